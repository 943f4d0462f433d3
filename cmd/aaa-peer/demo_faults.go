package main

// This file: the demo servers' fault injection (freeze, mute and reset of
// their connections), through internal/fault.

import (
	"errors"
	"net"
	"sync"

	"github.com/aaatp/aaatp/internal/fault"
	"github.com/aaatp/aaatp/transport"
)

// demoServer is one in-process server and the fault switch of the script.
type demoServer struct {
	name   string // Origin-Host
	short  string // server1
	url    string
	s      *server
	ln     net.Listener
	faults fault.Switch

	stopOnce sync.Once
}

func (ds *demoServer) stop() {
	ds.faults.Thaw()
	ds.stopOnce.Do(func() {
		ds.s.closePeers() // closes the listener too
		ds.faults.Wait()
	})
}

// freeze stops every connection of the server, present and future, from
// reading and writing: a hung process.
func (ds *demoServer) freeze() { ds.faults.Freeze() }

// frozen reports whether the server is frozen.
func (ds *demoServer) frozen() bool { return ds.faults.Frozen() }

// thaw undoes freeze. It returns how many requests were buffered for the
// server meanwhile, and how many of those are dropped because the server
// had given their connection up during the freeze (its own watchdog
// still runs in this emulation; the close is carried out now).
func (ds *demoServer) thaw() (buffered, dropped int) { return ds.faults.Thaw() }

// mute starts a crash: from now on the answers the server computes are
// never sent (it still reads and applies requests: those are applied,
// their answers lost). reset ends it.
func (ds *demoServer) mute() { ds.faults.Mute() }

// reset closes every connection with an RST (SO_LINGER 0), as the kernel
// does for a crashed process, and ends a mute. The listener stays open:
// the client reconnects. It returns how many connections were reset.
func (ds *demoServer) reset() int { return ds.faults.Reset() }

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
	sc := transport.NewStreamConn(tc, transport.SchemeTCP, transport.Options{})
	return l.ds.faults.Wrap(sc, func() error { return tc.SetLinger(0) }), nil
}

func (l *demoListener) Close() error   { return l.ln.Close() }
func (l *demoListener) Addr() net.Addr { return l.ln.Addr() }

// errNoTCP: the listener returned something other than a TCP connection.
var errNoTCP = errors.New("demo: not a TCP connection")
