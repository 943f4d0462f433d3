package radpeer

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// Defaults of ServerConfig.DupTTL, DupEntries and DupBytes: the duplicate cache of RFC 5080 section 2.2.2.
const (
	DefaultDupTTL     = 30 * time.Second
	DefaultDupEntries = 1 << 16
	// DefaultDupBytes bounds the cache by size as well: answers copy the
	// requests' Proxy-State, so 65,536 answers of 4 KB would hold 256 MB.
	DefaultDupBytes = 32 << 20
)

// UDPServer answers RADIUS requests on one UDP socket, with the
// duplicate cache of RFC 5080 2.2.2: a request with the source address
// and port, Identifier and Request Authenticator of one seen in the last
// DupTTL is a retransmission; while the first is being handled it is
// dropped, once answered it gets the same answer again, without running
// the handler.
//
// Accounting-Requests and the other requests have handler budgets of
// their own (MaxInFlight running, MaxQueued waiting, each), so that
// handlers stuck on a slow store (accounting waiting for Redis) never
// delay a login. The socket is read by one goroutine that never waits for
// a handler: a request finding its budget full is dropped, counted and
// logged, and handled afresh when its client retransmits. Its methods are
// safe for concurrent use.
type UDPServer struct {
	pc     net.PacketConn
	cfg    ServerConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the reader and the handlers

	// auth runs the handlers of Access-Requests, CoA and Disconnect
	// requests; acct those of Accounting-Requests.
	// Each client's address takes its turn.
	auth, acct *serve.Lane[netip.Addr, udpRequest]

	mu       sync.Mutex
	closed   bool
	stopping atomic.Bool // Shutdown: the reader ends at its next error
	now      func() time.Time
	dup      *dupCache
	// maPolicy is the Message-Authenticator state (blast.go).
	maPolicy maPolicy
	keys     atomic.Pointer[clientKeys] // the secrets, swapped by SetClients

	received, answered, resent, inProgress, badFrames, badAuth, overload, unencodable, dropped, unknownClient atomic.Uint64
	nas                                                                                                       nasTable
}

// udpRequest is a verified request waiting for, or in, its handler.
type udpRequest struct {
	dup    *dupEntry // its entry in the duplicate cache
	b      []byte
	secret []byte // its client's
	from   net.Addr
	client netip.Addr // from's IP address
}

// UDPServerStats are a UDPServer's counters.
type UDPServerStats struct {
	Received   uint64 `json:"received"`    // verified requests, duplicates not included
	Answered   uint64 `json:"answered"`    // answers sent, cached copies included
	Resent     uint64 `json:"resent"`      // duplicates answered from the cache
	InProgress uint64 `json:"in_progress"` // duplicates dropped while the first was handled
	BadFrames  uint64 `json:"bad_frames"`  // dropped: malformed (shorter than its Length, bad attributes)
	BadAuth    uint64 `json:"bad_auth"`    // dropped: failed verification (a wrong shared secret, or forged)
	// BadAuthBySource counts those by client address (at most 256
	// addresses; the rest under "other").
	BadAuthBySource map[string]uint64 `json:"bad_auth_by_source,omitempty"`
	// NAS are the counters by client address (at most 256 addresses).
	NAS []NASStats `json:"nas,omitempty"`
	// UnknownClient counts the datagrams dropped because their source is
	// none of ServerConfig.Clients.
	UnknownClient uint64 `json:"unknown_client"`
	Overload      uint64 `json:"overload"`     // of the received, dropped: their kind's handlers and queue were full
	Unencodable   uint64 `json:"unencodable"`  // of the received, not answered: the answer could not be encoded (over 4096 bytes)
	Dropped       uint64 `json:"dropped"`      // dropped: not a request, refused by the Message-Authenticator policy, no answer from the handler
	Cached        int    `json:"cached"`       // requests in the duplicate cache
	CachedBytes   int64  `json:"cached_bytes"` // its size, as its byte bound counts it
}

// NewUDPServer returns a server for pc (a socket from net.ListenPacket).
// cfg is as for Server (Secret or Clients required; MaxInFlight and MaxQueued bound
// each kind of request, accounting and the others; DupTTL, DupEntries
// and DupBytes bound the duplicate cache).
func NewUDPServer(pc net.PacketConn, cfg ServerConfig) (*UDPServer, error) {
	keys, err := newClientKeys(SchemeUDP, cfg.Secret, cfg.Clients)
	if err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &UDPServer{
		pc: pc, cfg: cfg, now: time.Now, ctx: ctx, cancel: cancel,
		dup: newDupCache(cfg.DupTTL, cfg.DupEntries, cfg.DupBytes),
	}
	s.keys.Store(keys)
	s.nas.names = func(a netip.Addr) string { return s.keys.Load().name(a) }
	s.auth = serve.NewLane[netip.Addr](s.handle, s.refuse, cfg.MaxInFlight, cfg.MaxQueued, &s.wg)
	s.acct = serve.NewLane[netip.Addr](s.handle, s.refuse, cfg.MaxInFlight, cfg.MaxQueued, &s.wg)
	return s, nil
}

