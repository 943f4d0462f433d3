// Package fault wraps transport.Conn to inject the faults of a sick peer
// process: a hang (freeze), a crash in progress (mute, then reset), a
// watchdog that never answers (drop DWA) and a process that stops reading
// (stall). It serves the test node and the tests; it is not a general
// network emulator.
//
// A Switch holds the faults of one emulated process and applies them to
// every connection wrapped by it, present and future. Its methods are safe
// for concurrent use.
package fault

import (
	"net"
	"sync"
	"sync/atomic"

	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// queueLen bounds the messages read ahead per connection (the kernel's
// receive buffer of the emulation); when full the reader stops and the
// sender's writes back up, as on a real socket.
const queueLen = 1 << 14

// Switch is the fault state of one emulated process.
type Switch struct {
	// DropDWA, set before the first Wrap, drops every DWA the process
	// writes: its peers' watchdogs see no answer.
	DropDWA bool
	// StallAfter, when positive and set before the first Wrap: once this
	// many application requests are read over all connections, no
	// connection reads any more until it closes (the sender's kernel
	// buffers fill). OnStall, if set, is called once when that happens.
	StallAfter int64
	OnStall    func()
	// ReadAhead, when positive and set before the first Wrap, bounds the
	// messages read ahead per connection (the receive buffer; default
	// 16384): a small one makes the sender's writes back up while the
	// process hangs, as they do over a socket with small buffers.
	ReadAhead int

	read  atomic.Int64 // application requests read from the sockets
	pumps sync.WaitGroup

	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed at Thaw; nil while not frozen
	muted  bool
	conns  map[*Conn]struct{}
}

// Conn is a connection wrapped by a Switch. A pump reads the underlying
// connection ahead into a bounded queue (the kernel's buffer, which keeps
// filling while the process hangs); ReadMessage hands messages on only
// while the Switch is not frozen.
type Conn struct {
	transport.Conn
	sw        *Switch
	rst       func() error
	q         chan result
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error
	wanted    bool // Close called while frozen; guarded by sw.mu
	queued    atomic.Int64
}

type result struct {
	msg []byte
	err error
}

// Wrap returns c under the Switch's faults. rst, if not nil, is called
// before the close that Reset does (for a TCP socket: SetLinger(0), so
// that the close sends an RST as a crashed process's kernel does).
func (s *Switch) Wrap(c transport.Conn, rst func() error) *Conn {
	n := queueLen
	if s.ReadAhead > 0 {
		n = s.ReadAhead
	}
	fc := &Conn{Conn: c, sw: s, rst: rst, q: make(chan result, n), closed: make(chan struct{})}
	s.mu.Lock()
	if s.conns == nil {
		s.conns = make(map[*Conn]struct{})
	}
	s.conns[fc] = struct{}{}
	s.mu.Unlock()
	s.pumps.Add(1)
	go fc.pump()
	return fc
}

// Wait waits until the reader of every wrapped connection has ended
// (each ends when its connection is closed).
func (s *Switch) Wait() { s.pumps.Wait() }

// Freeze stops every connection, present and future, from reading and
// writing: a hung process. Its Close calls are held until Thaw (a hung
// process closes nothing).
func (s *Switch) Freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.frozen {
		s.frozen = true
		s.thawed = make(chan struct{})
	}
}

// Frozen reports whether the Switch is frozen.
func (s *Switch) Frozen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frozen
}

// Muted reports whether the Switch is muted (a crash in progress).
func (s *Switch) Muted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.muted
}

// Thaw undoes Freeze. It returns how many application requests were
// buffered meanwhile, and how many of those are dropped because their
// connection was closed during the freeze (the close is carried out now).
func (s *Switch) Thaw() (buffered, dropped int) {
	s.mu.Lock()
	if !s.frozen {
		s.mu.Unlock()
		return 0, 0
	}
	s.frozen = false
	close(s.thawed)
	var closing []*Conn
	for c := range s.conns {
		n := int(c.queued.Load())
		buffered += n
		if c.wanted {
			closing = append(closing, c)
			dropped += n
		}
	}
	s.mu.Unlock()
	for _, c := range closing {
		c.realClose()
	}
	return buffered, dropped
}

// Mute starts a crash: from now on nothing the process writes is sent
// (writes block until the connection closes), while it still reads.
// Reset ends it.
func (s *Switch) Mute() {
	s.mu.Lock()
	s.muted = true
	s.mu.Unlock()
}

