package peer

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"

	"github.com/aaatp/aaatp/internal/testhook"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// conn is one transport connection of a Peer, after a successful
// capabilities exchange. It owns a reader and a writer goroutine.
type conn struct {
	p          *Peer
	tc         transport.Conn
	remoteHost string // Origin-Host from the CER or CEA
	hbh        *wire.HopByHopGen

	// pending requests by Hop-by-Hop id (F1). mu guards pending and
	// lost; once lost is set, nothing new is added.
	mu      sync.Mutex
	pending map[uint32]*Call
	lost    bool
	seq     uint64 // send order

	// write queue: callers append under wmu; the writer swaps it out.
	wmu      sync.Mutex
	wq       [][]byte
	wclosed  bool
	spare    [][]byte            // the writer's other buffer, kept across writers
	writing  bool                // a writer goroutine or an inline write is running
	wwg      sync.WaitGroup      // writers; Add only under wmu while !wclosed
	flushEnd bool                // after the queue drains, close (DPA sent)
	tw       transport.TryWriter // nil unless the transport writes without waiting
	writers  int                 // writer goroutines started (under wmu; for tests)
	inline   int                 // messages written inline, whole (under wmu; for tests)

	dpa      chan struct{} // closed when a DPA arrives
	dpaOnce  sync.Once
	closed   chan struct{}
	closeMu  sync.Once
	ctx      context.Context // cancelled when the connection closes: handlers watch it
	cancel   context.CancelFunc
	downNote string // why it closed, set before close by the closing side (under mu)
}

func newConn(p *Peer, tc transport.Conn, remoteHost string) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	tw, _ := tc.(transport.TryWriter)
	return &conn{
		p: p, tc: tc, remoteHost: remoteHost,
		hbh:     wire.NewHopByHopGenRandom(),
		pending: make(map[uint32]*Call),
		dpa:     make(chan struct{}),
		closed:  make(chan struct{}),
		ctx:     ctx, cancel: cancel,
		tw: tw,
	}
}

func (c *conn) start() {
	c.p.wg.Add(1)
	go c.reader()
}

// close closes the transport once; the reader then reports the loss.
func (c *conn) close(note string) {
	c.closeMu.Do(func() {
		if c.p != nil && c.p.cfg.Table != nil {
			c.p.cfg.Table.down(c) // a test conn may have no Peer
		}
		c.mu.Lock()
		if c.downNote == "" {
			c.downNote = note
		}
		c.mu.Unlock()
		c.wmu.Lock()
		c.wclosed = true
		c.wmu.Unlock()
		close(c.closed)
		c.cancel()
		c.tc.Close()
	})
}

func (c *conn) note() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downNote
}

// enqueue queues one message and makes sure a writer runs.
func (c *conn) enqueue(msg []byte) error {
	c.wmu.Lock()
	if c.wclosed {
		c.wmu.Unlock()
		return ErrConnectionLost
	}
	c.wq = append(c.wq, msg)
	c.kickLocked()
	c.wmu.Unlock()
	return nil
}

// enqueueLone is enqueue for a message that usually travels alone: a DWR,
// the DWA or error answer the reader sends back, a DPR or DPA. When
// nothing is queued or being written and the transport can write without
// waiting, the caller's goroutine writes it, so that it costs no writer
// goroutine and no wake-up: that is most of what an idle connection
// sends. Requests and their answers keep going through the writer, which
// batches them: written inline one by one they cost more (a syscall each,
// and the caller no longer runs alongside the writer).
func (c *conn) enqueueLone(msg []byte) error {
	c.wmu.Lock()
	if c.wclosed {
		c.wmu.Unlock()
		return ErrConnectionLost
	}
	if c.tw != nil && !c.writing && len(c.wq) == 0 && !c.flushEnd {
		c.writing = true // whatever comes meanwhile queues behind us
		c.wmu.Unlock()
		c.writeInline(msg)
		return nil
	}
	c.wq = append(c.wq, msg)
	c.kickLocked()
	c.wmu.Unlock()
	return nil
}

