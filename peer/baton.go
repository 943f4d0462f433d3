package peer

import (
	"errors"
	"math"
	"os"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// The reading baton. A caller whose request went out on its own
// goroutine (writeInline), alone on the connection, reads the connection
// itself while it waits (call.Reader): its answer then wakes it from the
// network, as a plain request-answer loop would be woken, instead of
// being read by the connection's reader goroutine and handed over, which
// costs a second goroutine's wake-up on every request.
//
// Exactly one goroutine reads a connection at a time: the one holding
// the baton. It is the reader goroutine's (batonReader) until the reader
// finishes the call of a caller that wrote its request inline with
// nothing else pending; the reader then parks and leaves the baton free
// (batonFree) for the next such caller, who takes it (batonCaller) in
// Await and reads until its own call is done. A caller that holds the
// baton handles the answers it meets as the reader does (any call's, a
// DWA, a DPA); a request from the peer (a DWR, a DPR, an application
// request), a read error or a message already buffered goes back to the
// reader, which handles it. On return the baton goes to a caller that
// registered waiting for it (c.waiter) if calls are still pending, or to
// the reader, or is left free when nothing is pending.
//
// The reader takes the baton back at once when a message is queued for
// the writer (a DWR, a DPR, a request that did not go out inline,
// wakeReader), when the connection is closed from this side, and at the
// latest 2*batonIdle after the baton was last left free with no caller
// taking it since: a request from the peer, the loss of the connection
// or the DWA to a DWR sent just as the reader parked is noticed that much
// later on an idle connection, far below the watchdog's Tw (seconds).
//
// A caller's wait is cut short (its deadline, its context) while it reads
// by the connection's read deadline: Interrupt sets it in the past, and
// the holder that meets the deadline clears it and looks again whether
// its call is done. Only transports whose read a deadline interrupts
// without losing a byte take part (transport.ReadInterrupter).

// batonIdle is how long the parked reader lets the baton lie free before
// it looks whether a caller took it since; it takes it back after two
// such looks with none.
const batonIdle = 5 * time.Millisecond

// testBatonIdle, when not zero, replaces batonIdle for the connections
// made from then on (tests that need the baton to stay free).
var testBatonIdle atomic.Int64

const (
	batonReader int32 = iota // the reader goroutine reads (or runs a Handler)
	batonFree                // no one reads: the reader is parked
	batonCaller              // a caller reads, or was handed the baton (c.handed)
)

// baton is a connection's share of the above. Fields marked (holder's)
// are touched only by the goroutine holding the baton.
type baton struct {
	rd     transport.ReadDeadliner // nil: the connection has no baton (always the reader's)
	state  atomic.Int32
	gen    atomic.Uint64         // takes by callers, for the parked reader's look
	want   atomic.Bool           // the reader is wanted (wakeReader)
	ch     chan struct{}         // the parked reader's wake-up: one token per hand-back
	waiter atomic.Pointer[dcall] // a caller waiting for the baton, or nil
	handed atomic.Pointer[dcall] // the caller the baton was handed to, not taken yet
	inRead atomic.Pointer[dcall] // the holder, while it waits in a read
	park   *time.Timer           // the parked reader's (reader's)
	idle   time.Duration         // batonIdle
	parks  atomic.Uint64         // times the reader parked (for tests)
	hint   bool                  // the reader finished an inline caller's call (reader's)
	carry  []byte                // a request a caller read, for the reader (holder's)
	err    error                 // a read error a caller met, for the reader (holder's)
	lastRq int64                 // when the reader last got an application request (reader's)
	self   atomic.Uint64         // calls finished by their own caller's read (for tests)
}

// initBaton gives c a baton when its transport can be read by callers.
func (c *conn) initBaton() {
	if ri, ok := c.tc.(transport.ReadInterrupter); ok && ri.ReadResumes() && c.tw != nil && c.rbuf != nil && !batonOff {
		c.bt.rd = ri
		c.bt.ch = make(chan struct{}, 1)
		c.bt.lastRq = math.MinInt64 / 2 // no request yet
		c.bt.idle = batonIdle
		if d := testBatonIdle.Load(); d != 0 {
			c.bt.idle = time.Duration(d)
		}
	}
}

// batonOff switches the baton off (tests that show what it changes).
var batonOff bool

// holderHook, when set (tests), runs on a caller holding the baton after
// each message it handled for d.
var holderHook func(d *dcall)

// via returns the connection on which d's caller may read: the one d was
// just written on inline, when it has a baton.
func (c *conn) via() *conn {
	if c.bt.rd == nil {
		return nil
	}
	return c
}

// ReadAnswer implements call.Reader: see baton.
func (d *dcall) ReadAnswer() {
	c := d.via.Load()
	if c == nil {
		return
	}
	b := &c.bt
	if b.handed.Load() == d && b.handed.CompareAndSwap(d, nil) {
		c.readFor(d) // handed on by the last holder: ours even if done
		return
	}
	if d.IsDone() || d.stop.Load() {
		return
	}
	for {
		switch b.state.Load() {
		case batonFree:
			if b.state.CompareAndSwap(batonFree, batonCaller) {
				b.gen.Add(1)
				c.readFor(d)
				return
			}
		case batonCaller:
			// Wait for the holder to hand it on; it looks at the waiter
			// after leaving the baton free, as we look at the state after
			// registering: one of us sees the other.
			b.waiter.Store(d)
			if b.state.Load() == batonFree {
				continue
			}
			return
		default:
			return // the reader reads: it completes d
		}
	}
}

// Interrupt implements call.Reader: d completed or its wait was cut
// short; a holder waiting in a read for it is woken by the read deadline.
func (d *dcall) Interrupt() {
	d.stop.Store(true)
	if c := d.via.Load(); c != nil && c.bt.inRead.Load() == d {
		c.bt.rd.SetReadDeadline(time.Unix(1, 0))
	}
}

// readFor reads c on d's caller's goroutine, holding the baton, until d
// is done, its wait is cut short, or something is for the reader; then
// hands the baton on.
func (c *conn) readFor(d *dcall) {
	p, b := c.p, &c.bt
	b.waiter.CompareAndSwap(d, nil)
	for {
		b.inRead.Store(d)
		if d.IsDone() || d.stop.Load() {
			b.inRead.Store(nil)
			break
		}
		msg, err := c.tc.ReadMessage()
		b.inRead.Store(nil)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				b.rd.SetReadDeadline(time.Time{}) // an Interrupt: ours, or one that came late
				continue
			}
			b.err = err // the reader reports it, as it reports its own
			break
		}
		if wire.IsRequest(msg) {
			b.carry = msg // the reader answers it, on its path
			break
		}
		at := p.mono()
		c.clock = at
		p.received(c, msg, at) // an answer: never runs a Handler
		b.hint = false
		if d.IsDone() {
			b.self.Add(1) // its answer, read by its caller (or a completion that raced it)
		}
		if holderHook != nil {
			holderHook(d)
		}
	}
	c.release(d)
}

