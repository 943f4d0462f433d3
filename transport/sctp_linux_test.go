//go:build linux && !386

package transport

import (
	"syscall"
	"testing"

	"github.com/ishidawataru/sctp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Stream choice needs no kernel SCTP, so it is tested even where TestSCTP
// skips.
func TestSCTPStreamFor(t *testing.T) {
	s := &sctpConn{streams: 4, next: 1}
	app := testMsg(24, 272, 1)
	var got []uint16
	for i := 0; i < 7; i++ {
		got = append(got, s.streamFor(app))
	}
	assert.Equal(t, []uint16{1, 2, 3, 1, 2, 3, 1}, got, "application messages round-robin over streams 1..n-1")
	for _, cmd := range []uint32{257, 280, 282} {
		assert.Equal(t, uint16(0), s.streamFor(testMsg(24, cmd, 1)), "command %d on stream 0", cmd)
	}
	assert.Equal(t, uint16(2), s.streamFor(app), "base messages do not disturb the rotation")

	one := &sctpConn{streams: 1, next: 1}
	assert.Equal(t, uint16(0), one.streamFor(app), "a single stream carries everything")
}

func TestSCTPUnsupportedError(t *testing.T) {
	err := sctpSupported()
	if err == nil {
		t.Skip("this kernel has SCTP")
	}
	assert.ErrorIs(t, err, ErrSCTPUnsupported)
	assert.Contains(t, err.Error(), "SCTP is not supported by this kernel")
	_, derr := Dial(t.Context(), "sctp://127.0.0.1:3868", Options{})
	assert.ErrorIs(t, derr, ErrSCTPUnsupported)
}

// Both ends of an SCTP association have SCTP_NODELAY set: Linux SCTP
// bundles small messages with a Nagle-like delay otherwise.
func TestSCTPNoDelay(t *testing.T) {
	if err := sctpSupported(); err != nil {
		t.Skipf("no SCTP here: %v", err)
	}
	ln, err := Listen("sctp://127.0.0.1:0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	c, err := Dial(t.Context(), "sctp://"+ln.Addr().String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		return
	}
	defer s.Close()
	for name, conn := range map[string]Conn{"dialed": c, "accepted": s} {
		rc, err := conn.(*sctpConn).c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		var gerr error
		if err := rc.Control(func(fd uintptr) {
			v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_SCTP, sctp.SCTP_NODELAY)
		}); err != nil || gerr != nil {
			t.Fatal(err, gerr)
		}
		assert.Equal(t, 1, v, "%s: SCTP_NODELAY", name)
	}
}

// A socket that reports no addresses (an aborted association, a closed
// socket: the sctp package returns a nil net.Addr then) still gives the
// connection addresses a log line can print.
func TestSCTPAddrsNeverNil(t *testing.T) {
	c := sctp.NewSCTPConn(-1, nil) // every getsockopt fails, as after an abort
	require.Nil(t, c.RemoteAddr(), "the sctp package gives no address for a dead socket")
	local, remote := sctpAddrs(c)
	require.NotNil(t, local)
	require.NotNil(t, remote)
	assert.Equal(t, "sctp:unknown-address", remote.String())
	assert.Equal(t, "sctp", local.Network())
}
