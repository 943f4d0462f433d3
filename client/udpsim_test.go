package client

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/internal/memudp"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
)

var (
	usimN    = flag.Int("usim.n", 0, "TestSimUDP: run n seeds from -sim.from instead of the fixed set (a soak)")
	usimSeed = flag.Uint64("usim.seed", 0, "TestSimUDP: replay the schedule of this seed only")
)

// usimFixedSeeds is the set every `go test` runs: a schedule costs a few
// milliseconds of wall time.
const usimFixedSeeds = 300

// TestSimUDP is the fault-schedule simulator for the RADIUS/UDP carrier:
// each seed draws a Client of 2-4 radius:// servers (balance with each
// access algorithm, or primary/secondary; in a third of the seeds with
// the ASR5K throttle), 1-3 attempts a server, and a
// schedule of Access- and Accounting-Requests (patient, short or no
// deadline) against faults on an in-memory datagram network in virtual
// time: packet loss both ways at a random rate, servers dead for a while
// (all of them at once, sometimes), frozen and thawed (their replies then
// arrive late, after the request was given up on), and replies
// duplicated. The servers apply accounting behind one shared duplicate
// store. After every schedule it checks:
//
//   - every call returned once, within its deadline plus a second, with an
//     answer of the right code or an error of the documented kinds;
//   - each server got each request at most once: every datagram of a
//     request at one server is byte-identical (a retransmission), and
//     there are at most Retries of them (one for a probe);
//   - no accounting record applied twice;
//   - a patient request is answered whenever one server stayed healthy
//     for the whole schedule, and that server's policy state never
//     leaves the states that take requests (it replied to everything,
//     also when its reply came after its request had ended);
//   - once every server answers again, every request returns within a
//     hold-down of the policy, a probe and its attempts on each server
//     (usimHealedBound): none waits on for servers that are back (the
//     policy's states are part of the view that wakes it);
//   - no waiter left once every request's deadline passed (waitersEnd);
//   - nothing of a request written by the client after its Exchange
//     returned, and in the schedules with a test user each probe written
//     once (udpsim_flood_test.go, from what the client's sockets wrote);
//   - in the flood schedules (udpsim_flood_test.go), requests that wait
//     for an Identifier are answered, get one in the order they came, and
//     once handed over (a down-timeout) are answered elsewhere.
//
// A failing schedule names its seed: go test ./client -run TestSimUDP
// -usim.seed=N -v
func TestSimUDP(t *testing.T) {
	seeds := simSeeds(*usimSeed, *usimN, usimFixedSeeds)
	onDispatcherPoll = spinPoll // sim_dispatchspin_test.go
	defer func() { onDispatcherPoll = nil }()
	start := time.Now()
	var total usimResult
	runSeeds(t, seeds, "-run TestSimUDP -usim.seed", runUSim, func(r usimResult) {
		total.answered, total.failed = total.answered+r.answered, total.failed+r.failed
		total.late, total.retrans = total.late+r.late, total.retrans+r.retrans
		total.throttled, total.queued = total.throttled+r.throttled, total.queued+r.queued
		total.floods, total.floodAnswered, total.probes = total.floods+r.floods, total.floodAnswered+r.floodAnswered, total.probes+r.probes
	})
	t.Logf("the latest return after every server answered again: %v", usimMaxLateTake())
	t.Logf("a waiter still in line once every request returned, in %d schedules", simLingeredTake())
	t.Logf("%d schedules in %v (%d with the throttle, %d of them queueing requests for a server): %d answered, %d failed, %d late replies, %d retransmissions",
		len(seeds), time.Since(start).Round(time.Millisecond), total.throttled, total.queued, total.answered, total.failed, total.late, total.retrans)
	t.Logf("%d schedules with a flood (%d flood requests answered), %d probes of the test user", total.floods, total.floodAnswered, total.probes)
	if len(seeds) >= 100 && (total.answered == 0 || total.failed == 0 || total.late == 0 || total.retrans == 0 || total.queued == 0) {
		t.Errorf("the schedules never produced an answer, a failure, a late reply, a retransmission and a throttle's server queue each: the faults do not bite")
	}
}

type usimResult struct {
	answered, failed, late, retrans, throttled, queued uint64
	floods, floodAnswered, probes                      uint64
}

// usimServer is one simulated server's fault state, under usimNet.mu.
type usimServer struct {
	addr    string
	loss    float64 // chance a datagram to or from it is lost
	dead    bool    // everything to it is lost
	healthy bool    // never lost, dead or frozen in this schedule
}

