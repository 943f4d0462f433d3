package client

import (
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/message"
)

// The throttle's order of a failover's replays, in TestSim's throttled
// schedules. A server that leaves service sends its throttle queue back,
// and its pending requests come back as replays, which go ahead of every
// newer request of their class. Between the two the throttle releases
// nothing: otherwise what the server's queue sent back, or a request sent
// meanwhile, would leave ahead of the replays. So a replay reaches its
// new connection ahead of every request of its class that was still in
// the throttle when the hand-over began (neither released nor sent by
// then) and went to that connection. The wire's order alone cannot tell
// which requests were still in the throttle then: the Client's hooks
// stamp its steps in the schedule's order (seq).
//
// Not held to it: a replay held out of the throttle since (no peer could
// take it: it rejoins the queue when one can, and what the throttle
// released meanwhile went first), or queued for another server first
// (the throttle keeps the order of each server's queue, not across
// servers), or released after its send there and before the hand-over
// (it had left that server already), or back in the scheduler and,
// when the other request left it, not picked since or last picked for
// no server (it could go nowhere then: it avoids the connection it was
// sent on, where the other could go; it was held then, or, with no
// server available, waited in the instance queue); a
// hand-over of a peer a reconfiguration removed or replaced (the
// throttle does not wait for a peer no member has); pinned requests (never replayed
// elsewhere); a premature failover's resend (a refusal, not a
// hand-over); a request whose steps outgrew their record.

// simThrottleOrder is a schedule's record of the throttle's steps, under
// simWorld.mu.
type simThrottleOrder struct {
	released map[uint32][]int // when the throttle released each request (seq)
	requeued map[uint32][]int // when each came back into the scheduler (seq)
	held     map[uint32][]int // when the throttle held each out, no peer able to take it (seq)
	leaving  []simLeaving     // the hand-overs the throttle waited for
	overflow bool             // more hand-overs than recorded: not checked
}

// simLeaving is a hand-over the throttle waited for: from the server
// host, from seq on.
type simLeaving struct {
	seq  int
	at   time.Time
	host string
	k    call.Carrier
}

// simStepsMax bounds each request's record of releases and holds, and
// the hand-overs recorded.
const simStepsMax = 64

func (o *simThrottleOrder) init() {
	if o.released == nil {
		o.released = map[uint32][]int{}
		o.requeued = map[uint32][]int{}
		o.held = map[uint32][]int{}
	}
}