// release hands the baton on from holder d: to the reader when it has
// something to handle, to a waiting caller while calls are pending, else
// to the reader while calls are pending, else it leaves it free.
func (c *conn) release(d *dcall) {
	b := &c.bt
	if b.err != nil || b.carry != nil || c.rbuf.MessageBuffered() {
		c.toReader()
		return
	}
	if c.pendingBesides(d) > 0 {
		if c.handTo(b.waiter.Swap(nil), d) {
			return
		}
		c.toReader()
		return
	}
	b.state.Store(batonFree)
	if b.want.Load() && b.state.CompareAndSwap(batonFree, batonReader) {
		b.ch <- struct{}{}
		return
	}
	// A caller that registered meanwhile: see ReadAnswer.
	if w := b.waiter.Swap(nil); w != nil && w != d && !w.IsDone() && b.state.CompareAndSwap(batonFree, batonCaller) {
		if !c.handTo(w, d) {
			c.toReader()
		}
	}
}

// pendingBesides counts the calls pending on c other than d (whose wait
// was cut short, if it is still pending: its Await retires it next).
func (c *conn) pendingBesides(d *dcall) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.pending.len()
	if n > 0 && !d.IsDone() && c.pending.get(d.hbh) == d {
		n--
	}
	return n
}

// handTo hands the baton, held by the caller, to w, a waiting caller
// other than the holder d whose call is pending here, unless w is nil or
// none of that; false if it did not.
func (c *conn) handTo(w, d *dcall) bool {
	if w == nil || w == d || w.IsDone() || w.via.Load() != c {
		return false
	}
	b := &c.bt
	b.handed.Store(w)
	if w.Offer() {
		return true // its Await runs ReadAnswer, which takes it
	}
	// Its caller has left Await: take the baton back, unless its
	// ReadAnswer took it after all.
	return !b.handed.CompareAndSwap(w, nil)
}

