package radudp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	lradius "layeh.com/radius"
)

// Defaults of the 7750 SR radius-server-policy and of PeerConfig.
const (
	// DefaultTimeout is how long one attempt waits for its reply.
	DefaultTimeout = 3 * time.Second
	// DefaultRetries is the number of attempts per request: the first send
	// and its retransmissions.
	DefaultRetries = 3
	// DefaultMaxSockets bounds the sockets of a Peer. Each carries 256
	// requests at once (one Identifier space).
	DefaultMaxSockets = 4
	// MaxSocketsLimit bounds PeerConfig.MaxSockets.
	MaxSocketsLimit = 64
	// DefaultMaxWaiting bounds the requests waiting for a free Identifier.
	DefaultMaxWaiting = 4096
	// IDsPerSocket is the size of one Identifier space.
	IDsPerSocket = 256
)

// Errors an exchange can end with. Match them with errors.Is.
var (
	// ErrTimeout: no reply to any attempt.
	ErrTimeout = errors.New("radudp: no reply to any attempt")
	// ErrClosed: the Peer or Client was closed.
	ErrClosed = errors.New("radudp: closed")
	// ErrBusy: every Identifier of every socket is in use and the wait
	// queue is full.
	ErrBusy = errors.New("radudp: busy: no free Identifier and the wait queue is full")
	// ErrConfig is matched by configuration errors.
	ErrConfig = errors.New("radudp: invalid configuration")
)

// TimeoutError says which server did not reply, and to how many attempts.
type TimeoutError struct {
	Server   string
	Attempts int
	Timeout  time.Duration
	// NoMessageAuthenticator counts the replies that came but were
	// dropped for want of a required Message-Authenticator.
	NoMessageAuthenticator int
}

func (e *TimeoutError) Error() string {
	if e.NoMessageAuthenticator > 0 {
		return fmt.Sprintf("RADIUS server %s: no reply with the required Message-Authenticator to %d attempt(s), %v apart (%d dropped without one)",
			e.Server, e.Attempts, e.Timeout, e.NoMessageAuthenticator)
	}
	return fmt.Sprintf("RADIUS server %s: no reply to %d attempt(s), %v apart", e.Server, e.Attempts, e.Timeout)
}

// Is makes errors.Is(err, ErrTimeout) true, and errors.Is(err,
// radius.ErrNoMessageAuthenticator) when replies without one were
// dropped.
func (e *TimeoutError) Is(target error) bool {
	return target == ErrTimeout || (e.NoMessageAuthenticator > 0 && target == radius.ErrNoMessageAuthenticator)
}

// PeerConfig configures a Peer.
type PeerConfig struct {
	// Secret is the shared secret of the server. Required.
	Secret []byte
	// Timeout is how long one attempt waits for a reply before the packet
	// is retransmitted (default DefaultTimeout).
	Timeout time.Duration
	// Retries is the number of attempts per request, the first send
	// included (default DefaultRetries): the 7750 SR "retry".
	Retries int
	// MaxSockets bounds the sockets opened to the server (default
	// DefaultMaxSockets, at most MaxSocketsLimit). A socket is opened only
	// when every Identifier of the open ones is in use.
	MaxSockets int
	// MaxWaiting bounds the requests waiting for a free Identifier
	// (default DefaultMaxWaiting); beyond it an exchange fails with ErrBusy.
	// While a socket is being opened, the requests that the sockets still
	// allowed will take wait too, on top of MaxWaiting: a burst gets the
	// same bound, MaxSockets x 256 in flight plus MaxWaiting, however far
	// the first socket's opening had got when it arrived.
	MaxWaiting int
	// RequireMessageAuthenticator says which replies must carry a
	// Message-Authenticator (BlastRADIUS). The zero value,
	// radpeer.RequireMAAuto, requires one in every reply to an
	// Access-Request, and verifies one in a reply to Status-Server without
	// requiring it (FreeRADIUS before 3.2.5 sends none there);
	// radpeer.RequireMAAlways requires it there too; radpeer.RequireMANever
	// nowhere, for servers that sign no reply. A reply without a required
	// one is dropped, counted (PeerStats.NoMessageAuthenticator) and
	// logged; the exchange goes on waiting, and if no other reply comes
	// its TimeoutError also matches radius.ErrNoMessageAuthenticator.
	RequireMessageAuthenticator radpeer.MessageAuthenticatorMode
	// Logger gets the rate-limited warnings about dropped replies.
	// Default slog.Default().
	Logger *slog.Logger
	// UpdateAcctDelayTime makes each retransmission of an
	// Accounting-Request carry an Acct-Delay-Time updated to the seconds
	// since the first send. The packet then changes, so each such
	// retransmission gets a new Identifier and Request Authenticator (RFC
	// 5080 2.2.1). Off by default: retransmissions are byte-identical.
	UpdateAcctDelayTime bool
	// Dial opens a connected datagram socket to addr: each Write sends one
	// datagram and each Read returns one. Default: UDP from an ephemeral
	// port. Tests pass in-memory packet connections.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// OnSend is called, without any lock held, just before each packet is
	// written (first sends and retransmissions), so before its reply.
	OnSend func(now time.Time)
	// OnReply is called, without any lock held, for each reply that
	// verifies, late and duplicate ones included (the server is alive),
	// before the exchange it answers returns.
	OnReply func(now time.Time)
}