// Addr returns the socket's address.
func (s *UDPServer) Addr() net.Addr { return s.pc.LocalAddr() }

// Serve reads requests until Close; it returns nil after Close. A failed
// read is logged and retried after a back-off: the socket is read while
// the UDPServer is open.
func (s *UDPServer) Serve() error {
	s.mu.Lock()
	if s.closed || s.stopping.Load() {
		s.mu.Unlock()
		return nil
	}
	// Counted so that Close waits for the reader, and so that the
	// handlers it starts are never added to the WaitGroup at zero while
	// Close waits on it.
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	buf := make([]byte, radius.MaxLength+1)
	var backoff serve.Backoff
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			if s.ctx.Err() != nil || s.stopping.Load() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// A failed read (no memory for a buffer, an error queued on
			// the socket) must not end the service.
			backoff.Wait(s.cfg.Logger, serve.KindReadFailed, "RADIUS/UDP read failed; retrying", "addr", s.pc.LocalAddr().String(), "err", err)
			continue
		}
		backoff.Reset()
		b := append([]byte(nil), buf[:n]...)
		s.packet(b, from)
	}
}

// packet handles one datagram, on the reader: it never waits for a
// handler.
func (s *UDPServer) packet(b []byte, from net.Addr) {
	// A source of no client is refused before its datagram is looked at.
	client, _ := serve.AddrOf(from)
	secret, ok := s.keys.Load().lookup(client)
	if !ok {
		s.unknownClient.Add(1)
		serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindUnknownClient, "RADIUS datagram dropped: its source is no configured client",
			"remote", from.String(), "source", client.String())
		return
	}
	b = unpad(b)
	if err := radius.Validate(b); err != nil {
		s.badFrames.Add(1)
		serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindBadFrame, "RADIUS datagram dropped: malformed", "remote", from.String(), "err", err)
		return
	}
	code := radius.Code(b)
	if !radius.IsRequest(code) {
		s.dropped.Add(1)
		serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindBadRequest, "RADIUS datagram dropped: not a request", "remote", from.String(), "code", code.String())
		return
	}
	// A byte-for-byte retransmission of a request verified before is
	// answered from the cache before verification: the secret may have
	// changed since (SetClients), and its answer was signed with the one
	// it was verified with.
	key, sum := dupKeyOf(from, b), s.dup.sum(b)
	s.mu.Lock()
	resp, hit := s.dup.identical(key, sum, s.now())
	s.mu.Unlock()
	if hit {
		s.duplicate(resp, from)
		return
	}
	signed, ok := s.verify(b, secret, from, client)
	if !ok {
		return
	}
	s.mu.Lock()
	e, resp, seen := s.dup.seen(key, s.now(), signed)
	if !seen {
		e.sum = sum
	}
	s.mu.Unlock()
	if seen {
		s.duplicate(resp, from)
		return
	}
	s.received.Add(1)
	s.nas.received(client, signed)
	if code == lradius.CodeStatusServer {
		s.finish(e, b, secret, from, lradius.CodeAccessAccept, nil) // RFC 5997: never a login
		return
	}
	lane := s.auth
	if code == lradius.CodeAccountingRequest {
		lane = s.acct
	}
	lane.Submit(client, udpRequest{dup: e, b: b, secret: secret, from: from, client: client})
}

// duplicate answers a retransmission from the cache: resp, or nothing
// while its first copy is being handled (resp nil).
func (s *UDPServer) duplicate(resp []byte, to net.Addr) {
	if resp == nil {
		s.inProgress.Add(1)
		return
	}
	s.resent.Add(1)
	s.send(resp, to)
}

// refuse drops a request its lane will not run: the lane was full when
// it came, or another client's request took its place.
func (s *UDPServer) refuse(r udpRequest) {
	s.forget(r.dup) // so that its retransmission is handled afresh
	s.overload.Add(1)
	serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindOverload, "RADIUS request dropped: its handlers and their queue are full; the client will retransmit",
		"remote", r.from.String(), "code", radius.Code(r.b).String(), "max_in_flight", s.cfg.MaxInFlight, "max_queued", s.cfg.MaxQueued)
}

// verify checks request b with the shared secret and the
// Message-Authenticator policy; it counts, and logs, a request that fails
// (ok false). signed: see maPolicy.verify.
func (s *UDPServer) verify(b, secret []byte, from net.Addr, client netip.Addr) (signed, ok bool) {
	signed, err := s.maPolicy.verify(&s.cfg, b, secret, client, false)
	switch {
	case errors.Is(err, radius.ErrAuthenticator):
		s.badAuth.Add(1)
		s.nas.badAuth(client)
		serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindBadAuth, "RADIUS request dropped: authenticator check failed",
			"remote", from.String(), "hint", "shared secret mismatch?", "err", err)
		return false, false
	case err != nil: // refused by the Message-Authenticator policy: never answered
		s.dropped.Add(1)
		serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindBadRequest, "RADIUS request dropped", "remote", from.String(), "err", err)
		return false, false
	}
	return signed, true
}

