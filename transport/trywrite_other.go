//go:build !unix

package transport

import "net"

// tcpConn has no TryWrite here: plain TCP is a streamConn.
type tcpConn struct{ *streamConn }

func newTCPConn(*streamConn, *net.TCPConn) *tcpConn { return nil }
