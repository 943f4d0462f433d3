package peer

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fmt"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/internal/outbox"
	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/internal/testhook"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// writeFailed starts the note of a connection closed by a failed write.
const writeFailed = "write failed: "

// conn is one transport connection of a Peer, after a successful
// capabilities exchange. It owns a reader and a writer goroutine.
type conn struct {
	p          *Peer
	tc         transport.Conn
	remoteHost string // Origin-Host from the CER or CEA
	hbh        *hopIDs

	downReported bool // its EventConnDown was published; under p.mu

	// pending requests by Hop-by-Hop id (F1), and those moved off this
	// connection, still matched for a late answer (bounded: goneMax). mu
	// guards the fields below; once lost or draining is set, nothing new
	// is added.
	mu       sync.Mutex
	pending  pendingTable
	gone     map[uint32]*dcall
	goneIDs  []uint32 // gone's ids: a ring of goneMax, oldest at goneNext once full
	goneNext int
	lost     bool
	shut     bool          // close has begun: its outbox is closed
	draining bool          // a graceful disconnect: no new requests
	drained  chan struct{} // closed when draining and nothing is pending
	seq      uint64        // send order

	// Requests received and not answered yet (server side), and the DPA
	// held back until they are: a DPR receiver lets the answers it owes
	// out first.
	owed    atomic.Int64
	heldDPA atomic.Pointer[[]byte]
	// dprIn: the peer sent a DPR (onDPR). The connection takes no new
	// request from then on (draining), and once the DPA is queued
	// (dpaOut) it closes as soon as nothing is pending or owed on it, or
	// when grace, set once with the first DPR, fires (DPATimeout): the
	// answers to our requests still come in meanwhile (see holdDPA).
	dprIn  atomic.Bool
	dpaOut atomic.Bool
	grace  atomic.Pointer[time.Timer]
	// flushOwed: the peer answered our DPR; the connection closes once
	// the answers still owed (requests that crossed our DPR) are written
	// (see flushOwedThenClose).
	flushOwed atomic.Bool

	// Handlers run on the reader (see Handler): inlineAt is 1 + the
	// p.mono() at which the reader entered the Handler it is running, 0
	// while it runs none. The guard hands the reading over to a new
	// goroutine when the Handler has run for cfg.InlineHandlerTime: it
	// takes inlineAt from that start to 0, and the reader, failing to do
	// the same when its Handler returns, knows it is no longer the reader.
	// The Config's handlerGuard ticks while readers run Handlers and sets
	// guard for a Handler it finds running (watched: c is in its set, the
	// reader's). guardArmed says the guard's timer is set (or running). After a slow
	// Handler, the next slowLeft requests go to workers instead. slowOnce
	// says the last Handler the reader ran took half the limit or more
	// (the reader's).
	inlineAt    atomic.Int64
	watched     bool
	guardArmed  atomic.Bool
	guard       *time.Timer
	slowLeft    atomic.Int32
	slowOnce    bool
	handovers   atomic.Uint64            // readings moved off a slow Handler (for tests)
	guardChecks atomic.Uint64            // checkInline runs (for tests)
	rbuf        transport.BufferedReader // nil unless the transport says what it holds unread
	deferred    bool                     // answers queued with no writer kicked (the reader's)
	// clock is the reader's latest clock reading (p.mono): at the socket
	// read that brought the message being handled, or at the end of the
	// Handler it ran since, which the next one of a burst starts from
	// (the reader's).
	clock int64

	out outbox.Outbox // the write queue; lock order: mu, a call's mutex, out.Mu
	bp  serve.Backlog // requests not answered on the wire yet (under out.Mu)

	dpa      chan struct{} // closed when the DPA to our DPR arrives
	dprID    atomic.Uint32 // our DPR's Hop-by-Hop id, 0 before it is sent
	dpaOnce  sync.Once
	closed   chan struct{}
	closeMu  sync.Once
	ctx      context.Context // cancelled when the connection closes: handlers watch it
	cancel   context.CancelFunc
	downNote string // why it closed, set before close by the closing side (under mu)

	unmatchedRun int // answers in a row that matched nothing (reader goroutine only)

	h call.Conn // this connection in the calls sent on it

	bt baton // who reads: the reader goroutine or a caller (see baton)
}

func newConn(p *Peer, tc transport.Conn, remoteHost string) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{
		p: p, tc: tc, remoteHost: remoteHost,
		hbh:    newHopIDs(),
		dpa:    make(chan struct{}),
		closed: make(chan struct{}),
		ctx:    ctx, cancel: cancel,
		bp: serve.Backlog{Limit: DefaultMaxUnanswered},
	}
	var carrier call.Carrier // a server's connection carries no calls of ours
	if p != nil {
		carrier = p
	}
	c.h.Init(carrier, c.retireCall)
	if p != nil {
		c.bp.Limit = p.cfg.MaxUnanswered
	}
	c.out.Init(tc, &c.bp, c.writeEnded)
	if p != nil {
		if p.cfg.InlineHandlerTime > 0 {
			c.guard = time.AfterFunc(time.Hour, c.checkInline)
			c.guard.Stop() // set by the first request a reader runs
		}
		c.rbuf, _ = tc.(transport.BufferedReader)
		c.initBaton()
	}
	return c
}

func (c *conn) start() {
	c.p.wg.Add(1)
	go c.reader()
}

// close closes the connection once; the reader then reports the loss.
func (c *conn) close(note string) {
	if c.stop(note) {
		c.tc.Close()
	}
}

// closeLater is close for a step under p.mu: the connection takes nothing
// more at once, and its socket is closed right after the lock, with the
// step's writes (a TLS socket's close may write). p.mu is held.
func (p *Peer) closeLater(c *conn, note string) {
	if c.stop(note) {
		p.out = append(p.out, effect{c: c, closeConn: true})
	}
}

// stop marks the connection closed, once: nothing more is submitted to
// it or written on it, and its reader and waiters are told; the first
// call reports true, its caller then closes the socket.
func (c *conn) stop(note string) (first bool) {
	c.closeMu.Do(func() {
		first = true
		if c.p != nil && c.p.cfg.Table != nil {
			c.p.cfg.Table.down(c) // a test conn may have no Peer
		}
		c.mu.Lock()
		if c.downNote == "" {
			c.downNote = note
		}
		// Under c.mu, so that a submit that finds the connection open
		// finds its outbox open too.
		c.shut = true
		c.out.Close(false)
		c.mu.Unlock()
		close(c.closed)
		c.cancel()
		if t := c.grace.Load(); t != nil {
			t.Stop()
		}
	})
	return first
}

func (c *conn) note() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downNote
}

// enqueueLone queues a message that usually travels alone (a DWR, the
// DWA or error answer the reader sends back, a DPR or DPA), or writes it
// on the caller's goroutine when the connection is free: most of what an
// idle connection sends then costs no writer goroutine and no wake-up.
func (c *conn) enqueueLone(msg []byte) error {
	c.wakeReader() // its answer (a DWA, a DPA) is for the reader to read
	// A DWA, a DPA or an error answer counts in the backlog until written.
	if _, ok := c.out.Post(msg, true, isAnswer(msg), nil); !ok {
		return ErrConnectionLost
	}
	return nil
}

