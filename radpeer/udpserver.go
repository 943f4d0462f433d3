package radpeer

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// Defaults of the duplicate cache of RFC 5080 section 2.2.2.
const (
	DefaultDupTTL     = 30 * time.Second
	DefaultDupEntries = 1 << 16
)

// UDPServer answers RADIUS requests on one UDP socket, with the
// duplicate cache of RFC 5080 2.2.2: a request with the source address
// and port, Identifier and Request Authenticator of one seen in the last
// DupTTL is a retransmission; while the first is being handled it is
// dropped, once answered it gets the same answer again, without running
// the handler. Its methods are safe for concurrent use.
type UDPServer struct {
	pc     net.PacketConn
	cfg    ServerConfig
	ttl    time.Duration
	max    int
	now    func() time.Time
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sem    chan struct{}

	mu    sync.Mutex
	cache map[dupKey]*dupEntry
	order []dupKey // insertion order, for expiry and the bound

	received, answered, resent, inProgress, badAuth, dropped atomic.Uint64
}

type dupKey struct {
	src  string
	id   byte
	auth [radius.AuthenticatorLen]byte
}

type dupEntry struct {
	at   time.Time
	resp []byte // nil while in progress
}

// UDPServerStats are a UDPServer's counters.
type UDPServerStats struct {
	Received   uint64 `json:"received"`    // verified requests handled (duplicates not included)
	Answered   uint64 `json:"answered"`    // answers sent, cached copies included
	Resent     uint64 `json:"resent"`      // duplicates answered from the cache
	InProgress uint64 `json:"in_progress"` // duplicates dropped while the first was handled
	BadAuth    uint64 `json:"bad_auth"`    // dropped: failed verification
	Dropped    uint64 `json:"dropped"`     // dropped: malformed, not a request, no Message-Authenticator, no answer
	Cached     int    `json:"cached"`
}

// NewUDPServer returns a server for pc (a socket from net.ListenPacket).
// cfg is as for Server (Secret required); MaxInFlight bounds the requests
// handled at once (beyond it the socket is not read).
func NewUDPServer(pc net.PacketConn, cfg ServerConfig) (*UDPServer, error) {
	if _, err := (Endpoint{Scheme: SchemeTCP}).Secret(cfg.Secret); err != nil {
		return nil, err
	}
	if cfg.Handler == nil {
		cfg.Handler = AcceptAll
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &UDPServer{
		pc: pc, cfg: cfg, ttl: DefaultDupTTL, max: DefaultDupEntries, now: time.Now,
		ctx: ctx, cancel: cancel, sem: make(chan struct{}, cfg.MaxInFlight),
		cache: make(map[dupKey]*dupEntry),
	}, nil
}

// Addr returns the socket's address.
func (s *UDPServer) Addr() net.Addr { return s.pc.LocalAddr() }

// Serve reads requests until Close; it returns nil after Close.
func (s *UDPServer) Serve() error {
	buf := make([]byte, radius.MaxLength+1)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		b := append([]byte(nil), buf[:n]...)
		s.packet(b, from)
	}
}

func (s *UDPServer) packet(b []byte, from net.Addr) {
	if radius.Validate(b) != nil || !radius.IsRequest(radius.Code(b)) {
		s.dropped.Add(1)
		return
	}
	switch err := radius.VerifyRequest(b, s.cfg.Secret, s.cfg.RequireMessageAuthenticator); {
	case errors.Is(err, radius.ErrAuthenticator):
		s.badAuth.Add(1)
		return
	case err != nil:
		s.dropped.Add(1)
		return
	}
	key := dupKey{src: from.String(), id: radius.Identifier(b), auth: radius.Authenticator(b)}
	s.mu.Lock()
	s.expire()
	if e, ok := s.cache[key]; ok {
		resp := e.resp
		s.mu.Unlock()
		if resp == nil {
			s.inProgress.Add(1)
			return
		}
		s.resent.Add(1)
		s.send(resp, from)
		return
	}
	s.cache[key] = &dupEntry{at: s.now()}
	s.order = append(s.order, key)
	s.mu.Unlock()
	s.received.Add(1)
	if radius.Code(b) == lradius.CodeStatusServer {
		s.finish(key, b, from, lradius.CodeAccessAccept, nil) // RFC 5997: never a login
		return
	}
	select {
	case s.sem <- struct{}{}:
	case <-s.ctx.Done():
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.sem }()
		p, err := radius.Decode(b, s.cfg.Secret)
		if err != nil {
			return
		}
		code, attrs := s.cfg.Handler(s.ctx, p, b)
		s.finish(key, b, from, code, attrs)
	}()
}

// finish answers a request and caches the answer for its duplicates; no
// answer forgets the entry, so a retransmission is handled afresh.
func (s *UDPServer) finish(key dupKey, req []byte, to net.Addr, code lradius.Code, attrs lradius.Attributes) {
	var resp []byte
	if code != 0 {
		resp, _ = radius.EncodeResponse(req, code, attrs, s.cfg.Secret)
	}
	s.mu.Lock()
	if e, ok := s.cache[key]; ok {
		if resp == nil {
			delete(s.cache, key)
		} else {
			e.resp = resp
		}
	}
	s.mu.Unlock()
	if resp == nil {
		s.dropped.Add(1)
		return
	}
	s.send(resp, to)
}

func (s *UDPServer) send(resp []byte, to net.Addr) {
	s.answered.Add(1) // before the write: a client holding the answer sees it counted
	if _, err := s.pc.WriteTo(resp, to); err != nil {
		s.answered.Add(^uint64(0))
	}
}

// expire drops entries older than the TTL, and the oldest beyond the
// bound. s.mu held.
func (s *UDPServer) expire() {
	now := s.now()
	i := 0
	for ; i < len(s.order); i++ {
		k := s.order[i]
		e, ok := s.cache[k]
		if ok && now.Sub(e.at) < s.ttl && len(s.order)-i <= s.max {
			break
		}
		if ok && (now.Sub(e.at) >= s.ttl || len(s.order)-i > s.max) {
			delete(s.cache, k)
		}
	}
	if i > 0 {
		s.order = append(s.order[:0], s.order[i:]...)
	}
}

// Stats returns the counters.
func (s *UDPServer) Stats() UDPServerStats {
	s.mu.Lock()
	n := len(s.cache)
	s.mu.Unlock()
	return UDPServerStats{
		Received: s.received.Load(), Answered: s.answered.Load(), Resent: s.resent.Load(), InProgress: s.inProgress.Load(),
		BadAuth: s.badAuth.Load(), Dropped: s.dropped.Load(), Cached: n,
	}
}

// Close closes the socket and waits for the handlers, or ctx.
func (s *UDPServer) Close(ctx context.Context) error {
	s.cancel()
	err := s.pc.Close()
	return awaitClosed(ctx, &s.wg, err)
}