func (c PeerConfig) validate() (PeerConfig, error) {
	if len(c.Secret) == 0 {
		return c, fmt.Errorf("%w: no shared secret", ErrConfig)
	}
	if c.Timeout < 0 || c.Retries < 0 || c.MaxSockets < 0 || c.MaxWaiting < 0 {
		return c, fmt.Errorf("%w: negative timeout, retries, sockets or waiting bound", ErrConfig)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Retries == 0 {
		c.Retries = DefaultRetries
	}
	if c.MaxSockets == 0 {
		c.MaxSockets = DefaultMaxSockets
	}
	if c.MaxSockets > MaxSocketsLimit {
		return c, fmt.Errorf("%w: MaxSockets %d above %d", ErrConfig, c.MaxSockets, MaxSocketsLimit)
	}
	if c.MaxWaiting == 0 {
		c.MaxWaiting = DefaultMaxWaiting
	}
	if c.RequireMessageAuthenticator > radpeer.RequireMANever {
		return c, fmt.Errorf("%w: RequireMessageAuthenticator %s", ErrConfig, c.RequireMessageAuthenticator)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Dial == nil {
		c.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", addr)
		}
	}
	return c, nil
}

// Response is a verified reply.
type Response struct {
	// Raw is the packet as received.
	Raw []byte
	// Packet is Raw decoded with the server's secret.
	Packet *lradius.Packet
	// RequestAuthenticator is the authenticator of the send it answers
	// (to decrypt hidden attributes of the reply).
	RequestAuthenticator [radius.AuthenticatorLen]byte
	// Server is the address of the server that answered.
	Server string
	// Attempts is how many times the packet had been sent when the reply
	// came.
	Attempts int
}

// PeerStats are a Peer's counters.
type PeerStats struct {
	Sent            uint64 `json:"sent"`            // first sends, new Identifiers
	Retransmissions uint64 `json:"retransmissions"` // byte-identical copies sent again
	Answered        uint64 `json:"answered"`
	TimedOut        uint64 `json:"timed_out"`   // every attempt unanswered
	Late            uint64 `json:"late"`        // verified replies to a request given up on
	Duplicates      uint64 `json:"duplicates"`  // verified replies to a request answered already
	BadReplies      uint64 `json:"bad_replies"` // dropped: malformed, unmatched or failing verification
	// NoMessageAuthenticator counts replies dropped for want of a
	// required Message-Authenticator (not in BadReplies).
	NoMessageAuthenticator uint64 `json:"no_ma"`
	Sockets                int    `json:"sockets"`
	InFlight               int    `json:"in_flight"`
	Waiting                int    `json:"waiting"`
}

// Peer is the client side of one RADIUS server over UDP: sockets from
// ephemeral ports (one, more when every Identifier is in use), requests
// sent and retransmitted byte for byte from the same socket with the same
// Identifier and authenticator every Timeout up to Retries attempts (RFC
// 2865 2.5, RFC 5080 2.10), replies matched by Identifier and verified
// against the request's authenticator. Identifiers are reused least
// recently first (RFC 5080 2.2.2). A reply that arrives after its request
// was answered or given up on is dropped and counted.
//
// Its methods are safe for concurrent use.
type Peer struct {
	addr string
	cfg  PeerConfig

	mu      sync.Mutex
	socks   []*socket
	dialing bool
	waiters []chan slot // FIFO of exchanges waiting for an Identifier
	closed  bool
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup

	sent, retrans, answered, timedOut, late, dups, bad, noMA atomic.Uint64
}

type slot struct {
	s  *socket
	id byte
}

// lastUse is what a socket remembers of the latest send on an Identifier,
// so that a reply arriving after it was released can be told apart: late,
// duplicate, or bogus.
type lastUse struct {
	auth     [radius.AuthenticatorLen]byte
	code     lradius.Code
	used     bool
	answered bool
}

type pending struct {
	auth [radius.AuthenticatorLen]byte
	code lradius.Code
	ch   chan *Response // cap 1
	noMA atomic.Int32   // replies dropped for want of a Message-Authenticator
}

type socket struct {
	c    net.Conn
	free idRing
	pend [IDsPerSocket]*pending
	last [IDsPerSocket]lastUse
}

// idRing is a FIFO of free Identifiers: the least recently released first.
type idRing struct {
	buf        [IDsPerSocket]byte
	head, size int
}

func newRing() idRing {
	var r idRing
	for i := range r.buf {
		r.buf[i] = byte(i)
	}
	r.size = IDsPerSocket
	return r
}

func (r *idRing) pop() (byte, bool) {
	if r.size == 0 {
		return 0, false
	}
	id := r.buf[r.head]
	r.head = (r.head + 1) % IDsPerSocket
	r.size--
	return id, true
}

func (r *idRing) push(id byte) {
	r.buf[(r.head+r.size)%IDsPerSocket] = id
	r.size++
}

// NewPeer returns the Peer of the server at addr (host:port, see
// radpeer.ParseUDPURL). No socket is opened before the first exchange.
func NewPeer(addr string, cfg PeerConfig) (*Peer, error) {
	c, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Peer{addr: addr, cfg: c, done: make(chan struct{})}, nil
}

// Addr returns the server's address.
func (p *Peer) Addr() string { return p.addr }

// Config returns the configuration with the defaults filled in.
func (p *Peer) Config() PeerConfig { return p.cfg }

// Exchange sends r and waits for its verified reply: up to Retries
// attempts, Timeout apart, or until ctx ends. It fails with an error
// matching ErrTimeout when no attempt got a reply.
func (p *Peer) Exchange(ctx context.Context, r *radius.Request) (*Response, error) {
	return p.ExchangeAttempts(ctx, r, p.cfg.Retries)
}

// ExchangeAttempts is Exchange with attempts sends at most (1: no
// retransmission, as for a probe).
func (p *Peer) ExchangeAttempts(ctx context.Context, r *radius.Request, attempts int) (*Response, error) {
	if attempts < 1 {
		attempts = 1
	}
	sl, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	req := r
	first := time.Now()
	pkt, pd, err := p.encode(sl, req)
	if err != nil {
		p.release(sl, false)
		return nil, err
	}
	timer := time.NewTimer(p.cfg.Timeout)
	defer timer.Stop()
	fresh := true
	for attempt := 1; ; attempt++ {
		if fresh {
			p.sent.Add(1)
			fresh = false
		} else {
			p.retrans.Add(1)
		}
		// OnSend before the write: the reply must not be seen first.
		if p.cfg.OnSend != nil {
			p.cfg.OnSend(time.Now())
		}
		// A write error (an ICMP port unreachable reported on a connected
		// socket) is an unanswered attempt: the timer decides.
		_, _ = sl.s.c.Write(pkt)
		timer.Reset(p.cfg.Timeout)
		select {
		case resp := <-pd.ch:
			p.release(sl, true)
			p.answered.Add(1)
			resp.Attempts = attempt
			return resp, nil
		case <-ctx.Done():
			p.release(sl, p.drop(sl, pd))
			return nil, ctx.Err()
		case <-p.done:
			return nil, ErrClosed
		case <-timer.C:
		}
		if attempt >= attempts {
			if p.drop(sl, pd) {
				// The reply raced the last timeout: take it.
				p.release(sl, true)
				p.answered.Add(1)
				resp := <-pd.ch
				resp.Attempts = attempt
				return resp, nil
			}
			p.release(sl, false)
			p.timedOut.Add(1)
			return nil, &TimeoutError{Server: p.addr, Attempts: attempt, Timeout: p.cfg.Timeout, NoMessageAuthenticator: int(pd.noMA.Load())}
		}
		if p.cfg.UpdateAcctDelayTime && r.Code == lradius.CodeAccountingRequest {
			// A changed attribute is a new packet: new Identifier and
			// authenticator (RFC 5080 2.2.1).
			if p.drop(sl, pd) {
				p.release(sl, true)
				p.answered.Add(1)
				resp := <-pd.ch
				resp.Attempts = attempt
				return resp, nil
			}
			p.release(sl, false)
			req = withDelay(r, time.Since(first))
			if sl, err = p.acquire(ctx); err != nil {
				return nil, err
			}
			if pkt, pd, err = p.encode(sl, req); err != nil {
				p.release(sl, false)
				return nil, err
			}
			fresh = true
		}
	}
}

// withDelay returns a copy of r whose Acct-Delay-Time is its own plus d.
func withDelay(r *radius.Request, d time.Duration) *radius.Request {
	base := uint32(0)
	out := &radius.Request{Code: r.Code, Attributes: make(lradius.Attributes, 0, len(r.Attributes)+1)}
	for _, a := range r.Attributes {
		if a.Type == radius.AttrAcctDelayTime {
			if len(a.Attribute) == 4 {
				base = binary.BigEndian.Uint32(a.Attribute)
			}
			continue
		}
		out.Attributes = append(out.Attributes, a)
	}
	v := make([]byte, 4)
	binary.BigEndian.PutUint32(v, base+uint32(d/time.Second))
	out.Attributes = append(out.Attributes, &lradius.AVP{Type: radius.AttrAcctDelayTime, Attribute: v})
	return out
}

// encode signs req for slot sl and registers it as pending there.
func (p *Peer) encode(sl slot, req *radius.Request) ([]byte, *pending, error) {
	pkt, auth, err := radius.EncodeRequest(req, sl.id, p.cfg.Secret)
	if err != nil {
		return nil, nil, err
	}
	pd := &pending{auth: auth, code: req.Code, ch: make(chan *Response, 1)}
	p.mu.Lock()
	sl.s.pend[sl.id] = pd
	sl.s.last[sl.id] = lastUse{auth: auth, code: req.Code, used: true}
	p.mu.Unlock()
	return pkt, pd, nil
}

// drop unregisters pd; it reports whether a reply was delivered first.
func (p *Peer) drop(sl slot, pd *pending) (answered bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sl.s.pend[sl.id] == pd {
		sl.s.pend[sl.id] = nil
		return false
	}
	return true
}

// acquire returns a free Identifier: the least recently used of the first
// socket that has one, on a new socket when none has, or after waiting.
func (p *Peer) acquire(ctx context.Context) (slot, error) {
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return slot{}, ErrClosed
		}
		for _, s := range p.socks {
			if id, ok := s.free.pop(); ok {
				p.mu.Unlock()
				return slot{s, id}, nil
			}
		}
		if p.dialing || len(p.socks) >= p.cfg.MaxSockets {
			break
		}
		p.dialing = true
		p.mu.Unlock()
		c, err := p.cfg.Dial(ctx, p.addr)
		p.mu.Lock()
		p.dialing = false
		if err != nil {
			p.mu.Unlock()
			return slot{}, fmt.Errorf("radudp: opening a socket to %s: %w", p.addr, err)
		}
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return slot{}, ErrClosed
		}
		s := &socket{c: c, free: newRing()}
		p.socks = append(p.socks, s)
		// Those who queued while the socket was being opened go first.
		for len(p.waiters) > 0 && s.free.size > 0 {
			id, _ := s.free.pop()
			p.waiters[0] <- slot{s, id}
			p.waiters = p.waiters[1:]
		}
		p.wg.Add(1)
		go p.read(s)
	}
	limit := p.cfg.MaxWaiting
	if p.dialing {
		// The socket being opened will take these, and the sockets still
		// allowed after it, which the dialer opens next for those left
		// waiting: the bound does not depend on how far the first dial
		// had got when a burst arrived.
		limit += (p.cfg.MaxSockets - len(p.socks)) * IDsPerSocket
	}
	if len(p.waiters) >= limit {
		p.mu.Unlock()
		return slot{}, ErrBusy
	}
	ch := make(chan slot, 1)
	p.waiters = append(p.waiters, ch)
	p.mu.Unlock()
	select {
	case sl, ok := <-ch:
		if !ok {
			return slot{}, ErrClosed
		}
		return sl, nil
	case <-ctx.Done():
		p.mu.Lock()
		for i, w := range p.waiters {
			if w == ch {
				p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
				p.mu.Unlock()
				return slot{}, ctx.Err()
			}
		}
		p.mu.Unlock()
		// A slot was handed over meanwhile: give it back.
		if sl, ok := <-ch; ok {
			p.release(sl, false)
		}
		return slot{}, ctx.Err()
	}
}

