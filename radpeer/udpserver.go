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
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
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
//
// On a socket bound to a wildcard address (0.0.0.0, [::]) each answer
// goes from the address its request was sent to (read with IP_PKTINFO or
// IPV6_PKTINFO), as FreeRADIUS does: on a host with several addresses (a
// VIP, a secondary address) a NAS that sent to one of them gets its
// answer from it, not from whichever the kernel's route back prefers,
// which it would drop. A socket bound to one address needs nothing.
type UDPServer struct {
	pc net.PacketConn
	// uc is pc when it reads each datagram's destination address (a
	// *net.UDPConn bound to a wildcard address), else nil; v6 tells an
	// IPv6 socket (dual-stack) from an IPv4 one.
	uc     *net.UDPConn
	v6     bool
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

	received, answered, resent, inProgress, badFrames, badAuth, overload, unencodable, dropped, unknownClient, panics atomic.Uint64
	nas                                                                                                               nasTable
}

// udpRequest is a verified request waiting for, or in, its handler.
type udpRequest struct {
	dup    *dupEntry // its entry in the duplicate cache
	b      []byte
	secret []byte // its client's
	from   net.Addr
	local  udpLocal   // where it was sent to, where its answer goes from
	client netip.Addr // from's IP address
}

// udpLocal is the server's end of a datagram on a wildcard socket: the
// address it was sent to, and the interface it came in on. The zero
// value (a socket bound to one address) leaves the answer's source to
// the kernel.
type udpLocal struct {
	addr    netip.Addr
	ifIndex int
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
	Overload      uint64 `json:"overload"`       // of the received, dropped: their kind's handlers and queue were full
	Unencodable   uint64 `json:"unencodable"`    // of the received, not answered: the answer could not be encoded (over 4096 bytes)
	Dropped       uint64 `json:"dropped"`        // dropped: not a request, refused by the Message-Authenticator policy, no answer from the handler
	HandlerPanics uint64 `json:"handler_panics"` // of the dropped, requests whose Handler panicked (logged with its stack)
	Cached        int    `json:"cached"`         // requests in the duplicate cache
	CachedBytes   int64  `json:"cached_bytes"`   // its size, as its byte bound counts it
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
	if s.uc, s.v6, err = pktinfoConn(pc); err != nil {
		s.uc = nil
		cfg.Logger.Warn("RADIUS/UDP: cannot read the destination address of datagrams on a wildcard socket; answers go from the address the kernel picks, which a NAS that sent to another address of this host drops",
			"addr", pc.LocalAddr().String(), "err", err)
	}
	s.auth = serve.NewLane[netip.Addr](s.handle, s.refuse, cfg.MaxInFlight, cfg.MaxQueued, &s.wg)
	s.acct = serve.NewLane[netip.Addr](s.handle, s.refuse, cfg.MaxInFlight, cfg.MaxQueued, &s.wg)
	return s, nil
}

// pktinfoConn returns pc as a *net.UDPConn that reads each datagram's
// destination address and interface, when pc is a UDP socket bound to a
// wildcard address; nil for any other (bound to one address: its answers
// go from it already). v6: an IPv6 socket, which on a dual-stack one
// reports an IPv4 datagram's destination as an IPv4-mapped address.
func pktinfoConn(pc net.PacketConn) (uc *net.UDPConn, v6 bool, err error) {
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		return nil, false, nil
	}
	la, ok := uc.LocalAddr().(*net.UDPAddr)
	if !ok || !la.IP.IsUnspecified() {
		return nil, false, nil
	}
	if la.IP.To4() != nil {
		return uc, false, ipv4.NewPacketConn(uc).SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true)
	}
	return uc, true, ipv6.NewPacketConn(uc).SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true)
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
	var rd udpReader
	for {
		var (
			n     int
			from  net.Addr
			local udpLocal
			err   error
		)
		if s.uc != nil {
			n, from, local, err = rd.read(s.uc, s.v6, buf)
		} else {
			n, from, err = s.pc.ReadFrom(buf)
		}
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
		s.packet(b, from, local)
	}
}

// udpReader reads datagrams with their destination address, reusing its
// buffers: the reader's own.
type udpReader struct {
	oob [128]byte
	cm4 ipv4.ControlMessage
	cm6 ipv6.ControlMessage
}

// read reads one datagram from uc (v6: an IPv6 socket) into buf.
func (r *udpReader) read(uc *net.UDPConn, v6 bool, buf []byte) (n int, from net.Addr, local udpLocal, err error) {
	n, oobn, _, ap, err := uc.ReadMsgUDPAddrPort(buf, r.oob[:])
	if err != nil {
		return 0, nil, udpLocal{}, err
	}
	from = net.UDPAddrFromAddrPort(ap)
	var dst net.IP
	// Dst is kept at its full length, so that Parse writes into it rather
	// than allocate one, and zeroed, so that a datagram without the
	// control message reads as unspecified.
	if v6 {
		if len(r.cm6.Dst) != net.IPv6len {
			r.cm6.Dst = make(net.IP, net.IPv6len)
		}
		clear(r.cm6.Dst)
		r.cm6.IfIndex = 0
		if r.cm6.Parse(r.oob[:oobn]) == nil {
			dst, local.ifIndex = r.cm6.Dst, r.cm6.IfIndex
		}
	} else {
		if len(r.cm4.Dst) != net.IPv4len {
			r.cm4.Dst = make(net.IP, net.IPv4len)
		}
		clear(r.cm4.Dst)
		r.cm4.IfIndex = 0
		if r.cm4.Parse(r.oob[:oobn]) == nil {
			dst, local.ifIndex = r.cm4.Dst, r.cm4.IfIndex
		}
	}
	if a, ok := netip.AddrFromSlice(dst); ok && !a.IsUnspecified() {
		local.addr = a.Unmap()
	} else {
		local = udpLocal{}
	}
	return n, from, local, nil
}

