// Package transport carries Diameter messages over TCP, TLS over TCP and
// SCTP (RFC 3539 section 3.1, RFC 6733 section 2.1), one whole message per
// ReadMessage, with the framing checked by package wire before anything is
// allocated from a length read off the wire.
//
// Addresses are URLs: tcp://host:port, tls://host:port, sctp://host:port.
//
// Concurrency: a Conn supports one reader goroutine (ReadMessage) and one
// writer goroutine (WriteMessages) at the same time; Close, LocalAddr,
// RemoteAddr and Network may be called from any goroutine at any time, and
// Close unblocks the reader and the writer. A plain TCP Conn is also a
// TryWriter: one write that never waits, which counts as the writer's. A
// Listener's methods are safe for concurrent use. Options is a plain value,
// copied on use.
//
// Errors: after any error from ReadMessage or WriteMessages the connection
// is in an unknown state (a message may be half read or half written) and
// the caller must Close it; errors matching wire.ErrBadFrame carry a reason
// meant for the log line that says why the peer was dropped.
package transport
