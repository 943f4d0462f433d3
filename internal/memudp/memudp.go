// Package memudp is an in-memory datagram network for tests: endpoints
// named by address ("a:1812") exchange datagrams without the kernel, so
// that code written against UDP sockets runs inside a testing/synctest
// bubble, where a real socket's read would never count as durably
// blocked and virtual time would not advance.
//
// Delivery is immediate and in order; a datagram to an address nobody
// listens on, or to an endpoint whose queue is full, is lost, as over
// UDP. A test can drop datagrams (SetDrop) and freeze an endpoint
// (Freeze): a frozen endpoint reads nothing until thawed, its datagrams
// waiting in its queue, as a stopped process's socket buffers them.
//
// Listen gives a server's net.PacketConn (radpeer.NewUDPServer takes
// it); Dial has the signature of radpeer.UDPConfig.Dial and gives a
// connected net.Conn from a new port of 10.0.0.1.
package memudp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// DefaultQueue is how many datagrams an endpoint holds unread before
// further ones are lost.
const DefaultQueue = 4096

// ErrInUse is returned by Listen for an address already open.
var ErrInUse = errors.New("memudp: address in use")

// Net is one in-memory network. Its methods are safe for concurrent use.
type Net struct {
	mu     sync.Mutex
	ends   map[string]*Conn
	frozen map[string]chan struct{} // closed by Thaw
	next   int
	drop   func(from, to string, b []byte) bool
	queue  int
}

// New returns an empty network whose endpoints hold DefaultQueue
// datagrams each.
func New() *Net {
	return &Net{ends: make(map[string]*Conn), frozen: make(map[string]chan struct{}), queue: DefaultQueue}
}

// Addr is an endpoint's address.
type Addr string

// Network returns "memudp".
func (Addr) Network() string { return "memudp" }

func (a Addr) String() string { return string(a) }

// SetDrop makes every datagram for which drop returns true lost (nil:
// deliver everything). drop runs on the sender's goroutine.
func (n *Net) SetDrop(drop func(from, to string, b []byte) bool) {
	n.mu.Lock()
	n.drop = drop
	n.mu.Unlock()
}

// Freeze stops the endpoint at addr (now or later opened) from reading:
// its reads wait, the datagrams sent to it wait in its queue, until Thaw.
func (n *Net) Freeze(addr string) {
	n.mu.Lock()
	if n.frozen[addr] == nil {
		n.frozen[addr] = make(chan struct{})
	}
	n.mu.Unlock()
}

// Thaw lets a frozen endpoint read again, its queue first.
func (n *Net) Thaw(addr string) {
	n.mu.Lock()
	if ch := n.frozen[addr]; ch != nil {
		close(ch)
		delete(n.frozen, addr)
	}
	n.mu.Unlock()
}

// Listen opens an unconnected endpoint at addr: it reads from anyone and
// writes to any address (net.PacketConn).
func (n *Net) Listen(addr string) (net.PacketConn, error) {
	return n.open(addr, "")
}

// Dial opens an endpoint connected to addr from a new port: it sends to
// addr and reads only what comes from there. Like a UDP connect, it
// succeeds whether or not anything listens at addr.
func (n *Net) Dial(_ context.Context, addr string) (net.Conn, error) {
	return n.open("", addr)
}

func (n *Net) open(addr, remote string) (*Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == "" {
		n.next++
		addr = fmt.Sprintf("10.0.0.1:%d", 40000+n.next)
	}
	if _, ok := n.ends[addr]; ok {
		return nil, fmt.Errorf("%w: %s", ErrInUse, addr)
	}
	c := &Conn{n: n, addr: addr, remote: remote, in: make(chan datagram, n.queue), done: make(chan struct{})}
	n.ends[addr] = c
	return c, nil
}

type datagram struct {
	b    []byte
	from string
}

func (n *Net) send(from, to string, b []byte) {
	n.mu.Lock()
	dst, drop := n.ends[to], n.drop
	n.mu.Unlock()
	if dst == nil || (drop != nil && drop(from, to, b)) {
		return
	}
	select {
	case dst.in <- datagram{b: append([]byte(nil), b...), from: from}:
	case <-dst.done:
	default: // queue full: lost
	}
}

// thawed waits while addr is frozen; false when c closes meanwhile.
func (n *Net) thawed(c *Conn) bool {
	for {
		n.mu.Lock()
		ch := n.frozen[c.addr]
		n.mu.Unlock()
		if ch == nil {
			return true
		}
		select {
		case <-ch:
		case <-c.done:
			return false
		}
	}
}

// Conn is an endpoint: a net.PacketConn, and for one of Dial a connected
// net.Conn. Deadlines are not supported.
type Conn struct {
	n      *Net
	addr   string
	remote string // "" for Listen's
	in     chan datagram
	done   chan struct{}
	once   sync.Once
}

// ReadFrom returns the next datagram and its sender; net.ErrClosed once
// the endpoint is closed. A connected endpoint skips datagrams from
// anyone but its peer.
func (c *Conn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		select {
		case d := <-c.in:
			if c.remote != "" && d.from != c.remote {
				continue
			}
			// Frozen while waiting: hold the datagram until thawed, as if
			// it were still queued.
			if !c.n.thawed(c) {
				return 0, nil, net.ErrClosed
			}
			return copy(b, d.b), Addr(d.from), nil
		case <-c.done:
			return 0, nil, net.ErrClosed
		}
	}
}

// WriteTo sends one datagram to addr.
func (c *Conn) WriteTo(b []byte, addr net.Addr) (int, error) {
	select {
	case <-c.done:
		return 0, net.ErrClosed
	default:
	}
	c.n.send(c.addr, addr.String(), b)
	return len(b), nil
}

// Read is ReadFrom without the sender.
func (c *Conn) Read(b []byte) (int, error) {
	k, _, err := c.ReadFrom(b)
	return k, err
}

// Write sends one datagram to a connected endpoint's peer.
func (c *Conn) Write(b []byte) (int, error) {
	if c.remote == "" {
		return 0, errors.New("memudp: Write on an unconnected endpoint")
	}
	return c.WriteTo(b, Addr(c.remote))
}

// Close frees the address; pending and later reads fail with
// net.ErrClosed.
func (c *Conn) Close() error {
	c.once.Do(func() {
		close(c.done)
		c.n.mu.Lock()
		delete(c.n.ends, c.addr)
		c.n.mu.Unlock()
	})
	return nil
}

// LocalAddr returns the endpoint's address.
func (c *Conn) LocalAddr() net.Addr { return Addr(c.addr) }

// RemoteAddr returns a connected endpoint's peer ("" for Listen's).
func (c *Conn) RemoteAddr() net.Addr { return Addr(c.remote) }

var errDeadline = fmt.Errorf("memudp: deadlines: %w", errors.ErrUnsupported)

// SetDeadline is not supported.
func (c *Conn) SetDeadline(time.Time) error { return errDeadline }

// SetReadDeadline is not supported.
func (c *Conn) SetReadDeadline(time.Time) error { return errDeadline }

// SetWriteDeadline is not supported.
func (c *Conn) SetWriteDeadline(time.Time) error { return errDeadline }
