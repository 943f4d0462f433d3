package client

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/message"
)

// The strand race of TestSim, once quiet, without a throttle: every
// server but one (a) is frozen until its peer is out of service (SUSPECT,
// past 2 Tw), a few requests go to a, answered a second later, and a's
// connection drops. Its failover finds no peer for them, and before they
// wait (beforeStrand) the frozen servers thaw and come back in service:
// the view changed after the one the failover placed them against, so
// they go at once (not parked 10 s while a server in service could take
// them: watchParked), and every one is answered (they are patient).

// simStrandRace is a schedule's record of the race.
type simStrandRace struct {
	mu   sync.Mutex
	back []*simServer // armed: thawed at the next strand of this schedule
}

// simBeforeStrand is beforeStrand: the strand race when it is armed for
// the calls' schedule, else a pause.
func simBeforeStrand(calls []*call.Call) {
	if len(calls) > 0 {
		if w := simWorldOf(calls[0].Ref); w != nil && w.raceStrand() {
			return
		}
	}
	simPause(50 * time.Millisecond)
}

func (w *simWorld) strandRacePhase(send func(opts ...string) *simReq) {
	if len(w.servers) < 2 || w.throttled {
		return
	}
	rng := rand.New(rand.NewPCG(w.seed, 0x73747264))
	a := w.servers[rng.IntN(len(w.servers))]
	var others []*simServer
	for _, x := range w.servers {
		if x != a {
			others = append(others, x)
		}
	}
	thaw := func() {
		for _, x := range others {
			x.f.unfreeze()
		}
	}
	for _, x := range others {
		x.f.freeze()
	}
	// Out of service at 2 Tw; the connection closes at 3 Tw.
	out := simWithin(80*time.Second, 100*time.Millisecond, func() bool { return !w.inView(others) })
	if !out || !w.inView([]*simServer{a}) {
		thaw() // a server policy's, or a's own, state: no race
		return
	}
	var rs []*simReq
	for range 2 + rng.IntN(4) {
		w.b2.mu.Lock()
		w.b2.next = &simB2Req{at: time.Now().Add(time.Second)}
		w.b2.mu.Unlock()
		rs = append(rs, send("patient", "unpinned", "b2"))
	}
	time.Sleep(10 * time.Millisecond) // written to a
	w.sr.mu.Lock()
	w.sr.back = others
	w.sr.mu.Unlock()
	w.tracef("strand race: %d requests on %s, which drops", len(rs), a.host)
	a.f.dropConnections()
	for _, r := range rs {
		w.waitReturnBy(r.id, time.Now().Add(3*time.Minute))
	}
	w.sr.mu.Lock()
	armed := w.sr.back != nil
	w.sr.back = nil
	w.sr.mu.Unlock()
	if armed {
		thaw()
	}
}

// inView reports whether any of servers is in service in the Client's
// view.
func (w *simWorld) inView(servers []*simServer) bool {
	v := w.c.view()
	for _, m := range v.ros.all {
		for _, s := range servers {
			if message.EqualIdentity(m.spec.Name, s.host) && v.open[m.index] {
				return true
			}
		}
	}
	return false
}

// raceStrand thaws the armed servers and returns once one of them is in
// service in the Client's view (at most 5 s); false when not armed.
func (w *simWorld) raceStrand() bool {
	w.sr.mu.Lock()
	back := w.sr.back
	w.sr.back = nil
	w.sr.mu.Unlock()
	if back == nil {
		return false
	}
	for _, x := range back {
		x.f.unfreeze()
	}
	if simWithin(5*time.Second, 100*time.Microsecond, func() bool { return w.inView(back) }) {
		w.mu.Lock()
		w.counts.StrandRaced++
		w.mu.Unlock()
	}
	return true
}
