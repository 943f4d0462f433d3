package radpeer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/internal/bus"
	"github.com/aaatp/aaatp/internal/outbox"
	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	lradius "layeh.com/radius"
)

// Handler answers one request a server received: Access-Request,
// Accounting-Request, CoA-Request or Disconnect-Request (Status-Server is
// answered by the Server itself). req is the verified packet, decoded with
// the connection's secret, and raw its bytes, which the Handler must not
// change: the response is signed from them. It returns the response code
// and attributes; the Server adds the Identifier, Proxy-State,
// Message-Authenticator and Response Authenticator. A zero code sends no
// answer. Handlers run on their own goroutine; ctx ends when the
// connection closes.
type Handler func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes)

// Defaults of a RADIUS server's limits.
const (
	// DefaultMaxInFlight bounds the handlers running at once for each
	// kind of request (authentication, accounting), across the server.
	DefaultMaxInFlight = serve.DefaultLaneMax
	// DefaultMaxQueued bounds the requests of each kind waiting for a
	// handler; beyond it a request is dropped and counted.
	DefaultMaxQueued = serve.DefaultLaneQueue
	// DefaultMaxConnections bounds a stream listener's connections
	// open at once.
	DefaultMaxConnections = serve.DefaultMaxConns
	// DefaultMaxConnectionsPerAddr bounds those from one address.
	DefaultMaxConnectionsPerAddr = serve.DefaultMaxConnsPerAddr
	// DefaultMaxUnanswered bounds, per connection, the requests read and
	// not answered on the wire: one Identifier space.
	DefaultMaxUnanswered = 256
	// DefaultOpeningTimeout bounds how long a new connection may take
	// (TLS handshake included) to send its first request that passes
	// verification. A RADIUS client may open its connection before it has
	// a request to send, and a watchdog's first Status-Server comes after
	// Tw (30 s +- 2 s by default): the bound leaves room for that.
	DefaultOpeningTimeout = time.Minute
	// DefaultIdleTimeout closes a connection with no request for this
	// long: four times a client watchdog's 30 s, whose Status-Server
	// keeps a live connection busy.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultSecretGrace is how long a stream connection whose client's
	// secret SetClients changed keeps its old secret: room for the
	// requests in flight and their retries (a NAS gives up on one within
	// some seconds, and rarely waits 30), so that a NAS mid-rotation
	// loses nothing, yet a secret changed because it leaked stops
	// working within a minute.
	DefaultSecretGrace = time.Minute
	// revokeDrainBound bounds how long a connection revoked by
	// SetClients, no longer read, waits for the answers it owes before
	// it is closed anyway.
	revokeDrainBound = 10 * time.Second
)

// Client is a RADIUS client a server knows by the address its requests
// come from (see ServerConfig.Clients).
type Client struct {
	// Name labels the client's counters (NASStats.Name); "": by address
	// alone.
	Name string
	// Secret is the client's shared secret over UDP and radius+tcp; radsec
	// listeners use RadSecSecret. A client of no secret there is refused
	// as an unknown one.
	Secret []byte
}

