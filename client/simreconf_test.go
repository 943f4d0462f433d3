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

	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/watchdog"
)

// The "reconfigure" fault of TestSim: in half the seeds, Client.SetPeers
// at random instants of the schedule, in the middle of the other faults:
// a configured server removed, a removed one added back (at a random
// place in the order), a weight changed, a server replaced (its Tw
// changed). It draws from its own source, so that a seed without it runs
// the very schedule it ran before the fault existed.
//
// What a reconfiguration changes in the invariants of check, as
// SetPeers documents it:
//   - a request whose Destination-Host names a server that is not
//     configured names none of the Client's peers: it is routed as any
//     other request (and replayed as any other once its connection
//     fails). The Destination-Host checks skip a request whose host was
//     out of the configuration at some moment of its life
//     (reconfUnpinned). A replaced server stays configured: its requests
//     stay pinned to it.
//   - nothing else: a request in flight on a removed or replaced server
//     is answered there (or, if that connection fails during the drain,
//     replayed as on any failure), nothing is lost, sent twice on one
//     connection, applied twice, nor returned late.
//
// And it adds its own:
//   - once quiet, every server configured at the end has a peer, in
//     service (checkRecovered passes over a member not dialed), and every
//     removed or replaced member's peer is closed: its drain ended;
//   - in half the reconfigured seeds, once quiet, a clean drain: with
//     every server answering in 1-3 s, one configured server is removed,
//     removed and added back at once, or replaced with requests in flight
//     on it; each of them is answered
//     there, sent once, applied once; the old peer closes (within
//     RequestTimeout: a request the server lost keeps its drain waiting
//     that long); the configuration's servers are then all in service
//     (a replacement is dialed once the old peer is done).
type simReconf struct {
	w   *simWorld
	rng *rand.Rand

	mu    sync.Mutex // one change at a time
	all   []PeerSpec // every server's spec, by server index
	specs []PeerSpec // the configuration now, in order

	omu sync.Mutex          // taken alone (check holds w.mu)
	out map[string][]simGap // host -> when it was out of the configuration
}

// simGap is a time a server was out of the configuration (to zero: still
// out).
type simGap struct{ from, to time.Time }

// simReconfCounts are the reconfigurations of every TestSim schedule, to
// check that the schedules exercise them.
var simReconfCounts struct {
	seeds, removed, added, reweighted, replaced, drained atomic.Int64
}

// newSimReconf returns the reconfiguration fault of w's seed, nil when the
// seed runs without it.
func newSimReconf(w *simWorld, specs []PeerSpec) *simReconf {
	rng := rand.New(rand.NewPCG(w.seed, 0x7ec0f))
	if rng.IntN(2) == 0 {
		return nil
	}
	simReconfCounts.seeds.Add(1)
	return &simReconf{w: w, rng: rng, all: slices.Clone(specs), specs: slices.Clone(specs), out: map[string][]simGap{}}
}

// reconfigure is one step of the schedule: sometimes a SetPeers, a random
// moment (up to 3 s) into the step, while the step's faults and requests
// go on.
func (w *simWorld) reconfigure(bg *sync.WaitGroup) {
	r := w.rc
	if r == nil || r.rng.IntN(4) != 0 {
		return
	}
	d := time.Duration(r.rng.Int64N(int64(3 * time.Second)))
	specs, what := r.change()
	bg.Add(1)
	go func() {
		defer bg.Done()
		time.Sleep(d)
		r.apply(specs, what)
	}()
}

