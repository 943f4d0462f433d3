package radpeer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// memNet is an in-memory datagram network for the UDPPeer tests inside
// synctest bubbles (loopback sockets hang there): endpoints are named by
// address, delivery is immediate, a full queue drops the datagram as UDP
// would.
type memNet struct {
	mu    sync.Mutex
	ends  map[string]*memEnd
	next  int
	queue int
}

func newMemNet() *memNet { return &memNet{ends: make(map[string]*memEnd), queue: 4096} }

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

type memDatagram struct {
	b    []byte
	from string
}

type memEnd struct {
	n      *memNet
	addr   string
	remote string // "" for a listener
	in     chan memDatagram
	done   chan struct{}
	once   sync.Once
}

func (n *memNet) end(addr, remote string) (*memEnd, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == "" {
		n.next++
		addr = fmt.Sprintf("10.0.0.1:%d", 40000+n.next)
	}
	if _, ok := n.ends[addr]; ok {
		return nil, fmt.Errorf("memnet: %s in use", addr)
	}
	e := &memEnd{n: n, addr: addr, remote: remote, in: make(chan memDatagram, n.queue), done: make(chan struct{})}
	n.ends[addr] = e
	return e, nil
}

// ListenPacket opens a server endpoint at addr.
func (n *memNet) ListenPacket(addr string) *memEnd {
	e, err := n.end(addr, "")
	if err != nil {
		panic(err)
	}
	return e
}

// Dial opens a connected client endpoint from a new port.
func (n *memNet) Dial(_ context.Context, addr string) (net.Conn, error) {
	return n.end("", addr)
}

func (n *memNet) send(from, to string, b []byte) {
	n.mu.Lock()
	dst := n.ends[to]
	n.mu.Unlock()
	if dst == nil {
		return
	}
	select {
	case dst.in <- memDatagram{b: append([]byte(nil), b...), from: from}:
	case <-dst.done:
	default: // queue full: lost, as over UDP
	}
}

func (e *memEnd) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		select {
		case d := <-e.in:
			if e.remote != "" && d.from != e.remote {
				continue // a connected socket sees only its peer
			}
			return copy(b, d.b), memAddr(d.from), nil
		case <-e.done:
			return 0, nil, net.ErrClosed
		}
	}
}

func (e *memEnd) WriteTo(b []byte, to net.Addr) (int, error) {
	select {
	case <-e.done:
		return 0, net.ErrClosed
	default:
	}
	e.n.send(e.addr, to.String(), b)
	return len(b), nil
}

func (e *memEnd) Read(b []byte) (int, error) {
	n, _, err := e.ReadFrom(b)
	return n, err
}

func (e *memEnd) Write(b []byte) (int, error) {
	if e.remote == "" {
		return 0, errors.New("memnet: not connected")
	}
	return e.WriteTo(b, memAddr(e.remote))
}

func (e *memEnd) Close() error {
	e.once.Do(func() {
		close(e.done)
		e.n.mu.Lock()
		delete(e.n.ends, e.addr)
		e.n.mu.Unlock()
	})
	return nil
}

func (e *memEnd) LocalAddr() net.Addr                { return memAddr(e.addr) }
func (e *memEnd) RemoteAddr() net.Addr               { return memAddr(e.remote) }
func (e *memEnd) SetDeadline(t time.Time) error      { return nil }
func (e *memEnd) SetReadDeadline(t time.Time) error  { return nil }
func (e *memEnd) SetWriteDeadline(t time.Time) error { return nil }