// ServerConfig configures a Server or a UDPServer.
type ServerConfig struct {
	// Secret is the shared secret for radius+tcp listeners; radsec
	// listeners use RadSecSecret. Not needed when Clients is set.
	Secret []byte
	// Clients, when set, tells the clients the server answers by their
	// source address, and each one's secret: a source it does not know
	// (ok false) is refused, its datagram dropped or its connection
	// closed as soon as it is accepted, each counted (UnknownClient) and
	// logged; a client's requests are verified and answered with its own
	// Secret, and its counters carry its Name. A stream connection keeps
	// the client it was accepted as until it closes. Nil: every source
	// is a client, of Secret. It is called for every datagram and
	// connection, and must be safe for concurrent use. SetClients
	// changes Secret and Clients while the server runs.
	Clients func(addr netip.Addr) (c Client, ok bool)
	// Handler answers requests. Nil answers Access-Request with
	// Access-Accept and Accounting-Request with Accounting-Response.
	Handler Handler
	// AccountingPort says that a UDPServer's socket is an accounting
	// port (RFC 2866: 1813, or 1646 of old): the server answers
	// Status-Server there with Accounting-Response, as RFC 5997 asks,
	// where an authentication port answers Access-Accept. Either port
	// takes every kind of request. A stream listener (RFC 6613, one
	// port for both) answers Access-Accept, and NewServer refuses it.
	AccountingPort bool
	// RequireMessageAuthenticator says which Access-Requests must carry a
	// Message-Authenticator (BlastRADIUS): the zero value, RequireMAAuto,
	// those of a client that has sent one before; RequireMAAlways every
	// one; RequireMANever none. LimitProxyState (zero value:
	// LimitProxyStateAlways) also refuses those with Proxy-State and no
	// Message-Authenticator. Status-Server always needs one, and so does
	// an Access-Request with EAP-Message (RFC 3579 3.2). A request
	// refused is dropped, counted (Dropped, MAPolicyStats) and never
	// answered. Over radsec:// neither RequireMessageAuthenticator nor
	// LimitProxyState refuses anything: TLS protects the packet, and a
	// Message-Authenticator there is keyed with the public secret
	// "radsec". See MessageAuthenticatorMode.
	RequireMessageAuthenticator MessageAuthenticatorMode
	LimitProxyState             ProxyStateLimit
	// MaxInFlight bounds the handlers running at once for each kind of
	// request, across the server: Accounting-Requests have a budget of
	// their own, Access-Requests (and CoA and Disconnect requests)
	// another, so that a slow accounting store never delays
	// authentication. Default DefaultMaxInFlight.
	MaxInFlight int
	// MaxQueued bounds the requests of each kind waiting for a handler
	// while MaxInFlight run. The connections (over UDP, the clients'
	// addresses) take turns for the next free handler; when MaxQueued
	// wait, a request pushes out the newest waiting one of the connection
	// with the most waiting, or is itself dropped if its own connection
	// has about as many. A dropped request is counted and logged (a
	// client retransmits or fails over). Access-Requests that prove no
	// secret (no Message-Authenticator; anyone can send them, over UDP
	// from any address), on a stream connection that has not proved it
	// before, wait apart, at most half of MaxQueued, run after
	// the signed ones waiting, and are the first pushed out: they never
	// refuse or push out a signed request. Default DefaultMaxQueued;
	// negative: none wait.
	MaxQueued int
	// MaxUnanswered bounds, per stream connection, the requests read and
	// not yet answered on the wire (in a handler, waiting for one, or
	// answers queued behind a client that does not read them). At the
	// bound the connection is not read until answers drain, so that TCP
	// flow control pushes back on the client. Default
	// DefaultMaxUnanswered.
	MaxUnanswered int
	// MaxOpening and MaxOpeningPerAddr bound a stream listener's
	// connections that have not sent a request signed with the shared
	// secret yet (an Accounting-Request, or any request with a
	// Message-Authenticator: an Access-Request without one is answered
	// but proves nothing, and its connection, kept while it sends, stays
	// counted here; over radsec:// the handshake's certificate is the
	// proof and any request passing verification admits), in all and
	// from one address (an IPv6 /64 counts as one): those need no
	// secret, so over either bound a new connection closes the oldest
	// such connection holding a place it needs (of its own address over
	// MaxOpeningPerAddr, else of the address with the most) and is
	// admitted: a client without the secret cannot keep a NAS from
	// connecting. Zero means serve.DefaultMaxOpening (256) and
	// serve.DefaultMaxOpeningPerAddr (64); negative means no limit.
	MaxOpening, MaxOpeningPerAddr int
	// MaxConnections bounds a stream listener's connections open at
	// once, admitted or not: over it a new connection makes room by
	// closing the oldest one not admitted yet, as over MaxOpening, or is
	// closed at once when admitted ones hold every place, counted and
	// logged. Zero means DefaultMaxConnections; negative
	// means no limit (an IPv6 /64 counts as one source address for the
	// per-address bounds). MaxConnectionsPerAddr bounds those from one source
	// address, so that one host cannot take every place: zero means
	// DefaultMaxConnectionsPerAddr, negative no limit.
	MaxConnections, MaxConnectionsPerAddr int
	// OpeningTimeout closes a stream connection that has not sent a
	// request passing verification within it (signed or not; see
	// MaxOpening for which admit it). Default
	// DefaultOpeningTimeout.
	OpeningTimeout time.Duration
	// SecretGrace is how long a stream connection whose client's secret
	// SetClients changed keeps working on the old one; then it is read no
	// more and closed once it owes no answer (within 10 s). A connection
	// whose client SetClients removed is closed at once. Default
	// DefaultSecretGrace; negative: no grace.
	SecretGrace time.Duration
	// IdleTimeout closes a stream connection that sent no whole request
	// for that long while owed no answer, and so also one that sends a
	// request too slowly. Default DefaultIdleTimeout; negative: never.
	IdleTimeout time.Duration
	// DupTTL is how long a UDPServer remembers a request, so that a
	// retransmission gets its answer again (default DefaultDupTTL).
	DupTTL time.Duration
	// DupEntries and DupBytes bound a UDPServer's duplicate cache: at
	// most DupEntries requests, and DupBytes bytes counting each cached
	// answer and about 320 bytes per request. Past either bound the
	// oldest are forgotten first (defaults DefaultDupEntries,
	// DefaultDupBytes). Requests not signed with the secret
	// (Access-Requests without Message-Authenticator, which anyone can
	// send) hold at most half of each, so that they cannot push out the
	// answers of clients that sign.
	DupEntries int
	DupBytes   int64
	// Events receives connection and error events. Default: a new Bus.
	Events *peer.Bus
	// Logger, default slog.Default().
	Logger *slog.Logger
}

// check reports what NewServer and NewUDPServer refuse in cfg.
func (cfg ServerConfig) check() error {
	switch {
	case cfg.RequireMessageAuthenticator > RequireMANever:
		return fmt.Errorf("radpeer: %w: RequireMessageAuthenticator %s", ErrConfig, cfg.RequireMessageAuthenticator)
	case cfg.LimitProxyState > LimitProxyStateNever:
		return fmt.Errorf("radpeer: %w: LimitProxyState %s", ErrConfig, cfg.LimitProxyState)
	case cfg.DupTTL < 0 || cfg.DupEntries < 0 || cfg.DupBytes < 0:
		return fmt.Errorf("radpeer: %w: negative duplicate cache bound (TTL %v, %d entries, %d bytes)", ErrConfig, cfg.DupTTL, cfg.DupEntries, cfg.DupBytes)
	}
	return nil
}