func isAnswer(msg []byte) bool { return len(msg) > 4 && msg[4]&wire.FlagRequest == 0 }

// writeEnded closes the connection after a failed write, or once the DPA
// is written (err nil).
func (c *conn) writeEnded(err error) {
	if err != nil {
		c.close(writeFailed + err.Error())
	} else {
		c.close("disconnected by DPR")
	}
}

// submit queues cl on this connection with a fresh Hop-by-Hop id (see
// dcall.board for the T flag). The pending entry and the queued bytes are
// made under one hold of c.mu, so that a failover or a loss of the
// connection either sees the call pending here or the call never was.
func (c *conn) submit(cl *dcall) error {
	c.mu.Lock()
	if err := c.notInService(); err != nil {
		c.mu.Unlock()
		return err
	}
	if c.lost || c.draining || c.shut {
		draining := c.draining // read under c.mu: a DPR's startDrain sets it
		c.mu.Unlock()
		if draining {
			return ErrDisconnecting
		}
		return ErrConnectionLost
	}
	raw, id, b, err := cl.board(c)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.seq++
	cl.seq = c.seq
	c.pending.put(id, cl)
	c.countSent(1, b.Sends > 0)
	if testhook.Queued != nil {
		testhook.Queued(cl.Ref, c, raw, cl.afterRefusal)
	}
	// A request alone is for its caller to write (see outbox.Outbox):
	// with one caller that saves a writer goroutine's start and wake-up
	// on every request, most of the round trip's scheduling. The
	// connection is open (not shut), so its outbox is: Post takes it and
	// releases c.mu. via is set before the write, so that the reader,
	// should it read the answer first, knows it was written inline (see
	// baton); it is cleared if Post queued the request instead. Only a
	// request alone may be written inline: for the others via stays nil,
	// and they save the store (a full barrier) and its undoing.
	alone := c.pending.len() == 1
	var via *conn
	if alone {
		via = c.via()
	}
	if cl.via.Load() != via {
		cl.via.Store(via)
	}
	inline, _ := c.out.Post(raw, alone, false, &c.mu)
	if testhook.AfterQueue != nil {
		testhook.AfterQueue(cl.Ref)
	}
	if inline {
		if c.bt.state.Load() == batonFree {
			// Its caller reads the answer (ReadAnswer). One already
			// waiting (this submit is a dispatcher's, a failover's) is
			// woken for it, also from a read of a connection its call
			// left (leaveRead).
			if cl.Offer() {
				cl.leaveRead(c)
			}
		}
	} else {
		if via != nil {
			cl.via.Store(nil)
		}
		c.wakeReader()
	}
	return nil
}

// notInService is the error of a submit to c while its peer's watchdog
// is not OKAY, nil while it is. c.mu is held: the state is read here, not
// when the peer chose c, because a failover after that (OKAY to SUSPECT)
// moves c's pending calls out and leaves c open, and a call boarded after
// it would stay there, out of service, until c closes a Tw later. The
// state is stored before the failover takes c.mu to move the calls, so a
// submit that reads OKAY here puts its call in the pending table before
// they are moved, and it moves with them.
func (c *conn) notInService() error {
	if st := c.p.State(); st != watchdog.Okay {
		return &NotInServiceError{Peer: c.p.Name(), State: st}
	}
	return nil
}

// submitAll is submit for a batch, in order, under one hold of c.mu and
// one of the write queue: a failover of thousands of requests then costs
// one wake-up of the writer and large writes, not one per request. Each
// call meets the same checks as in submit; it returns those refused (sent
// here before, or in flight elsewhere). On a lost or draining connection
// none is sent.
func (c *conn) submitAll(calls []*call.Call) (refused []*call.Call, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.notInService(); err != nil {
		return nil, err
	}
	if c.lost || c.draining {
		if c.draining {
			return nil, ErrDisconnecting
		}
		return nil, ErrConnectionLost
	}
	type boarded struct {
		cl *dcall
		id uint32
		b  call.Boarding
	}
	raws := make([][]byte, 0, len(calls))
	ok := make([]boarded, 0, len(calls))
	for _, cl := range calls {
		d := dcallOf(cl)
		raw, id, b, err := d.board(c)
		if err != nil {
			if err != call.ErrComplete {
				refused = append(refused, cl)
			}
			continue
		}
		raws = append(raws, raw)
		ok = append(ok, boarded{d, id, b})
	}
	if !c.out.Send(raws...) {
		for _, b := range ok {
			b.cl.Unboard(&c.h, b.b)
		}
		return nil, ErrConnectionLost
	}
	c.wakeReader()
	for i, b := range ok {
		c.countSent(1, b.b.Sends > 0)
		if b.cl.via.Load() != nil {
			b.cl.via.Store(nil)
		}
		c.seq++
		b.cl.seq = c.seq
		c.pending.put(b.id, b.cl)
		if testhook.Queued != nil {
			testhook.Queued(b.cl.Ref, c, raws[i], b.cl.afterRefusal)
		}
	}
	return refused, nil
}

// goneMax bounds how many calls moved off a connection stay matchable
// there for a late answer; past it the oldest is forgotten (its late
// answer then matches nothing, and counts as late if its id is among the
// last issuedWindow issued here, see hopIDs).
const goneMax = 4096

// issuedWindow is how many of a connection's most recent Hop-by-Hop ids
// an answer that matches nothing may carry and count as late rather than
// unmatched: a server up to about a million requests behind may catch up
// on the ones the connection forgot without being closed as broken. An
// arbitrary id falls among them once in 4096 (2^32 / issuedWindow), so a
// peer that rewrites ids still reaches MaxUnmatched (a late answer does
// not reset the run), however long its connection has lived.
const issuedWindow = goneMax * 256

// hopIDs issues a connection's Hop-by-Hop ids, in sequence from a random
// start, skipping 0 (as wire.HopByHopGen), and knows which ids it issued
// lately: an answer that matches nothing but carries one of the last
// issuedWindow ids answers a request this connection forgot (more than
// goneMax left it unanswered), as a slow server that recovers sends them,
// or repeats an answer, not a broken peer's id. Safe for concurrent use.
type hopIDs struct {
	first uint32
	n     atomic.Uint64 // places of the sequence taken (the skipped 0's included), before each id is made
}

func newHopIDs() *hopIDs {
	return &hopIDs{first: wire.NewHopByHopGenRandom().Next()}
}

// Next returns the next id.
func (h *hopIDs) Next() uint32 {
	for {
		// Counted before the id exists: an answer that carries it sees
		// it counted.
		if id := h.first + uint32(h.n.Add(1)-1); id != 0 {
			return id
		}
	}
}

