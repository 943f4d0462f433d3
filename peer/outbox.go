package peer

import (
	"fmt"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/wire"
)

// Effects after the lock. A step decides under p.mu and records what must
// happen in two places, both run once p.mu is released (as etcd-io/raft
// hands back a Ready instead of acting inside Step):
//
//   - p.out: writes (DWR, DWA, DPR, the held DPA) and calls failed by a
//     lost connection, carried out by the goroutine that stepped, right
//     after it unlocks;
//   - the notice queue: events and hand-overs to the failover hook, in the order
//     the steps made them, delivered by one notifier goroutine per peer
//     that runs while notices are queued and exits when none are (an idle
//     peer costs no goroutine for it).
//
// Subscribers and the failover hook therefore never run under p.mu, and
// never on a connection's reader: they may call any method of the peer,
// Close included, which does not wait for the notifier (Done does).

// effect is one entry of p.out.
type effect struct {
	c    *conn
	msg  []byte // write msg on c
	hold bool   // msg is a DPA: hold it until the answers owed are out
	fail []*call.Call
	err  error
}

// notice is one entry of the notice queue: an event, or a hand-over of
// calls to the failover hook.
type notice struct {
	ev       Event
	failover bool
	calls    []*call.Call
	reason   string
}

// write records a write for after the lock. p.mu is held.
func (p *Peer) write(c *conn, msg []byte) { p.out = append(p.out, effect{c: c, msg: msg}) }

// takeOut returns the effects recorded so far. p.mu is held.
func (p *Peer) takeOut() []effect {
	out := p.out
	p.out = nil
	return out
}

// run carries out effects; p.mu is not held.
func (p *Peer) run(out []effect) {
	for _, e := range out {
		switch {
		case e.hold:
			e.c.holdDPA(e.msg, p.cfg.DPATimeout)
		case e.msg != nil:
			if e.c.enqueueLone(e.msg) == nil && wire.IsRequest(e.msg) && wire.CommandCode(e.msg) == wire.CmdDeviceWatchdog {
				p.stats.dwrSent.Add(1)
			}
		}
		var from *call.Conn // the connection the calls were failed for, if any
		if e.c != nil {
			from = &e.c.h
		}
		for _, cl := range e.fail {
			if ok, owner := cl.Finish(nil, fmt.Errorf("peer %s: %w", p.Name(), e.err), from, &p.stats.lost); ok && owner != nil {
				owner.Retire(cl, false)
			}
		}
	}
}

// notify queues n for delivery after the lock, in order. Called with or
// without p.mu; notices queued under p.mu keep the order of the steps.
func (p *Peer) notify(n notice) { p.notes.Schedule(n) }

// deliver hands n to the failover hook or the subscribers, on the notice
// queue's goroutine.
func (p *Peer) deliver(n notice) {
	if n.failover {
		p.cfg.Failover(p, n.calls, n.reason)
	} else {
		p.cfg.Events.Publish(n.ev)
	}
}