func (cfg ServerConfig) withDefaults() ServerConfig {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxQueued == 0 {
		cfg.MaxQueued = DefaultMaxQueued
	}
	if cfg.MaxUnanswered <= 0 {
		cfg.MaxUnanswered = DefaultMaxUnanswered
	}
	if cfg.OpeningTimeout <= 0 {
		cfg.OpeningTimeout = DefaultOpeningTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.SecretGrace == 0 {
		cfg.SecretGrace = DefaultSecretGrace
	}
	if cfg.DupTTL <= 0 {
		cfg.DupTTL = DefaultDupTTL
	}
	if cfg.DupEntries <= 0 {
		cfg.DupEntries = DefaultDupEntries
	}
	if cfg.DupBytes <= 0 {
		cfg.DupBytes = DefaultDupBytes
	}
	if cfg.Handler == nil {
		cfg.Handler = AcceptAll
	}
	if cfg.Events == nil {
		cfg.Events = peer.NewBus()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// ServerStats are a Server's counters.
type ServerStats struct {
	Connections  uint64 `json:"connections"` // accepted
	Open         int    `json:"open"`
	Opening      int    `json:"opening"`   // open, no verified request yet
	Refused      uint64 `json:"refused"`   // closed at once: over a MaxConnections or MaxOpening bound
	Evicted      uint64 `json:"evicted"`   // not admitted yet, closed to make room for a new one over those bounds
	TimedOut     uint64 `json:"timed_out"` // closed: OpeningTimeout or IdleTimeout passed
	Received     uint64 `json:"received"`  // verified requests, Status-Server included
	StatusServer uint64 `json:"status_server"`
	Answered     uint64 `json:"answered"`
	BadFrames    uint64 `json:"bad_frames"` // connections closed on a framing error
	BadAuth      uint64 `json:"bad_auth"`   // connections closed on a failed authenticator
	// BadAuthBySource counts those by client address (at most 256
	// addresses; the rest under "other"): a shared secret mismatch names
	// its NAS.
	BadAuthBySource map[string]uint64 `json:"bad_auth_by_source,omitempty"`
	// NAS are the counters by client address (at most 256 addresses).
	NAS []NASStats `json:"nas,omitempty"`
	// UnknownClient counts the connections closed at once because their
	// source is none of ServerConfig.Clients.
	UnknownClient uint64 `json:"unknown_client"`
	Dropped       uint64 `json:"dropped"`        // packets dropped: not a request (logged), refused by the Message-Authenticator policy, no answer
	HandlerPanics uint64 `json:"handler_panics"` // of the dropped, requests whose Handler panicked (logged with its stack)
	Overload      uint64 `json:"overload"`       // requests dropped: their kind's handlers and queue were full
	Paused        uint64 `json:"paused"`         // times a connection's reading paused at MaxUnanswered
}

// Server answers RADIUS requests on the connections of one listener. Its
// methods are safe for concurrent use.
type Server struct {
	ln     transport.Listener
	cfg    ServerConfig
	keys   atomic.Pointer[clientKeys] // the secrets, swapped by SetClients
	scheme string
	radsec bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // connections' readers, handlers, and the shutting of drained connections (shut)
	open   serve.Admission
	// maPolicy is the Message-Authenticator state (blast.go).
	maPolicy maPolicy

	// auth and acct run the Handler: accounting on a budget of its own,
	// the connections taking turns.
	auth, acct *serve.Lane[*serverConn, job]

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	stopping bool          // Shutdown: accept nothing more
	emptied  chan struct{} // Shutdown's wait: closed when conns empties

	connections, received, status, answered, badFrames, badAuth, dropped, overload, timedOut, paused, unknownClient, panics atomic.Uint64
	nas                                                                                                                     nasTable
}

// job is one verified request waiting for its handler.
type job struct {
	c *serverConn
	b []byte
}

// NewServer returns a Server for ln, a listener from Listen; scheme is
// the URL scheme ln was opened with (SchemeTCP or SchemeRadSec), which
// selects the secret.
func NewServer(ln transport.Listener, scheme string, cfg ServerConfig) (*Server, error) {
	keys, err := newClientKeys(scheme, cfg.Secret, cfg.Clients)
	if err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.AccountingPort {
		return nil, fmt.Errorf("radpeer: %w: AccountingPort is a UDP socket's: a %s listener takes both kinds of request on one port", ErrConfig, scheme)
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{ln: ln, cfg: cfg, scheme: scheme, radsec: scheme == SchemeRadSec, ctx: ctx, cancel: cancel, conns: make(map[*serverConn]struct{})}
	s.keys.Store(keys)
	s.nas.names = func(a netip.Addr) string { return s.keys.Load().name(a) }
	s.open = serve.Admission{Max: cfg.MaxOpening, PerAddr: cfg.MaxOpeningPerAddr, MaxConns: cfg.MaxConnections,
		MaxConnsPerAddr: cfg.MaxConnectionsPerAddr, What: "a first valid request"}
	s.auth = serve.NewLane[*serverConn](s.handle, s.refuse, cfg.MaxInFlight, cfg.MaxQueued, &s.wg)
	s.acct = serve.NewLane[*serverConn](s.handle, s.refuse, cfg.MaxInFlight, cfg.MaxQueued, &s.wg)
	return s, nil
}

// AcceptAll is the default Handler: Access-Accept for every
// Access-Request, Accounting-Response for every Accounting-Request,
// CoA-NAK and Disconnect-NAK for the others.
func AcceptAll(_ context.Context, req *lradius.Packet, _ []byte) (lradius.Code, lradius.Attributes) {
	switch req.Code {
	case lradius.CodeAccessRequest:
		return lradius.CodeAccessAccept, nil
	case lradius.CodeAccountingRequest:
		return lradius.CodeAccountingResponse, nil
	case lradius.CodeCoARequest:
		return lradius.CodeCoANAK, nil
	case lradius.CodeDisconnectRequest:
		return lradius.CodeDisconnectNAK, nil
	}
	return 0, nil
}

// Addr returns the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts connections until Close; it returns nil after Close. A
// failed accept (out of descriptors) is logged and retried after a
// back-off: the listener never stops while the Server is open.
func (s *Server) Serve() error {
	closed := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.ctx.Err() != nil || s.stopping
	}
	return serve.Accept(clientsOnly{s.ln, s}, &s.open, s.cfg.Logger, closed, transport.Conn.RemoteAddr,
		func(tc transport.Conn) { tc.Close() }, s.start)
}

// clientsOnly is a Server's listener, that closes the connections of
// no configured client as they come: before the opening limits count
// them, so that one never takes the place of a client's.
type clientsOnly struct {
	transport.Listener
	s *Server
}

func (l clientsOnly) Accept() (transport.Conn, error) {
	for {
		tc, err := l.Listener.Accept()
		if err != nil || l.s.known(tc) {
			return tc, err
		}
	}
}

// known reports whether tc comes from a configured client; it closes,
// counts and logs it when not.
func (s *Server) known(tc transport.Conn) bool {
	addr, _ := serve.AddrOf(tc.RemoteAddr())
	if _, ok := s.keys.Load().lookup(addr); ok {
		return true
	}
	s.unknownClient.Add(1)
	serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindUnknownClient, "RADIUS connection closed at once: its source is no configured client",
		"remote", tc.RemoteAddr().String(), "source", addr.String())
	tc.Close()
	return false
}

// start runs a connection's reader; t is its place in s.open.
func (s *Server) start(tc transport.Conn, t *serve.Ticket) {
	addr, _ := serve.AddrOf(tc.RemoteAddr())
	keys := s.keys.Load()
	secret, ok := keys.lookup(addr)
	if !ok { // SetClients removed it since it was accepted
		t.Ended()
		tc.Close()
		return
	}
	s.connections.Add(1)
	c := &serverConn{s: s, tc: tc, addr: addr, secret: secret, ticket: t, opened: time.Now()}
	c.ctx, c.cancel = context.WithCancel(withSender(s.ctx, Sender{Addr: addr}))
	c.out.Init(tc, &serve.Backlog{Limit: s.cfg.MaxUnanswered}, func(error) {
		tc.Close()
		c.cancel()
	})
	c.rd, _ = tc.(transport.ReadDeadliner)
	c.out.Idle = c.armDeadlineLocked
	s.mu.Lock()
	if s.ctx.Err() != nil || s.stopping {
		s.mu.Unlock()
		t.Ended()
		tc.Close()
		return
	}
	if k := s.keys.Load(); k != keys {
		// SetClients ran since the lookup, and walked the connections
		// without this one: it takes the new secrets.
		if c.secret, ok = k.lookup(addr); !ok {
			s.mu.Unlock()
			s.unknownClient.Add(1)
			t.Ended()
			tc.Close()
			return
		}
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.publish(tc.RemoteAddr().String(), peer.Event{Kind: peer.EventConnUp, Network: tc.Network(), Addr: tc.RemoteAddr().String(), Reason: "accepted over " + tc.Network()})
	go c.serve()
}

// SetClients changes the secrets s verifies requests with, as its
// ServerConfig's Secret and Clients would (with clients nil, every
// source is a client of secret; radsec listeners use RadSecSecret). A
// connection accepted from now on is verified with them. One accepted
// before:
//   - whose client is gone is closed at once (a removed or compromised
//     NAS stops being served);
//   - whose client's secret changed keeps the old one for
//     ServerConfig.SecretGrace, so that a NAS mid-rotation loses nothing
//     (one that moved to the new secret on it fails verification there,
//     is closed and reconnects); then it is read no more and closed once
//     it owes no answer, so that a leaked secret stops working;
//   - whose secret is unchanged goes on (a grace begun before ends if
//     its secret is back).
//
// Connections closed or given a grace are logged. The counters by client
// address take the new names. What is refused changes nothing. Safe for
// concurrent use.
func (s *Server) SetClients(secret []byte, clients func(netip.Addr) (Client, bool)) error {
	k, err := newClientKeys(s.scheme, secret, clients)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.keys.Store(k) // under mu: start sees it, or is among the conns walked
	removed, grace := 0, 0
	for c := range s.conns {
		sec, ok := k.lookup(c.addr)
		switch {
		case !ok:
			removed++
			c.revoke()
		case !bytes.Equal(sec, c.secret):
			grace++
			if c.grace == nil {
				c.grace = time.AfterFunc(max(s.cfg.SecretGrace, 0), c.endGrace)
			}
		case c.grace != nil:
			c.grace.Stop()
			c.grace = nil
		}
	}
	s.mu.Unlock()
	s.nas.rename()
	if removed+grace > 0 {
		s.cfg.Logger.Info("RADIUS clients changed: connections of removed clients closed, those on a changed secret kept for its grace",
			"addr", s.ln.Addr().String(), "closed", removed, "in_grace", grace, "grace", max(s.cfg.SecretGrace, 0))
	}
	return nil
}

// clientKeys are the secrets a server verifies requests with: one for
// every source (secret), or each source's client's (clients). Read-only
// once made.
type clientKeys struct {
	secret  []byte                          // with clients nil; RadSecSecret over radsec
	clients func(netip.Addr) (Client, bool) // nil: every source is a client of secret
	radsec  bool
}

// newClientKeys checks secret and clients, as a server of scheme uses
// them.
func newClientKeys(scheme string, secret []byte, clients func(netip.Addr) (Client, bool)) (*clientKeys, error) {
	k := &clientKeys{secret: secret, clients: clients, radsec: scheme == SchemeRadSec}
	switch {
	case clients != nil:
		k.secret = nil
	case k.radsec:
		k.secret = RadSecSecret
	case len(secret) == 0:
		return nil, fmt.Errorf("radpeer: %w: a %s server needs a shared secret (Secret) or Clients", ErrConfig, scheme)
	}
	return k, nil
}

// lookup returns the secret of the client at addr; false when none is
// known there.
func (k *clientKeys) lookup(addr netip.Addr) ([]byte, bool) {
	if k.clients == nil {
		return k.secret, true
	}
	cl, ok := k.clients(addr)
	switch {
	case !ok:
		return nil, false
	case k.radsec:
		return RadSecSecret, true
	}
	return cl.Secret, len(cl.Secret) > 0
}

// name returns the name of the client at addr, "" without clients.
func (k *clientKeys) name(addr netip.Addr) string {
	if k.clients == nil {
		return ""
	}
	cl, _ := k.clients(addr)
	return cl.Name
}

// Close stops accepting, closes every connection and waits for their
// handlers, or for ctx. Called with the context a subscriber got with one
// of this Server's events (on the goroutine of a connection it would wait
// for), it does all but the waiting and returns.
func (s *Server) Close(ctx context.Context) error {
	s.cancel()
	err := s.ln.Close()
	s.mu.Lock()
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// After the lock, and all at once: a TLS close writes a close_notify,
	// which a client that does not read makes wait (transport bounds it).
	var closing sync.WaitGroup
	for _, c := range conns {
		closing.Go(func() { c.tc.Close() })
	}
	closing.Wait()
	s.auth.Close() // parked workers end now, not after a linger
	s.acct.Close()
	if bus.PublishedBy(ctx, s) {
		if errors.Is(err, net.ErrClosed) { // closed before: as awaitClosed says
			return nil
		}
		return err
	}
	return awaitClosed(ctx, &s.wg, err)
}

// Shutdown stops accepting and reading requests, closes each connection
// as soon as it owes no answer (an idle one at once), and returns when
// every one is closed, then closes s as Close does: a drain ends as soon
// as nothing is in flight. RADIUS has no goodbye to send: a client sees
// its connection close and sends what it had not had read to another
// server, as it does for requests still unanswered when ctx ends, when
// the connections left are closed. If ctx ends first, Shutdown returns
// ctx's error once Close is done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	var wait chan struct{}
	if len(s.conns) > 0 {
		if s.emptied == nil {
			s.emptied = make(chan struct{})
		}
		wait = s.emptied
	}
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.ln.Close()
	for _, c := range conns {
		c.drain("closed: the server is shutting down")
	}
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
		}
	}
	if err := s.Close(ctx); err != nil || ctx.Err() == nil {
		return err
	}
	return ctx.Err()
}

