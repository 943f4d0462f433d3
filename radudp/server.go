package radudp

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	lradius "layeh.com/radius"
)

// Server defaults.
const (
	// DefaultCacheTTL is how long a request stays in the duplicate cache
	// (RFC 5080 2.2.2 suggests a few times the clients' retransmission
	// span; 30 s covers 3 tries of 3 s with room).
	DefaultCacheTTL = 30 * time.Second
	// DefaultCacheEntries bounds the duplicate cache of one socket.
	DefaultCacheEntries = 65536
	// DefaultServerInFlight bounds the requests handled at once.
	DefaultServerInFlight = 1024
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Secret is the shared secret of the clients. Required.
	Secret []byte
	// Handler answers Access-, Accounting-, CoA- and Disconnect-Requests
	// (Status-Server is answered by the Server). Nil: radpeer.AcceptAll.
	Handler radpeer.Handler
	// Store, when set, applies each accounting record once across
	// retransmissions under new Identifiers and across the servers sharing
	// it (dedup.RADIUSAccountingKey): a record already handled gets the
	// stored answer without running the Handler.
	Store dedup.Store
	// RequireMessageAuthenticator drops Access-Requests without one.
	RequireMessageAuthenticator bool
	// CacheTTL is how long a request stays in the duplicate cache (default
	// DefaultCacheTTL); CacheEntries bounds it (default
	// DefaultCacheEntries), the oldest entry leaving first.
	CacheTTL     time.Duration
	CacheEntries int
	// MaxInFlight bounds the requests handled at once (default
	// DefaultServerInFlight); beyond it the socket is not read until one
	// finishes.
	MaxInFlight int
	// Events receives error events. Default: a new Bus.
	Events *peer.Bus
	// Logger, default slog.Default().
	Logger *slog.Logger
}

// ServerStats are a Server's counters.
type ServerStats struct {
	Received     uint64 `json:"received"` // verified requests, Status-Server included
	StatusServer uint64 `json:"status_server"`
	Applied      uint64 `json:"applied"` // Handler runs
	Answered     uint64 `json:"answered"`
	// CachedAnswers: duplicates answered from the cache without processing.
	CachedAnswers uint64 `json:"cached_answers"`
	// InProgressDrops: duplicates of a request still being handled, dropped.
	InProgressDrops uint64 `json:"in_progress_drops"`
	// StoreDuplicates: accounting records found in the shared store (handled
	// before under another Identifier or by another server), answered from it.
	StoreDuplicates uint64 `json:"store_duplicates"`
	BadRequests     uint64 `json:"bad_requests"` // malformed or failed verification
	Dropped         uint64 `json:"dropped"`      // no answer produced, or it could not be encoded
	CacheEntries    int    `json:"cache_entries"`
	CacheEvicted    uint64 `json:"cache_evicted"` // entries pushed out by the bound before their TTL
}

// Server answers RADIUS over UDP on one socket, with the duplicate cache of
// RFC 5080 2.2.2: a request is identified by its source address and port,
// its Identifier and the receiving socket, and compared by its Request
// Authenticator. A copy of a request still being handled is dropped; a copy
// of one answered less than CacheTTL ago gets the same answer again without
// being handled. The same Identifier with another authenticator is a new
// request.
//
// Its methods are safe for concurrent use.
type Server struct {
	pc     net.PacketConn
	cfg    ServerConfig
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	cache map[cacheKey]*list.Element
	order *list.List // of *cacheEntry, oldest first

	received, status, applied, answered, cached, inProgress, storeDups, bad, dropped, evicted atomic.Uint64
}

type cacheKey struct {
	src string // address and port
	id  byte
}

type cacheEntry struct {
	key  cacheKey
	auth [radius.AuthenticatorLen]byte
	at   time.Time
	resp []byte // nil while in progress
}

