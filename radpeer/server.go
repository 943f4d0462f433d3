package radpeer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/internal/workpool"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	lradius "layeh.com/radius"
)

// Handler answers one request a server received: Access-Request,
// Accounting-Request, CoA-Request or Disconnect-Request (Status-Server is
// answered by the Server itself). req is the verified packet, decoded with
// the connection's secret, and raw its bytes. It returns the response code
// and attributes; the Server adds the Identifier, Proxy-State,
// Message-Authenticator and Response Authenticator. A zero code sends no
// answer. Handlers run on their own goroutine; ctx ends when the
// connection closes.
type Handler func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes)

// DefaultMaxInFlight bounds the requests of one connection being handled
// at once (one RADIUS Identifier space and the watchdog's): beyond it the
// connection is not read until one finishes.
const DefaultMaxInFlight = 256

// ServerConfig configures a Server.
type ServerConfig struct {
	// Secret is the shared secret for radius+tcp listeners; radsec
	// listeners use RadSecSecret.
	Secret []byte
	// Handler answers requests. Nil answers Access-Request with
	// Access-Accept and Accounting-Request with Accounting-Response.
	Handler Handler
	// RequireMessageAuthenticator says which Access-Requests must carry a
	// Message-Authenticator (BlastRADIUS): the zero value, RequireMAAuto,
	// those of a client that has sent one before; RequireMAAlways every
	// one; RequireMANever none. LimitProxyState (zero value:
	// LimitProxyStateAlways) also refuses those with Proxy-State and no
	// Message-Authenticator. Status-Server always needs one. A request
	// refused is dropped, counted (Dropped, MAPolicyStats) and never
	// answered. See MessageAuthenticatorMode.
	RequireMessageAuthenticator MessageAuthenticatorMode
	LimitProxyState             ProxyStateLimit
	// MaxInFlight bounds requests handled at once per connection
	// (default DefaultMaxInFlight).
	MaxInFlight int
	// Events receives connection and error events. Default: a new Bus.
	Events *peer.Bus
	// Logger, default slog.Default().
	Logger *slog.Logger
}

// ServerStats are a Server's counters.
type ServerStats struct {
	Connections  uint64 `json:"connections"` // accepted
	Open         int    `json:"open"`
	Received     uint64 `json:"received"` // verified requests, Status-Server included
	StatusServer uint64 `json:"status_server"`
	Answered     uint64 `json:"answered"`
	BadFrames    uint64 `json:"bad_frames"` // connections closed on a framing error
	BadAuth      uint64 `json:"bad_auth"`   // connections closed on a failed authenticator
	Dropped      uint64 `json:"dropped"`    // requests dropped: no Message-Authenticator, not a request, no answer
}

// Server answers RADIUS requests on the connections of one listener. Its
// methods are safe for concurrent use.
type Server struct {
	ln     transport.Listener
	cfg    ServerConfig
	secret []byte
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// maPolicy is the Message-Authenticator state (blast.go).
	maPolicy maPolicy

	mu    sync.Mutex
	conns map[*serverConn]struct{}

	connections, received, status, answered, badFrames, badAuth, dropped atomic.Uint64
}

// NewServer returns a Server for ln, a listener from Listen; scheme is
// the URL scheme ln was opened with (SchemeTCP or SchemeRadSec), which
// selects the secret.
func NewServer(ln transport.Listener, scheme string, cfg ServerConfig) (*Server, error) {
	ep := Endpoint{Scheme: scheme}
	secret, err := ep.Secret(cfg.Secret)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
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
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{ln: ln, cfg: cfg, secret: secret, ctx: ctx, cancel: cancel, conns: make(map[*serverConn]struct{})}, nil
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

// Serve accepts connections until Close; it returns nil after Close.
func (s *Server) Serve() error {
	for {
		tc, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		s.connections.Add(1)
		c := &serverConn{s: s, tc: tc, sem: make(chan struct{}, s.cfg.MaxInFlight)}
		c.ctx, c.cancel = context.WithCancel(s.ctx)
		c.handlers = workpool.New(c.handle, &c.hwg)
		c.out = &outbox{tc: tc, onError: func(error) { tc.Close() }}
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			tc.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.publish(tc.RemoteAddr().String(), peer.Event{Kind: peer.EventConnUp, Network: tc.Network(), Addr: tc.RemoteAddr().String(), Reason: "accepted over " + tc.Network()})
		go c.serve()
	}
}

// Close stops accepting, closes every connection and waits for their
// handlers, or for ctx.
func (s *Server) Close(ctx context.Context) error {
	s.cancel()
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.tc.Close()
	}
	s.mu.Unlock()
	return awaitClosed(ctx, &s.wg, err)
}