// Stats returns the counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	open := len(s.conns)
	s.mu.Unlock()
	return ServerStats{
		Connections: s.connections.Load(), Open: open, Opening: s.open.Opening(), Refused: s.open.Refused(), Evicted: s.open.Evicted(),
		TimedOut: s.timedOut.Load(), Received: s.received.Load(), StatusServer: s.status.Load(),
		Answered: s.answered.Load(), BadFrames: s.badFrames.Load(), BadAuth: s.badAuth.Load(), Dropped: s.dropped.Load(), HandlerPanics: s.panics.Load(),
		Overload: s.overload.Load(), Paused: s.paused.Load(), BadAuthBySource: s.nas.badAuthBySource(), NAS: s.nas.snapshot(),
		UnknownClient: s.unknownClient.Load(),
	}
}

// publish delivers e to the subscribers on the calling goroutine (a
// connection's), with a context that marks a Close called from them.
func (s *Server) publish(from string, e peer.Event) {
	e.Time, e.Peer = time.Now(), from
	s.cfg.Events.Publish(bus.WithPublisher(s.ctx, s), e)
}

type serverConn struct {
	s      *Server
	tc     transport.Conn
	addr   netip.Addr              // the client's IP address
	secret []byte                  // the client's shared secret, chosen at accept
	rd     transport.ReadDeadliner // nil if tc has no deadlines
	out    outbox.Outbox
	ctx    context.Context // carries the Sender; ends when the connection does
	cancel context.CancelFunc
	opened time.Time
	ticket *serve.Ticket // its place among the listener's connections

	deadline time.Time // the read deadline set, zero for none; guarded by out.Mu

	// grace ends the connection's old secret (SetClients), and cut
	// closes it if its drain then takes too long; guarded by s.mu.
	grace, cut *time.Timer

	// draining: no request read from now on is handled, and the
	// connection closes once it owes no answer (drained, idle closed
	// then); why is the reason its event gives. Guarded by out.Mu.
	draining, drained bool
	idle              chan struct{}
	why               string

	// ended: the reader closed the connection and is done, or about to
	// be (its count in s.wg is let go). Set under out.Mu.
	ended bool

	// admitted: a request signed with the shared secret passed
	// verification; live: a request passed verification, signed or not.
	// Set by the reader under out.Mu; read by the reader, and by the
	// writer under out.Mu.
	admitted, live bool
}