// release frees an Identifier, to the first waiter or to the tail of the
// socket's ring (least recently used first). answered records how the
// last send on it ended.
func (p *Peer) release(sl slot, answered bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sl.s.pend[sl.id] = nil
	sl.s.last[sl.id].answered = answered
	if p.closed {
		return
	}
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		w <- sl
		return
	}
	sl.s.free.push(sl.id)
}

// read delivers the replies arriving on s until it is closed.
func (p *Peer) read(s *socket) {
	defer p.wg.Done()
	buf := make([]byte, radius.MaxLength+1)
	for {
		n, err := s.c.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			// ICMP errors on a connected socket: the timers decide.
			continue
		}
		p.datagram(s, buf[:n])
	}
}

// datagram handles one datagram from the server: anything but a
// well-formed reply is dropped and counted.
func (p *Peer) datagram(s *socket, b []byte) {
	if radius.Validate(b) != nil || radius.IsRequest(radius.Code(b)) {
		p.bad.Add(1)
		return
	}
	p.reply(s, b)
}

// verify checks reply b against a send of code req with authenticator
// auth; a reply dropped for want of a Message-Authenticator is counted
// (and returns false), any other failure is the caller's to count.
func (p *Peer) verify(b []byte, req lradius.Code, auth [radius.AuthenticatorLen]byte) (ok, noMA bool) {
	if !radius.Answers(req, radius.Code(b)) {
		return false, false
	}
	err := radius.VerifyResponse(b, auth, p.cfg.Secret, p.cfg.RequireMessageAuthenticator.AnswerNeedsMA(req))
	if errors.Is(err, radius.ErrNoMessageAuthenticator) {
		p.noMA.Add(1)
		serve.Log(p.cfg.Logger, slog.LevelWarn, serve.KindBadAuth,
			"RADIUS reply dropped: no Message-Authenticator (BlastRADIUS); a server that never sends one needs RequireMessageAuthenticator never",
			"server", p.addr, "code", radius.Code(b).String(), "id", radius.Identifier(b))
		return false, true
	}
	return err == nil, false
}