// writeInline writes msg with one write that never waits, c.writing set
// by the caller. What the socket did not take goes to the head of the
// queue for a writer, as does anything queued meanwhile; a write error
// closes the connection as the writer's does. The caller is never blocked
// behind a full send buffer: a reader answering a DWR must not wait for
// its own peer to read, or two peers writing to each other could deadlock.
func (c *conn) writeInline(msg []byte) {
	n, err := c.tw.TryWrite(msg)
	if err != nil {
		c.close("write failed: " + err.Error())
		c.wmu.Lock()
		c.writing = false
		c.wmu.Unlock()
		return
	}
	c.wmu.Lock()
	if n < len(msg) {
		c.wq = slices.Insert(c.wq, 0, msg[n:])
	} else {
		c.inline++
	}
	c.writing = false
	if !c.wclosed && (len(c.wq) > 0 || c.flushEnd) {
		c.kickLocked()
	}
	c.wmu.Unlock()
}

// kickLocked starts a writer unless one runs. The writer exits when the
// queue is empty, so an idle connection costs no writer goroutine; under
// load it keeps running and batches. c.wmu is held, and the connection is
// not closed, so the Add cannot race with the reader's Wait.
func (c *conn) kickLocked() {
	if !c.writing {
		c.writing = true
		c.writers++
		c.wwg.Add(1)
		go c.writer()
	}
}

// writer flushes the queue in batches: one writev for whatever callers
// queued meanwhile. Yielding once before taking the batch lets callers that
// are runnable right now add their message to it.
func (c *conn) writer() {
	defer c.wwg.Done()
	for {
		runtime.Gosched()
		c.wmu.Lock()
		batch := c.wq
		end := c.flushEnd
		if len(batch) == 0 && !end {
			c.writing = false
			c.wmu.Unlock()
			return
		}
		// The two buffers must never share an array, or callers would
		// append into what we write.
		c.wq, c.spare = c.spare[:0], nil
		c.wmu.Unlock()
		err := c.tc.WriteMessages(batch...)
		clear(batch)
		c.wmu.Lock()
		c.spare = batch[:0]
		c.wmu.Unlock()
		if err != nil {
			c.close("write failed: " + err.Error())
			return
		}
		if end {
			c.close("disconnected by DPR")
			return
		}
	}
}

// closeAfterFlush makes the writer close the connection once everything
// queued so far is written (used after sending a DPA).
func (c *conn) closeAfterFlush() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.flushEnd = true
	if !c.wclosed {
		c.kickLocked()
	}
}

// prepare returns the bytes to send for cl with a fresh Hop-by-Hop id. A
// call sent before is copied and gets the T flag: the previous
// connection's writer may still be reading the old bytes.
func (c *conn) prepare(cl *Call) ([]byte, uint32) {
	raw := cl.raw
	if cl.sends.Load() > 0 {
		raw = append([]byte(nil), raw...)
		wire.SetRetransmit(raw)
	}
	id := c.hbh.Next()
	wire.SetHopByHop(raw, id)
	return raw, id
}

// send queues cl on this connection with a fresh Hop-by-Hop id. A call
// sent before (a failover replay) is copied first and gets the T flag: the
// old connection's writer may still be reading the previous bytes.
func (c *conn) send(cl *Call) error {
	raw, id := c.prepare(cl)
	c.mu.Lock()
	if c.lost {
		c.mu.Unlock()
		return ErrConnectionLost
	}
	cl.raw = raw
	cl.hbh.Store(id)
	c.seq++
	cl.seq = c.seq
	c.pending[id] = cl
	cl.owner.Store(c)
	c.mu.Unlock()
	if err := c.enqueue(raw); err != nil {
		cl.owner.CompareAndSwap(c, nil)
		c.forget(cl)
		return err
	}
	if testhook.AfterQueue != nil {
		testhook.AfterQueue(cl.e2e)
	}
	cl.sends.Add(1)
	return nil
}