// issued reports whether id is one of the last issuedWindow places of the
// sequence taken: the most recent place that held it lies less than
// issuedWindow behind the last one taken.
func (h *hopIDs) issued(id uint32) bool {
	n := h.n.Load()
	if id == 0 || n == 0 {
		return false // 0 is never issued
	}
	// Place k holds first+k modulo 2^32: the last taken is n-1, and the
	// latest that held id is back places before it, if back < n.
	back := uint64(h.first + uint32(n-1) - id)
	return back < issuedWindow && back < n
}

// goLocked moves the entry id from pending to gone: no longer pending
// here, still matched if its answer comes. c.mu is held.
func (c *conn) goLocked(id uint32, cl *dcall) {
	c.pending.del(id)
	c.rememberGoneLocked(id, cl)
}

// rememberGoneLocked adds id to gone. c.mu is held.
func (c *conn) rememberGoneLocked(id uint32, cl *dcall) {
	if c.gone == nil {
		c.gone = make(map[uint32]*dcall)
	}
	if len(c.goneIDs) < goneMax {
		c.goneIDs = append(c.goneIDs, id)
	} else { // a ring: overwrite the oldest
		if old := c.goneIDs[c.goneNext]; c.gone[old] != nil {
			delete(c.gone, old)
		}
		c.goneIDs[c.goneNext] = id
		c.goneNext = (c.goneNext + 1) % goneMax
	}
	c.gone[id] = cl
}

// retire takes a call that completed elsewhere out of this connection's
// pending table (its id here is hbh), keeping it matchable for a late
// answer.
func (c *conn) retire(cl *dcall, hbh uint32) {
	c.mu.Lock()
	flush := false
	if c.pending.get(hbh) == cl {
		c.goLocked(hbh, cl)
		flush = c.drainedLocked()
	}
	c.mu.Unlock()
	if flush {
		c.closeAfterFlush()
	}
}

// match finds the call the answer ans with Hop-by-Hop id hbh belongs to
// and takes it out of the maps: pending (late false) or moved away (late
// true); nil if none. An answer must carry its request's End-to-End id
// and Command Code (RFC 6733 3): one that carries another's (crossed: a
// peer that crossed its answers) answers a request its Hop-by-Hop id
// does not name, and is matched to none, the call left waiting for its
// own. ans nil: not checked.
func (c *conn) match(hbh uint32, ans []byte) (cl *dcall, late, crossed bool) {
	c.mu.Lock()
	if cl = c.pending.get(hbh); cl != nil {
		if !cl.answeredBy(ans) {
			c.mu.Unlock()
			return nil, false, true
		}
		c.pending.del(hbh)
		flush := c.drainedLocked()
		c.mu.Unlock()
		if flush {
			c.closeAfterFlush()
		}
		return cl, false, false
	}
	defer c.mu.Unlock()
	if cl = c.gone[hbh]; cl != nil {
		if !cl.answeredBy(ans) {
			return nil, false, true
		}
		delete(c.gone, hbh) // its id stays in goneIDs until evicted: harmless
		return cl, true, false
	}
	return nil, false, false
}

// answeredBy reports whether ans carries d's End-to-End id and Command
// Code, as its answer must (true for nil: not checked).
func (d *dcall) answeredBy(ans []byte) bool {
	return ans == nil || wire.EndToEnd(ans) == d.Ref && wire.CommandCode(ans) == d.cmd
}

// takePending marks the connection lost (for cause, as in moveOut) and
// returns the calls still in flight on it, in send order. They stay
// matchable as gone, with those moved off before: answers the reader had
// already received when the connection was lost (a write that failed
// while they sat in its buffer) still complete their calls. flush: close
// the connection once its queue is written (see drainedLocked).
func (c *conn) takePending(cause error) (calls []*call.Call, flush bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost = true
	return c.leaveLocked(cause, nil)
}

// sortBySend orders calls taken off one connection by their send order
// there.
func sortBySend(calls []*call.Call) {
	slices.SortFunc(calls, func(a, b *call.Call) int { return cmp.Compare(dcallOf(a).seq, dcallOf(b).seq) })
}

// moveOut takes every call in flight here but those keep reports true
// for (keep may be nil) off the connection (Moved), in send order, for a
// failover; a late answer here still completes them (F4). cause, if not
// nil, says why the connection was given up: a call that then fails says
// so (call.Call.Leave). flush as for takePending.
func (c *conn) moveOut(cause error, keep func(*call.Call) bool) (calls []*call.Call, flush bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaveLocked(cause, keep)
}

// leaveLocked moves every pending entry but those keep reports true for
// (keep may be nil, and is asked once per entry) to gone and returns the
// calls that were in flight here, in send order, and drainedLocked's
// flush. A call whose request is still in the write queue is taken out
// of it and its send undone instead (withdrawLocked, call.Call.Unsend):
// it never reaches this peer, which it may go to again. c.mu is held.
func (c *conn) leaveLocked(cause error, keep func(*call.Call) bool) (calls []*call.Call, flush bool) {
	type entry struct {
		id uint32
		cl *dcall
	}
	var leaving []entry
	c.pending.each(func(id uint32, cl *dcall) {
		if keep == nil || !keep(&cl.Call) {
			leaving = append(leaving, entry{id, cl})
		}
	})
	var stays map[uint32]bool // with keep: the ids of the calls that stay
	if keep != nil && len(leaving) < c.pending.len() {
		stays = make(map[uint32]bool, c.pending.len()-len(leaving))
		c.pending.each(func(id uint32, _ *dcall) { stays[id] = true })
		for _, e := range leaving {
			delete(stays, e.id)
		}
	}
	unsent := c.withdrawLocked(len(leaving), func(id uint32) bool { return !stays[id] })
	for _, e := range leaving {
		cl := e.cl
		cl.via.CompareAndSwap(c, nil) // its caller reads here no more (see baton)
		if keep != nil {
			c.pending.del(e.id)
		}
		if unsent[e.id] {
			// Never written here: no answer can come, and this
			// connection may carry it again.
			if cl.Unsend(&c.h, cl.afterRefusal, cause) {
				calls = append(calls, &cl.Call)
				c.countSent(-1, cl.Sends() > 0) // was this send a resend
			}
			if testhook.Withdrawn != nil {
				testhook.Withdrawn(cl.Ref, c, e.id)
			}
			continue
		}
		if cl.Leave(&c.h, cause) {
			calls = append(calls, &cl.Call)
		}
		c.rememberGoneLocked(e.id, cl)
	}
	if keep == nil {
		c.pending.clear()
	}
	flush = c.drainedLocked()
	sortBySend(calls)
	return calls, flush
}

// countSent adds n (1, or -1 for a send taken back) to the peer's sent
// requests, and to its retransmissions when resend. Under c.mu, as the
// send's queueing and its withdrawal are, so that the counts never go
// below what reached the queue.
func (c *conn) countSent(n int, resend bool) {
	c.p.stats.sent.Add(uint64(n))
	if resend {
		c.p.stats.retransmitted.Add(uint64(n))
	}
}