func (c *serverConn) serve() {
	s := c.s
	defer s.wg.Done()
	name := c.tc.RemoteAddr().String()
	note := ""
	// rearm: the last packet was a request (or there was none yet), so the
	// read deadline moves on; a packet that is not a request is dropped
	// and leaves it as it was: it is no whole request for IdleTimeout.
	rearm := true
	for note == "" {
		c.out.WaitRoom(c.ctx.Done(), c.paused)
		if rearm {
			c.setDeadline()
		}
		b, err := c.tc.ReadMessage()
		if why, idle := c.drainState(); idle != nil {
			// Shutdown, or its client revoked: what was read now is not
			// handled (the client sends it elsewhere once the connection
			// closes); the answers owed are written first. What the
			// client sends meanwhile is read and dropped, until its
			// close or the linger after ours (shut): closed with data
			// unread, a socket is reset, and an answer not sent yet lost.
			for err == nil {
				_, err = c.tc.ReadMessage()
			}
			select {
			case <-idle:
			case <-c.ctx.Done():
			}
			note = why
			break
		}
		rearm = err != nil || radius.IsRequest(radius.Code(b))
		switch {
		case errors.Is(err, radius.ErrBadFrame):
			s.badFrames.Add(1)
			note = "bad frame: " + err.Error()
			serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindBadFrame, "closing RADIUS connection on a bad frame", "remote", name, "err", err)
		case errors.Is(err, os.ErrDeadlineExceeded):
			s.timedOut.Add(1)
			note = "timed out: no request signed with the shared secret within the opening timeout"
			if c.live {
				note = "timed out: no request within the idle timeout"
			}
			serve.Log(s.cfg.Logger, slog.LevelInfo, serve.KindTimeout, "closing RADIUS connection: "+note[len("timed out: "):], "remote", name)
		case errors.Is(err, io.EOF):
			note = "closed by the client"
		case err != nil:
			note = err.Error()
		default:
			note = c.request(b)
		}
	}
	c.tc.Close()
	c.out.Mu.Lock()
	c.ended = true // no shut from now on: see shutLocked
	c.out.Mu.Unlock()
	c.cancel()
	c.ticket.Ended()
	c.out.Close(true)
	s.mu.Lock()
	for _, t := range []*time.Timer{c.grace, c.cut} {
		if t != nil {
			t.Stop()
		}
	}
	c.grace, c.cut = nil, nil
	delete(s.conns, c)
	if len(s.conns) == 0 && s.emptied != nil {
		close(s.emptied)
		s.emptied = nil
	}
	s.mu.Unlock()
	s.publish(name, peer.Event{Kind: peer.EventConnDown, Reason: "connection closed: " + note})
}

