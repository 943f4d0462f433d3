package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
)

// radReconf is the reconfigure fault of the RADIUS simulators: in half
// the seeds (its own random source: the other seeds run the schedule they
// ran before), every few seconds while the faults run, Client.SetPeers
// with a configured server removed, a removed one added back (anywhere
// in the order), a weight changed, or a server replaced (its watchdog
// interval, or for radius:// its AccountingURL, written out). The first
// server stays configured when it is the healthy one (it may be
// reweighted or replaced): the schedules' check that a patient request is
// answered while it stays healthy holds across the changes, as every
// other does (answer codes, deadlines, nothing applied twice, passwords
// re-encrypted for the server that gets them). Its own checks, once the
// faults have ended and every call has returned (check): every server
// configured is in service, and every member taken out has closed; then,
// in half those seeds, a clean drain (drainCheck): requests in flight on
// a server removed or replaced are answered there, not moved.
type radReconf struct {
	t    *testing.T
	c    *Client
	rng  *rand.Rand
	all  []PeerSpec
	keep string // a name never removed ("": none)

	servers radNetwork // the stream servers by URL, for the drain check (nil: none)
	udp     bool       // radius:// servers: see startUDPReconf
	drains  *atomic.Int64

	stopc chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	specs []PeerSpec
	n     int // changes made
}

// startRADReconf starts the fault on c, whose configuration is specs; nil
// when the seed runs without it. keep: a server's name never to remove.
func startRADReconf(t *testing.T, seed uint64, c *Client, specs []PeerSpec, keep string, servers radNetwork) *radReconf {
	rng := rand.New(rand.NewPCG(seed, 0x7ec0f))
	if rng.IntN(2) == 0 {
		return nil
	}
	specs = slices.Clone(specs)
	for i := range specs {
		if specs[i].Name == "" {
			specs[i].Name = specs[i].URL
		}
	}
	if keep == "" {
		keep = "\x00"
	}
	r := &radReconf{t: t, c: c, rng: rng, all: slices.Clone(specs), specs: slices.Clone(specs), keep: keep, stopc: make(chan struct{}),
		servers: servers, drains: &radReconfDrains}
	cancel := c.Events().Subscribe(func(_ context.Context, e Event) {
		if e.Kind == EventReconfigured {
			t.Logf("%v event %s %s: %s", e.Time.Format("04:05.000"), e.Server, e.Change, e.Reason)
		}
	})
	r.wg.Go(func() { defer cancel(); r.run() })
	return r
}

func (r *radReconf) run() {
	for {
		select {
		case <-r.stopc:
			return
		case <-time.After(time.Duration(1+r.rng.IntN(10)) * time.Second):
		}
		r.step()
	}
}

// step makes one change.
func (r *radReconf) step() {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.specs
	next := slices.Clone(cur)
	i := r.rng.IntN(len(cur))
	switch r.rng.IntN(4) {
	case 0: // removed
		if len(cur) < 2 || cur[i].Name == r.keep {
			return
		}
		next = slices.Delete(next, i, i+1)
	case 1: // one added back
		if r.udp {
			return
		}
		var outs []PeerSpec
		for _, s := range r.all {
			if !slices.ContainsFunc(cur, func(c PeerSpec) bool { return c.Name == s.Name }) {
				outs = append(outs, s)
			}
		}
		if len(outs) == 0 {
			return
		}
		next = slices.Insert(next, r.rng.IntN(len(cur)+1), outs[r.rng.IntN(len(outs))])
	case 2: // reweighted
		next[i].Weight = 1 + r.rng.IntN(4)
	default: // replaced
		if r.udp {
			return
		}
		s := &next[i]
		switch {
		case len(s.URL) > 9 && s.URL[:9] == "radius://":
			if s.AccountingURL == "" {
				s.AccountingURL = s.URL
			} else {
				s.AccountingURL = ""
			}
		case s.Tw == 0:
			s.Tw = 8 * time.Second
		default:
			s.Tw = 0
		}
	}
	ch, err := r.c.SetPeers(context.Background(), next)
	if err != nil {
		r.t.Errorf("SetPeers: %v", err)
		return
	}
	r.t.Logf("%v SetPeers %+v", time.Now().Format("04:05.000"), ch)
	r.specs = next
	r.n++
}

// stop ends the changes. Safe on nil.
func (r *radReconf) stop() {
	if r == nil {
		return
	}
	close(r.stopc)
	r.wg.Wait()
}