// withdrawLocked takes the requests of the n calls leaving c (those
// leaving reports true for, by Hop-by-Hop id) that are still in its
// write queue out of it, and returns their ids (nil if none). Written
// after the calls moved on, they would reach this peer after their
// copies reached another, or, when this peer takes them back, twice; and
// a peer that stopped reading (the usual reason for a failover) gets them
// as soon as it reads again. A request a writer has already taken stays:
// it may be on the wire. c.mu is held.
func (c *conn) withdrawLocked(n int, leaving func(id uint32) bool) map[uint32]bool {
	if n == 0 {
		return nil
	}
	ours := func(m []byte) bool {
		if !wire.IsRequest(m) {
			return false // an answer
		}
		id := wire.HopByHop(m)
		return c.pending.get(id) != nil && leaving(id) // not a watchdog request, a CER or DPR, a call that stays
	}
	// One being written inline now may be on the wire (the call stays
	// sent here); should the socket take none of it, it is dropped.
	c.out.ForgoInline(ours)
	var taken map[uint32]bool
	c.out.Withdraw(func(m []byte) bool {
		if !ours(m) {
			return false
		}
		if taken == nil {
			taken = make(map[uint32]bool)
		}
		taken[wire.HopByHop(m)] = true
		return true
	})
	return taken
}

// startDrain stops new requests on the connection and returns a channel
// closed once nothing is pending on it, and drainedLocked's flush.
func (c *conn) startDrain() (drained <-chan struct{}, flush bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.draining {
		c.draining = true
		c.drained = make(chan struct{})
		flush = c.drainedLocked()
	}
	return c.drained, flush
}

// drainedLocked signals a drain once nothing is pending or owed on the
// connection; after the peer's DPR, once its DPA is queued, the
// connection closes then (see holdDPA): flush says so, and the caller
// calls closeAfterFlush once it has released c.mu and, in a step, p.mu
// (an effect: closeAfterFlush may start a writer). c.mu is held.
func (c *conn) drainedLocked() (flush bool) {
	if !c.draining || c.pending.len() != 0 || c.owed.Load() != 0 {
		return false
	}
	if c.drained != nil {
		select {
		case <-c.drained:
		default:
			close(c.drained)
		}
	}
	return c.dpaOut.Load() && !c.shut
}

// closeAfterFlush closes the connection once what is queued is written
// (it may start a writer): never under p.mu.
func (c *conn) closeAfterFlush() {
	if closeAfterFlushHook != nil {
		closeAfterFlushHook(c)
	}
	c.out.CloseAfterFlush()
}

// closeAfterFlushHook, when set (tests), runs at each closeAfterFlush.
var closeAfterFlushHook func(*conn)

func (c *conn) pendingLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending.len()
}

// reader reads until the connection fails. Bad bytes close only this
// connection, with the reason logged and counted (T5).
func (c *conn) reader() {
	defer c.p.wg.Done()
	p := c.p
	if c.deferred {
		// Taking over from a slow Handler (checkInline): the answers the
		// old reader queued for its burst must not wait for that Handler.
		c.deferred = false
		c.out.Kick()
	}
	var at int64 // when the bytes of the message read arrived (p.mono)
	for {
		// Messages that one read of the socket brought arrived together:
		// one clock reading serves them all (a reading costs about as
		// much as matching an answer).
		fresh := c.waitRoom() || at == 0 || c.rbuf == nil || !c.rbuf.MessageBuffered()
		var msg []byte
		var err error
		switch {
		case c.bt.carry != nil: // a request a caller read (see baton)
			msg, c.bt.carry, fresh = c.bt.carry, nil, true
		case c.bt.err != nil:
			err, c.bt.err = c.bt.err, nil
		default:
			msg, err = c.tc.ReadMessage()
		}
		if err != nil && c.bt.rd != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			// A caller's Interrupt that came after it handed the baton
			// on: nothing is lost (transport.ReadInterrupter).
			c.bt.rd.SetReadDeadline(time.Time{})
			continue
		}
		if err != nil {
			note := c.note()
			switch {
			case strings.HasPrefix(note, writeFailed):
				// A peer that does not read its answers (the write deadline)
				// or whose socket broke.
				p.logLimited(slog.LevelWarn, serve.KindWriteTimeout, "closing connection: "+note, "peer", p.Name(), "remote", c.tc.RemoteAddr().String())
			case note != "":
			case errors.Is(err, wire.ErrBadFrame):
				p.stats.badFrames.Add(1)
				note = "bad frame: " + err.Error()
				p.publish(Event{Kind: EventError, Reason: note})
				p.logLimited(slog.LevelWarn, serve.KindBadFrame, "closing connection on a bad frame", "peer", p.Name(), "remote", c.tc.RemoteAddr().String(), "err", err)
			case errors.Is(err, io.EOF):
				note = "closed by peer"
			case errors.Is(err, net.ErrClosed):
				note = "closed"
			default:
				note = err.Error()
			}
			c.close(note)
			if c.guard != nil {
				c.guard.Stop() // no Handler runs on a reader any more
			}
			if c.watched {
				p.cfg.guard.unwatch(c)
			}
			if p.cfg.ownLanes {
				p.cfg.lanes.close() // parked workers end now; a later request still gets one
			}
			c.out.Close(true) // no writer outlives its connection
			p.step(input{kind: evConnDown, c: c, note: note})
			return
		}
		if fresh {
			at = p.mono()
			c.clock = at
		}
		if p.received(c, msg, at) {
			return // a Handler ran too long here: another goroutine reads now
		}
		if c.deferred && !c.rbuf.MessageBuffered() {
			c.deferred = false
			c.out.Kick() // before the next read may wait
		}
		if c.bt.hint {
			c.bt.hint = false
			// A wish for the reader from before the look of mayPark is
			// met by it (what it waits for is pending, so the reader
			// stays) or can wait for the parked reader's look (a DWA);
			// one from after it keeps the reader (parkReader).
			c.bt.want.Store(false)
			if c.mayPark() {
				if parkHook != nil {
					parkHook(c)
				}
				c.parkReader()
			}
		}
	}
}