// unpad returns the packet datagram b holds: RFC 2865 section 3 has the
// octets past the Length field be padding, to be ignored. A datagram
// shorter than its Length is returned whole, for Validate to refuse.
func unpad(b []byte) []byte {
	if len(b) < radius.HeaderLen {
		return b
	}
	if n := int(binary.BigEndian.Uint16(b[2:4])); n >= radius.HeaderLen && n < len(b) {
		return b[:n]
	}
	return b
}

// handle runs the Handler on a request, in its lane.
func (s *UDPServer) handle(r udpRequest) {
	if s.ctx.Err() != nil { // closing: what still waits is not handled
		s.forget(r.dup)
		return
	}
	p, err := radius.Decode(r.b, r.secret)
	if err != nil { // packet validated it: cannot happen
		s.forget(r.dup)
		return
	}
	code, attrs := s.cfg.Handler(withSender(s.ctx, Sender{Addr: r.client}), p, r.b)
	s.finish(r.dup, r.b, r.secret, r.from, code, attrs)
}

// finish answers a request and caches the answer for its duplicates; no
// answer forgets the entry, so a retransmission is handled afresh.
func (s *UDPServer) finish(e *dupEntry, req, secret []byte, to net.Addr, code lradius.Code, attrs lradius.Attributes) {
	if code == 0 {
		s.forget(e)
		s.dropped.Add(1)
		return
	}
	resp, err := radius.EncodeResponse(req, code, attrs, secret)
	if err != nil {
		s.forget(e)
		s.unencodable.Add(1)
		serve.Log(s.cfg.Logger, slog.LevelWarn, serve.KindDropped, "RADIUS answer not sent: cannot encode it",
			"remote", to.String(), "code", code.String(), "err", err)
		return
	}
	s.mu.Lock()
	s.dup.answer(e, resp)
	s.mu.Unlock()
	s.send(resp, to)
}

func (s *UDPServer) forget(e *dupEntry) {
	s.mu.Lock()
	s.dup.forget(e)
	s.mu.Unlock()
}

func (s *UDPServer) send(resp []byte, to net.Addr) {
	s.answered.Add(1) // before the write: a client holding the answer sees it counted
	if _, err := s.pc.WriteTo(resp, to); err != nil {
		s.answered.Add(^uint64(0))
		return
	}
	if a, ok := serve.AddrOf(to); ok {
		s.nas.answered(a, resp)
	}
}

// Stats returns the counters.
func (s *UDPServer) Stats() UDPServerStats {
	s.mu.Lock()
	n, size := s.dup.len(), s.dup.size
	s.mu.Unlock()
	return UDPServerStats{
		Received: s.received.Load(), Answered: s.answered.Load(), Resent: s.resent.Load(), InProgress: s.inProgress.Load(),
		BadFrames: s.badFrames.Load(), BadAuth: s.badAuth.Load(), Overload: s.overload.Load(),
		Unencodable: s.unencodable.Load(), Dropped: s.dropped.Load(), Cached: n, CachedBytes: size,
		BadAuthBySource: s.nas.badAuthBySource(), NAS: s.nas.snapshot(), UnknownClient: s.unknownClient.Load(),
	}
}

// SetClients changes the secrets s verifies requests with, as its
// ServerConfig's Secret and Clients would (with clients nil, every
// source is a client of secret). Every datagram read from now on is
// verified with them; a request read before is answered with the secret
// it was verified with, and so is its byte-for-byte retransmission while
// its answer is in the duplicate cache (a client whose answer was lost
// still gets it). The counters by client address take the new names.
// What is refused changes nothing. Safe for concurrent use.
func (s *UDPServer) SetClients(secret []byte, clients func(netip.Addr) (Client, bool)) error {
	k, err := newClientKeys(SchemeUDP, secret, clients)
	if err != nil {
		return err
	}
	s.keys.Store(k)
	s.nas.rename()
	return nil
}

// Shutdown stops reading the socket (a read deadline ends the read in
// progress), waits for the requests already read to be handled and
// answered, those waiting for a handler included, then closes the
// socket; if ctx ends first, the handlers still running are cancelled
// and ctx's error returned. A server whose socket another takes over (a
// new secret, a new table of clients) ends so without losing a request
// it had read.
func (s *UDPServer) Shutdown(ctx context.Context) error {
	// Under mu, as Serve's check: a Serve that comes after it returns at
	// once rather than add to the WaitGroup Shutdown waits on.
	s.mu.Lock()
	s.stopping.Store(true)
	s.mu.Unlock()
	_ = s.pc.SetReadDeadline(time.Now())
	s.auth.Close() // queued requests still run; parked workers end now
	s.acct.Close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return s.Close(ctx)
	}
	return s.Close(ctx)
}

// Close closes the socket and waits for the reader and the handlers, or
// ctx. Requests still waiting for a handler are dropped.
func (s *UDPServer) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	err := s.pc.Close()
	s.auth.Close() // parked workers end now, not after a linger
	s.acct.Close()
	return awaitClosed(ctx, &s.wg, err)
}