// reply matches one reply to its pending request.
func (p *Peer) reply(s *socket, b []byte) {
	id := radius.Identifier(b)
	p.mu.Lock()
	pd := s.pend[id]
	last := s.last[id]
	p.mu.Unlock()
	if pd == nil {
		// No request waits on this Identifier: a reply to a request given
		// up on (late) or answered already (duplicate), or garbage.
		if !last.used {
			p.unmatched(b)
			return
		}
		if ok, noMA := p.verify(b, last.code, last.auth); !ok {
			if !noMA {
				p.unmatched(b)
			}
			return
		}
		if last.answered {
			p.dups.Add(1)
		} else {
			p.late.Add(1)
		}
		p.alive()
		return
	}
	if ok, noMA := p.verify(b, pd.code, pd.auth); !ok {
		if noMA {
			pd.noMA.Add(1)
		} else {
			p.unmatched(b)
		}
		return
	}
	raw := append([]byte(nil), b...)
	pkt, err := radius.Decode(raw, p.cfg.Secret)
	if err != nil {
		p.bad.Add(1)
		return
	}
	p.mu.Lock()
	if s.pend[id] != pd {
		// Given up on between the two locks.
		p.mu.Unlock()
		p.late.Add(1)
		p.alive()
		return
	}
	s.pend[id] = nil
	s.last[id].answered = true
	p.mu.Unlock()
	p.alive() // before the caller sees the answer, so that it sees its effect too
	pd.ch <- &Response{Raw: raw, Packet: pkt, RequestAuthenticator: pd.auth, Server: p.addr}
}

