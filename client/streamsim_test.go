package client

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
)

var (
	ssimN    = flag.Int("ssim.n", 0, "TestSimRADIUSStream: run n seeds from -sim.from instead of the fixed set (a soak)")
	ssimSeed = flag.Uint64("ssim.seed", 0, "TestSimRADIUSStream: replay the schedule of this seed only")
)

// ssimFixedSeeds is the set every `go test` runs, with ssimSoakSeeds:
// those failed in a soak and pass since their fix. Each failed every
// replay: a server hung with the throttle's places all taken answered
// them at once, more than the slot's quota, and what waited in its
// queue stayed there until its deadline (the dispatcher's timer had
// been set while no place was free).
const ssimFixedSeeds = 200

var ssimSoakSeeds = []uint64{4612, 11926, 21525, 56736}

// TestSimRADIUSStream is the fault-schedule simulator for the RADIUS
// stream carrier (radius+tcp://, radpeer.Peer with its Status-Server
// watchdog): each seed draws a Client of 2-3 servers over net.Pipe in
// virtual time (balance with each access algorithm, or primary/secondary;
// 1-2 connections a server; in a third of the seeds with the ASR5K
// throttle) and a schedule of Access- and
// Accounting-Requests (patient, short or no deadline) against faults:
// servers frozen and thawed (SUSPECT, failover, late answers), every
// server frozen at once, connections reset mid-burst, a crash (requests
// read and applied, no answer, then the connections reset), and a flood
// of requests at a hung server, more than its Identifiers, most given up
// within the hang, the hang ending or the server dying within the
// watchdog's detection or after it. The servers apply
// accounting behind one shared duplicate store. After every schedule it
// checks: every call returned once, within its deadline plus a second,
// with an answer of the right code or an error of the documented kinds;
// no accounting record applied twice; every password decrypted with the
// secret of the server that got it (each replay re-signed); a patient
// request, and one with the default deadline (failover detection plus an
// answer), answered whenever one server stayed healthy; no waiter left
// once every deadline passed. In some schedules, once every request has
// returned, the recycle phase (streamsim_recycle_test.go): the other
// servers down, one server's backend hung while it answers
// Status-Server, a request handed back by its SUSPECT connection held
// back from it while that connection is OKAY again, then the connection
// recycled: the request is answered at once, not at its deadline.
//
// A failing schedule names its seed: go test ./client -run
// TestSimRADIUSStream -ssim.seed=N -v
func TestSimRADIUSStream(t *testing.T) {
	seeds := simSeeds(*ssimSeed, *ssimN, ssimFixedSeeds)
	if *ssimSeed == 0 && *ssimN == 0 {
		seeds = append(seeds, ssimSoakSeeds...)
	}
	onWait = ssimWaited         // streamsim_conn_test.go: the parked requests' watch
	beforeSent = ssimSent       // and the requests a server took
	onDispatcherPoll = spinPoll // sim_dispatchspin_test.go
	defer func() { onWait, beforeSent, onDispatcherPoll = nil, nil, nil }()
	start := time.Now()
	var total ssimResult
	runSeeds(t, seeds, "-run TestSimRADIUSStream -ssim.seed", runSSim, func(r ssimResult) {
		total.answered, total.failed, total.moved = total.answered+r.answered, total.failed+r.failed, total.moved+r.moved
		total.throttled, total.queued = total.throttled+r.throttled, total.queued+r.queued
	})
	t.Logf("a waiter still in line once every request returned, in %d schedules", simLingeredTake())
	t.Logf("%d schedules in %v (%d with the throttle, %d of them queueing requests for a server): %d answered, %d failed, %d moved by failovers",
		len(seeds), time.Since(start).Round(time.Millisecond), total.throttled, total.queued, total.answered, total.failed, total.moved)
	if len(seeds) >= 100 && (total.answered == 0 || total.failed == 0 || total.moved == 0 || total.queued == 0) {
		t.Errorf("the schedules never produced an answer, a failure, a failover and a throttle's server queue each: the faults do not bite")
	}
	radReconfExercised(t, len(seeds))
	t.Logf("%d writes of a request pending on an OKAY connection of its server excused: that connection closed by the end of the write's instant", ssimExcused.Swap(0))
	ran, formed := ssimRecycleTake()
	t.Logf("the recycle phase ran in %d schedules, its situation formed in %d", ran, formed)
	if len(seeds) >= 100 && formed == 0 {
		t.Errorf("the recycle phase never formed its situation (a request held back from a server in service, then its connection recycled)")
	}
}