// NewServer returns a Server reading pc (a UDP socket from
// net.ListenPacket, or any datagram PacketConn).
func NewServer(pc net.PacketConn, cfg ServerConfig) (*Server, error) {
	if len(cfg.Secret) == 0 {
		return nil, fmt.Errorf("%w: no shared secret", ErrConfig)
	}
	if cfg.CacheTTL < 0 || cfg.CacheEntries < 0 || cfg.MaxInFlight < 0 {
		return nil, fmt.Errorf("%w: negative cache or in-flight bound", ErrConfig)
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.CacheEntries == 0 {
		cfg.CacheEntries = DefaultCacheEntries
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultServerInFlight
	}
	if cfg.Handler == nil {
		cfg.Handler = radpeer.AcceptAll
	}
	if cfg.Events == nil {
		cfg.Events = peer.NewBus()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{pc: pc, cfg: cfg, ctx: ctx, cancel: cancel, sem: make(chan struct{}, cfg.MaxInFlight),
		cache: make(map[cacheKey]*list.Element), order: list.New()}, nil
}

// Listen opens a UDP socket for a radius:// URL (port 0: any free port).
func Listen(rawURL string) (net.PacketConn, error) {
	addr, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return net.ListenPacket("udp", addr)
}

// Addr returns the socket's address.
func (s *Server) Addr() net.Addr { return s.pc.LocalAddr() }

// Serve reads requests until Close; it returns nil after Close.
func (s *Server) Serve() error {
	buf := make([]byte, radius.MaxLength+1)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		s.packet(append([]byte(nil), buf[:n]...), from)
	}
}

// Close stops reading and waits for the handlers, or for ctx.
func (s *Server) Close(ctx context.Context) error {
	s.cancel()
	err := s.pc.Close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns the counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	n := len(s.cache)
	s.mu.Unlock()
	return ServerStats{
		Received: s.received.Load(), StatusServer: s.status.Load(), Applied: s.applied.Load(),
		Answered: s.answered.Load(), CachedAnswers: s.cached.Load(), InProgressDrops: s.inProgress.Load(),
		StoreDuplicates: s.storeDups.Load(), BadRequests: s.bad.Load(), Dropped: s.dropped.Load(),
		CacheEntries: n, CacheEvicted: s.evicted.Load(),
	}
}

func (s *Server) publish(from, reason string) {
	s.cfg.Events.Publish(peer.Event{Time: time.Now(), Peer: from, Type: peer.EventError, Reason: reason})
}

// packet handles one datagram.
func (s *Server) packet(b []byte, from net.Addr) {
	if radius.Validate(b) != nil || !radius.IsRequest(radius.Code(b)) {
		s.bad.Add(1)
		return
	}
	if err := radius.VerifyRequest(b, s.cfg.Secret, s.cfg.RequireMessageAuthenticator); err != nil {
		// Over UDP a bad packet is dropped (RFC 2865 3); nothing to close.
		s.bad.Add(1)
		s.publish(from.String(), "dropped: "+err.Error())
		return
	}
	s.received.Add(1)
	if radius.Code(b) == lradius.CodeStatusServer {
		// RFC 5997: answered by the server itself, never a login, and not
		// cached (each one is a fresh probe).
		s.status.Add(1)
		s.answer(b, from, lradius.CodeAccessAccept, nil, nil)
		return
	}
	key := cacheKey{src: from.String(), id: radius.Identifier(b)}
	auth := radius.Authenticator(b)
	now := time.Now()
	s.mu.Lock()
	s.expire(now)
	if el, ok := s.cache[key]; ok {
		e := el.Value.(*cacheEntry)
		if e.auth == auth {
			resp := e.resp
			s.mu.Unlock()
			if resp == nil {
				s.inProgress.Add(1)
				return
			}
			s.cached.Add(1)
			s.send(resp, from)
			return
		}
		// The client reused the Identifier: a new request.
		s.order.Remove(el)
		delete(s.cache, key)
	}
	if len(s.cache) >= s.cfg.CacheEntries {
		old := s.order.Front()
		delete(s.cache, old.Value.(*cacheEntry).key)
		s.order.Remove(old)
		s.evicted.Add(1)
	}
	e := &cacheEntry{key: key, auth: auth, at: now}
	s.cache[key] = s.order.PushBack(e)
	s.mu.Unlock()

	select {
	case s.sem <- struct{}{}:
	case <-s.ctx.Done():
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.sem }()
		s.handle(b, from, e)
	}()
}

