package radpeer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// SchemeUDP is the URL scheme of RADIUS over UDP (RFC 2865).
const SchemeUDP = "radius"

// Defaults of UDPConfig, those of the Nokia 7750 SR: a request is sent
// every 3 s, 3 times in all.
const (
	DefaultUDPTimeout = 3 * time.Second
	DefaultUDPSends   = 3
	// IDsPerSocket is the Identifier space of one UDP socket.
	IDsPerSocket = 256
)

// ParseUDPURL parses radius://host:port and returns "host:port".
func ParseUDPURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || !strings.EqualFold(u.Scheme, SchemeUDP) {
		return "", fmt.Errorf("radpeer: URL %q: want radius://host:port", s)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Port() == "" || u.Hostname() == "" {
		return "", fmt.Errorf("radpeer: URL %q: want radius://host:port", s)
	}
	return u.Host, nil
}

// UDPConfig configures a UDPPeer.
type UDPConfig struct {
	// Secret is the shared secret (required).
	Secret []byte
	// Timeout is the time between two sends of a request (default 3 s).
	Timeout time.Duration
	// Sends is how many times a request is sent in all, the same bytes
	// each time (same Identifier, authenticator and source port: RFC 2865
	// 2.5, RFC 5080 2.10); the call fails Sends x Timeout after the
	// first send (default 3).
	Sends int
	// MaxSockets is how many sockets (each one source port with 256
	// Identifiers) may be open to the server (default 1, at most 64).
	MaxSockets int
	// MaxWaiting bounds the calls waiting for a free Identifier (default
	// DefaultMaxWaiting); beyond it Submit fails with ErrBusy.
	MaxWaiting int
	// RequireMessageAuthenticator drops answers to Access-Requests
	// without one (BlastRADIUS).
	RequireMessageAuthenticator bool
	// Events receives error events. Default: a new Bus.
	Events *peer.Bus
	// Logger, default slog.Default().
	Logger *slog.Logger
}

// UDPPeer is a client of one RADIUS server over UDP. Each request goes
// out on an Identifier of one of its sockets, least recently used first
// (RFC 5080 2.2.2), and is retransmitted unchanged every Timeout until it
// is answered or has been sent Sends times. Answers are verified against
// the request they answer; late and duplicate answers are dropped and
// counted. It has no watchdog: whether the server is in service is for a
// policy above it to decide from the answers and timeouts. Its methods
// are safe for concurrent use.
type UDPPeer struct {
	cfg    UDPConfig
	url    string
	addr   string
	wg     sync.WaitGroup
	stats  udpCounters
	closed chan struct{}

	mu      sync.Mutex
	socks   []*udpSock
	waiting []*Call
	closing bool
	fx      []func()
}

type udpCounters struct {
	sent, retransmitted, answered, late, duplicates, unmatched, badAuth, noMA, timedOut atomic.Uint64
}

// UDPStats is a snapshot of a UDPPeer's counters.
type UDPStats struct {
	Peer          string `json:"peer"`
	Sent          uint64 `json:"sent"`          // requests sent for the first time
	Retransmitted uint64 `json:"retransmitted"` // identical copies sent again
	Answered      uint64 `json:"answered"`
	Late          uint64 `json:"late"`       // verified answers after the last send timed out, or after the caller gave up
	Duplicates    uint64 `json:"duplicates"` // second answers to a request already answered
	Unmatched     uint64 `json:"unmatched"`  // answers matching no request (or failing verification)
	NoMA          uint64 `json:"no_ma"`
	TimedOut      uint64 `json:"timed_out"` // calls failed after Sends sends
	Pending       int    `json:"pending"`
	Sockets       int    `json:"sockets"`
	Waiting       int    `json:"waiting"`
}

type udpSlot struct {
	call  *Call
	pkt   []byte
	auth  [radius.AuthenticatorLen]byte
	code  lradius.Code
	left  int // sends still to make
	timer *time.Timer
	ready bool
}

