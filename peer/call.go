package peer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// Errors a Request can return. Match them with errors.Is.
var (
	// ErrNotInService: the watchdog is not OKAY (SUSPECT, DOWN, REOPEN or
	// not yet connected); send elsewhere or wait (W6, W8).
	ErrNotInService = errors.New("peer not in service")
	// ErrConnectionLost: the connection closed before the answer arrived.
	ErrConnectionLost = errors.New("connection lost before the answer")
	// ErrTimeout: no answer before the request's deadline.
	ErrTimeout = errors.New("no answer before the deadline")
	// ErrClosed: the Peer was closed.
	ErrClosed = errors.New("peer closed")
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

// Call is one request in flight. It completes exactly once: the first of
// an answer, an error, or the caller's deadline wins, so a caller never sees
// two answers (F4) even when the request is pending on two connections
// after a failover. A Call may move between peers (Peer.Submit after a
// failover); its End-to-End id never changes, and every send after the
// first carries the T flag (RFC 6733 3, 5.5.4).
//
// Its methods are safe for concurrent use.
type Call struct {
	raw   []byte               // bytes of the latest send; each resend works on a copy
	hbh   atomic.Uint32        // Hop-by-Hop id on the owner connection
	owner atomic.Pointer[conn] // where it waits for an answer; nil while moved or parked
	seq   uint64               // send order on the owner connection (under its mu)
	sends atomic.Uint32        // how many times it was queued on a connection
	e2e   uint32
	first atomic.Pointer[Peer] // the peer it was first sent to
	by    atomic.Pointer[Peer] // the peer whose answer completed it
	done  atomic.Bool
	res   chan result // buffered 1; receives exactly once
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
	return &Call{raw: req, e2e: wire.EndToEnd(req), res: make(chan result, 1)}, nil
}

// EndToEnd returns the request's End-to-End Identifier.
func (c *Call) EndToEnd() uint32 { return c.e2e }

// Sends returns how many times the request was queued for sending; more
// than one means it was retransmitted with the T flag.
func (c *Call) Sends() int { return int(c.sends.Load()) }

// DestinationHost returns the request's Destination-Host, if any: a
// request addressed to one host is not failed over to another (RFC 6733
// 5.5.4).
func (c *Call) DestinationHost() (string, bool) {
	return message.StringOf(c.raw, message.DestinationHost, 0)
}

// FirstPeer returns the peer the call was first sent to, nil before.
// Per-server statistics attribute a request's outcome to it.
func (c *Call) FirstPeer() *Peer { return c.first.Load() }

// AnsweredBy returns the peer whose answer completed the call, nil when it
// ended without an answer.
func (c *Call) AnsweredBy() *Peer { return c.by.Load() }

// Request returns the request bytes as last sent. Read only.
func (c *Call) Request() []byte { return c.raw }

// IsDone reports whether the call has completed.
func (c *Call) IsDone() bool { return c.done.Load() }

// Fail completes the call with err unless it is complete already, and
// reports whether it did.
func (c *Call) Fail(err error) bool {
	if !c.complete(nil, err) {
		return false
	}
	if o := c.owner.Swap(nil); o != nil {
		o.forget(c)
	}
	return true
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
	if o := c.owner.Load(); c.Fail(err) && o != nil {
		o.p.stats.timedOut.Add(1)
	}
	r := <-c.res // ours, or the answer that won the race
	return r.ans, r.err
}

// complete delivers r if the call is not complete yet and reports whether
// it did.
func (c *Call) complete(ans []byte, err error) bool {
	if !c.claim() {
		return false
	}
	c.deliver(ans, err)
	return true
}

// claim makes the caller the one that completes c. Counters are updated
// between claim and deliver, so that a caller who got its answer sees them.
func (c *Call) claim() bool { return c.done.CompareAndSwap(false, true) }

func (c *Call) deliver(ans []byte, err error) { c.res <- result{ans, err} }