type usimNet struct {
	*memudp.Net
	mu      sync.Mutex
	rng     *rand.Rand
	servers map[string]*usimServer
	dup     float64 // chance a reply is sent twice
	// got records the datagrams each server received, by request: the
	// User-Name (unique per request) and the server's address.
	got map[string]map[string][][]byte

	dialDelay time.Duration // how long a UDPPeer's dial takes (usimNet.dial)
	// writes records the datagrams the client's sockets wrote, lost or
	// not, by request (User-Name), in the order of wseq
	// (udpsim_flood_test.go).
	wmu    sync.Mutex
	wseq   int
	writes map[string][]usimWrite
}

func (n *usimNet) drop(from, to string, b []byte) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.servers[to]; s != nil {
		if s.dead || n.rng.Float64() < s.loss {
			return true
		}
		if radius.IsRequest(radius.Code(b)) {
			u, _ := radius.Attr(b, radius.AttrUserName)
			m := n.got[string(u)]
			if m == nil {
				m = map[string][][]byte{}
				n.got[string(u)] = m
			}
			m[to] = append(m[to], bytes.Clone(b))
		}
		return false
	}
	if s := n.servers[from]; s != nil && n.rng.Float64() < s.loss {
		return true
	}
	return false
}

func runUSim(t *testing.T, seed uint64) usimResult {
	rng := rand.New(rand.NewPCG(seed, 0x75d5))
	n := &usimNet{Net: memudp.New(), rng: rand.New(rand.NewPCG(seed, 0xd1ce)), servers: map[string]*usimServer{},
		got: map[string]map[string][][]byte{}, writes: map[string][]usimWrite{}}
	n.SetDrop(n.drop)
	nServers := 2 + rng.IntN(3)
	store := dedup.NewMemory(dedup.WithMaxEntries(simStoreEntries))
	defer store.Close()
	defer func() { checkStoreBound(t, seed, store.Len()) }()
	var applyMu sync.Mutex
	applied := map[string]int{}
	var floodHold atomic.Int64 // how long a server holds a flood request (usimFlood)
	handler := radpeer.Dedup(store, func(_ context.Context, req *lradius.Packet, _ []byte) (lradius.Code, lradius.Attributes) {
		if u, _ := req.Attributes.Lookup(radius.AttrUserName); isFloodUser(u) {
			time.Sleep(time.Duration(floodHold.Load()))
		}
		if req.Code == lradius.CodeAccountingRequest {
			id, _ := req.Attributes.Lookup(radius.AttrAcctSessionID)
			applyMu.Lock()
			applied[string(id)]++
			applyMu.Unlock()
			return lradius.CodeAccountingResponse, nil
		}
		return lradius.CodeAccessAccept, nil
	}, nil)
	var specs []PeerSpec
	var srvs []*radpeer.UDPServer
	healthyOne := rng.IntN(2) == 0 // one server never suffers a fault
	for i := range nServers {
		addr := fmt.Sprintf("s%d:1812", i)
		s := &usimServer{addr: addr, healthy: healthyOne && i == 0}
		n.servers[addr] = s
		pc, err := n.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := radpeer.NewUDPServer(pc, radpeer.ServerConfig{Secret: udpSecret, Logger: quiet, Handler: handler,
			MaxInFlight: 2048}) // a flood's requests held at once
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve()
		srvs = append(srvs, srv)
		specs = append(specs, PeerSpec{URL: "radius://" + addr})
	}
	retries := 1 + rng.IntN(3)
	timeout := time.Duration(1+rng.IntN(3)) * time.Second
	cfg := Config{Peers: specs, RADIUS: radpeer.Config{Secret: udpSecret, Logger: quiet},
		UDP: radpeer.UDPConfig{Timeout: timeout, Retries: retries, Dial: n.dial, Logger: quiet}}
	switch rng.IntN(5) {
	case 0:
		cfg.Mode = PrimarySecondary
	case 1:
		cfg.Algorithm = loadbalance.Direct
	case 2:
		cfg.Algorithm = loadbalance.RoundRobin
	case 3:
		cfg.Algorithm = loadbalance.Hash
	}
	// The ASR5K throttle in a third of the schedules, drawn from a source
	// of its own (the other schedules stay as they were): requests wait
	// for their rate slot and a free place, and what a server did not
	// answer is handed on through its queues.
	throttled := false
	if trng := rand.New(rand.NewPCG(seed, 0x746872)); trng.IntN(3) == 0 {
		lim := func() throttle.Limits {
			return throttle.Limits{MaxRate: 2 + trng.IntN(38), MaxOutstanding: 1 + trng.IntN(8)}
		}
		cfg.Throttle = &Throttle{Auth: lim(), Accounting: lim()}
		throttled = true
	}
	testUser := usimTestUser(seed, &cfg)
	flood := usimFloodPlan(seed, &cfg, n, throttled)
	if flood != nil {
		floodHold.Store(int64(flood.hold))
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer watchSpin(t, seed, c)()
	// The healthy server's policy states: it must never be held down.
	var heldMu sync.Mutex
	var held []string
	unsubscribe := c.Events().Subscribe(func(_ context.Context, e Event) {
		if e.Kind == EventPolicy && healthyOne && e.Server == specs[0].URL && !e.Policy.To.Takes() && (flood == nil || !flood.stalled.Load()) {
			heldMu.Lock()
			held = append(held, e.Policy.String())
			heldMu.Unlock()
		}
	})

	keep := ""
	if healthyOne {
		keep = specs[0].URL
	}
	reconf := startUDPReconf(t, seed, c, specs, keep) // ssimreconf_test.go

	// The faults, on their own goroutine: phases of a few seconds.
	stopFaults := make(chan struct{})
	var fwg sync.WaitGroup
	fwg.Go(func() {
		frng := rand.New(rand.NewPCG(seed, 0xfa17))
		for {
			select {
			case <-stopFaults:
				return
			case <-time.After(time.Duration(1+frng.IntN(8)) * time.Second):
			}
			n.mu.Lock()
			allOut := frng.IntN(10) == 0
			for _, s := range n.servers {
				if s.healthy {
					continue
				}
				switch k := frng.IntN(6); {
				case allOut:
					s.dead = true
				case k == 0:
					s.dead = !s.dead
				case k == 1:
					s.loss = frng.Float64()
				case k == 2:
					s.loss = 0
				case k == 3:
					s.dead = false
				}
			}
			n.mu.Unlock()
			if frng.IntN(5) == 0 { // a frozen server: its replies come late
				s := specs[frng.IntN(len(specs))].URL[len("radius://"):]
				if !n.servers[s].healthy {
					n.Freeze(s)
					time.Sleep(time.Duration(1+frng.IntN(10)) * time.Second)
					n.Thaw(s)
				}
			}
		}
	})

	type outcome struct {
		user     string
		acct     bool
		patient  bool
		deadline time.Time
		sent     time.Time
		done     time.Time
		resp     *radpeer.Response
		err      error
	}
	nReq := 20 + rng.IntN(40)
	outs := make([]outcome, nReq)
	var wg sync.WaitGroup
	for i := range nReq {
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		o := &outs[i]
		o.user, o.acct, o.sent = fmt.Sprintf("u%d", i), rng.IntN(3) == 0, time.Now()
		r := &radius.Request{Code: lradius.CodeAccessRequest}
		r.Attributes.Add(radius.AttrUserName, lradius.Attribute(o.user))
		if o.acct {
			r.Code = lradius.CodeAccountingRequest
			r.Attributes.Add(radius.AttrAcctSessionID, lradius.Attribute("sess-"+o.user))
			r.Attributes.Add(radius.AttrAcctStatusType, lradius.Attribute([]byte{0, 0, 0, 2}))
			// A record with its Event-Timestamp: what the content key
			// needs (radpeer.AccountingKey).
			r.Attributes.Add(radius.AttrNASIdentifier, lradius.Attribute("nas1"))
			r.Attributes.Add(radius.AttrEventTimestamp, lradius.Attribute([]byte{0x67, 0, 0, byte(i)}))
		} else {
			r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("pw"))
		}
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		switch rng.IntN(3) {
		case 0:
			o.patient = true
			ctx, cancel = context.WithTimeout(ctx, time.Hour)
		case 1:
			ctx, cancel = context.WithTimeout(ctx, time.Duration(1+rng.IntN(20))*time.Second)
		}
		o.deadline, _ = ctx.Deadline()
		if o.deadline.IsZero() {
			o.deadline = o.sent.Add(cfg.RequestTimeout)
			if cfg.RequestTimeout == 0 {
				o.deadline = o.sent.Add(c.cfg.RequestTimeout)
			}
		}
		wg.Go(func() {
			defer cancel()
			o.resp, o.err = c.Exchange(ctx, r)
			o.done = time.Now()
		})
	}
	// The patient ones may wait for a server to come back: faults stop
	// after a while, and every server is healed.
	time.Sleep(30 * time.Second)
	close(stopFaults)
	fwg.Wait()
	reconf.stop()
	n.mu.Lock()
	for _, s := range n.servers {
		s.dead, s.loss = false, 0
	}
	n.mu.Unlock()
	for _, s := range n.servers {
		n.Thaw(s.addr)
	}
	healed := time.Now()
	wg.Wait()
	reconf.check()
	var last time.Time
	for _, o := range outs {
		last = maxTime(last, o.deadline)
	}
	waitersEnd(t, c, last)
	var res usimResult
	if flood != nil {
		res.floods = 1
		res.floodAnswered, _ = flood.run(t, c, n, healed, timeout, retries, nServers)
	}
	if throttled {
		// Every Exchange returned: no request holds a throttle place or
		// waits in a queue. A place kept for good would stall its server
		// once it is back in service.
		synctest.Wait()
		c.tmu.Lock()
		for i := range c.ros.Load().all {
			for _, class := range []throttle.Class{throttle.Auth, throttle.Accounting} {
				if n := c.sched.Outstanding(i, class); n != 0 {
					t.Errorf("every Exchange returned, yet server %d holds %d %v places in the throttle", i, n, class)
				}
			}
		}
		if n := c.sched.Len(); n != 0 {
			t.Errorf("every Exchange returned, yet %d requests wait in the throttle", n)
		}
		c.unlockThrottle()
	}
	if throttled {
		res.throttled = 1
		if slices.ContainsFunc(c.QueueDepths(), func(q QueueDepth) bool { return q.MaxDepth > 0 }) {
			res.queued = 1
		}
	}
	for _, u := range c.UDPPeers() {
		st := u.Stats()
		res.late += st.Late
		res.retrans += st.Retransmissions
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if !closeBounded(t, ctx, c) {
		t.Fatalf("Client.Close has not returned after %v", simCloseBound)
	}
	cancel()
	for _, srv := range srvs {
		srv.Close(context.Background())
	}

	unsubscribe()
	heldMu.Lock()
	for _, h := range held {
		t.Errorf("server s0 stayed healthy and its policy held it down: %s", h)
	}
	heldMu.Unlock()

	// The invariants.
	for _, o := range outs {
		if o.done.IsZero() {
			t.Errorf("%s: Exchange never returned", o.user)
			continue
		}
		if o.done.After(o.deadline.Add(time.Second)) {
			t.Errorf("%s: returned %v after its deadline", o.user, o.done.Sub(o.deadline))
		}
		if late := o.done.Sub(healed); late > usimHealedBound(timeout, retries, nServers) {
			t.Errorf("%s: returned %v after every server answered again (err %v): it waited for servers that were back", o.user, late, o.err)
		}
		if late := o.done.Sub(healed); late > 0 {
			usimMaxLate.Lock()
			usimMaxLate.d = max(usimMaxLate.d, late)
			usimMaxLate.Unlock()
		}
		switch {
		case o.err == nil:
			res.answered++
			want := lradius.CodeAccessAccept
			if o.acct {
				want = lradius.CodeAccountingResponse
			}
			if o.resp == nil || o.resp.Packet == nil || o.resp.Packet.Code != want {
				t.Errorf("%s: answer %+v, want %v", o.user, o.resp, want)
			}
		default:
			res.failed++
			if !errors.Is(o.err, radpeer.ErrNoReply) && !errors.Is(o.err, call.ErrTimeout) && !errors.Is(o.err, ErrNoPeer) {
				t.Errorf("%s: error of no documented kind: %v", o.user, o.err)
			}
			if o.patient && healthyOne {
				t.Errorf("%s: a patient request failed while server s0 stayed healthy: %v", o.user, o.err)
			}
		}
		n.checkAfterReturn(t, o.user, o.done)
		for addr, dgrams := range n.got[o.user] {
			if len(dgrams) > retries {
				t.Errorf("%s: %d datagrams at %s, more than the %d attempts a server gets", o.user, len(dgrams), addr, retries)
			}
			for _, d := range dgrams[1:] {
				if !bytes.Equal(d, dgrams[0]) {
					t.Errorf("%s: at %s a datagram differs from the first: a second send, not a retransmission", o.user, addr)
					break
				}
			}
		}
	}
	if testUser {
		res.probes = uint64(n.checkProbes(t))
	}
	for id, k := range applied {
		if k > 1 {
			t.Errorf("accounting record %s applied %d times", id, k)
		}
	}
	return res
}

// usimMaxLate is the latest return after every server answered again,
// over the schedules of a run (how far below usimHealedBound they stay).
var usimMaxLate struct {
	sync.Mutex
	d time.Duration
}

// usimMaxLateTake is usimMaxLate's value, reset.
func usimMaxLateTake() time.Duration {
	usimMaxLate.Lock()
	defer usimMaxLate.Unlock()
	d := usimMaxLate.d
	usimMaxLate.d = 0
	return d
}

// usimHealedBound is how long after every server answers again a request
// may still take: a server the policy put out of service just before is
// held down (policy.DefaultHoldDown), then probed (one attempt) or back
// to unknown, and the request's attempts on each server follow.
func usimHealedBound(timeout time.Duration, retries, servers int) time.Duration {
	attempts := timeout * time.Duration(retries)
	return policy.DefaultHoldDown + attempts + timeout + time.Duration(servers)*attempts + time.Second
}