// change draws the next configuration from the current one (as the
// reconfiguration itself will find it: changes are applied in the order
// they are drawn, each on its own goroutine, so one drawn later waits
// its turn under r.mu).
func (r *simReconf) change() (func(cur []PeerSpec) []PeerSpec, string) {
	k := r.rng.IntN(4)
	pick := r.rng.Uint64()
	w := 1 + r.rng.IntN(4)
	switch k {
	case 0: // remove one (one stays)
		return func(cur []PeerSpec) []PeerSpec {
			if len(cur) < 2 {
				return nil
			}
			i := int(pick % uint64(len(cur)))
			return slices.Delete(slices.Clone(cur), i, i+1)
		}, "removed"
	case 1: // add one back, anywhere in the order
		return func(cur []PeerSpec) []PeerSpec {
			var outs []PeerSpec
			for _, s := range r.all {
				if !slices.ContainsFunc(cur, func(c PeerSpec) bool { return c.Name == s.Name }) {
					outs = append(outs, s)
				}
			}
			if len(outs) == 0 {
				return nil
			}
			s := outs[pick%uint64(len(outs))]
			s.Tw = 0
			if pick&(1<<40) != 0 {
				s.Weight = w
			}
			at := int((pick >> 8) % uint64(len(cur)+1))
			return slices.Insert(slices.Clone(cur), at, s)
		}, "added"
	case 2: // a weight
		return func(cur []PeerSpec) []PeerSpec {
			out := slices.Clone(cur)
			out[pick%uint64(len(cur))].Weight = w
			return out
		}, "reweighted"
	default: // replaced: its watchdog interval changes
		return func(cur []PeerSpec) []PeerSpec {
			out := slices.Clone(cur)
			s := &out[pick%uint64(len(cur))]
			if s.Tw == 0 {
				s.Tw = 20 * time.Second
			} else {
				s.Tw = 0
			}
			return out
		}, "replaced"
	}
}

// apply makes the change on the Client, and keeps the configuration's
// record.
func (r *simReconf) apply(change func([]PeerSpec) []PeerSpec, what string) {
	w := r.w
	r.mu.Lock()
	defer r.mu.Unlock()
	next := change(r.specs)
	if next == nil {
		return
	}
	ch, err := w.c.SetPeers(context.Background(), next)
	if err != nil {
		w.c.mu.Lock()
		closed := w.c.closed
		w.c.mu.Unlock()
		if !closed {
			w.violation("SetPeers (%s) refused: %v", what, err)
		}
		return
	}
	now := time.Now()
	w.t.Logf("%v SetPeers (%s): %+v", now.Format("04:05.000"), what, ch)
	r.omu.Lock()
	defer r.omu.Unlock()
	for _, name := range ch.Removed {
		r.out[name] = append(r.out[name], simGap{from: now})
		simReconfCounts.removed.Add(1)
	}
	for _, name := range ch.Added {
		if g := r.out[name]; len(g) > 0 && g[len(g)-1].to.IsZero() {
			g[len(g)-1].to = now
		}
		simReconfCounts.added.Add(1)
	}
	simReconfCounts.reweighted.Add(int64(len(ch.Reweighted)))
	simReconfCounts.replaced.Add(int64(len(ch.Replaced)))
	r.specs = next
}

// reconfUnpinned reports whether the host request rq names in
// Destination-Host was out of the configuration at some moment between
// its start and its answer (the Client's close if none came): it was
// routed as a request naming none of the Client's peers then. w.mu is
// held.
func (w *simWorld) reconfUnpinned(rq *simReq) bool {
	if w.rc == nil || rq.pinned == "" {
		return false
	}
	end := w.closedAt
	if at, ok := w.answered[rq.id]; ok {
		end = at
	}
	w.rc.omu.Lock()
	defer w.rc.omu.Unlock()
	for _, g := range w.rc.out[rq.pinned] {
		if !end.IsZero() && g.from.After(end) { // zero: not closed yet
			continue
		}
		if g.to.IsZero() || !g.to.Before(rq.start) {
			return true
		}
	}
	return false
}

// reconfExcused reports whether request id is excused, by a
// reconfiguration, from being answered once quiet: its Destination-Host
// was out of the configuration at some moment of its life
// (reconfUnpinned). Routed as a request naming none of the Client's
// peers, it reaches the servers configured, which are no relays: each
// answers UNABLE_TO_DELIVER. A request lost on a connection (its host's
// drain ended with it unanswered, or that connection failed) is not ended
// by those refusals (its host may have applied it): it is asked again
// every refusedRetry until its deadline, and fails then.
func (w *simWorld) reconfExcused(id uint32) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	rq := w.reqs[id]
	return rq != nil && w.reconfUnpinned(rq)
}

