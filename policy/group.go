package policy

import (
	"fmt"
	"sync"
	"time"
)

// Group owns the trackers of all the servers a client uses, and makes the
// decision that needs all of them: a server whose hold-down is over is
// probed only when there are several servers and at least one other is
// healthy, that is in service and available.
//
// Available is the owner's view of the transport: a server whose watchdog
// is not OKAY is not available. It gets no traffic and does not count as
// healthy. A server gets ordinary traffic only if it is available and its
// state is Unknown or InService; a probing one gets only its probe.
//
// A Group is safe for concurrent use.
type Group struct {
	mu      sync.Mutex
	t       []*Tracker
	avail   []bool
	removed []bool // by index: taken out by Remove
	cfg     Config
}

// TestSend is a test-user request the owner must send to server Index.
type TestSend struct {
	Index int
	Kind  Send
}

// NewGroup returns a group with one tracker per name, all Unknown and
// available, with the same configuration.
func NewGroup(names []string, cfg Config) (*Group, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no server", ErrConfig)
	}
	g := &Group{t: make([]*Tracker, len(names)), avail: make([]bool, len(names)), removed: make([]bool, len(names)), cfg: cfg}
	for i, n := range names {
		t, err := NewTracker(n, cfg)
		if err != nil {
			return nil, err
		}
		t.index = i
		g.t[i] = t
		g.avail[i] = true
	}
	return g, nil
}

// Add adds a server with the group's configuration, Unknown and
// unavailable until SetAvailable says otherwise, and returns its index:
// a Tick between the two, on another goroutine, must not ask for a
// test-user request to a server that is not connected yet, nor start its
// down-timeout.
func (g *Group) Add(name string) (int, error) {
	t, err := NewTracker(name, g.cfg)
	if err != nil {
		return 0, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	t.index = len(g.t)
	g.t = append(g.t, t)
	g.avail = append(g.avail, false)
	g.removed = append(g.removed, false)
	return t.index, nil
}

// Remove takes server i out for good: it is unavailable from now on, and
// nothing advances it any more (Tick, or a reply or a send on the
// connection it drains: a server of its name may have replaced it, and
// the state changes of the old one would be read as the new one's). Its
// index is not reused.
func (g *Group) Remove(i int) {
	g.mu.Lock()
	g.removed[i], g.avail[i] = true, false
	g.mu.Unlock()
}

// frozen is the Output of a call on removed server i: its last state,
// nothing allowed, no change. g.mu is held.
func (g *Group) frozen(i int) Output { return Output{State: g.t[i].state} }

// Len returns the number of servers, removed ones included.
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.t)
}

// Name returns the name of server i.
func (g *Group) Name(i int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.t[i].name
}

// State returns the state of server i as of the last call.
func (g *Group) State(i int) State {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.t[i].state
}

// States appends the state of every server to dst.
func (g *Group) States(dst []State) []State {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range g.t {
		dst = append(dst, t.state)
	}
	return dst
}

// SetAvailable records whether server i's transport can carry requests
// (its watchdog is OKAY). A server made available may have a probe or a
// keep-alive due at once: the owner looks at NextWakeup again.
func (g *Group) SetAvailable(i int, ok bool) {
	g.mu.Lock()
	g.avail[i] = ok && !g.removed[i]
	g.mu.Unlock()
}

// probeOK: several servers, and one other than i in service and available.
func (g *Group) probeOK(i int) bool {
	for j, t := range g.t {
		if j != i && g.avail[j] && t.state == InService {
			return true
		}
	}
	return false
}

// Allow says whether a new ordinary request may go to server i now, and
// whether it is the probe (see Tracker.Allow). An unavailable server is
// refused.
func (g *Group) Allow(i int, now time.Time) Output {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed[i] {
		return g.frozen(i)
	}
	if !g.avail[i] {
		return g.t[i].hold(now, g.probeOK(i))
	}
	return g.t[i].Allow(now, g.probeOK(i))
}