// expire drops the entries older than CacheTTL. s.mu is held.
func (s *Server) expire(now time.Time) {
	for el := s.order.Front(); el != nil; el = s.order.Front() {
		e := el.Value.(*cacheEntry)
		if now.Sub(e.at) < s.cfg.CacheTTL {
			return
		}
		s.order.Remove(el)
		delete(s.cache, e.key)
	}
}

// handle runs the Handler once for a new request, through the shared
// store for accounting records, and answers.
func (s *Server) handle(b []byte, from net.Addr, e *cacheEntry) {
	var o *dedup.Outcome
	if k, ok := dedup.RADIUSAccountingKey(b); ok && s.cfg.Store != nil {
		var err error
		if o, err = s.cfg.Store.Begin(s.ctx, k); err != nil {
			s.forget(e)
			s.dropped.Add(1)
			s.publish(from.String(), "duplicate store: "+err.Error())
			return
		}
		defer o.Abandon()
		if o.Duplicate() {
			s.storeDups.Add(1)
			code, attrs, err := storedAnswer(o.Answer(), s.cfg.Secret)
			if err != nil {
				s.forget(e)
				s.dropped.Add(1)
				s.publish(from.String(), "stored answer unreadable: "+err.Error())
				return
			}
			s.answer(b, from, code, attrs, e)
			return
		}
	}
	p, err := radius.Decode(b, s.cfg.Secret)
	if err != nil {
		s.forget(e)
		s.bad.Add(1)
		return
	}
	s.applied.Add(1)
	code, attrs := s.cfg.Handler(s.ctx, p, b)
	if code == 0 {
		s.forget(e)
		s.dropped.Add(1)
		return
	}
	resp := s.answer(b, from, code, attrs, e)
	if o != nil && resp != nil {
		if err := o.Complete(resp); err != nil {
			s.cfg.Logger.Warn("RADIUS accounting answer not stored", "err", err)
		}
	}
}

// storedAnswer reads the code and attributes of a stored answer, without
// those EncodeResponse adds for each request.
func storedAnswer(b, secret []byte) (lradius.Code, lradius.Attributes, error) {
	if err := radius.Validate(b); err != nil {
		return 0, nil, err
	}
	attrs, err := lradius.ParseAttributes(b[radius.HeaderLen:])
	if err != nil {
		return 0, nil, err
	}
	out := attrs[:0]
	for _, a := range attrs {
		if a.Type != radius.AttrProxyState && a.Type != radius.AttrMessageAuthenticator {
			out = append(out, a)
		}
	}
	return radius.Code(b), out, nil
}

// forget removes an in-progress entry that got no answer, so that the
// client's next copy is handled.
func (s *Server) forget(e *cacheEntry) {
	if e == nil {
		return
	}
	s.mu.Lock()
	if el, ok := s.cache[e.key]; ok && el.Value.(*cacheEntry) == e {
		s.order.Remove(el)
		delete(s.cache, e.key)
	}
	s.mu.Unlock()
}

// answer encodes, caches (when e is not nil) and sends a response to req.
func (s *Server) answer(req []byte, from net.Addr, code lradius.Code, attrs lradius.Attributes, e *cacheEntry) []byte {
	resp, err := radius.EncodeResponse(req, code, attrs, s.cfg.Secret)
	if err != nil {
		s.forget(e)
		s.dropped.Add(1)
		s.cfg.Logger.Warn("cannot encode RADIUS answer", "err", err)
		return nil
	}
	if e != nil {
		s.mu.Lock()
		e.resp = resp
		s.mu.Unlock()
	}
	s.send(resp, from)
	return resp
}

func (s *Server) send(resp []byte, to net.Addr) {
	if _, err := s.pc.WriteTo(resp, to); err != nil {
		s.dropped.Add(1)
		return
	}
	s.answered.Add(1)
}