// reconfQuiet runs once the schedule has been quiet for simRecovery (after
// checkRecovered): the configuration's servers are all dialed and in
// service, the members taken out are closed; then, in half the seeds,
// the clean drain (see simReconf).
func (w *simWorld) reconfQuiet(send func(opts ...string) *simReq) {
	r := w.rc
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w.checkConfigured("once quiet")
	if r.rng.IntN(2) == 0 || len(r.specs) < 2 {
		return
	}
	simReconfCounts.drained.Add(1)
	for _, s := range w.servers {
		s.mu.Lock()
		s.delay = time.Duration(1+r.rng.IntN(3)) * time.Second
		s.mu.Unlock()
	}
	var reqs []*simReq
	for range 4 + r.rng.IntN(12) {
		reqs = append(reqs, send("patient", "unpinned"))
	}
	time.Sleep(100 * time.Millisecond)
	// The throttle's rate slots may keep some of them for a few slots
	// (the other requests of the schedule used their quota): they have
	// that long to leave.
	for wait := 0; w.throttled && wait < 40 && !w.allSent(reqs); wait++ {
		time.Sleep(throttle.MinSlot)
	}
	i := r.rng.IntN(len(r.specs))
	victim := r.specs[i]
	next := slices.Clone(r.specs)
	what := "removed"
	switch r.rng.IntN(3) {
	case 0:
		next = slices.Delete(next, i, i+1)
	case 1:
		// Removed, then added back at once: a new member of the same
		// name is dialed while the old one drains. Whatever the old one
		// does as it closes is no longer the name's.
		what = "removed and added back"
	default:
		what = "replaced"
		if next[i].Tw == 0 {
			next[i].Tw = 20 * time.Second
		} else {
			next[i].Tw = 0
		}
	}
	var old *member
	for _, m := range w.c.ros.Load().order {
		if m.spec.Name == victim.Name {
			old = m
		}
	}
	// The requests in flight on the victim: written there, not answered.
	w.mu.Lock()
	var inFlight []uint32
	for _, rq := range reqs {
		ss := w.sends[rq.id]
		if len(ss) == 0 && w.tight {
			// Still in the throttle's queue, behind the few places of
			// its server (some held by requests lost earlier): it
			// leaves after the change, as a new request would.
			continue
		}
		if len(ss) != 1 {
			w.errs = append(w.errs, fmt.Sprintf("request %d sent once quiet: sends %+v before any change", rq.id, ss))
			continue
		}
		_, done := w.answered[rq.id]
		if w.wrote[[2]uint32{rq.id, ss[0].hbh}] == w.n[victim.URL].host && !done {
			inFlight = append(inFlight, rq.id)
		}
	}
	w.mu.Unlock()
	if what == "removed and added back" {
		if _, err := w.c.SetPeers(context.Background(), slices.Delete(slices.Clone(next), i, i+1)); err != nil {
			w.violation("quiet SetPeers (%s %s): %v", what, victim.Name, err)
			return
		}
		from := time.Now()
		time.Sleep(time.Duration(r.rng.Int64N(int64(time.Second))))
		r.omu.Lock()
		r.out[victim.Name] = append(r.out[victim.Name], simGap{from: from, to: time.Now()})
		r.omu.Unlock()
	}
	if _, err := w.c.SetPeers(context.Background(), next); err != nil {
		w.violation("quiet SetPeers (%s %s): %v", what, victim.Name, err)
		return
	}
	if what == "removed" {
		r.omu.Lock()
		r.out[victim.Name] = append(r.out[victim.Name], simGap{from: time.Now()})
		r.omu.Unlock()
	}
	r.specs = next
	// The servers answer within 3 s; the replacement is dialed once the
	// old peer has closed, and is in service after its CER.
	time.Sleep(30 * time.Second)
	w.mu.Lock()
	for _, id := range inFlight {
		if ss := w.sends[id]; len(ss) != 1 || w.applied[id] != 1 {
			w.errs = append(w.errs, fmt.Sprintf("request %d in flight on %s when it was %s (quiet): sends %+v, applied %d; it must be answered there",
				id, victim.Name, what, ss, w.applied[id]))
		} else if _, ok := w.answered[id]; !ok {
			w.errs = append(w.errs, fmt.Sprintf("request %d in flight on %s when it was %s (quiet): no answer read after 30 s", id, victim.Name, what))
		}
	}
	w.mu.Unlock()
	if old != nil && old.p() != nil {
		// A request a server lost (silent) is still in flight there: the
		// drain waits for it as long as the Client lets a request wait
		// (RequestTimeout), then closes.
		select {
		case <-old.p().Done():
		case <-time.After(w.c.cfg.RequestTimeout):
			w.violation("%s, %s with every server answering, has not closed %v later", victim.Name, what, w.c.cfg.RequestTimeout+30*time.Second)
		}
		time.Sleep(10 * time.Second) // a replacement's CER and CEA
	}
	w.checkConfigured("after the quiet " + what)
	for _, s := range w.servers {
		s.mu.Lock()
		s.delay = 0
		s.mu.Unlock()
	}
}