func (c *serverConn) paused(unanswered int) {
	c.s.paused.Add(1)
	serve.Log(c.s.cfg.Logger, slog.LevelWarn, serve.KindPaused, "reading paused: the client's requests are not answered yet",
		"remote", c.tc.RemoteAddr().String(), "unanswered", unanswered, "limit", c.s.cfg.MaxUnanswered)
}

// drain stops c taking requests and closes it once it owes no answer:
// now, if it owes none. why is the reason its event gives. Idempotent.
func (c *serverConn) drain(why string) {
	c.out.Mu.Lock()
	defer c.out.Mu.Unlock()
	if c.draining {
		return
	}
	c.draining, c.why, c.idle = true, why, make(chan struct{})
	c.closeIfIdleLocked()
}

// revoke closes c at once: its client was removed.
func (c *serverConn) revoke() {
	c.out.Mu.Lock()
	if !c.draining {
		c.draining, c.why, c.idle = true, "closed: its client was removed", make(chan struct{})
	}
	if !c.drained {
		c.drained = true
		close(c.idle)
	}
	c.out.Mu.Unlock()
	c.tc.Close()
	c.cancel()
}

// endGrace ends the old secret of c: it is drained, and closed anyway
// revokeDrainBound later if it still owes answers then.
func (c *serverConn) endGrace() {
	c.drain("closed: its client's shared secret changed")
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if _, open := c.s.conns[c]; open && c.cut == nil {
		c.cut = time.AfterFunc(revokeDrainBound, func() {
			c.tc.Close()
			c.cancel()
		})
	}
}

// closeIfIdleLocked closes a draining connection that owes no answer.
// c.out.Mu is held.
func (c *serverConn) closeIfIdleLocked() {
	if c.draining && !c.drained && c.out.BP.Unanswered() == 0 {
		c.drained = true
		close(c.idle)
		c.shutLocked()
	}
}