// received is called by a connection's reader for every message, which
// arrived at now (p.mono). moved reports that the reader ran a Handler for
// too long and the reading has moved to another goroutine: the caller is
// no longer the reader.
func (p *Peer) received(c *conn, msg []byte, now int64) (moved bool) {
	p.lastRx.Store(now) // before reading state: see onTimer
	p.stats.received.Add(1)
	flags, cmd := wire.Flags(msg), wire.CommandCode(msg)
	if flags&wire.FlagRequest != 0 {
		switch cmd {
		case wire.CmdDeviceWatchdog:
			p.stats.dwrReceived.Add(1)
			p.step(input{kind: evDWR, c: c, msg: msg, at: now})
		case wire.CmdDisconnectPeer:
			p.step(input{kind: evDPR, c: c, msg: msg, at: now})
		case wire.CmdCapabilitiesExchange:
			p.refuseCER(c, msg, now)
		default:
			if p.cfg.IdleTimeout > 0 {
				p.lastApp.Store(now)
			}
			c.bt.lastRq = now // a connection serving requests keeps its reader
			if r := p.cfg.checkRequest(msg, c.remoteHost); r != nil {
				p.refuse(c, msg, r, now)
				return false
			}
			if p.State() == watchdog.Okay {
				return p.serve(c, msg)
			} else {
				p.step(input{kind: evOther, c: c, msg: msg, at: now})
			}
		}
		return false
	}
	switch cmd {
	case wire.CmdDeviceWatchdog:
		p.stats.dwaReceived.Add(1)
		p.stats.lastDWA.Store(time.Now().UnixNano())
		p.step(input{kind: evDWA, c: c, at: now})
		return false
	case wire.CmdDisconnectPeer:
		if id := c.dprID.Load(); id != 0 && wire.HopByHop(msg) == id {
			c.dpaOnce.Do(func() { close(c.dpa) })
		} else {
			p.strayDPA(c, msg)
		}
		return false
	}
	if p.cfg.IdleTimeout > 0 {
		p.lastApp.Store(now)
	}
	hbh := wire.HopByHop(msg)
	cl, late, crossed := c.match(hbh, msg)
	var bad *wire.BadAVP
	var code, rc uint32
	refused := false
	if cl != nil {
		c.unmatchedRun = 0
		if p.cfg.Replied != nil {
			p.cfg.Replied(p)
		}
		code, bad = wire.CheckAnswer(msg)
		if p.cfg.Failover != nil && wire.Flags(msg)&wire.FlagError != 0 {
			rc, refused = refusalOf(msg)
		}
	}
	switch {
	case cl == nil:
		if p.unmatched(c, hbh, msg, crossed) {
			return false
		}
	case !late && refused && p.premature(c, cl, msg, rc):
	case late && refused:
		// A late refusal of a request that has moved on: it may have been
		// applied where it went, and the refusal would tell its caller it
		// was not (RFC 6733 7.1.3). Its current send answers it; one that
		// waits for a peer learns that this one did not apply it.
		p.stats.late.Add(1)
		if cl.RefuseLate(&c.h, msg, rc) {
			p.publishPerMessage(Event{Kind: EventLateRefusal, ResultCode: rc, Reason: fmt.Sprintf("late refusal of a request that moved on: %d %s", rc, resultName(rc))})
		}
	case bad != nil:
		p.malformedAnswer(c, cl, msg, bad)
	default:
		ok, owner := cl.Finish(msg, code, nil, &c.h, &p.stats.answered)
		if ok && cl.via.Load() == c {
			c.bt.hint = true // its caller wrote inline: the next may read (see baton)
		}
		switch {
		case !ok:
			p.stats.late.Add(1)
		case owner != nil:
			owner.Retire(&cl.Call, false) // answered here while in flight elsewhere
		}
	}
	p.notifyOther(c, now)
	return false
}

// notifyOther steps a non-DWA message when the watchdog is
// not OKAY (in OKAY the lastRx store is enough).
func (p *Peer) notifyOther(c *conn, at int64) {
	if p.State() != watchdog.Okay {
		p.step(input{kind: evOther, c: c, at: at})
	}
}

// refusalOf returns the Result-Code of ans and whether it refuses its
// request before applying it: DIAMETER_TOO_BUSY or
// DIAMETER_UNABLE_TO_DELIVER (RFC 6733 7.1.3), which the request may be
// tried elsewhere after.
func refusalOf(ans []byte) (rc uint32, refused bool) {
	rc, _ = message.ResultCodeOf(ans)
	return rc, rc == message.TooBusy || rc == message.UnableToDeliver
}

// slowRequests is how many requests after a slow Handler go to workers
// rather than run on the reader: Handlers that wait (on a database, a
// lock) then run side by side, as they need, and a connection whose
// Handlers are all slow runs only one request in slowRequests on its
// reader, and pays for a hand-over at most that often. Counted in
// requests, not time, so that a Handler that looked slow only because
// the reader waited for a processor (a busy machine, a garbage
// collection) costs a busy connection a few milliseconds of workers.
const slowRequests int32 = 256

// slowRun is how long a Handler may run for the connection to go on
// running the next ones on its reader: half the guard's limit, so
// that Handlers that are slow but not slow enough for the guard (which
// would each hold the reading up for nearly the limit) move to workers too,
// once two in a row took that long.
func (c *conn) slowRun() time.Duration { return c.p.cfg.InlineHandlerTime / 2 }

// answerRequest runs the Handler for one request on a worker and queues
// its answer. How long it ran says nothing: it includes the wait for a
// processor among the other workers, which grows with the load.
func (c *conn) answerRequest(req []byte) {
	hbh, e2e := wire.HopByHop(req), wire.EndToEnd(req)
	c.answered(hbh, e2e, c.handle(req), false)
}

// answerInline runs the Handler for req, read at now, on the reader, and
// queues its answer; moved reports that the Handler ran so long that the
// reading moved to another goroutine meanwhile (checkInline).
func (c *conn) answerInline(req []byte, now int64) (moved bool) {
	at := now + 1 // never 0, and later than the start of any Handler handed over
	c.inlineAt.Store(at)
	if !c.watched {
		c.watched = true
		c.p.cfg.guard.watch(c)
	}
	c.p.cfg.guard.entering() // see handlerGuard: no timer per request
	hbh, e2e := wire.HopByHop(req), wire.EndToEnd(req)
	ans := c.handle(req)
	moved = !c.inlineAt.CompareAndSwap(at, 0)
	if !moved {
		end := c.p.mono()
		c.clock = end
		// Two slow Handlers in a row send the next requests to workers:
		// one alone is as likely the reader waiting for a processor (a
		// busy machine, a collection) as a slow Handler, and a slow one
		// shows again at once (a blocked one is handed over at the limit).
		slow := time.Duration(end-now) >= c.slowRun()
		if slow && c.slowOnce {
			c.slowLeft.Store(c.p.cfg.slowRequests)
		}
		c.slowOnce = slow && !c.slowOnce
	}
	// While more requests are buffered, their answers will follow this
	// one: queue it, and kick the writer once they are queued too (the
	// reader's loop), so that they go out in one write. Only the reader
	// may look at the read buffer.
	more := !moved && c.rbuf != nil && c.rbuf.MessageBuffered()
	c.answered(hbh, e2e, ans, more)
	if more { // then still the reader: moved is false
		c.deferred = true
	}
	return moved
}

// checkInline is the guard's timer: it hands the reading over to a new
// goroutine when the reader has been running a Handler for
// InlineHandlerTime, sets the timer again while it is in a younger one,
// and disarms itself when the reader runs none. A reader entering a
// Handler stores inlineAt, then arms the timer unless armed; the guard
// disarms, then looks at inlineAt again: one of them sees the other.
func (c *conn) checkInline() {
	c.guardChecks.Add(1)
	limit := c.p.cfg.InlineHandlerTime
	for {
		at := c.inlineAt.Load()
		if at == 0 {
			c.guardArmed.Store(false)
			if c.inlineAt.Load() == 0 || !c.guardArmed.CompareAndSwap(false, true) {
				return
			}
			continue // a Handler started meanwhile and found the guard armed
		}
		now := c.p.mono()
		if ran := time.Duration(now - (at - 1)); ran < limit {
			c.guard.Reset(limit - ran)
			return
		}
		if c.inlineAt.CompareAndSwap(at, 0) {
			// The old reader is in its Handler, not reading, and will not
			// touch the reader's state again: the new one takes it over.
			c.handovers.Add(1)
			c.slowLeft.Store(c.p.cfg.slowRequests)
			c.p.wg.Add(1) // the old reader still counts: never from zero
			go c.reader()
		}
	}
}