// checkConfigured checks that the servers configured now are the Client's
// peers, each dialed and in service, and that every member taken out has
// closed. r.mu is held.
func (w *simWorld) checkConfigured(when string) {
	r := w.rc
	ps := w.c.Peers()
	if len(ps) != len(r.specs) {
		w.violation("%s: %d peers, %d configured", when, len(ps), len(r.specs))
		return
	}
	for i, p := range ps {
		switch {
		case p == nil:
			w.violation("%s: configured server %s has no peer", when, r.specs[i].Name)
		case p.State() != watchdog.Okay:
			w.violation("%s: configured server %s is %s", when, r.specs[i].Name, p.State())
		}
	}
	if snap, ok := w.c.Balancer(); ok {
		var names []string
		for _, s := range snap.Servers {
			names = append(names, s.Name)
			if want := w.balancerWants(s.Name); s.State != want {
				w.violation("%s: balancer: %s is %v, its peer in service, want %v", when, s.Name, s.State, want)
			}
		}
		var want []string
		for _, s := range r.specs {
			want = append(want, s.Name)
		}
		slices.Sort(names)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			w.violation("%s: balancer lists %v, configured %v", when, names, want)
		}
	}
	for _, m := range w.c.ros.Load().all {
		if !m.removed.Load() || m.p() == nil {
			continue
		}
		select {
		case <-m.p().Done():
		default:
			w.violation("%s: %s (member %d), taken out of the configuration, is still open (%s)", when, m.spec.Name, m.index, m.p().State())
		}
	}
}

// simReconfExercised fails TestSim when a full run did not reconfigure in
// every way, and resets the counts.
func simReconfExercised(t *testing.T, seeds int) {
	c := &simReconfCounts
	s, rm, ad, rw, rp, dr := c.seeds.Swap(0), c.removed.Swap(0), c.added.Swap(0), c.reweighted.Swap(0), c.replaced.Swap(0), c.drained.Swap(0)
	t.Logf("reconfigurations: %d seeds; %d removed, %d added, %d reweighted, %d replaced; %d quiet drains", s, rm, ad, rw, rp, dr)
	if seeds >= simFixedSeeds && (rm == 0 || ad == 0 || rw == 0 || rp == 0 || dr == 0) {
		t.Errorf("the schedules reconfigured too little")
	}
}

// allSent reports whether every one of reqs was sent at least once.
func (w *simWorld) allSent(reqs []*simReq) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, rq := range reqs {
		if len(w.sends[rq.id]) == 0 {
			return false
		}
	}
	return true
}