// drainLinger bounds how long a drained connection, its writing side
// shut, is read for the client's own close before it is closed.
const drainLinger = time.Second

// shutLocked ends a drained connection in order (see shut), on a
// goroutine of its own: shutting a writing side is network I/O, which
// never runs under a lock. Over TLS it writes a close_notify alert,
// which waits (up to 5 s) for room in the send buffer of a client that
// does not read; meanwhile c.out.Mu held would stall the drain of the
// other connections by Shutdown, and everything else that takes it.
// c.out.Mu is held.
func (c *serverConn) shutLocked() {
	if c.ended {
		return // closed by its reader already
	}
	// The reader is still counted in s.wg (it sets ended, under
	// c.out.Mu, before it is done), so the count is not zero here.
	c.s.wg.Add(1)
	go c.shut()
}

// shut ends a drained connection in order: its writing side is shut, so
// that the client reads every answer, then the end, and the reader reads
// what the client still sends until the client closes or drainLinger
// passes; a connection that cannot shut its writing side alone is closed
// now.
func (c *serverConn) shut() {
	defer c.s.wg.Done()
	wc, ok := c.tc.(transport.WriteCloser)
	if !ok || c.rd == nil || wc.CloseWrite() != nil {
		c.tc.Close()
		return
	}
	c.out.Mu.Lock()
	defer c.out.Mu.Unlock()
	c.setDeadlineLocked(time.Now().Add(drainLinger))
}

// drainState returns, for a draining connection, the reason and the
// channel closed once it owes nothing; idle nil otherwise.
func (c *serverConn) drainState() (why string, idle chan struct{}) {
	c.out.Mu.Lock()
	defer c.out.Mu.Unlock()
	return c.why, c.idle
}

// setDeadline bounds the next read (see armDeadlineLocked).
func (c *serverConn) setDeadline() {
	if c.rd == nil {
		return
	}
	c.out.Mu.Lock()
	defer c.out.Mu.Unlock()
	c.armDeadlineLocked()
}

// armDeadlineLocked sets the read deadline. Until a request passes
// verification, it is the opening timeout from the connection's start.
// Then (admitted, or live with unsigned requests) it is the idle timeout
// from now, or none while the connection is owed answers: a client
// waiting for a slow handler is not idle, and no answer it waits for is
// lost to the timeout. The outbox calls it too, when the last answer
// owed is written. An idle deadline set less than idleSlack ago is left
// as it is: a busy connection does not pay for a new one at every
// request. A draining connection is closed instead, once it owes
// nothing. c.out.Mu is held.
func (c *serverConn) armDeadlineLocked() {
	if c.draining {
		c.closeIfIdleLocked()
		return
	}
	if c.rd == nil {
		return
	}
	if !c.live {
		c.setDeadlineLocked(c.opened.Add(c.s.cfg.OpeningTimeout))
		return
	}
	if c.s.cfg.IdleTimeout < 0 || c.out.BP.Unanswered() > 0 {
		c.setDeadlineLocked(time.Time{})
		return
	}
	at := time.Now().Add(c.s.cfg.IdleTimeout)
	if !c.deadline.IsZero() && !c.deadline.After(at) && at.Sub(c.deadline) < idleSlack {
		return
	}
	c.setDeadlineLocked(at)
}

// idleSlack is how much sooner than IdleTimeout after its last request
// or answer an idle connection may be closed, in exchange for fewer
// deadline updates.
const idleSlack = time.Second

// setDeadlineLocked sets the read deadline, unless it is set already.
// c.out.Mu is held.
func (c *serverConn) setDeadlineLocked(t time.Time) {
	if t.Equal(c.deadline) {
		return
	}
	c.deadline = t
	c.rd.SetReadDeadline(t)
}