// packet handles one datagram, on the reader: it never waits for a
// handler.
func (s *UDPServer) packet(b []byte, from net.Addr, local udpLocal) {
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
	key, sum := dupKeyOf(from, local.addr, b), s.dup.sum(b)
	s.mu.Lock()
	resp, hit := s.dup.identical(key, sum, s.now())
	s.mu.Unlock()
	if hit {
		s.duplicate(resp, from, local)
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
		s.duplicate(resp, from, local)
		return
	}
	s.received.Add(1)
	s.nas.received(client, signed)
	if code == lradius.CodeStatusServer {
		// RFC 5997: answered by the server itself, never a login, with
		// the answer of the kind of port it came to.
		code := lradius.CodeAccessAccept
		if s.cfg.AccountingPort {
			code = lradius.CodeAccountingResponse
		}
		s.finish(e, b, secret, from, local, code, nil)
		return
	}
	lane := s.auth
	if code == lradius.CodeAccountingRequest {
		lane = s.acct
	}
	r := udpRequest{dup: e, b: b, secret: secret, from: from, local: local, client: client}
	if signed {
		lane.Submit(client, r)
	} else {
		// Anyone can send it, from any address: it waits apart, and never
		// refuses or pushes out a request signed with the secret.
		lane.SubmitWeak(client, r)
	}
}

// duplicate answers a retransmission from the cache: resp, or nothing
// while its first copy is being handled (resp nil).
func (s *UDPServer) duplicate(resp []byte, to net.Addr, local udpLocal) {
	if resp == nil {
		s.inProgress.Add(1)
		return
	}
	s.resent.Add(1)
	s.send(resp, to, local)
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
	code, attrs := runHandler(&s.cfg, &s.panics, withSender(s.ctx, Sender{Addr: r.client}), p, r.b)
	s.finish(r.dup, r.b, r.secret, r.from, r.local, code, attrs)
}

// finish answers a request and caches the answer for its duplicates; no
// answer forgets the entry, so a retransmission is handled afresh.
func (s *UDPServer) finish(e *dupEntry, req, secret []byte, to net.Addr, local udpLocal, code lradius.Code, attrs lradius.Attributes) {
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
	s.send(resp, to, local)
}

func (s *UDPServer) forget(e *dupEntry) {
	s.mu.Lock()
	s.dup.forget(e)
	s.mu.Unlock()
}

// send writes resp to to, from local's address when it has one.
func (s *UDPServer) send(resp []byte, to net.Addr, local udpLocal) {
	s.answered.Add(1) // before the write: a client holding the answer sees it counted
	if err := s.write(resp, to, local); err != nil {
		s.answered.Add(^uint64(0))
		return
	}
	if a, ok := serve.AddrOf(to); ok {
		s.nas.answered(a, resp)
	}
}

// write sends b to to; on a wildcard socket from local's address, with
// an IP_PKTINFO or IPV6_PKTINFO control message. The interface is named
// only for a link-local address, which needs it; otherwise the route
// back picks it, as for any answer.
func (s *UDPServer) write(b []byte, to net.Addr, local udpLocal) error {
	u, ok := to.(*net.UDPAddr)
	if s.uc == nil || !local.addr.IsValid() || !ok {
		_, err := s.pc.WriteTo(b, to)
		return err
	}
	ifIndex := 0
	if local.addr.IsLinkLocalUnicast() {
		ifIndex = local.ifIndex
	}
	var oob []byte
	if local.addr.Is4() {
		// Also on a dual-stack socket, for an IPv4-mapped destination:
		// the kernel takes IP_PKTINFO there (IPV6_PKTINFO carries no
		// IPv4 source in x/net's encoding).
		oob = (&ipv4.ControlMessage{Src: local.addr.AsSlice(), IfIndex: ifIndex}).Marshal()
	} else {
		oob = (&ipv6.ControlMessage{Src: local.addr.AsSlice(), IfIndex: ifIndex}).Marshal()
	}
	_, _, err := s.uc.WriteMsgUDPAddrPort(b, oob, u.AddrPort())
	return err
}

// Stats returns the counters.
func (s *UDPServer) Stats() UDPServerStats {
	s.mu.Lock()
	n, size := s.dup.len(), s.dup.size
	s.mu.Unlock()
	return UDPServerStats{
		Received: s.received.Load(), Answered: s.answered.Load(), Resent: s.resent.Load(), InProgress: s.inProgress.Load(),
		BadFrames: s.badFrames.Load(), BadAuth: s.badAuth.Load(), Overload: s.overload.Load(),
		Unencodable: s.unencodable.Load(), Dropped: s.dropped.Load(), HandlerPanics: s.panics.Load(), Cached: n, CachedBytes: size,
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