// Reset closes every connection at once, with an RST where Wrap was given
// one, as the kernel does for a crashed process, and ends a Mute. It
// returns how many connections it closed.
func (s *Switch) Reset() int {
	s.mu.Lock()
	cs := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.muted = false
	s.mu.Unlock()
	for _, c := range cs {
		if c.rst != nil {
			_ = c.rst()
		}
		c.realClose()
	}
	return len(cs)
}

// Conns is how many wrapped connections are open.
func (s *Switch) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Buffered is how many application requests wait, read from the sockets
// but not yet by the process, over every connection.
func (s *Switch) Buffered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		n += int(c.queued.Load())
	}
	return n
}

func (s *Switch) gate() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.frozen {
		return nil
	}
	return s.thawed
}

func (s *Switch) stalled() bool { return s.StallAfter > 0 && s.read.Load() >= s.StallAfter }

func (c *Conn) pump() {
	defer c.sw.pumps.Done()
	for {
		if c.sw.stalled() {
			<-c.closed
			return
		}
		m, err := c.Conn.ReadMessage()
		if err == nil && c.sw.StallAfter > 0 {
			// A read already under way when another connection reached
			// the stall: the process never sees what it brought.
			over := c.sw.stalled()
			if IsAppRequest(m) {
				n := c.sw.read.Add(1)
				over = n > c.sw.StallAfter
				if n == c.sw.StallAfter && c.sw.OnStall != nil {
					c.sw.OnStall()
				}
			}
			if over {
				<-c.closed
				return
			}
		}
		if err == nil && IsAppRequest(m) {
			c.queued.Add(1)
		}
		select {
		case c.q <- result{m, err}:
		case <-c.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

// hold waits while the Switch is frozen; false if the connection closed.
func (c *Conn) hold() bool {
	for g := c.sw.gate(); g != nil; g = c.sw.gate() {
		select {
		case <-g:
		case <-c.closed:
			return false
		}
	}
	return true
}

// ReadMessage returns the next message once the Switch is not frozen.
func (c *Conn) ReadMessage() ([]byte, error) {
	if !c.hold() || c.closeWanted() {
		return nil, net.ErrClosed
	}
	select {
	case r := <-c.q:
		if r.err == nil && IsAppRequest(r.msg) {
			c.queued.Add(-1)
		}
		if !c.hold() { // froze meanwhile: hold it
			return nil, net.ErrClosed
		}
		return r.msg, r.err
	case <-c.closed:
		return nil, net.ErrClosed
	}
}

// WriteMessages writes msgs once the Switch is not frozen, without the
// DWAs under DropDWA, and not at all while muted.
func (c *Conn) WriteMessages(msgs ...[]byte) error {
	if !c.hold() {
		return net.ErrClosed
	}
	c.sw.mu.Lock()
	muted := c.sw.muted
	c.sw.mu.Unlock()
	if muted { // crashing: nothing leaves the process any more
		<-c.closed
		return net.ErrClosed
	}
	if c.sw.DropDWA {
		keep := msgs[:0:0]
		for _, m := range msgs {
			if wire.CommandCode(m) == wire.CmdDeviceWatchdog && !wire.IsRequest(m) {
				continue
			}
			keep = append(keep, m)
		}
		if len(keep) == 0 {
			return nil
		}
		msgs = keep
	}
	return c.Conn.WriteMessages(msgs...)
}

// Close closes the connection, or, while the Switch is frozen, marks it
// to be closed at Thaw.
func (c *Conn) Close() error {
	c.sw.mu.Lock()
	if c.sw.frozen {
		c.wanted = true
		c.sw.mu.Unlock()
		return nil
	}
	c.sw.mu.Unlock()
	return c.realClose()
}

func (c *Conn) closeWanted() bool {
	c.sw.mu.Lock()
	defer c.sw.mu.Unlock()
	return c.wanted
}

func (c *Conn) realClose() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.closeErr = c.Conn.Close()
		c.sw.mu.Lock()
		delete(c.sw.conns, c)
		c.sw.mu.Unlock()
	})
	return c.closeErr
}

// IsAppRequest reports whether msg is a request other than the base
// protocol's CER, DWR and DPR.
func IsAppRequest(msg []byte) bool {
	if !wire.IsRequest(msg) {
		return false
	}
	switch wire.CommandCode(msg) {
	case wire.CmdCapabilitiesExchange, wire.CmdDeviceWatchdog, wire.CmdDisconnectPeer:
		return false
	}
	return true
}