// simStep returns a hook that stamps a request's step in the record
// that of picks from its world's (under simWorld.mu).
func simStep(of func(*simThrottleOrder) map[uint32][]int) func(*call.Call) {
	return func(cl *call.Call) {
		w := simWorldOf(cl.Ref)
		if w == nil {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.tord.init()
		m := of(&w.tord)
		if r := m[cl.Ref]; len(r) < simStepsMax {
			m[cl.Ref] = append(r, w.next())
		}
	}
}

// The hooks onReleased, onRequeued and onHeld.
var (
	simReleased = simStep(func(o *simThrottleOrder) map[uint32][]int { return o.released })
	simRequeued = simStep(func(o *simThrottleOrder) map[uint32][]int { return o.requeued })
	simHeld     = simStep(func(o *simThrottleOrder) map[uint32][]int { return o.held })
)

// simClients is the world of each schedule's Client, from New on (no
// request is sent before).
var simClients sync.Map // *Client -> *simWorld

// simAwaitHandOver is onAwaitHandOver.
func simAwaitHandOver(c *Client, k call.Carrier) {
	x, ok := simClients.Load(c)
	if !ok {
		return
	}
	w := x.(*simWorld)
	w.mu.Lock()
	if len(w.tord.leaving) < simStepsMax*16 {
		w.tord.leaving = append(w.tord.leaving, simLeaving{w.next(), time.Now(), k.Name(), k})
	} else {
		w.tord.overflow = true
	}
	w.mu.Unlock()
}

// full reports whether request id's steps outgrew their record.
func (o *simThrottleOrder) full(id uint32) bool {
	return len(o.released[id]) >= simStepsMax || len(o.held[id]) >= simStepsMax || len(o.requeued[id]) >= simStepsMax
}

// first returns the first of seqs in (from, to), or to.
func first(seqs []int, from, to int) int {
	for _, s := range seqs {
		if s > from && s < to {
			return s
		}
	}
	return to
}

// within reports whether one of seqs is in (from, to).
func within(seqs []int, from, to int) bool {
	for _, s := range seqs {
		if s > from && s < to {
			return true
		}
	}
	return false
}

// replaysAheadOfQueued checks that a failover's replays through the
// throttle reached their new connection ahead of the requests of their
// class still in the throttle when the hand-over began. w.mu is held.
func (w *simWorld) replaysAheadOfQueued() {
	if !w.throttled || w.tord.overflow {
		return
	}
	// The peers still members at the end: a wait for another's
	// hand-over may have been dropped when a reconfiguration removed or
	// replaced its member (the throttle does not wait for a peer no
	// member has: it may never hand over).
	members := map[call.Carrier]bool{}
	for _, m := range w.c.ros.Load().all {
		if k := m.carrier(); k != nil && !m.removed.Load() {
			members[k] = true
		}
	}
	for id, ss := range w.sends {
		rq := w.reqs[id]
		if rq == nil || rq.pinned != "" || w.tord.full(id) {
			continue
		}
		for k := 1; k < len(ss); k++ {
			prev, s := ss[k-1], ss[k]
			if s.afterRefusal || !s.tflag {
				continue
			}
			// The hand-over that moved it: the first of the server it
			// was last sent to since that send. Not one it had left
			// before (released since the send).
			host := w.hostOf(id, prev)
			var h *simLeaving
			for i := range w.tord.leaving {
				l := &w.tord.leaving[i]
				if l.seq > prev.seq && l.seq < s.seq && host != "" && message.EqualIdentity(l.host, host) {
					h = l
					break
				}
			}
			if h == nil || !members[h.k] || within(w.tord.released[id], prev.seq, h.seq) || within(w.tord.held[id], h.seq, s.seq) ||
				w.queuedElsewhere(id, w.hostOfSend(id, s.seq), h.seq, s.seq) {
				continue
			}
			for qid, qs := range w.sends {
				q := w.reqs[qid]
				// Another request of its class first sent after the
				// hand-over began, and not released before it.
				if qid == id || q == nil || simClass(q) != simClass(rq) || w.tord.full(qid) || qs[0].seq < h.seq || qs[0].conn != s.conn || within(w.tord.released[qid], 0, h.seq) {
					continue
				}
				w.counts.ThrottleOrderPairs++
				// Back in the scheduler before q left it, and, as q left
				// it, not picked since or picked for no server: the
				// replay could go nowhere then (it avoids the connection
				// it was sent on, while q could go there), and the
				// throttle lets what can go go. The pick that counts is
				// the last before q left: one before it is stale when the
				// replay came back to the instance queue since (its
				// server's queue sent back as the server left service,
				// Repick) and was picked again, for none; it was then
				// held (throttle.Nowhere), or waited for a server to be
				// available.
				back := first(w.tord.requeued[id], h.seq, s.seq)
				qr := first(w.tord.released[qid], h.seq, qs[0].seq+1)
				var last *simPick
				for i, p := range w.picks[id] {
					if p.seq > h.seq && p.seq < qr {
						last = &w.picks[id][i]
					}
				}
				if back < qr && (last == nil || last.host == "") {
					continue
				}
				if qs[0].seq < s.seq {
					w.t.Errorf("seed %d: replay of %d (sent at %d to %s, which left service at %d, %v) reached its new connection at %d behind request %d (pinned %q), which was still in the throttle then and went there at %d: the throttle let it go ahead of the hand-over's replays; sends %+v and %+v; released %v and %v; requeued %v and %v; held %v and %v; picks %v and %v",
						w.seed, id, prev.seq, host, h.seq, h.at.Format("04:05.000"), s.seq, qid, q.pinned, qs[0].seq, ss, qs, w.tord.released[id], w.tord.released[qid],
						w.tord.requeued[id], w.tord.requeued[qid], w.tord.held[id], w.tord.held[qid], w.picks[id], w.picks[qid])
				}
			}
		}
	}
}

// TestHostOfUnwrittenSend checks that the order checks know where a
// send was queued though it was never written: its connection broke, or
// its server froze, first.
func TestHostOfUnwrittenSend(t *testing.T) {
	c1, c2 := new(int), new(int) // two connections
	w := &simWorld{
		sends: map[uint32][]simSend{
			1: {{seq: 10, conn: c1, hbh: 100}, {seq: 30, conn: c2, hbh: 201}},
			2: {{seq: 20, conn: c2, hbh: 200}},
			3: {{seq: 40, conn: c1, hbh: 101}},
		},
		wrote: map[[2]uint32]string{{1, 100}: "a", {2, 200}: "c"},
	}
	for _, tc := range []struct {
		id   uint32
		seq  int
		want string
	}{
		{1, 10, "a"}, // written
		{1, 30, "c"}, // not written: request 2 was written to its connection
		{3, 40, "a"}, // not written: request 1 was written to its connection
		{2, 99, ""},  // no such send
	} {
		if got := w.hostOfSend(tc.id, tc.seq); got != tc.want {
			t.Errorf("hostOfSend(%d, %d) = %q, want %q", tc.id, tc.seq, got, tc.want)
		}
	}
}