// toReader hands the baton from a caller to the parked reader.
func (c *conn) toReader() {
	c.bt.state.Store(batonReader)
	c.bt.ch <- struct{}{}
}

// wakeReader gets the reader reading again if it is parked: something was
// written whose answer a caller may not read (see baton).
func (c *conn) wakeReader() {
	b := &c.bt
	if b.rd == nil {
		return
	}
	if !b.want.Load() { // under load it stays set: a load, not a store, per request
		b.want.Store(true)
	}
	if b.state.Load() == batonFree && b.state.CompareAndSwap(batonFree, batonReader) {
		b.ch <- struct{}{}
	}
}

// mayPark reports whether the reader, which just finished an inline
// caller's call, may leave the socket to the next caller: nothing is
// buffered, pending, owed or queued for it to answer, and the peer sent
// no application request lately (a connection that serves requests keeps
// its reader).
func (c *conn) mayPark() bool {
	return !c.deferred && !c.rbuf.MessageBuffered() && c.owed.Load() == 0 &&
		c.clock-c.bt.lastRq > int64(c.bt.idle) && c.pendingLen() == 0
}

// parkReader leaves the baton free and waits until it is handed back or
// the reader takes it back (see baton). c.bt.state is batonReader.
func (c *conn) parkReader() {
	b := &c.bt
	b.state.Store(batonFree)
	if b.want.Load() && b.state.CompareAndSwap(batonFree, batonReader) {
		b.want.Store(false)
		return
	}
	if b.park == nil {
		b.park = time.NewTimer(b.idle)
	} else {
		b.park.Reset(b.idle)
	}
	defer b.park.Stop()
	b.parks.Add(1)
	gen, closed, handed := b.gen.Load(), c.closed, (*dcall)(nil)
	for {
		select {
		case <-b.ch:
			b.want.Store(false)
			return
		case <-closed:
			if b.state.CompareAndSwap(batonFree, batonReader) {
				return // the next read reports the close
			}
			if h := b.handed.Load(); h != nil && b.handed.CompareAndSwap(h, nil) {
				b.state.Store(batonReader)
				return
			}
			closed = nil // a caller holds it: its read fails, and it hands back
		case <-b.park.C:
			g := b.gen.Load()
			if g == gen && b.state.CompareAndSwap(batonFree, batonReader) {
				b.want.Store(false)
				return
			}
			// Handed to a caller that never took it (its call left for
			// another connection meanwhile): take it back.
			if h := b.handed.Load(); h != nil && h == handed && b.handed.CompareAndSwap(h, nil) {
				b.state.Store(batonReader)
				return
			}
			gen, handed = g, b.handed.Load()
			b.park.Reset(b.idle)
		}
	}
}
