package main

// This file: the demo servers' fault injection: freeze, mute and reset of their connections.

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/aaatp/aaatp/transport"
)

// demoServer is one in-process server and the fault switches of the
// script.
type demoServer struct {
	name  string // Origin-Host
	short string // server1
	url   string
	s     *server
	ln    net.Listener

	stopOnce sync.Once
	pumps    sync.WaitGroup

	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed at thaw; nil while not frozen
	muted  bool          // crashing: answers are not sent
	conns  map[*demoConn]struct{}
}

func (ds *demoServer) stop() {
	ds.thaw()
	ds.stopOnce.Do(func() {
		ds.s.closePeers() // closes the listener too
		ds.pumps.Wait()
	})
}

// gate returns a channel to wait on while the server is frozen, nil
// otherwise.
func (ds *demoServer) gate() <-chan struct{} {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if !ds.frozen {
		return nil
	}
	return ds.thawed
}

// freeze stops every connection of the server, present and future, from
// reading and writing: a hung process.
func (ds *demoServer) freeze() {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if !ds.frozen {
		ds.frozen = true
		ds.thawed = make(chan struct{})
	}
}

// thaw undoes freeze. It returns how many requests were buffered for the
// server meanwhile, and how many of those are dropped because the server
// had given their connection up during the freeze (its own watchdog
// still runs in this emulation; the close is carried out now).
func (ds *demoServer) thaw() (buffered, dropped int) {
	ds.mu.Lock()
	if !ds.frozen {
		ds.mu.Unlock()
		return 0, 0
	}
	ds.frozen = false
	close(ds.thawed)
	var closing []*demoConn
	for c := range ds.conns {
		n := c.buffered()
		buffered += n
		if c.closeWanted {
			closing = append(closing, c)
			dropped += n
		}
	}
	ds.mu.Unlock()
	for _, c := range closing {
		c.realClose()
	}
	return buffered, dropped
}

// mute starts a crash: from now on the answers the server computes are
// never sent (it still reads and applies requests: those are applied,
// their answers lost). reset ends it.
func (ds *demoServer) mute() {
	ds.mu.Lock()
	ds.muted = true
	ds.mu.Unlock()
}

// reset closes every connection with an RST (SO_LINGER 0), as the kernel
// does for a crashed process, and ends a mute. The listener stays open:
// the client reconnects. It returns how many connections were reset.
func (ds *demoServer) reset() int {
	ds.mu.Lock()
	cs := make([]*demoConn, 0, len(ds.conns))
	for c := range ds.conns {
		cs = append(cs, c)
	}
	ds.muted = false
	ds.mu.Unlock()
	for _, c := range cs {
		_ = c.tcp.SetLinger(0)
		c.realClose()
	}
	return len(cs)
}

// demoListener is a transport.Listener over a TCP listener of ours, so
// that we hold each connection's socket (for the RST) and wrap it.
type demoListener struct {
	ln net.Listener
	ds *demoServer
}

func (l *demoListener) Accept() (transport.Conn, error) {
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, errNoTCP
	}
	return l.ds.wrap(transport.NewStreamConn(tc, transport.SchemeTCP, transport.Options{}), tc), nil
}

func (l *demoListener) Close() error   { return l.ln.Close() }
func (l *demoListener) Addr() net.Addr { return l.ln.Addr() }

// errNoTCP: the listener returned something other than a TCP connection.
var errNoTCP = errors.New("demo: not a TCP connection")

// demoConn is an accepted connection that can be frozen, as
// client/harness_test.go's freezeConn: a pump reads the socket into a
// queue (the kernel's buffer, which keeps filling while the process
// hangs) and ReadMessage hands messages on only while the server is not
// frozen. While frozen, writes block too, and a Close is held until the
// thaw: a hung process closes nothing.
type demoConn struct {
	transport.Conn
	tcp         *net.TCPConn
	ds          *demoServer
	q           chan readResult
	closed      chan struct{}
	closeOnce   sync.Once
	closeErr    error
	closeWanted bool // guarded by ds.mu
	queued      atomic.Int64
}

type readResult struct {
	msg []byte
	err error
}

const demoQueue = 1 << 14

func (ds *demoServer) wrap(sc transport.Conn, tc *net.TCPConn) *demoConn {
	c := &demoConn{Conn: sc, tcp: tc, ds: ds, q: make(chan readResult, demoQueue), closed: make(chan struct{})}
	ds.mu.Lock()
	ds.conns[c] = struct{}{}
	ds.mu.Unlock()
	ds.pumps.Add(1)
	go c.pump()
	return c
}

func (c *demoConn) pump() {
	defer c.ds.pumps.Done()
	for {
		m, err := c.Conn.ReadMessage()
		if err == nil && isAppRequest(m) {
			c.queued.Add(1)
		}
		select {
		case c.q <- readResult{m, err}:
		case <-c.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

// buffered is how many application requests wait in the queue.
func (c *demoConn) buffered() int { return int(c.queued.Load()) }

// hold waits while the server is frozen; false if the connection closed.
func (c *demoConn) hold() bool {
	for g := c.ds.gate(); g != nil; g = c.ds.gate() {
		select {
		case <-g:
		case <-c.closed:
			return false
		}
	}
	return true
}

func (c *demoConn) ReadMessage() ([]byte, error) {
	if !c.hold() || c.wanted() {
		return nil, net.ErrClosed
	}
	select {
	case r := <-c.q:
		if r.err == nil && isAppRequest(r.msg) {
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

func (c *demoConn) WriteMessages(msgs ...[]byte) error {
	if !c.hold() {
		return net.ErrClosed
	}
	c.ds.mu.Lock()
	muted := c.ds.muted
	c.ds.mu.Unlock()
	if muted { // crashing: nothing leaves the process any more
		<-c.closed
		return net.ErrClosed
	}
	return c.Conn.WriteMessages(msgs...)
}

func (c *demoConn) Close() error {
	c.ds.mu.Lock()
	if c.ds.frozen {
		c.closeWanted = true
		c.ds.mu.Unlock()
		return nil
	}
	c.ds.mu.Unlock()
	return c.realClose()
}

// wanted reports whether the server closed the connection while frozen.
func (c *demoConn) wanted() bool {
	c.ds.mu.Lock()
	defer c.ds.mu.Unlock()
	return c.closeWanted
}

func (c *demoConn) realClose() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.closeErr = c.Conn.Close()
		c.ds.mu.Lock()
		delete(c.ds.conns, c)
		c.ds.mu.Unlock()
	})
	return c.closeErr
}
