package peer

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/aaatp/aaatp/wire"
)

// CallState is where a request is in its life. A Call is in exactly one
// state; it changes only along the transitions of legalTransitions, each
// made under the Call's mutex, so that the goroutines that can act on one
// request (the connection's reader matching an answer, a failover moving
// it, the caller's deadline, a dispatcher re-sending it) never both act.
type CallState uint8

const (
	// Queued: created, not yet sent on any connection.
	Queued CallState = iota
	// InFlight: sent on one connection, pending there for its answer.
	InFlight
	// Moved: taken off the connection it was pending on (a failover, a
	// graceful disconnect, a too-busy answer), on its way to another. It is
	// pending nowhere; a late answer on an old connection still completes
	// it.
	Moved
	// Parked: waiting for a connection in service that it was never sent
	// on.
	Parked
	// Answered: an answer was delivered. Final.
	Answered
	// Failed: an error was delivered (deadline, close, unreachable). Final.
	Failed
)

var stateNames = [...]string{"queued", "in-flight", "moved", "parked", "answered", "failed"}

func (s CallState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("CallState(%d)", s)
}

// legalTransitions[from][to]. The rules behind them:
//   - a request is in flight on at most one connection at a time, and it
//     leaves a connection (Moved) before it is sent on another;
//   - it is never sent again on a connection it was sent on (submit checks
//     sentOn), whatever state it comes from;
//   - an answer can complete it in any state but the final ones, because
//     an old connection may answer late while it is moved or parked.
var legalTransitions = [6][6]bool{
	Queued:   {InFlight: true, Parked: true, Failed: true},
	InFlight: {Answered: true, Moved: true, Failed: true},
	Moved:    {InFlight: true, Parked: true, Answered: true, Failed: true},
	Parked:   {InFlight: true, Answered: true, Failed: true},
}

// to changes the state; c.mu is held. An illegal transition is a bug in
// this package: it panics rather than lose or duplicate a request.
func (c *Call) to(next CallState) {
	if !legalTransitions[c.state][next] {
		panic(fmt.Sprintf("peer: request %d: illegal transition %s -> %s", c.e2e, c.state, next))
	}
	c.state = next
	if next >= Answered {
		c.done.Store(true)
	}
}

// final reports whether the state is Answered or Failed; c.mu is held.
func (c *Call) final() bool { return c.state >= Answered }

// board makes c in flight on cn: the only way a request reaches a
// connection. cn.mu is held. It returns the bytes to queue, the
// Hop-by-Hop id and the state it left, or an error without changing anything: ErrAlreadySent if
// c was sent on cn before, errComplete if c is complete, errInFlight if c
// is pending elsewhere (it must be moved first).
//
// The first send writes the Hop-by-Hop id into the caller's bytes and
// clears the T flag unless c keeps it (an agent forwarding a T-flagged
// request); every later send works on a copy, because the writer of a
// previous connection may still be reading the old bytes, and sets the T
// flag unless the last connection answered with an error (a premature
// failover: that request was not lost, RFC 6733 3).
func (c *Call) board(cn *conn) (raw []byte, id uint32, prev CallState, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev = c.state
	switch {
	case c.final():
		return nil, 0, prev, errComplete
	case c.state == InFlight:
		return nil, 0, prev, errInFlight
	case slices.Contains(c.sentOn, cn):
		return nil, 0, prev, ErrAlreadySent
	}
	raw = c.raw
	switch {
	case c.sends == 0 && c.keepT:
	case c.sends == 0 || c.errAnswered:
		if c.sends > 0 {
			raw = slices.Clone(raw)
		}
		wire.SetFlags(raw, wire.Flags(raw)&^wire.FlagRetransmit)
	default:
		raw = slices.Clone(raw)
		wire.SetRetransmit(raw)
	}
	id = cn.hbh.Next()
	wire.SetHopByHop(raw, id)
	c.afterRefusal = c.sends > 0 && c.errAnswered
	c.raw, c.hbh, c.owner = raw, id, cn
	c.sentOn = append(c.sentOn, cn)
	c.sends++
	c.errAnswered = false
	if c.first == nil {
		c.first = cn.p
	}
	c.to(InFlight)
	return raw, id, prev, nil
}

// unboard undoes board when the bytes could not be queued after all; cn.mu
// is held and c was in flight on cn.
func (c *Call) unboard(cn *conn, prev CallState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != InFlight || c.owner != cn {
		return
	}
	c.owner = nil
	c.sentOn = c.sentOn[:len(c.sentOn)-1]
	c.sends--
	if c.sends == 0 {
		c.first = nil
	}
	c.state = prev // the one step back board made
}

// leave takes c off cn (a failover, a drain, a too-busy answer): Moved,
// pending nowhere. cn.mu is held. False if c is not in flight on cn.
func (c *Call) leave(cn *conn, busy *Peer, answer []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != InFlight || c.owner != cn {
		return false
	}
	c.owner = nil
	if busy != nil {
		c.errAnswered = true
		c.refusedBy = append(c.refusedBy, busy)
		c.lastAnswer = answer
	}
	c.to(Moved)
	return true
}

// finish completes c with an answer or an error, unless it is complete,
// counting it in cnt (when not nil) before the caller can see the result.
// It returns whether it did and, when c was still in flight on a
// connection other than from, that connection and the Hop-by-Hop id there,
// so that the caller can take it out of that pending map.
func (c *Call) finish(ans []byte, err error, by *Peer, from *conn, cnt *atomic.Uint64) (ok bool, owner *conn, hbh uint32) {
	c.mu.Lock()
	if c.final() {
		c.mu.Unlock()
		return false, nil, 0
	}
	if c.state == InFlight && c.owner != from {
		owner, hbh = c.owner, c.hbh
	}
	c.owner = nil
	if err != nil {
		c.to(Failed)
	} else {
		c.by = by
		c.to(Answered)
	}
	c.mu.Unlock()
	if cnt != nil {
		cnt.Add(1)
	}
	c.res <- result{ans, err}
	return true, owner, hbh
}