// handle runs the Handler (or answers 3001 without one). A Handler that
// panics is answered for (handlerPanicked): one request's bug must not end
// the process, nor this connection.
func (c *conn) handle(req []byte) (ans []byte) {
	p := c.p
	if p.cfg.Handler == nil {
		return message.ErrorAnswer(req, p.cfg.identity(), message.CommandUnsupported, "no handler").Bytes()
	}
	defer func() {
		if r := recover(); r != nil {
			ans = p.handlerPanicked(req, r)
		}
	}()
	return p.cfg.Handler(c.ctx, p, req)
}

// handlerPanicked answers req, whose Handler panicked with v,
// DIAMETER_UNABLE_TO_COMPLY with an Error-Message that tells nothing of
// the panic, counts it, publishes an EventError and logs v with the stack
// (rate-limited: a request that panics every time cannot fill the disk).
// It runs in the Handler's deferred recover, on its goroutine: the stack
// is the Handler's.
func (p *Peer) handlerPanicked(req []byte, v any) []byte {
	stack := debug.Stack()
	p.stats.handlerPanics.Add(1)
	cmd := message.CommandName(req)
	p.publishPerMessage(Event{Kind: EventError, Reason: fmt.Sprintf("handler panicked on %s: answered DIAMETER_UNABLE_TO_COMPLY", cmd)})
	p.logLimited(slog.LevelError, serve.KindHandlerPanic, "handler panicked: request answered DIAMETER_UNABLE_TO_COMPLY",
		"peer", p.Name(), "command", cmd, "panic", fmt.Sprint(v), "stack", string(stack))
	return message.ErrorAnswer(req, p.cfg.identity(), message.UnableToComply, "the request could not be processed").Bytes()
}

// answered queues the Handler's answer ans to the request whose
// Hop-by-Hop and End-to-End ids were hbh and e2e (more: leave it to the
// writer, see enqueueAnswer) and settles what the connection owed. The
// ids are read before the Handler runs: it owns the request and may
// change it (a relay's Client.Send writes its own Hop-by-Hop id).
func (c *conn) answered(hbh, e2e uint32, ans []byte, more bool) {
	p := c.p
	if ans == nil {
		c.out.Unheld(false) // the handler chose not to answer
	} else {
		// The answer carries the request's ids; R and T are never set on it.
		wire.SetHopByHop(ans, hbh)
		wire.SetEndToEnd(ans, e2e)
		wire.SetFlags(ans, wire.Flags(ans)&^(wire.FlagRequest|wire.FlagRetransmit))
		// The answer to the only request in a Handler, when nothing is
		// queued or being written, is written by the Handler's goroutine.
		if c.out.Answer(ans, false, more, true) {
			p.stats.answersSent.Add(1)
		}
	}
	if c.owed.Add(-1) == 0 {
		if c.heldDPA.Load() != nil {
			c.releaseDPA()
		}
		if c.flushOwed.Load() {
			c.closeAfterFlush() // the last answer owed after our DPA
		}
		c.mu.Lock()
		flush := c.drainedLocked() // a server's graceful disconnect waits for what it owes
		c.mu.Unlock()
		if flush {
			c.closeAfterFlush()
		}
	}
}

// holdDPA answers a DPR from the peer (onDPR has stopped new requests
// here). The DPA waits until every request received before it is
// answered: the peer that asked to disconnect gets the answers it is owed
// first. The connection then stays open, still read, until the answers
// to our own requests on it are in too, or the requests have left it (a
// deadline, a failover): the peer, leaving, still sends them, and RFC
// 6733 5.4 has the receiver of the DPA, not its sender, close the
// transport. Both waits end at the latest bound after the first DPR,
// when the DPA goes if it is still held and the connection closes once
// it is written. A DPR while a DPA is held replaces it, and the bound's
// timer is set once per connection: a peer that repeats its DPR cannot
// pile up timers.
func (c *conn) holdDPA(dpa []byte, bound time.Duration) {
	c.heldDPA.Store(&dpa)
	if c.grace.Load() == nil {
		t := time.AfterFunc(bound, c.graceOver)
		if !c.grace.CompareAndSwap(nil, t) {
			t.Stop()
		}
		select {
		case <-c.closed:
			t.Stop() // closed meanwhile: stop missed it
		default:
		}
	}
	if c.owed.Load() == 0 {
		c.releaseDPA()
	}
}

// releaseDPA queues the held DPA, if any, and closes the connection once
// it is written if nothing is pending or owed on it.
func (c *conn) releaseDPA() {
	if d := c.heldDPA.Swap(nil); d != nil {
		c.enqueueLone(*d)
		c.dpaOut.Store(true)
		c.mu.Lock()
		flush := c.drainedLocked()
		c.mu.Unlock()
		if flush {
			c.closeAfterFlush()
		}
	}
}

// flushOwedThenClose closes the connection, after the DPA answered our
// DPR, once the answers it still owes are written: the requests the peer
// sent before it read our DPR are answered, as we want ours answered
// after a DPR of the peer's. The caller bounds the wait (DPATimeout).
func (c *conn) flushOwedThenClose() {
	c.flushOwed.Store(true)
	// answered looks at flushOwed after owed falls to zero, we at owed
	// after setting flushOwed: one of us sees the other.
	if c.owed.Load() == 0 {
		c.closeAfterFlush() // what is queued still goes (an answer just made)
	}
}

// graceOver ends the wait that follows a DPR from the peer (holdDPA): the
// DPA goes now if it is still held, and the connection closes once it is
// written, whatever is still pending (those requests then fail over, or
// fail, as on any lost connection) or owed.
func (c *conn) graceOver() {
	c.releaseDPA()
	c.mu.Lock()
	if n := c.pending.len(); n > 0 && !c.shut {
		c.downNote += fmt.Sprintf("; closed %v after it with %d of our requests unanswered", c.p.cfg.DPATimeout, n)
	}
	c.mu.Unlock()
	c.closeAfterFlush()
}