// Stats returns the counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	open := len(s.conns)
	s.mu.Unlock()
	return ServerStats{
		Connections: s.connections.Load(), Open: open, Received: s.received.Load(), StatusServer: s.status.Load(),
		Answered: s.answered.Load(), BadFrames: s.badFrames.Load(), BadAuth: s.badAuth.Load(), Dropped: s.dropped.Load(),
	}
}

func (s *Server) publish(from string, e peer.Event) {
	e.Time, e.Peer = time.Now(), from
	s.cfg.Events.Publish(e)
}

type serverConn struct {
	s      *Server
	tc     transport.Conn
	out    *outbox
	sem    chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	hwg    sync.WaitGroup

	// handlers runs the Handler on verified requests, on workers that
	// live while there is work (at most MaxInFlight busy, sem's bound).
	handlers *workpool.Pool[[]byte]
}

func (c *serverConn) serve() {
	s := c.s
	defer s.wg.Done()
	name := c.tc.RemoteAddr().String()
	note := ""
	for note == "" {
		b, err := c.tc.ReadMessage()
		switch {
		case errors.Is(err, radius.ErrBadFrame):
			s.badFrames.Add(1)
			note = "bad frame: " + err.Error()
		case errors.Is(err, io.EOF):
			note = "closed by the client"
		case err != nil:
			note = err.Error()
		default:
			note = c.request(b)
		}
	}
	c.tc.Close()
	c.cancel()
	c.handlers.Close() // no request comes after the reader: no worker waits for one
	c.hwg.Wait()
	c.out.close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.publish(name, peer.Event{Kind: peer.EventConnDown, Reason: "connection closed: " + note})
}

// request handles one packet; a non-empty result closes the connection.
func (c *serverConn) request(b []byte) string {
	s := c.s
	code := radius.Code(b)
	if !radius.IsRequest(code) {
		s.dropped.Add(1)
		return ""
	}
	switch err := s.maPolicy.verify(&s.cfg, b, s.secret, c.tc.RemoteAddr()); {
	case errors.Is(err, radius.ErrAuthenticator):
		s.badAuth.Add(1)
		s.cfg.Logger.Warn("closing RADIUS connection", "remote", c.tc.RemoteAddr().String(), "err", err)
		return "request failed verification: " + err.Error()
	case err != nil: // refused by the Message-Authenticator policy: never answered
		s.dropped.Add(1)
		serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindBadRequest, "RADIUS request dropped", "remote", c.tc.RemoteAddr().String(), "err", err)
		s.publish(c.tc.RemoteAddr().String(), peer.Event{Kind: peer.EventError, Reason: "dropped: " + err.Error()})
		return ""
	}
	s.received.Add(1)
	if code == lradius.CodeStatusServer {
		// RFC 5997: answered by the server itself, never a login.
		s.status.Add(1)
		c.answer(b, lradius.CodeAccessAccept, nil)
		return ""
	}
	select {
	case c.sem <- struct{}{}: // released when the request is handled
	case <-c.ctx.Done():
		return "closed"
	}
	c.handlers.Submit(b)
	return ""
}

// handle answers one verified request and frees its place.
func (c *serverConn) handle(b []byte) {
	defer func() { <-c.sem }()
	s := c.s
	if p, err := radius.Decode(b, s.secret); err == nil { // ReadFrame validated it
		if rc, attrs := s.cfg.Handler(c.ctx, p, b); rc != 0 {
			c.answer(b, rc, attrs)
		} else {
			s.dropped.Add(1)
		}
	}
}

func (c *serverConn) answer(req []byte, code lradius.Code, attrs lradius.Attributes) {
	ans, err := radius.EncodeResponse(req, code, attrs, c.s.secret)
	if err != nil {
		c.s.dropped.Add(1)
		c.s.cfg.Logger.Warn("cannot encode RADIUS answer", "err", err)
		return
	}
	// Counted before it is queued, so that a client holding the answer
	// sees it counted.
	c.s.answered.Add(1)
	if !c.out.send(ans) {
		c.s.answered.Add(^uint64(0))
	}
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
