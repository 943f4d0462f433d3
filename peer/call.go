package peer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// Errors a Request can return. Match them with errors.Is.
var (
	// ErrNotInService: the watchdog is not OKAY (SUSPECT, DOWN, REOPEN or
	// not yet connected); send elsewhere or wait.
	ErrNotInService = errors.New("peer not in service")
	// ErrConnectionLost: the connection closed before the answer arrived.
	ErrConnectionLost = errors.New("connection lost before the answer")
	// ErrTimeout: no answer before the request's deadline.
	ErrTimeout = errors.New("no answer before the deadline")
	// ErrClosed: the Peer was closed.
	ErrClosed = errors.New("peer closed")
	// ErrAlreadySent: the request was sent on this peer's connection
	// before; it is never sent twice on one connection (RFC 3539 2.10).
	ErrAlreadySent = errors.New("request already sent on this connection")
	// ErrDisconnecting: the peer is closing its connection gracefully and
	// takes no new request.
	ErrDisconnecting = errors.New("peer disconnecting")

	errComplete = errors.New("request complete")
	errInFlight = errors.New("request in flight on another connection")
)

// NotInServiceError says which state refused the request.
type NotInServiceError struct {
	Peer  string
	State watchdog.State
}

func (e *NotInServiceError) Error() string {
	return fmt.Sprintf("peer %s: not in service (watchdog %s)", e.Peer, e.State)
}

// Is makes errors.Is(err, ErrNotInService) true.
func (e *NotInServiceError) Is(target error) bool { return target == ErrNotInService }

type result struct {
	ans []byte
	err error
}

// Call is one request and its lifecycle (see CallState). It completes
// exactly once: the first of an answer, an error, or the caller's deadline
// wins, so a caller never sees two answers, even when an old
// connection answers late. A Call may move between connections (Submit
// after a failover); its End-to-End id never changes, it is never sent
// twice on one connection, and every send after the first carries the T
// flag (RFC 6733 3, 5.5.4) unless the previous peer answered it with an
// error.
//
// Its methods are safe for concurrent use.
type Call struct {
	e2e  uint32
	dest string      // Destination-Host, "" when none
	res  chan result // buffered 1; receives exactly once
	done atomic.Bool // state is final; read without the mutex
	tag  atomic.Pointer[any]

	mu           sync.Mutex
	state        CallState
	raw          []byte   // bytes of the latest send; each resend works on a copy
	hbh          uint32   // Hop-by-Hop id on owner
	owner        *conn    // InFlight: where it is pending
	sentOn       []*conn  // every connection it was queued on, oldest first
	sentOn0      [2]*conn // sentOn's first array: most requests are sent once or twice
	seq          uint64   // send order on owner (under owner.mu)
	sends        int
	keepT        bool    // an agent's forwarded request keeps its T flag
	errAnswered  bool    // the last connection answered with an error: resend without T
	afterRefusal bool    // the latest send was such a resend (for testhook.Queued)
	refusedBy    []*Peer // peers that answered too busy / unable to deliver
	lastAnswer   []byte  // the last of those answers
	first, by    *Peer
}

// NewCall wraps an encoded request. It sets the R flag and, when the
// request carries none, an End-to-End id from the process's generator. The
// Call takes req over: do not touch it afterwards.
func NewCall(req []byte) (*Call, error) {
	if len(req) < wire.HeaderLen || int(wire.Length(req)) != len(req) {
		return nil, fmt.Errorf("request of %d bytes is not one whole Diameter message", len(req))
	}
	wire.SetFlags(req, wire.Flags(req)|wire.FlagRequest)
	if wire.EndToEnd(req) == 0 {
		wire.SetEndToEnd(req, e2e.Next())
	}
	cl := &Call{raw: req, e2e: wire.EndToEnd(req), res: make(chan result, 1)}
	cl.sentOn = cl.sentOn0[:0]
	if dh, ok := wire.FindAVP(req, message.DestinationHost, 0); ok {
		cl.dest = string(dh)
	}
	return cl, nil
}

// KeepRetransmitFlag makes the first send keep a T flag the request
// already carries: what an agent forwarding a retransmitted request does
// (RFC 6733 6.1.1). Without it an originator's first send clears the flag.
// Call it before the first Submit.
func (c *Call) KeepRetransmitFlag() {
	c.mu.Lock()
	c.keepT = true
	c.mu.Unlock()
}