type udpSock struct {
	p     *UDPPeer
	c     *net.UDPConn
	slots [IDsPerSocket]udpSlot
	free  [IDsPerSocket]byte // ring of free Identifiers, least recently used first
	head  int
	n     int
	// prev is the authenticator of the last request on each Identifier
	// and how it ended, to tell a duplicate or late answer from a stray.
	prev    [IDsPerSocket][radius.AuthenticatorLen]byte
	prevEnd [IDsPerSocket]uint8 // 0 none, endAnswered, endGaveUp
}

const (
	endAnswered = 1 + iota
	endGaveUp
)

func (s *udpSock) pop() byte {
	id := s.free[s.head]
	s.head = (s.head + 1) % IDsPerSocket
	s.n--
	return id
}

func (s *udpSock) push(id byte) {
	s.free[(s.head+s.n)%IDsPerSocket] = id
	s.n++
}

// DialUDP returns a UDPPeer for radius://host:port. Sockets are opened on
// demand; DialUDP resolves the address and opens the first.
func DialUDP(rawURL string, cfg UDPConfig) (*UDPPeer, error) {
	addr, err := ParseUDPURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if len(cfg.Secret) == 0 {
		return nil, fmt.Errorf("%w: RADIUS over UDP needs a shared secret", ErrConfig)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultUDPTimeout
	}
	if cfg.Sends == 0 {
		cfg.Sends = DefaultUDPSends
	}
	if cfg.MaxSockets == 0 {
		cfg.MaxSockets = 1
	}
	if cfg.MaxWaiting == 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	switch {
	case cfg.Timeout < 0 || cfg.Sends < 1 || cfg.Sends > 100:
		return nil, fmt.Errorf("%w: Timeout %v, Sends %d", ErrConfig, cfg.Timeout, cfg.Sends)
	case cfg.MaxSockets < 1 || cfg.MaxSockets > MaxConnsLimit || cfg.MaxWaiting < 0:
		return nil, fmt.Errorf("%w: MaxSockets %d, MaxWaiting %d", ErrConfig, cfg.MaxSockets, cfg.MaxWaiting)
	}
	if cfg.Events == nil {
		cfg.Events = peer.NewBus()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &UDPPeer{cfg: cfg, url: SchemeUDP + "://" + addr, addr: addr, closed: make(chan struct{})}
	p.mu.Lock()
	_, err = p.openSocket()
	p.unlock()
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Name returns the server's URL.
func (p *UDPPeer) Name() string { return p.url }

func (p *UDPPeer) unlock() {
	fx := p.fx
	p.fx = nil
	p.mu.Unlock()
	for _, f := range fx {
		f()
	}
}

// openSocket opens a connected UDP socket (one source port). p.mu held.
func (p *UDPPeer) openSocket() (*udpSock, error) {
	raddr, err := net.ResolveUDPAddr("udp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("radpeer: %s: %w", p.url, err)
	}
	c, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		return nil, fmt.Errorf("radpeer: %s: %w", p.url, err)
	}
	s := &udpSock{p: p, c: c, n: IDsPerSocket}
	for i := range s.free {
		s.free[i] = byte(i)
	}
	p.socks = append(p.socks, s)
	p.wg.Add(1)
	go s.reader()
	return s, nil
}

// Exchange sends r and waits for its answer, until ctx is done or the
// request has been sent Sends times without one.
func (p *UDPPeer) Exchange(ctx context.Context, r *radius.Request) (*Response, error) {
	cl := NewCall(r)
	if err := p.Submit(cl); err != nil {
		return nil, err
	}
	return cl.Wait(ctx, time.Duration(p.cfg.Sends+1)*p.cfg.Timeout)
}

// Submit sends cl without waiting. When every Identifier of every socket
// is in use and no socket may be added, cl waits (up to MaxWaiting).
func (p *UDPPeer) Submit(cl *Call) error {
	p.mu.Lock()
	defer p.unlock()
	if p.closing {
		return fmt.Errorf("RADIUS server %s: %w", p.url, ErrClosed)
	}
	if s := p.pick(); s != nil {
		p.assign(s, cl)
		return nil
	}
	if len(p.waiting) >= p.cfg.MaxWaiting {
		return fmt.Errorf("RADIUS server %s: %w (%d waiting)", p.url, ErrBusy, len(p.waiting))
	}
	p.waiting = append(p.waiting, cl)
	return nil
}

// pick returns the socket with the most free Identifiers, opening one
// when all are full and MaxSockets allows. p.mu held.
func (p *UDPPeer) pick() *udpSock {
	var best *udpSock
	for _, s := range p.socks {
		if s.n > 0 && (best == nil || s.n > best.n) {
			best = s
		}
	}
	if best == nil && len(p.socks) < p.cfg.MaxSockets {
		s, err := p.openSocket()
		if err != nil {
			p.cfg.Logger.Warn("opening a further RADIUS socket", "peer", p.url, "err", err)
			return nil
		}
		best = s
	}
	return best
}

func (p *UDPPeer) assign(s *udpSock, cl *Call) {
	id := s.pop()
	s.slots[id] = udpSlot{call: cl}
	p.fx = append(p.fx, func() { s.send(id, cl) })
}

// send encodes cl once for its Identifier and sends it; retransmissions
// send the same bytes.
func (s *udpSock) send(id byte, cl *Call) {
	p := s.p
	b, auth, err := radius.EncodeRequest(cl.req, id, p.cfg.Secret)
	p.mu.Lock()
	defer p.unlock()
	sl := &s.slots[id]
	if sl.call != cl || p.closing {
		return
	}
	if err != nil {
		s.release(id)
		p.fx = append(p.fx, func() { cl.Fail(fmt.Errorf("RADIUS server %s: %w", p.url, err)) })
		return
	}
	sl.pkt, sl.auth, sl.code, sl.left, sl.ready = b, auth, cl.req.Code, p.cfg.Sends-1, true
	sl.timer = time.AfterFunc(p.cfg.Timeout, func() { s.expire(id, cl) })
	cl.sends.Add(1)
	p.stats.sent.Add(1)
	p.fx = append(p.fx, func() { _, _ = s.c.Write(b) }) // a lost datagram is what retransmission is for
}

// expire is a request's retransmission timer.
func (s *udpSock) expire(id byte, cl *Call) {
	p := s.p
	p.mu.Lock()
	defer p.unlock()
	sl := &s.slots[id]
	if sl.call != cl || p.closing {
		return
	}
	if sl.left > 0 && !cl.IsDone() {
		sl.left--
		sl.timer.Reset(p.cfg.Timeout)
		cl.sends.Add(1)
		p.stats.retransmitted.Add(1)
		b := sl.pkt
		p.fx = append(p.fx, func() { _, _ = s.c.Write(b) })
		return
	}
	s.prev[id], s.prevEnd[id] = sl.auth, endGaveUp
	s.release(id)
	p.fx = append(p.fx, func() {
		if cl.Fail(fmt.Errorf("RADIUS server %s: %w (sent %d times, %v apart)", p.url, ErrTimeout, p.cfg.Sends, p.cfg.Timeout)) {
			p.stats.timedOut.Add(1)
		}
	})
}

// release frees an Identifier and gives it to a waiting call. p.mu held.
func (s *udpSock) release(id byte) {
	p := s.p
	if t := s.slots[id].timer; t != nil {
		t.Stop()
	}
	s.slots[id] = udpSlot{}
	s.push(id)
	for len(p.waiting) > 0 && s.n > 0 {
		cl := p.waiting[0]
		p.waiting = p.waiting[1:]
		if !cl.IsDone() {
			p.assign(s, cl)
		}
	}
}

func (s *udpSock) reader() {
	p := s.p
	defer p.wg.Done()
	buf := make([]byte, radius.MaxLength+1)
	for {
		n, err := s.c.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // ICMP errors (port unreachable) surface here: retransmission covers them
		}
		b := append([]byte(nil), buf[:n]...)
		if radius.Validate(b) != nil {
			p.stats.unmatched.Add(1)
			continue
		}
		s.received(b)
	}
}