// unmatched counts and logs, at a bounded rate, a reply that matches no
// send or fails its verification.
func (p *Peer) unmatched(b []byte) {
	p.bad.Add(1)
	serve.Log(p.cfg.Logger, slog.LevelWarn, serve.KindUnmatched, "RADIUS reply dropped: it matches no request, or fails verification (shared secret mismatch?)",
		"server", p.addr, "code", radius.Code(b).String(), "id", radius.Identifier(b))
}

func (p *Peer) alive() {
	if p.cfg.OnReply != nil {
		p.cfg.OnReply(time.Now())
	}
}

// Stats returns the counters.
func (p *Peer) Stats() PeerStats {
	p.mu.Lock()
	st := PeerStats{Sockets: len(p.socks), Waiting: len(p.waiters)}
	for _, s := range p.socks {
		st.InFlight += IDsPerSocket - s.free.size
	}
	p.mu.Unlock()
	st.Sent, st.Retransmissions, st.Answered = p.sent.Load(), p.retrans.Load(), p.answered.Load()
	st.TimedOut, st.Late, st.Duplicates, st.BadReplies = p.timedOut.Load(), p.late.Load(), p.dups.Load(), p.bad.Load()
	st.NoMessageAuthenticator = p.noMA.Load()
	return st
}

// Close closes the sockets and waits for their readers. Exchanges in
// progress and new ones fail with ErrClosed.
func (p *Peer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	for _, w := range p.waiters {
		close(w)
	}
	p.waiters = nil
	socks := p.socks
	p.mu.Unlock()
	for _, s := range socks {
		s.c.Close()
	}
	p.wg.Wait()
	return nil
}