// check runs once the faults have ended and every call returned: within
// a minute every configured server is in service, and every member taken
// out of the configuration has closed. Safe on nil.
func (r *radReconf) check() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.c
	if r.udp {
		var names []string
		for _, m := range c.ros.Load().order {
			names = append(names, m.spec.Name)
		}
		var want []string
		for _, s := range r.specs {
			want = append(want, s.Name)
		}
		if !slices.Equal(names, want) {
			r.t.Errorf("configured %v, the Client has %v", want, names)
		}
		return
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var bad []string
		ros := c.ros.Load()
		if len(ros.order) != len(r.specs) {
			r.t.Errorf("%d servers configured, the Client has %d", len(r.specs), len(ros.order))
			return
		}
		for i, m := range ros.order {
			if m.spec.Name != r.specs[i].Name {
				bad = append(bad, "order: "+m.spec.Name+" in place of "+r.specs[i].Name)
			} else if !m.okay() {
				bad = append(bad, m.spec.Name+" not in service")
			}
		}
		for _, m := range ros.all {
			if !m.removed.Load() {
				continue
			}
			if p := m.rp.Load(); p != nil {
				select {
				case <-p.Done():
				default:
					bad = append(bad, m.spec.Name+", taken out, still open")
				}
			}
		}
		if len(bad) == 0 {
			if r.servers != nil && len(r.specs) > 1 && r.rng.IntN(2) == 0 {
				r.drainCheck()
			}
			return
		}
		if time.Now().After(deadline) {
			for _, m := range ros.all {
				p := m.rp.Load()
				st := "nil"
				if p != nil {
					st = fmt.Sprintf("%v state=%v okay=%v", p, p.State(), m.okay())
				}
				r.t.Logf("member %d %s removed=%v spec=%+v: %s", m.index, m.spec.Name, m.removed.Load(), m.spec, st)
			}
			r.t.Errorf("a minute after the faults ended, %d changes made: %v", r.n, bad)
			return
		}
		time.Sleep(time.Second)
	}
}

// radReconfDrains counts the drain checks that had requests in flight on
// the server taken out.
var radReconfDrains atomic.Int64

// drainCheck, with every server healthy: one is frozen for half a second with
// requests written to it, and removed or replaced meanwhile; each request
// is answered, none moved off it (its drain waits for the answers) unless
// its watchdog failed it over meanwhile, and its old peer closes. r.mu is
// held.
func (r *radReconf) drainCheck() {
	c := r.c
	i := r.rng.IntN(len(r.specs))
	victim := r.specs[i]
	var m *member
	for _, x := range c.ros.Load().order {
		if x.spec.Name == victim.Name {
			m = x
		}
	}
	srv := r.servers[victim.URL]
	sent0, moved0 := m.stats.sent.Load(), m.stats.failedOver.Load()
	// A watchdog that finds the server frozen (a Status-Server due in that
	// second) fails its connection over, as on any loss: its requests move
	// then, drain or not, and the check has nothing to say.
	// So does a connection lost before the change.
	var watchdogFired, changed atomic.Bool
	defer c.Events().Subscribe(func(_ context.Context, e Event) {
		if e.Server != victim.Name {
			return
		}
		if e.Kind == EventPeer && e.Peer != nil && e.Peer.Kind == peer.EventWatchdog && e.Peer.To == watchdog.Suspect ||
			e.Kind == EventFailover && !changed.Load() {
			watchdogFired.Store(true)
		}
	})()
	srv.faults.Freeze()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for k := range 4 + r.rng.IntN(10) {
		user := fmt.Sprintf("drain%d", k)
		req := accessRequest(user)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := c.Exchange(ctx, req)
			errs <- err
		})
	}
	time.Sleep(200 * time.Millisecond)
	inFlight := m.stats.sent.Load() - sent0
	next := slices.Clone(r.specs)
	what := "removed"
	if r.rng.IntN(2) == 0 {
		next = slices.Delete(next, i, i+1)
	} else {
		what = "replaced"
		next[i].Tw = map[bool]time.Duration{true: 8 * time.Second, false: 0}[next[i].Tw == 0]
	}
	changed.Store(true)
	if _, err := c.SetPeers(context.Background(), next); err != nil {
		r.t.Errorf("drain check: SetPeers: %v", err)
	} else {
		r.specs = next
	}
	time.Sleep(500 * time.Millisecond)
	srv.faults.Thaw()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			r.t.Errorf("drain check: a request failed: %v", err)
		}
	}
	if moved := m.stats.failedOver.Load() - moved0; moved != 0 && !watchdogFired.Load() {
		r.t.Errorf("drain check: %d of the %d requests in flight on %s when it was %s were moved off it, not answered there", moved, inFlight, victim.Name, what)
	}
	if inFlight > 0 && !watchdogFired.Load() {
		r.drains.Add(1)
	}
	select {
	case <-m.rp.Load().Done():
	case <-time.After(time.Minute):
		r.t.Errorf("drain check: %s, %s, has not closed a minute later", victim.Name, what)
	}
}

// radReconfExercised logs how many drain checks had requests in flight,
// fails a full run of the stream simulator that had none, and resets the
// count.
func radReconfExercised(t *testing.T, seeds int) {
	n := radReconfDrains.Swap(0)
	t.Logf("reconfigure: %d drain checks with requests in flight on the server taken out", n)
	if seeds >= ssimFixedSeeds && n == 0 {
		t.Errorf("no drain check had requests in flight")
	}
}

// startUDPReconf is startRADReconf for TestSimUDP, with removals and
// weight changes only: a server added back or replaced gets a new peer,
// which may send it a request its old peer sent it before (a new
// datagram, not a retransmission: the Client avoids a request's
// connections, and the new peer's are new), and the simulator's check that
// a server gets each request at most once, retransmissions aside, is per
// server. Its end check: the Client's servers are the configured ones (a
// radius:// server has no watchdog to say it is in service once quiet).
func startUDPReconf(t *testing.T, seed uint64, c *Client, specs []PeerSpec, keep string) *radReconf {
	r := startRADReconf(t, seed, c, specs, keep, nil)
	if r != nil {
		r.mu.Lock()
		r.udp = true
		r.mu.Unlock()
	}
	return r
}