// OnSent records an ordinary request sent to server i (Tracker.OnSent).
func (g *Group) OnSent(i int, now time.Time) Output {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed[i] {
		return g.frozen(i)
	}
	return g.t[i].OnSent(now)
}

// ReplyMark returns server i's mark of the replies recorded so far
// (Tracker.ReplyMark), for OnSentSince.
func (g *Group) ReplyMark(i int) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.t[i].ReplyMark()
}

// OnSentSince records a request sent to server i after ReplyMark
// returned mark (Tracker.OnSentSince).
func (g *Group) OnSentSince(i int, now time.Time, mark uint64) Output {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed[i] {
		return g.frozen(i)
	}
	return g.t[i].OnSentSince(now, mark)
}

// OnReply records a reply from server i (Tracker.OnReply).
func (g *Group) OnReply(i int, now time.Time) Output {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed[i] {
		return g.frozen(i)
	}
	return g.t[i].OnReply(now)
}

// CancelProbe gives back the probe claimed for server i (Tracker.CancelProbe).
func (g *Group) CancelProbe(i int) {
	g.mu.Lock()
	g.t[i].CancelProbe()
	g.mu.Unlock()
}

// Tick advances every tracker to now. It appends the state changes to evs
// and the test-user requests to send to sends. Trackers are advanced in two
// passes, timers first and hold-downs second, so that a server whose
// down-timeout expires in this Tick no longer counts as healthy for the
// others' probing decision.
func (g *Group) Tick(now time.Time, sends []TestSend, evs []Event) ([]TestSend, []Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, t := range g.t {
		if g.removed[i] {
			continue
		}
		var o Output
		t.advance(now, &o)
		evs = append(evs, o.Events()...)
	}
	for i, t := range g.t {
		if g.removed[i] {
			continue
		}
		if !g.avail[i] { // no test-user request on a connection that cannot carry it
			o := t.hold(now, g.probeOK(i))
			evs = append(evs, o.Events()...)
			continue
		}
		o := t.Tick(now, g.probeOK(i))
		evs = append(evs, o.Events()...)
		if o.Send != SendNothing {
			sends = append(sends, TestSend{Index: i, Kind: o.Send})
		}
	}
	return sends, evs
}

// NextWakeup returns the earliest NextWakeup of the trackers. For a
// server that is not available only its down-timeout, probe timeout and
// hold-down end count: it is sent no probe or keep-alive meanwhile, so
// those wait until SetAvailable makes it available again, when they are
// due at once (the owner should look at NextWakeup again then).
func (g *Group) NextWakeup() (at time.Time, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, t := range g.t {
		if g.removed[i] {
			continue
		}
		if x, tok := t.nextWakeup(g.avail[i]); tok && (!ok || x.Before(at)) {
			at, ok = x, true
		}
	}
	return at, ok
}

// Eligible appends to dst the servers that take ordinary requests: available
// and Unknown or InService, as of the last call (Tick at NextWakeup keeps
// that current). Probing servers are not listed: see ProbeWanted.
func (g *Group) Eligible(dst []int) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, t := range g.t {
		if g.avail[i] && t.state.Takes() {
			dst = append(dst, i)
		}
	}
	return dst
}

// WantsProbe reports whether server i is probing without a test user and
// waits for a real request to probe it: available, and its probe not
// claimed yet (see ProbeWanted).
func (g *Group) WantsProbe(i int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.t[i]
	return g.avail[i] && !g.removed[i] && t.state == Probing && !t.cfg.TestUser && !t.probeOut
}

// ProbeWanted returns a server, the lowest index, that is probing without a
// test user and waits for a real request to probe it. The owner may send
// the next request there through Allow, which claims the probe.
func (g *Group) ProbeWanted() (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, t := range g.t {
		if g.avail[i] && t.state == Probing && !t.cfg.TestUser && !t.probeOut {
			return i, true
		}
	}
	return -1, false
}
