package peer

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/aaatp/aaatp/watchdog"
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

// call is one request in flight. It completes exactly once: the first of
// the answer, an error, or the caller's deadline wins, so a caller never
// sees two answers (F4) even when the same request is pending on two
// connections after a failover.
type call struct {
	raw  []byte // request bytes; the Hop-by-Hop id is this connection's
	hbh  uint32
	done atomic.Bool
	res  chan result // buffered 1; receives exactly once
}

func newCall(raw []byte) *call {
	return &call{raw: raw, res: make(chan result, 1)}
}

// complete delivers r if the call is not complete yet and reports whether
// it did.
func (c *call) complete(ans []byte, err error) bool {
	if !c.done.CompareAndSwap(false, true) {
		return false
	}
	c.res <- result{ans, err}
	return true
}