type ssimResult struct{ answered, failed, moved, throttled, queued uint64 }

// ssimOutcome is one Exchange of TestSimRADIUSStream and how it ended.
type ssimOutcome struct {
	user       string
	acct       bool
	patient    bool
	noDeadline bool // RequestTimeout's
	deadline   time.Time
	done       time.Time
	resp       *radpeer.Response
	err        error
}

func runSSim(t *testing.T, seed uint64) (r ssimResult) {
	rng := rand.New(rand.NewPCG(seed, 0x5712))
	store := dedup.NewMemory(dedup.WithMaxEntries(simStoreEntries))
	defer store.Close()
	defer func() { checkStoreBound(t, seed, store.Len()) }()
	nServers := 2 + rng.IntN(2)
	n := radNetwork{}
	var urls []string
	var servers []*radServer
	for i := range nServers {
		u := fmt.Sprintf("radius+tcp://s%d:1812", i)
		s := newRADServerWith(t, fmt.Sprintf("secret-%d", i), store)
		n[u], urls, servers = s, append(urls, u), append(servers, s)
	}
	healthyOne := rng.IntN(2) == 0 // server 0 never suffers a fault
	mode := Balance
	if rng.IntN(4) == 0 {
		mode = PrimarySecondary
	}
	cfg := radClientConfig(n, mode, urls...)
	cfg.RADIUS.MaxConns = 1 + rng.IntN(2)
	cfg.RequestTimeout = 0 // the default: failover detection plus an answer
	switch rng.IntN(4) {
	case 1:
		cfg.Algorithm = loadbalance.Direct
	case 2:
		cfg.Algorithm = loadbalance.RoundRobin
	case 3:
		cfg.Algorithm = loadbalance.Hash
	}
	// The ASR5K throttle in a third of the schedules, drawn from a source
	// of its own (the other schedules stay as they were): the flood and
	// the failovers' replays go through its queues.
	if trng := rand.New(rand.NewPCG(seed, 0x746872)); trng.IntN(3) == 0 {
		lim := func() throttle.Limits {
			return throttle.Limits{MaxRate: 100 + trng.IntN(900), MaxOutstanding: 64 + trng.IntN(192)}
		}
		cfg.Throttle = &Throttle{Auth: lim(), Accounting: lim()}
		r.throttled = 1
	}
	// Faults of one connection of a server (streamsim_conn_test.go) in
	// half the schedules, drawn from a source of their own: MaxConns 2
	// or 3, and a burst at the start opens the further connections.
	crng := rand.New(rand.NewPCG(seed, 0xc0ff))
	connFaults := crng.IntN(2) == 0
	if connFaults {
		cfg.RADIUS.MaxConns = 2 + crng.IntN(2)
	}
	snet := newSSimNet(func(string, ...any) {})
	cfg.RADIUS.Dialer = snet.dialer(cfg.RADIUS.Dialer)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer watchSpin(t, seed, c)()
	ready, cancelReady := context.WithTimeout(context.Background(), time.Minute)
	defer cancelReady()
	if err := c.WaitReady(ready, nServers); err != nil {
		closeBounded(t, context.Background(), c)
		t.Fatal(err) // each server's first connection is up within a second
	}

	tracef := func(format string, args ...any) {
		if *simTrace {
			t.Logf("%v "+format, append([]any{time.Now().Format("04:05.000")}, args...)...)
		}
	}
	snet.mu.Lock()
	snet.tracef = tracef
	snet.servers = servers
	snet.tw = cfg.RADIUS.Watchdog.Twinit
	snet.mu.Unlock()
	stopParked := snet.watchParked(c)
	if *simTrace {
		cancelSub := c.Events().Subscribe(func(_ context.Context, e Event) {
			b, _ := json.Marshal(e.Line())
			t.Logf("%v event %s", e.Time.Format("04:05.000"), b)
		})
		defer cancelSub()
	}
	var wg sync.WaitGroup // the Exchanges
	// A flood: more requests at once than a hung server's Identifiers
	// (255 a connection), so that some wait for one there; their own
	// outcomes, checked like the others'.
	var floodMu sync.Mutex
	var flood []*ssimOutcome
	exchange := func(o *ssimOutcome, ctx context.Context, cancel context.CancelFunc, r *radius.Request) {
		o.deadline, _ = ctx.Deadline()
		o.noDeadline = o.deadline.IsZero()
		if o.noDeadline {
			o.deadline = time.Now().Add(c.cfg.RequestTimeout)
		}
		wg.Go(func() {
			defer cancel()
			o.resp, o.err = c.Exchange(ctx, r)
			o.done = time.Now()
			if o.err != nil {
				tracef("%s failed: %v", o.user, o.err)
			}
		})
	}
	first := 0 // the first server that suffers faults
	if healthyOne {
		first = 1
	}
	if connFaults {
		// A burst at servers hung for a moment (within the watchdog's
		// detection): more requests than a connection's Identifiers at
		// each, which open the servers' further connections.
		nb := 300 * len(servers)
		tracef("fault: servers from s%d hung, a burst of %d requests", first, nb)
		for _, s := range servers[first:] {
			s.faults.Freeze()
		}
		floodMu.Lock()
		for i := range nb {
			o := &ssimOutcome{user: fmt.Sprintf("b%d", i)}
			r := accessRequest(o.user)
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			switch crng.IntN(6) {
			case 0:
				o.patient = true
				ctx, cancel = context.WithTimeout(ctx, time.Hour)
			case 1: // RequestTimeout
			default:
				ctx, cancel = context.WithTimeout(ctx, time.Duration(5+crng.IntN(20))*time.Second)
			}
			flood = append(flood, o)
			exchange(o, ctx, cancel, r)
		}
		floodMu.Unlock()
		time.Sleep(time.Duration(1+crng.IntN(3)) * time.Second)
		for _, s := range servers[first:] {
			s.faults.Thaw()
		}
	}
	stopFaults := make(chan struct{})
	var fwg, cwg sync.WaitGroup
	if connFaults {
		fwg.Go(func() { ssimConnFaults(crng, snet, urls, first, stopFaults, &cwg) })
	}
	fwg.Go(func() {
		frng := rand.New(rand.NewPCG(seed, 0xfa17))
		flooded := false
		for {
			select {
			case <-stopFaults:
				return
			case <-time.After(time.Duration(2+frng.IntN(15)) * time.Second):
			}
			first := 0
			if healthyOne {
				first = 1
			}
			switch k := frng.IntN(4); {
			case k == 0 && frng.IntN(4) == 0: // every server out at once, then back
				tracef("fault: every server from s%d frozen", first)
				for _, s := range servers[first:] {
					s.faults.Freeze()
				}
				time.Sleep(time.Duration(5+frng.IntN(20)) * time.Second)
				tracef("fault: every server thawed")
				for _, s := range servers[first:] {
					s.faults.Thaw()
				}
			case k <= 1 && first < len(servers): // one frozen: SUSPECT, failover, late answers
				i := first + frng.IntN(len(servers)-first)
				tracef("fault: s%d frozen", i)
				servers[i].faults.Freeze()
				time.Sleep(time.Duration(1+frng.IntN(25)) * time.Second)
				tracef("fault: s%d thawed", i)
				servers[i].faults.Thaw()
			case k == 2 && first < len(servers): // connections reset
				i := first + frng.IntN(len(servers)-first)
				tracef("fault: s%d's connections reset", i)
				servers[i].faults.Reset()
			case k == 3 && first < len(servers) && !flooded && frng.IntN(2) == 0:
				// A flood while a server hangs: it holds every Identifier
				// of its connections, the requests past them wait for one;
				// most have short deadlines and give theirs up (stale: the
				// connection is recycled when they fill it, its live
				// requests still on it). It comes back, or dies, within
				// the watchdog's detection (2 Tw) or after it (SUSPECT:
				// what waits there goes elsewhere).
				flooded = true
				fi := first + frng.IntN(len(servers)-first)
				s := servers[fi]
				s.faults.Freeze()
				n := 300 * len(servers)
				tracef("fault: s%d frozen, a flood of %d requests", fi, n)
				floodMu.Lock()
				for i := range n {
					o := &ssimOutcome{user: fmt.Sprintf("f%d", i)}
					r := accessRequest(o.user)
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					switch frng.IntN(6) {
					case 0:
						o.patient = true
						ctx, cancel = context.WithTimeout(ctx, time.Hour)
					case 1: // RequestTimeout
					default: // most give up within the hang: a majority of stale Identifiers
						ctx, cancel = context.WithTimeout(ctx, time.Duration(1+frng.IntN(5))*time.Second)
					}
					flood = append(flood, o)
					exchange(o, ctx, cancel, r)
				}
				floodMu.Unlock()
				time.Sleep(time.Duration(6+frng.IntN(20)) * time.Second)
				if frng.IntN(2) == 0 {
					tracef("fault: s%d's connections reset", fi)
					s.faults.Reset()
				}
				tracef("fault: s%d thawed", fi)
				s.faults.Thaw()
			case k == 3 && first < len(servers) && frng.IntN(2) == 0:
				// A crash: the process reads and applies but answers
				// nothing for a few seconds (within the watchdog's
				// detection, 2 Tw), then dies: its connections close with
				// requests in flight, which go to another server.
				i := first + frng.IntN(len(servers)-first)
				tracef("fault: s%d crashes (reads, answers nothing)", i)
				servers[i].faults.Mute()
				time.Sleep(time.Duration(1+frng.IntN(8)) * time.Second)
				tracef("fault: s%d's connections reset", i)
				servers[i].faults.Reset()
			}
		}
	})

	keep := ""
	if healthyOne {
		keep = urls[0]
	}
	reconf := startRADReconf(t, seed, c, cfg.Peers, keep, n) // ssimreconf_test.go
	snet.mu.Lock()
	snet.oneClient = reconf == nil
	snet.mu.Unlock()

	nReq := 20 + rng.IntN(40)
	outs := make([]ssimOutcome, nReq)
	for i := range nReq {
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Millisecond)
		o := &outs[i]
		o.user, o.acct = fmt.Sprintf("u%d", i), rng.IntN(3) == 0
		r := &radius.Request{Code: lradius.CodeAccessRequest}
		r.Attributes.Add(radius.AttrUserName, lradius.Attribute(o.user))
		if o.acct {
			r.Code = lradius.CodeAccountingRequest
			r.Attributes.Add(radius.AttrAcctSessionID, lradius.Attribute("sess-"+o.user))
			r.Attributes.Add(radius.AttrAcctStatusType, lradius.Attribute([]byte{0, 0, 0, 2}))
			r.Attributes.Add(radius.AttrNASIdentifier, lradius.Attribute("nas1"))
			r.Attributes.Add(radius.AttrEventTimestamp, lradius.Attribute([]byte{0x67, 0, 0, byte(i)}))
		} else {
			r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("pw-"+o.user))
		}
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		switch rng.IntN(3) {
		case 0:
			o.patient = true
			ctx, cancel = context.WithTimeout(ctx, time.Hour)
		case 1:
			ctx, cancel = context.WithTimeout(ctx, time.Duration(1+rng.IntN(40))*time.Second)
		}
		exchange(o, ctx, cancel, r)
	}
	time.Sleep(time.Minute)
	close(stopFaults)
	fwg.Wait()
	cwg.Wait()
	reconf.stop()
	for _, s := range servers {
		s.faults.Thaw()
	}
	wg.Wait()
	reconf.check()
	// The recycle phase (streamsim_recycle_test.go), once every request
	// has returned, in some schedules.
	var rec *ssimRecycle
	if prng := ssimRecycleDraw(seed, cfg.Throttle != nil); prng != nil {
		rec = runSSimRecycle(prng, c, snet, n, urls, exchange, wg.Wait, tracef)
		tracef("recycle phase at %s: formed %v %s", rec.server, rec.formed, rec.why)
		flood = append(flood, rec.outs...)
	}
	var last time.Time
	for _, o := range outs {
		last = maxTime(last, o.deadline)
	}
	for _, o := range flood {
		last = maxTime(last, o.deadline)
	}
	waitersEnd(t, c, last)
	stopParked()
	if k := handOverAwaited(c); k != "" {
		t.Errorf("seed %d: %s", seed, k)
	}
	for _, s := range c.ServerStats() {
		r.moved += s.FailedOver
	}
	if r.throttled > 0 && slices.ContainsFunc(c.QueueDepths(), func(q QueueDepth) bool { return q.MaxDepth > 0 }) {
		r.queued = 1
	}
	if !closeBounded(t, context.Background(), c) {
		t.Fatalf("Client.Close has not returned after %v", simCloseBound)
	}
	n.close()
	for _, v := range snet.violations() {
		t.Error(v)
	}
	if rec != nil {
		for _, v := range rec.check() {
			t.Errorf("seed %d: %s", seed, v)
		}
	}

	all := make([]*ssimOutcome, 0, len(outs)+len(flood))
	for i := range outs {
		all = append(all, &outs[i])
	}
	all = append(all, flood...)
	for _, o := range all {
		if o.done.After(o.deadline.Add(time.Second)) {
			t.Errorf("%s: returned %v after its deadline", o.user, o.done.Sub(o.deadline))
		}
		switch {
		case o.err == nil:
			r.answered++
			want := lradius.CodeAccessAccept
			if o.acct {
				want = lradius.CodeAccountingResponse
			}
			if o.resp == nil || o.resp.Packet == nil || o.resp.Packet.Code != want {
				t.Errorf("%s: answer %+v, want %v", o.user, o.resp, want)
			}
		default:
			r.failed++
			if !errors.Is(o.err, call.ErrTimeout) && !errors.Is(o.err, ErrNoPeer) && !errors.Is(o.err, radpeer.ErrClosed) {
				t.Errorf("%s: error of no documented kind: %v", o.user, o.err)
			}
			if o.patient && healthyOne {
				t.Errorf("%s: a patient request failed while server s0 stayed healthy: %v", o.user, o.err)
			}
			if o.noDeadline && healthyOne {
				// The default RequestTimeout is failover detection plus an
				// answer: a request on a hung server goes to s0 in time.
				t.Errorf("%s: a request with the default deadline failed while server s0 stayed healthy: %v", o.user, o.err)
			}
		}
	}
	applied := map[string]int{}
	for _, s := range servers {
		for _, u := range s.handled() {
			applied[u]++
		}
		s.mu.Lock()
		if s.badPass > 0 {
			t.Errorf("%d passwords did not decrypt with the secret of the server they reached", s.badPass)
		}
		s.mu.Unlock()
	}
	for _, o := range outs {
		if o.acct && applied[o.user] > 1 {
			t.Errorf("accounting record of %s applied %d times", o.user, applied[o.user])
		}
	}
	return r
}
