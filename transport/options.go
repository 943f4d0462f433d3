package transport

import (
	"bufio"
	"crypto/tls"
	"time"

	"github.com/aaatp/aaatp/wire"
)

// Defaults applied to zero fields of Options.
const (
	DefaultDialTimeout      = 5 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultSCTPStreams      = 10
	DefaultSCTPInitAttempts = 4
	DefaultSCTPInitTimeout  = 2 * time.Second
)

// Options configures Dial, Listen and NewStreamConn. The zero value is
// ready to use: every zero field means its documented default.
type Options struct {
	// NoDelay disables the Nagle algorithm on TCP (and TLS over TCP)
	// sockets. The default, false, leaves Nagle ON because RFC 3539
	// section 3.2 says AAA implementations over TCP MUST enable it (note
	// that Go's net package disables Nagle on every TCP socket by default,
	// so we switch it back on explicitly).
	//
	// Trade-off: Nagle batches small writes into full segments, which
	// cuts packet counts when a backlog forms (a NAS reboot, a restored
	// link: the network-driven regime RFC 3539 describes), at the cost of
	// up to one delayed-ACK interval (tens of ms, 40 ms on Linux) of added
	// latency per message on a lightly loaded link. Our writer already
	// batches (WriteMessages sends a whole batch with one writev), so
	// setting NoDelay is safe for latency-sensitive deployments that
	// knowingly depart from the RFC's MUST.
	//
	// Not applicable to SCTP: RFC 3539 3.2 says Nagle is not used with
	// SCTP, and each Diameter message is already one SCTP message.
	NoDelay bool

	// DialTimeout bounds Dial, including the TLS handshake. Default 5 s.
	DialTimeout time.Duration

	// WriteTimeout bounds every WriteMessages call: the whole batch gets
	// one deadline, so a peer that stops reading cannot block the writer
	// forever. Default 10 s; values <= 0 mean the default (there is no way
	// to switch write deadlines off). For SCTP see WriteMessages.
	WriteTimeout time.Duration

	// MaxMessageLen is the largest message ReadMessage accepts; a longer
	// length field is a bad frame and nothing is allocated for it.
	// Default wire.DefaultMaxMessageLen (64 KiB); capped at
	// wire.MaxMessageLen.
	MaxMessageLen uint32

	// ReadFrame, when set, replaces Diameter framing on TCP and TLS
	// connections: ReadMessage returns what it reads from the connection's
	// buffered reader, one whole message per call (RADIUS uses
	// radius.ReadFrame). It must return io.EOF between messages and an
	// error wrapping its own bad-frame error otherwise; MaxMessageLen does
	// not apply. SCTP ignores it.
	ReadFrame func(r *bufio.Reader) ([]byte, error)

	// TLS is the configuration for tls:// endpoints (see ServerTLSConfig
	// and ClientTLSConfig). Listen requires it. Dial uses a default
	// verifying the server against the system roots when nil, and fills
	// ServerName from the URL when it is empty.
	TLS *tls.Config

	// SCTPStreams is the number of outbound SCTP streams requested (also
	// the maximum inbound streams accepted). Stream 0 carries the base
	// protocol's CER/CEA, DWR/DWA and DPR/DPA; the others carry the rest
	// round-robin so a lost packet only delays the messages behind it on
	// its own stream (RFC 3539 3.8, head-of-line blocking). Default 10.
	SCTPStreams uint16

	// SCTPInitAttempts bounds how many times an SCTP INIT is sent before
	// Dial gives up. Default 4.
	SCTPInitAttempts uint16

	// SCTPInitTimeout caps the retransmission timeout of each INIT
	// (millisecond resolution, at most 65.535 s). Default 2 s, so an
	// unreachable peer fails in about SCTPInitAttempts x SCTPInitTimeout;
	// DialTimeout applies as well.
	SCTPInitTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxMessageLen == 0 {
		o.MaxMessageLen = wire.DefaultMaxMessageLen
	}
	if o.MaxMessageLen > wire.MaxMessageLen {
		o.MaxMessageLen = wire.MaxMessageLen
	}
	if o.SCTPStreams == 0 {
		o.SCTPStreams = DefaultSCTPStreams
	}
	if o.SCTPInitAttempts == 0 {
		o.SCTPInitAttempts = DefaultSCTPInitAttempts
	}
	if o.SCTPInitTimeout <= 0 {
		o.SCTPInitTimeout = DefaultSCTPInitTimeout
	}
	if o.SCTPInitTimeout > 65535*time.Millisecond {
		o.SCTPInitTimeout = 65535 * time.Millisecond
	}
	return o
}
