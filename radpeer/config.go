package radpeer

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
)

// Defaults of Config.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultMaxConns       = 1
	DefaultMaxWaiting     = 4096
	// MaxConnsLimit bounds Config.MaxConns.
	MaxConnsLimit = 64
	// IDsPerConn is how many requests one connection carries at once:
	// Identifiers 1 to 255, 0 being the watchdog's Status-Server.
	IDsPerConn = 255
)

// Config configures a client Peer. The zero value, with a Secret for
// radius+tcp (or TLS certificates for radsec), is ready to use.
type Config struct {
	// Secret is the shared secret of radius+tcp; radsec always uses
	// RadSecSecret (RFC 6614 2.3). Read it with ReadSecret.
	Secret []byte

	// Watchdog configures the RFC 3539 machine run on every connection,
	// with Status-Server as its watchdog message (RFC 6613 2.4).
	Watchdog watchdog.Config
	// Transport configures dialing (Nagle, deadlines, TLS for radsec).
	Transport transport.Options
	// Dialer replaces Dial (tests dial over net.Pipe). It must return a
	// Conn with RADIUS framing.
	Dialer func(ctx context.Context, url string) (transport.Conn, error)

	// MaxConns is how many connections to the server may be open at once
	// (default 1, at most 64). Further connections are opened only when
	// every Identifier of the open ones is in use.
	MaxConns int
	// MaxWaiting bounds the requests waiting for a free Identifier
	// (default 4096); beyond it a request fails with ErrBusy (a
	// client.Client then tries another server, and with none ends the
	// request with that error).
	MaxWaiting int
	// RequestTimeout bounds Exchange when its context has no deadline
	// (default 10 s).
	RequestTimeout time.Duration
	// RequireMessageAuthenticator says which answers must carry a
	// Message-Authenticator (BlastRADIUS). The zero value, RequireMAAuto,
	// requires one in every answer to an Access-Request; answers to the
	// watchdog's Status-Server are verified when they carry one but need
	// not (FreeRADIUS before 3.2.5 sends none). RequireMAAlways requires
	// one there too; RequireMANever nowhere, for servers that sign no
	// answer. An answer to an Access-Request without a required one is
	// dropped, counted (Stats.NoMA) and logged, and its call fails with
	// an error matching radius.ErrNoMessageAuthenticator; a Status-Server
	// answer without one is dropped and counted, so the watchdog sees no
	// answer. See MessageAuthenticatorMode.
	RequireMessageAuthenticator MessageAuthenticatorMode

	// Failover receives the calls of a connection that leaves service
	// (OKAY -> SUSPECT, OKAY -> DOWN, a connection lost), and those
	// waiting for an Identifier when no connection is left in service,
	// in send order. It runs after the Peer's lock is released. They stay
	// matched on their old connection, so a late answer there still
	// completes them once. Nil: they wait where they are (and fail when
	// their connection closes or their deadline passes). Package client
	// sets it for the servers it dials.
	Failover call.Failover
	// Replied, when set, is told of every verified answer to a request
	// sent here, before it completes the request: also of a late one, to
	// a request already complete (its caller gave up, another server
	// answered first). Each shows the server alive. It runs after the
	// Peer's lock is released, on the reader's goroutine. When package
	// client keeps server states (its Policy) it sets its own, which calls
	// the one its template has after it: any answer keeps a server in
	// service. Close waits for the readers: called from Replied, it
	// returns only when its ctx ends.
	Replied func(from call.Carrier)

	// Events receives every event (watchdog transitions, connections,
	// errors), typed as package peer's. Default: a new Bus.
	Events *peer.Bus
	// Logger gets one line per state change, and warnings about answers
	// dropped (no Message-Authenticator, matching no request, failing
	// verification) and connections that look like a shared secret
	// mismatch (see Stats.SecretMismatch) at a bounded rate. Lines are
	// written on the goroutine that delivers the events, in order with
	// them: a slow Logger delays the events, never the connection.
	// Default slog.Default().
	Logger *slog.Logger
}

func (c Config) validate() (Config, error) {
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxConns < 1 || c.MaxConns > MaxConnsLimit {
		return c, fmt.Errorf("radpeer: %w: MaxConns %d outside 1..%d", ErrConfig, c.MaxConns, MaxConnsLimit)
	}
	if c.MaxWaiting == 0 {
		c.MaxWaiting = DefaultMaxWaiting
	}
	if c.MaxWaiting < 0 {
		return c, fmt.Errorf("radpeer: %w: MaxWaiting %d is negative", ErrConfig, c.MaxWaiting)
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if _, err := watchdog.New(c.Watchdog); err != nil {
		return c, fmt.Errorf("radpeer: %w: %w", ErrConfig, err)
	}
	if c.RequireMessageAuthenticator > RequireMANever {
		return c, fmt.Errorf("radpeer: %w: RequireMessageAuthenticator %s", ErrConfig, c.RequireMessageAuthenticator)
	}
	if c.Events == nil {
		c.Events = peer.NewBus()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}