// request handles one packet; a non-empty result closes the connection.
func (c *serverConn) request(b []byte) string {
	s := c.s
	code := radius.Code(b)
	if !radius.IsRequest(code) {
		// An answer or an unknown code sent to a server: a client and a
		// server swapped, or a proxy echoing answers back. Said, as over
		// UDP, at the log's rate.
		s.dropped.Add(1)
		serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindBadRequest, "RADIUS packet dropped: not a request",
			"remote", c.tc.RemoteAddr().String(), "code", code.String())
		return ""
	}
	signed, err := s.maPolicy.verify(&s.cfg, b, c.secret, c.addr, s.radsec)
	switch {
	case errors.Is(err, radius.ErrAuthenticator):
		s.badAuth.Add(1)
		s.nas.badAuth(c.addr)
		serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindBadAuth, "closing RADIUS connection: request failed verification (shared secret mismatch?)",
			"remote", c.tc.RemoteAddr().String(), "err", err)
		return "request failed verification: " + err.Error()
	case err != nil: // refused by the Message-Authenticator policy: never answered
		s.dropped.Add(1)
		// An event at the log's rate: a client that sends thousands of
		// these (it needs no secret to) gets neither a line nor an event
		// each.
		if line := serve.Limited(s.cfg.Logger, slog.LevelWarn, serve.KindBadRequest, "RADIUS request dropped", "remote", c.tc.RemoteAddr().String(), "err", err); line != nil {
			line.Write(s.cfg.Logger)
			s.publish(c.tc.RemoteAddr().String(), peer.Event{Kind: peer.EventError, Reason: "dropped: " + err.Error()})
		}
		return ""
	}
	switch {
	case c.admitted:
	case signed || s.radsec:
		// Only a request signed with the secret admits a connection
		// (over radsec:// the secret is public, and the certificate the
		// handshake checked is the proof): an Access-Request without
		// Message-Authenticator is answered, but anyone can send one,
		// and admitted connections are the places the opening limits
		// keep for clients that hold the secret.
		c.out.Mu.Lock()
		c.admitted, c.live = true, true
		c.out.Mu.Unlock()
		c.ticket.Admitted()
	case !c.live:
		// Live, not admitted: it keeps its place among the opening
		// connections, bounded by MaxOpening, but is read until idle, as
		// a NAS that never signs (RequireMANever, or auto for a client
		// never seen signing) must not be cut while it sends.
		c.out.Mu.Lock()
		c.live = true
		c.out.Mu.Unlock()
	}
	acct := code == lradius.CodeAccountingRequest
	c.out.Held(acct)
	if _, idle := c.drainState(); idle != nil {
		// Draining since it was read: not handled. Held first, so that
		// a drain in between waits for it rather than close under it.
		c.out.Unheld(acct)
		return ""
	}
	s.received.Add(1)
	s.nas.received(c.addr, signed)
	if code == lradius.CodeStatusServer {
		// RFC 5997: answered by the server itself, never a login.
		s.status.Add(1)
		c.answer(b, lradius.CodeAccessAccept, nil)
		return ""
	}
	lane := s.auth
	if acct {
		lane = s.acct
	}
	if signed || s.radsec || c.admitted {
		// A connection that proved the secret once is its client's: a
		// TCP stream is not spoofed.
		lane.Submit(c, job{c, b})
	} else {
		// It proves no secret: it waits apart, and never refuses or
		// pushes out a request signed with the secret.
		lane.SubmitWeak(c, job{c, b})
	}
	return ""
}

// refuse drops a request its lane will not run: the lane was full when
// it came, or another connection's request took its place.
func (s *Server) refuse(j job) {
	code := radius.Code(j.b)
	j.c.out.Unheld(code == lradius.CodeAccountingRequest)
	s.overload.Add(1)
	serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindOverload, "RADIUS request dropped: its handlers and their queue are full",
		"remote", j.c.tc.RemoteAddr().String(), "code", code.String(), "max_in_flight", s.cfg.MaxInFlight, "max_queued", s.cfg.MaxQueued)
}

// handle runs the Handler on one verified request and answers it.
func (s *Server) handle(j job) {
	c := j.c
	acct := radius.Code(j.b) == lradius.CodeAccountingRequest
	if c.ctx.Err() != nil { // its connection is gone
		c.out.Unheld(acct)
		return
	}
	p, err := radius.Decode(j.b, c.secret) // ReadFrame validated it
	if err != nil {
		c.out.Unheld(acct)
		return
	}
	if rc, attrs := runHandler(&s.cfg, &s.panics, c.ctx, p, j.b); rc != 0 {
		c.answer(j.b, rc, attrs)
		return
	}
	c.out.Unheld(acct)
	s.dropped.Add(1)
}

// runHandler runs cfg's Handler. A Handler that panics does not end the
// process: the panic is logged with its stack (rate-limited) and counted
// in panics, and the request is left unanswered, as by a Handler that
// answers nothing: its client retransmits or fails over.
func runHandler(cfg *ServerConfig, panics *atomic.Uint64, ctx context.Context, p *lradius.Packet, raw []byte) (code lradius.Code, attrs lradius.Attributes) {
	defer func() {
		if r := recover(); r != nil {
			panics.Add(1)
			serve.Log(cfg.Logger, slog.LevelError, serve.KindHandlerPanic, "RADIUS handler panicked: request left unanswered",
				"code", p.Code.String(), "id", p.Identifier, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			code, attrs = 0, nil
		}
	}()
	return cfg.Handler(ctx, p, raw)
}

// answer sends the answer to a request counted by held.
func (c *serverConn) answer(req []byte, code lradius.Code, attrs lradius.Attributes) {
	acct := radius.Code(req) == lradius.CodeAccountingRequest
	ans, err := radius.EncodeResponse(req, code, attrs, c.secret)
	if err != nil {
		c.out.Unheld(acct)
		c.s.dropped.Add(1)
		serve.Log(c.s.cfg.Logger, slog.LevelWarn, serve.KindDropped, "cannot encode RADIUS answer; dropped", "remote", c.tc.RemoteAddr().String(), "err", err)
		return
	}
	// Counted before it is queued, so that a client holding the answer
	// sees it counted.
	c.s.answered.Add(1)
	if !c.out.Answer(ans, acct, false, false) {
		c.s.answered.Add(^uint64(0))
		return
	}
	c.s.nas.answered(c.addr, ans)
}

// awaitClosed ends a server's Close: it waits for wg (the server's
// goroutines) or ctx, and reports closeErr, the error of closing its
// socket, unless that is only "already closed".
func awaitClosed(ctx context.Context, wg *sync.WaitGroup, closeErr error) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		if errors.Is(closeErr, net.ErrClosed) {
			return nil
		}
		return closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}