// sendAll is send for many calls at once, under one lock of the pending
// map and one of the write queue: a failover of thousands of requests then
// costs one wake-up of the writer, not one per request.
func (c *conn) sendAll(calls []*Call) error {
	raws := make([][]byte, 0, len(calls))
	ids := make([]uint32, 0, len(calls))
	for _, cl := range calls {
		raw, id := c.prepare(cl)
		raws, ids = append(raws, raw), append(ids, id)
	}
	c.mu.Lock()
	if c.lost {
		c.mu.Unlock()
		return ErrConnectionLost
	}
	for i, cl := range calls {
		cl.raw = raws[i]
		cl.hbh.Store(ids[i])
		c.seq++
		cl.seq = c.seq
		c.pending[ids[i]] = cl
		cl.owner.Store(c)
	}
	c.mu.Unlock()
	c.wmu.Lock()
	if c.wclosed {
		c.wmu.Unlock()
		for _, cl := range calls {
			cl.owner.CompareAndSwap(c, nil)
			c.forget(cl)
		}
		return ErrConnectionLost
	}
	c.wq = append(c.wq, raws...)
	c.kickLocked()
	c.wmu.Unlock()
	for _, cl := range calls {
		cl.sends.Add(1)
	}
	return nil
}

// forget removes a call (its caller gave up, or it completed elsewhere).
func (c *conn) forget(cl *Call) {
	c.mu.Lock()
	if id := cl.hbh.Load(); c.pending[id] == cl {
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

// takePending marks the connection lost and returns the unanswered calls
// it still owns; calls moved elsewhere are dropped from its map.
func (c *conn) takePending() []*Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost = true
	var calls []*Call
	for id, cl := range c.pending {
		if cl.owner.CompareAndSwap(c, nil) {
			calls = append(calls, cl)
		}
		delete(c.pending, id)
	}
	return calls
}

// moveOut hands over the calls this connection owns, in send order, and
// disowns them; they stay in the map so that a late answer here still
// completes them (F4).
func (c *conn) moveOut() []*Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	var calls []*Call
	for _, cl := range c.pending {
		if !cl.done.Load() && cl.owner.CompareAndSwap(c, nil) {
			calls = append(calls, cl)
		}
	}
	slices.SortFunc(calls, func(a, b *Call) int { return cmp.Compare(a.seq, b.seq) })
	return calls
}

func (c *conn) pendingLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// reader reads until the connection fails. Bad bytes close only this
// connection, with the reason logged and counted (T5).
func (c *conn) reader() {
	defer c.p.wg.Done()
	p := c.p
	for {
		msg, err := c.tc.ReadMessage()
		if err != nil {
			note := c.note()
			switch {
			case note != "":
			case errors.Is(err, wire.ErrBadFrame):
				p.stats.badFrames.Add(1)
				note = "bad frame: " + err.Error()
				p.publish(Event{Kind: EventError, Reason: note})
				p.cfg.Logger.Warn("closing connection on a bad frame", "peer", p.Name(), "remote", c.tc.RemoteAddr().String(), "err", err)
			case errors.Is(err, io.EOF):
				note = "closed by peer"
			case errors.Is(err, net.ErrClosed):
				note = "closed"
			default:
				note = err.Error()
			}
			c.close(note)
			c.wwg.Wait() // no writer outlives its connection
			p.step(input{kind: evConnDown, c: c, note: note})
			return
		}
		p.received(c, msg)
	}
}

// answerRequest runs the handler for one request and queues its answer.
func (c *conn) answerRequest(req []byte) {
	p := c.p
	var ans []byte
	if p.cfg.Handler != nil {
		ans = p.cfg.Handler(c.ctx, p, req)
	} else {
		ans = message.ErrorAnswer(req, p.cfg.identity(), message.CommandUnsupported, "no handler").Bytes()
	}
	if ans == nil {
		return // the handler chose not to answer
	}
	// The answer carries the request's ids; R and T are never set on it.
	wire.SetHopByHop(ans, wire.HopByHop(req))
	wire.SetEndToEnd(ans, wire.EndToEnd(req))
	wire.SetFlags(ans, wire.Flags(ans)&^(wire.FlagRequest|wire.FlagRetransmit))
	if c.enqueue(ans) == nil {
		p.stats.answersSent.Add(1)
	}
}