// EndToEnd returns the request's End-to-End Identifier.
func (c *Call) EndToEnd() uint32 { return c.e2e }

// State returns where the request is in its lifecycle.
func (c *Call) State() CallState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Sends returns how many times the request was queued for sending; more
// than one means it was resent (failover, premature failover).
func (c *Call) Sends() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sends
}

// DestinationHost returns the request's Destination-Host, if any.
func (c *Call) DestinationHost() (string, bool) { return c.dest, c.dest != "" }

// FirstPeer returns the peer the call was first sent to, nil before.
// Per-server statistics attribute a request's outcome to it.
func (c *Call) FirstPeer() *Peer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

// AnsweredBy returns the peer whose answer completed the call, nil when it
// ended without an answer.
func (c *Call) AnsweredBy() *Peer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by
}

// Request returns the request bytes as last sent. Read only.
func (c *Call) Request() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.raw
}

// IsDone reports whether the call has completed.
func (c *Call) IsDone() bool { return c.done.Load() }

// SentOn reports whether the call was sent on p's current connection: it
// must not be sent there again.
func (c *Call) SentOn(p *Peer) bool {
	cn := p.cur.Load()
	if cn == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.sentOn, cn)
}

// RefusedBy reports whether p answered the call DIAMETER_TOO_BUSY or
// DIAMETER_UNABLE_TO_DELIVER: it is not offered to p again.
func (c *Call) RefusedBy(p *Peer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.refusedBy, p)
}

// Avoids reports whether p must not get the call: SentOn or RefusedBy.
func (c *Call) Avoids(p *Peer) bool {
	cn := p.cur.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sends == 0 {
		return false
	}
	return (cn != nil && slices.Contains(c.sentOn, cn)) || slices.Contains(c.refusedBy, p)
}

// Tag returns the value SetTag stored, nil if none.
func (c *Call) Tag() any {
	if t := c.tag.Load(); t != nil {
		return *t
	}
	return nil
}

// SetTag stores a value for the layer that dispatches the call (the
// client keeps its throttle bookkeeping there).
func (c *Call) SetTag(v any) { c.tag.Store(&v) }

// Park records that the call waits for a connection in service; false if
// it is complete (or in flight, which a caller must not park).
func (c *Call) Park() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != Queued && c.state != Moved {
		return c.state == Parked
	}
	c.to(Parked)
	return true
}

// Conclude completes a call that was refused by a peer (too busy, unable
// to deliver) with the last such answer: what the caller gets when no
// other peer is left to try. False if it has no such answer or is
// complete.
func (c *Call) Conclude() bool {
	c.mu.Lock()
	ans, from := c.lastAnswer, (*Peer)(nil)
	if n := len(c.refusedBy); n > 0 {
		from = c.refusedBy[n-1]
	}
	c.mu.Unlock()
	if ans == nil {
		return false
	}
	ok, owner, hbh := c.finish(ans, nil, from, nil, nil)
	if owner != nil {
		owner.retire(c, hbh)
	}
	return ok
}

// Fail completes the call with err unless it is complete already, and
// reports whether it did.
func (c *Call) Fail(err error) bool {
	ok, owner, hbh := c.finish(nil, err, nil, nil, nil)
	if owner != nil {
		owner.retire(c, hbh)
	}
	return ok
}

// Wait waits for the answer until ctx is done, or timeout when ctx has no
// deadline (zero: DefaultRequestTimeout). A call that ends without an
// answer fails with an error matching ErrTimeout.
func (c *Call) Wait(ctx context.Context, timeout time.Duration) ([]byte, error) {
	var expired <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		if timeout <= 0 {
			timeout = DefaultRequestTimeout
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	var err error
	select {
	case r := <-c.res:
		return r.ans, r.err
	case <-ctx.Done():
		err = fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	case <-expired:
		err = fmt.Errorf("%w (%v)", ErrTimeout, timeout)
	}
	if ok, owner, hbh := c.finish(nil, err, nil, nil, nil); ok && owner != nil {
		owner.retire(c, hbh)
		owner.p.stats.timedOut.Add(1)
	}
	r := <-c.res // ours, or the answer that won the race
	return r.ans, r.err
}