// Errors a Request can return. Match them with errors.Is.
var (
	// ErrNotInService: the watchdog is not OKAY (SUSPECT, DOWN, REOPEN or
	// not yet connected); send elsewhere or wait.
	ErrNotInService = errors.New("peer not in service")
	// ErrConnectionLost: the connection closed before the answer arrived.
	ErrConnectionLost = errors.New("connection lost before the answer")
	// ErrTimeout: no answer before the request's deadline.
	ErrTimeout = call.ErrTimeout
	// ErrClosed: the Peer was closed.
	ErrClosed = errors.New("peer closed")
	// ErrAlreadySent: the request was sent on this peer's connection
	// before; it is never sent twice on one connection (RFC 3539 2.10).
	ErrAlreadySent = call.ErrAlreadySent
	// ErrDisconnecting: the connection is closing gracefully (Close, or
	// a DPR the remote peer sent) and takes no new request.
	ErrDisconnecting = errors.New("peer disconnecting")
	// ErrMalformedAnswer: the answer's AVPs do not fit the message (one
	// runs past its end, or is shorter than its own header), so nothing
	// in it can be read; the error names the first such AVP. The answer
	// still shows the server alive and answering, to the watchdog and to
	// a server policy.
	ErrMalformedAnswer = errors.New("malformed answer")
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

// dcall is a Diameter request: the shared lifecycle (call.Call) and what
// Diameter adds to each send. It may move between connections (a
// failover); its End-to-End id never changes, it is never sent twice on
// one connection, and every send after the first carries the T flag (RFC
// 6733 3, 5.5.4) unless the previous peer answered it with an error.
type dcall struct {
	call.Call
	// Under the Call's lock:
	raw          []byte // bytes of the latest send; each resend works on a copy
	hbh          uint32 // Hop-by-Hop id on the connection it boarded last
	keepT        bool   // an agent's forwarded request came with the T flag: it keeps it
	afterRefusal bool   // the latest send followed a refusal (for testhook.Queued)
	seq          uint64 // send order on its connection (under that conn's mu)
	cmd          uint32 // the request's Command Code (set once, by newCall)

	// via is the connection the caller may read for the answer (it wrote
	// the request there inline), nil when none; stop says its wait ended
	// or it completed (see baton).
	via  atomic.Pointer[conn]
	stop atomic.Bool
	// reading is the connection whose baton the caller took last
	// (readFor): the one its read waits on, which Interrupt wakes. Not
	// via, which a later send of the call (a failover's) changes while
	// the caller still reads the first connection.
	reading atomic.Pointer[conn]
}

// newCall wraps an encoded request. It sets the R flag and, when the
// request carries none, an End-to-End id from the process's generator.
// The call takes req over. withKey fills in the call's routing key
// (User-Name, Session-Id, Destination-Host) for a dispatcher.
func newCall(req []byte, withKey bool) (*dcall, error) {
	if len(req) < wire.HeaderLen || int(wire.Length(req)) != len(req) {
		return nil, fmt.Errorf("request of %d bytes is not one whole Diameter message", len(req))
	}
	wire.SetFlags(req, wire.Flags(req)|wire.FlagRequest)
	if wire.EndToEnd(req) == 0 {
		wire.SetEndToEnd(req, e2e.Next())
	}
	d := &dcall{raw: req, cmd: wire.CommandCode(req)}
	d.Init()
	d.Ref, d.Proto = wire.EndToEnd(req), d
	if withKey {
		d.Key = routingKey(req)
		d.Accounting = throttle.ClassOf(wire.AppID(req), wire.CommandCode(req)) == throttle.Accounting
	}
	return d, nil
}

// routingKey reads a request's User-Name, Session-Id and Destination-Host
// (the first of each, as FindAVP finds them) in one walk, which ends once
// all three are found: one walk measured faster than three FindAVPs.
func routingKey(req []byte) call.Key {
	var d [3][]byte
	found := wire.FindAVPs(req, routingAVPs[:], d[:])
	k := call.Key{NAI: d[0], SessionID: d[1]}
	if found&4 != 0 {
		k.Dest = string(d[2])
	}
	return k
}

// routingAVPs are the AVPs routingKey reads, in the order of its data.
var routingAVPs = [3]uint32{message.UserName, message.SessionID, message.DestinationHost}

// Lifecycle returns the Call d embeds (call.Payload).
func (d *dcall) Lifecycle() *call.Call { return &d.Call }

// dcallOf returns the Diameter record of a call, nil when it is another
// protocol's.
func dcallOf(c *call.Call) *dcall {
	d, _ := c.Proto.(*dcall)
	return d
}

// ErrOtherProtocol: a call of another protocol was submitted to a peer.
var ErrOtherProtocol = errors.New("request of another protocol")

// NewCall makes a call of an encoded Diameter request for a dispatcher
// (package client), its routing key filled in; the call takes req over.
// keepT keeps a T flag req carries on every send (an agent forwarding a
// request its origin retransmitted); otherwise the first send clears it.
func NewCall(req []byte, keepT bool) (*call.Call, error) {
	d, err := newCall(req, true)
	if err != nil {
		return nil, err
	}
	d.keepT = keepT && wire.Flags(req)&wire.FlagRetransmit != 0
	return &d.Call, nil
}

// board makes d in flight on cn: the only way a request reaches a
// connection. cn.mu is held. It returns the bytes to queue and the
// Hop-by-Hop id, or an error without changing anything (see
// call.BoardLocked).
//
// The first send writes the Hop-by-Hop id into the caller's bytes and
// clears the T flag unless d keeps it (an agent forwarding a T-flagged
// request); every later send works on a copy, because the writer of a
// previous connection may still be reading the old bytes, and sets the T
// flag unless every send before it was refused with an error answer (a
// premature failover: that request was not lost, RFC 6733 3). Once a send
// was lost, a server may have applied it, and every later send is a
// possible duplicate, even one that follows another server's refusal. A
// request an agent forwards with its T flag keeps it on every send.
func (d *dcall) board(cn *conn) (raw []byte, id uint32, b call.Boarding, err error) {
	d.Lock()
	defer d.Unlock()
	b, err = d.BoardLocked(&cn.h)
	if err != nil {
		return nil, 0, b, err
	}
	raw = d.raw
	switch {
	case d.keepT: // T as it came, on a copy after the first send
		if b.Sends > 0 {
			raw = slices.Clone(raw)
		}
	case b.Sends == 0 || b.AfterRefusal && !b.Lost:
		if b.Sends > 0 {
			raw = slices.Clone(raw)
		}
		wire.SetFlags(raw, wire.Flags(raw)&^wire.FlagRetransmit)
	default:
		raw = slices.Clone(raw)
		wire.SetRetransmit(raw)
	}
	id = cn.hbh.Next()
	wire.SetHopByHop(raw, id)
	d.afterRefusal = b.Sends > 0 && b.AfterRefusal
	d.raw, d.hbh = raw, id
	return raw, id, b, nil
}

// retireCall takes a call that completed without its answer out of cn's
// pending table (cn.h's retire).
func (cn *conn) retireCall(c *call.Call, timedOut bool) {
	d := dcallOf(c)
	cn.retire(d, d.hbh) // hbh: written by the board that made cn the owner, before Finish
	if timedOut {
		cn.p.stats.timedOut.Add(1)
	}
}

// Submit sends c, a call of NewCall, without waiting: its answer
// completes it (call.Carrier). A call already complete is not sent.
func (p *Peer) Submit(c *call.Call) error {
	d := dcallOf(c)
	if d == nil {
		return fmt.Errorf("peer %s: %w", p.Name(), ErrOtherProtocol)
	}
	return p.submit(d)
}

// SubmitAll is Submit for a batch, in order (call.Carrier): the calls
// sent on this peer's connection before come back in refused; on error
// none was sent.
func (p *Peer) SubmitAll(calls []*call.Call) ([]*call.Call, error) {
	for _, c := range calls {
		if dcallOf(c) == nil {
			return nil, fmt.Errorf("peer %s: %w", p.Name(), ErrOtherProtocol)
		}
	}
	return p.submitAll(calls)
}

// submit sends cl on this peer's connection without waiting: the answer
// completes cl. It refuses with a *NotInServiceError unless the watchdog
// is OKAY, with ErrDisconnecting while a graceful disconnect (ours, or
// the peer's DPR) drains the connection, and with ErrAlreadySent if cl was sent on this connection
// before (it is never sent twice on one connection). A call sent before
// on another connection goes out as a copy with a new Hop-by-Hop id and
// the T flag: the failover replay of RFC 3539 3.4.1 [3]. A call already
// complete is not sent and submit returns nil.
func (p *Peer) submit(cl *dcall) error {
	c := p.cur.Load()
	if c == nil {
		return &NotInServiceError{Peer: p.Name(), State: p.State()}
	}
	if err := c.submit(cl); err != nil {
		if err == call.ErrComplete {
			return nil
		}
		return p.submitError(err)
	}
	p.touch()
	return nil
}

// submitAll is submit for a batch, in order, with one wake-up of the
// writer: what a failover of many requests wants. Each call meets the same
// checks as in submit; those refused (sent on this connection before) are
// returned for the caller to send elsewhere. Calls already complete are
// skipped. On error none was sent.
func (p *Peer) submitAll(calls []*call.Call) (refused []*call.Call, err error) {
	c := p.cur.Load()
	if c == nil {
		return nil, &NotInServiceError{Peer: p.Name(), State: p.State()}
	}
	refused, err = c.submitAll(calls)
	if err != nil {
		return nil, p.submitError(err)
	}
	p.touch()
	return refused, nil
}

// submitError names p in a connection's refusal of a submit (a
// NotInServiceError names it already).
func (p *Peer) submitError(err error) error {
	if _, ok := err.(*NotInServiceError); ok {
		return err
	}
	return fmt.Errorf("peer %s: %w", p.Name(), err)
}

// touch records application activity for the idle bring-down (T4). Only
// when IdleTimeout is set: a clock read and a shared cache line per
// request are not free.
func (p *Peer) touch() {
	if p.cfg.IdleTimeout > 0 {
		p.lastApp.Store(p.mono())
	}
}

// HandOver moves every request pending on the peer's connection but
// those keep reports true for (keep may be nil) to Config.Failover, in
// send order, with reason, as a watchdog failover does, and keeps the
// connection and its watchdog (call.Carrier). It is
// for a dispatcher that decided, above the watchdog, that the peer does
// not answer: a server that sends its own DWRs and answers ours, but not
// the requests, stays OKAY (any message resets Tw, RFC 3539 3.4.1). An
// answer that comes later is still taken, unless the request was
// answered elsewhere first. Without a Failover, it moves nothing.
// done, if not nil, is called once the calls moved have gone to
// Failover, on the Peer's notifier (see call.Carrier).
func (p *Peer) HandOver(reason string, keep func(*call.Call) bool, done func()) {
	if !p.step(input{kind: evHandOver, note: reason, keep: keep, done: done}) && done != nil {
		p.notify(notice{done: done}) // finished: nothing was pending; in its turn all the same
	}
}

// Avoids reports whether c must not be sent to this peer now
// (call.Carrier): it was sent on the peer's current connection, or the
// peer refused it.
func (p *Peer) Avoids(c *call.Call) bool {
	var cn *call.Conn
	if cur := p.cur.Load(); cur != nil {
		cn = &cur.h
	}
	return c.Avoids(cn, p)
}

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
// wakeReader), when a call is pending as it leaves the baton free to park
// (a request written inline just as the reader was about to park, whose
// caller found the baton still the reader's and left the read to it),
// when the connection is closed from this side, and at the
// latest 2*batonIdle after the baton was last left free with no caller
// taking it since: a request from the peer, the loss of the connection,
// the DWA to a DWR sent just as the reader parked, or the answer to a
// request written inline whose caller's wait ended before it took the
// baton (a context that had ended before Await: the call ends, nothing
// stays pending, and no caller reads) is noticed that much later on an
// idle connection, far below the watchdog's Tw (seconds).
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
	if ri, ok := c.tc.(transport.ReadInterrupter); ok && ri.ReadResumes() && c.out.Inlines() && c.rbuf != nil && !batonOff {
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

// parkHook, when set (tests), runs on the reader once it found that it
// may park (mayPark), before it leaves the baton free.
var parkHook func(c *conn)

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
	if c := d.reading.Load(); c != nil && c.bt.inRead.Load() == d {
		c.bt.rd.SetReadDeadline(time.Unix(1, 0))
	}
}

// readFor reads c on d's caller's goroutine, holding the baton, until d
// is done, its wait is cut short, it left c (its via is another
// connection or none: refused here, moved out by a failover, written on
// elsewhere), or something is for the reader; then hands the baton on.
func (c *conn) readFor(d *dcall) {
	p, b := c.p, &c.bt
	b.waiter.CompareAndSwap(d, nil)
	d.reading.Store(c) // before inRead: an Interrupt that misses the stop below finds it
	for {
		b.inRead.Store(d)
		if d.IsDone() || d.stop.Load() || d.via.Load() != c {
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
			if testhook.CallerRead != nil {
				testhook.CallerRead(d.Ref)
			}
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
	if testhook.Handing != nil {
		testhook.Handing(w.Ref)
	}
	if w.Offer() {
		return true // its Await runs ReadAnswer, which takes it
	}
	// Its caller has left Await: take the baton back, unless its
	// ReadAnswer took it after all.
	return !b.handed.CompareAndSwap(w, nil)
}

// leaveRead wakes d's caller from its read of a connection other than
// c, whose baton it holds, once d was written inline on c and offered
// c's baton: d left the connection it reads (a refusal read there, a
// failover), and its answer comes on c, which no one else reads until
// c's parked reader looks, batonIdle later. The holder finds its via
// changed and hands that baton on (readFor); its Await then takes up the
// Offer. submit stored via before it looks here, as readFor stores
// inRead before it looks at via: one of them sees the other.
func (d *dcall) leaveRead(c *conn) {
	if r := d.reading.Load(); r != nil && r != c && r.bt.inRead.Load() == d {
		r.bt.rd.SetReadDeadline(time.Unix(1, 0))
	}
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
	// A request written inline since mayPark looked may be pending now,
	// its caller having found the baton still the reader's (submit
	// offered it nothing, ReadAnswer left the read to the reader): the
	// reader reads on. It looks after leaving the baton free, as submit
	// looks at the state after making its call pending: one of them sees
	// the other.
	if (b.want.Load() || c.pendingLen() > 0) && b.state.CompareAndSwap(batonFree, batonReader) {
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