func (s *udpSock) received(b []byte) {
	p := s.p
	id, code := radius.Identifier(b), radius.Code(b)
	p.mu.Lock()
	defer p.unlock()
	sl := s.slots[id]
	if sl.call == nil || !sl.ready || !radius.Answers(sl.code, code) {
		// Not a live request: a second answer to the last request on this
		// Identifier, an answer after we gave up on it (both verify
		// against that request), or a stray packet.
		switch {
		case s.prevEnd[id] == 0 || radius.VerifyResponse(b, s.prev[id], p.cfg.Secret, false) != nil:
			p.stats.unmatched.Add(1)
		case s.prevEnd[id] == endAnswered:
			p.stats.duplicates.Add(1)
		default:
			p.stats.late.Add(1)
		}
		return
	}
	require := p.cfg.RequireMessageAuthenticator && sl.code == lradius.CodeAccessRequest
	err := radius.VerifyResponse(b, sl.auth, p.cfg.Secret, require)
	if errors.Is(err, radius.ErrAuthenticator) {
		p.stats.badAuth.Add(1)
		p.stats.unmatched.Add(1) // over UDP a forged answer is dropped; the request stays pending
		return
	}
	cl := sl.call
	s.prev[id], s.prevEnd[id] = sl.auth, endAnswered
	s.release(id)
	if err != nil {
		p.stats.noMA.Add(1)
		p.fx = append(p.fx, func() { cl.Fail(fmt.Errorf("RADIUS server %s: %w", p.url, err)) })
		return
	}
	if !cl.claim() {
		p.stats.late.Add(1)
		return
	}
	p.stats.answered.Add(1)
	p.fx = append(p.fx, func() {
		pk, _ := radius.Decode(b, p.cfg.Secret)
		cl.deliver(&Response{Raw: b, Packet: pk, RequestAuthenticator: sl.auth}, nil)
	})
}

