package serve

import (
	"errors"
	"log/slog"
	"net"
	"time"
)

// Listener is what Accept accepts from: transport.Listener, or any
// listener of connections of type C.
type Listener[C any] interface {
	Accept() (C, error)
	Addr() net.Addr
}

// Backoff bounds of Accept: after a failed accept it waits MinBackoff,
// doubling on each failure in a row up to MaxBackoff.
const (
	MinBackoff = 5 * time.Millisecond
	MaxBackoff = time.Second
)

// Accept accepts from ln until it is closed or closed() reports true, and
// returns nil then. Every other accept error (EMFILE when the process is
// out of descriptors, a connection aborted before accept) is logged,
// rate-limited, and retried after a back-off: a listener never stops
// accepting while the process lives.
//
// Each accepted connection is counted by adm (nil admits all) and handed
// to start with its Ticket (nil when adm is), which start's connection
// must tell when it is admitted and when it ends, or, over adm's limits,
// closed at once by closeConn. Until it is admitted, a connection may be
// closed by closeConn on the accepting goroutine, to make room for a
// newer one (see Admission): its service then ends as on any closed
// connection, and its Ticket's Admitted and Ended do nothing. start and
// closeConn run on the accepting goroutine: they must not block.
func Accept[C any](ln Listener[C], adm *Admission, lg *slog.Logger, closed func() bool,
	remote func(C) net.Addr, closeConn func(C), start func(c C, t *Ticket)) error {
	var backoff Backoff
	for {
		c, err := ln.Accept()
		if err != nil {
			if closed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			backoff.Wait(lg, KindAcceptFailed, "accept failed; retrying", "addr", ln.Addr().String(), "err", err)
			continue
		}
		backoff.Reset()
		var t *Ticket
		if adm != nil {
			var ok bool
			if t, ok = adm.Admit(remote(c), lg, func() { closeConn(c) }); !ok {
				closeConn(c)
				continue
			}
		}
		start(c, t)
	}
}

// Backoff is the wait after a failed accept or read that must be
// retried, not end the service: MinBackoff, doubling on each failure in a
// row up to MaxBackoff. Its zero value is ready; it is not safe for
// concurrent use.
type Backoff struct{ d time.Duration }

// Wait logs msg as kind k (rate-limited) with how long it will wait,
// then waits.
func (b *Backoff) Wait(lg *slog.Logger, k Kind, msg string, args ...any) {
	b.d = min(max(2*b.d, MinBackoff), MaxBackoff)
	Log(lg, slog.LevelWarn, k, msg, append(args, "in", b.d)...)
	time.Sleep(b.d)
}

// Reset starts the next failure from MinBackoff again.
func (b *Backoff) Reset() { b.d = 0 }