// Stats returns a snapshot of the counters.
func (p *UDPPeer) Stats() UDPStats {
	s := &p.stats
	st := UDPStats{
		Peer: p.url, Sent: s.sent.Load(), Retransmitted: s.retransmitted.Load(), Answered: s.answered.Load(),
		Late: s.late.Load(), Duplicates: s.duplicates.Load(), Unmatched: s.unmatched.Load(), NoMA: s.noMA.Load(),
		TimedOut: s.timedOut.Load(),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st.Sockets, st.Waiting = len(p.socks), len(p.waiting)
	for _, k := range p.socks {
		st.Pending += IDsPerSocket - k.n
	}
	return st
}

// Close closes the sockets; pending and waiting calls fail with
// ErrClosed.
func (p *UDPPeer) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closing {
		p.closing = true
		for _, s := range p.socks {
			for id := range s.slots {
				sl := &s.slots[id]
				if sl.timer != nil {
					sl.timer.Stop()
				}
				if cl := sl.call; cl != nil {
					p.fx = append(p.fx, func() { cl.Fail(fmt.Errorf("RADIUS server %s: %w", p.url, ErrClosed)) })
				}
				*sl = udpSlot{}
			}
			p.fx = append(p.fx, func() { s.c.Close() })
		}
		for _, cl := range p.waiting {
			p.fx = append(p.fx, func() { cl.Fail(fmt.Errorf("RADIUS server %s: %w", p.url, ErrClosed)) })
		}
		p.waiting = nil
	}
	p.unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
