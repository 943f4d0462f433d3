package radpeer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// Defaults of UDPConfig.
const (
	// DefaultUDPTimeout is how long one attempt waits for its reply.
	DefaultUDPTimeout = 3 * time.Second
	// DefaultUDPRetries is the number of attempts per request and server:
	// the first send and its retransmissions.
	DefaultUDPRetries = 3
	// DefaultUDPSockets bounds the sockets of a UDPPeer per address. Each
	// carries 256 requests at once (one Identifier space).
	DefaultUDPSockets = 4
	// MaxUDPSocketsLimit bounds UDPConfig.MaxSockets.
	MaxUDPSocketsLimit = 64
	// IDsPerSocket is the size of one Identifier space.
	IDsPerSocket = 256
)

// ErrNoReply is matched by the error of a request that got no reply to
// any attempt: a *TimeoutError, which also matches ErrTimeout.
var ErrNoReply = errors.New("no reply to any attempt")

// TimeoutError says which server did not reply, and to how many attempts.
// It matches ErrNoReply and ErrTimeout, and radius.ErrNoMessageAuthenticator
// when replies came but were dropped for want of one.
type TimeoutError struct {
	Server   string
	Attempts int
	Timeout  time.Duration
	// NoMessageAuthenticator counts the replies that came but were
	// dropped for want of a required Message-Authenticator.
	NoMessageAuthenticator int
	// FailedVerification counts the replies that came but failed
	// verification: most likely the server has another shared secret.
	FailedVerification int
}

func (e *TimeoutError) Error() string {
	if e.FailedVerification > 0 {
		return fmt.Sprintf("RADIUS server %s: no reply that verifies to %d attempt(s), %v apart (%d failed verification: %v)",
			e.Server, e.Attempts, e.Timeout, e.FailedVerification, ErrSecretMismatch)
	}
	if e.NoMessageAuthenticator > 0 {
		return fmt.Sprintf("RADIUS server %s: no reply with the required Message-Authenticator to %d attempt(s), %v apart (%d dropped without one)",
			e.Server, e.Attempts, e.Timeout, e.NoMessageAuthenticator)
	}
	return fmt.Sprintf("RADIUS server %s: no reply to %d attempt(s), %v apart", e.Server, e.Attempts, e.Timeout)
}

// Is makes errors.Is(err, ErrNoReply) and errors.Is(err, ErrTimeout)
// true, errors.Is(err, radius.ErrNoMessageAuthenticator) when replies
// without one were dropped, and errors.Is(err, ErrSecretMismatch) when
// replies failed verification.
func (e *TimeoutError) Is(target error) bool {
	return target == ErrNoReply || target == ErrTimeout ||
		(e.NoMessageAuthenticator > 0 && target == radius.ErrNoMessageAuthenticator) ||
		(e.FailedVerification > 0 && target == ErrSecretMismatch)
}

// UDPConfig configures a UDPPeer.
type UDPConfig struct {
	// Secret is the shared secret of the server. Required.
	Secret []byte
	// AccountingAddr, when set, is where Accounting-Requests go (the
	// server's accounting port, host:port); the others go to the peer's
	// address.
	AccountingAddr string
	// Timeout is how long one attempt waits for a reply before the packet
	// is sent again (default DefaultUDPTimeout).
	Timeout time.Duration
	// Retries is the number of attempts per request, the first send
	// included (default DefaultUDPRetries): the 7750 SR "retry".
	Retries int
	// MaxSockets bounds the sockets opened to each address (default
	// DefaultUDPSockets, at most MaxUDPSocketsLimit). A socket is opened
	// only when every Identifier of the open ones is in use.
	MaxSockets int
	// MaxWaiting bounds the requests waiting for a free Identifier
	// (default DefaultMaxWaiting); beyond it Submit fails with ErrBusy
	// (a client.Client then tries another server, and with none ends the
	// request with that error).
	MaxWaiting int
	// RequireMessageAuthenticator says which replies must carry a
	// Message-Authenticator (BlastRADIUS), as Config's does. A reply
	// without a required one is dropped, counted and logged; the request
	// goes on waiting, and if no other reply comes its TimeoutError also
	// matches radius.ErrNoMessageAuthenticator.
	RequireMessageAuthenticator MessageAuthenticatorMode
	// Logger gets the rate-limited warnings about dropped replies.
	// Default slog.Default().
	Logger *slog.Logger
	// Dial opens a connected datagram socket to addr: each Write sends one
	// datagram and each Read returns one. Default: UDP from an ephemeral
	// port. Tests pass in-memory packet connections.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Failover receives a request that got no reply to any attempt,
	// refused by this server (call.Call.Refuse, with a *TimeoutError), to
	// be tried at another server; it runs on a timer's goroutine, without
	// the peer's locks. Nil: the request fails with the *TimeoutError.
	// Package client sets it for the servers it dials.
	Failover call.Failover
	// Replied, when set, is told of every verified reply from the server,
	// before it completes its request: also of a late one, to a request
	// already complete (its caller gave up, another server answered
	// first) or given up on here, and of a duplicate. Each shows the
	// server alive. It runs on the reader's goroutine, without the
	// peer's locks. Package client sets its own, which calls the one its
	// template has after it: any reply keeps a server in service (package
	// policy's down-timeout). Close waits for the readers: called from
	// Replied, it returns only when its ctx ends.
	Replied func(from call.Carrier)
}

func (c UDPConfig) validate() (UDPConfig, error) {
	if len(c.Secret) == 0 {
		return c, fmt.Errorf("radpeer: %w: no shared secret", ErrConfig)
	}
	if c.Timeout < 0 || c.Retries < 0 || c.MaxSockets < 0 || c.MaxWaiting < 0 {
		return c, fmt.Errorf("radpeer: %w: negative timeout, retries, sockets or waiting bound", ErrConfig)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultUDPTimeout
	}
	if c.Retries == 0 {
		c.Retries = DefaultUDPRetries
	}
	if c.MaxSockets == 0 {
		c.MaxSockets = DefaultUDPSockets
	}
	if c.MaxSockets > MaxUDPSocketsLimit {
		return c, fmt.Errorf("radpeer: %w: MaxSockets %d above %d", ErrConfig, c.MaxSockets, MaxUDPSocketsLimit)
	}
	if c.MaxWaiting == 0 {
		c.MaxWaiting = DefaultMaxWaiting
	}
	if c.RequireMessageAuthenticator > RequireMANever {
		return c, fmt.Errorf("radpeer: %w: RequireMessageAuthenticator %s", ErrConfig, c.RequireMessageAuthenticator)
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

// UDPStats are a UDPPeer's counters.
type UDPStats struct {
	Sent            uint64 `json:"sent"`            // first sends
	Retransmissions uint64 `json:"retransmissions"` // byte-identical copies sent again
	Answered        uint64 `json:"answered"`
	TimedOut        uint64 `json:"timed_out"`   // every attempt unanswered
	Late            uint64 `json:"late"`        // verified replies to a request given up on
	Duplicates      uint64 `json:"duplicates"`  // verified replies to a request answered already
	BadReplies      uint64 `json:"bad_replies"` // dropped: malformed, unmatched or failing verification
	// NoMA counts replies dropped for want of a required
	// Message-Authenticator (not in BadReplies).
	NoMA     uint64 `json:"no_ma"`
	Sockets  int    `json:"sockets"`
	InFlight int    `json:"in_flight"` // Identifiers held, by requests and by late-reply reservations
	Waiting  int    `json:"waiting"`   // requests waiting for an Identifier
}

// UDPPeer is the client side of one RADIUS server over UDP (radius://):
// sockets from ephemeral ports (one, more when every Identifier is in
// use), requests sent and retransmitted byte for byte from the same
// socket with the same Identifier and authenticator every Timeout up to
// Retries attempts (RFC 2865 2.5, RFC 5080 2.10), replies matched by
// Identifier and verified against the request's authenticator.
// Identifiers are reused least recently first (RFC 5080 2.2.2).
//
// A request that got no reply to any attempt is refused by this server
// and handed to Failover, as a Diameter peer hands on a request answered
// too busy: the dispatcher sends it to another server, each at most once.
// Its Identifier stays reserved for one more Timeout, so that a late
// reply is recognised (counted, and delivered if the caller has no
// answer yet) rather than taken for the answer of the next request. A
// reply that arrives after that, or after its request was answered, is
// dropped and counted.
//
// A UDPPeer is a call.Carrier; Exchange sends one request on its own. Its
// methods are safe for concurrent use.
type UDPPeer struct {
	url string
	cfg UDPConfig
	h   call.Conn // the handle of every send: a request goes to a server once

	auth, acct *udpAddr // acct nil: auth takes everything

	mu      sync.Mutex
	closed  atomic.Bool         // set under mu; InService reads it without
	sending map[*rcall]*udpSend // requests boarded here and not yet ended
	drained chan struct{}       // closed when sending empties after Close began; nil before
	// shut: Close's drain is over (or its ctx ended) and the sockets are
	// being closed. Until then, while closed, the timers, the readers and
	// the Identifiers freed go on working, so that what is in flight can
	// finish. Under mu.
	shut bool
	// ending counts the requests taken out of sending whose completion
	// (an answer, an error, a refusal) still runs, after mu: Close's
	// drain waits for them too, or Close could return before a request it
	// drained was answered or refused. Not for the hand-over to Failover
	// that follows a refusal (see giveUp). Added to under mu, see
	// endDone.
	ending atomic.Int64
	wg     sync.WaitGroup // socket readers
	// dials counts the goroutines opening sockets, until they have
	// opened them or refused the requests waiting for them; a failed
	// dial's hand-over to Failover runs after, uncounted, so that a
	// Failover may Close the peer.
	dials  sync.WaitGroup
	ndials atomic.Int32 // dials' count, read without waiting

	sent, retrans, answered, timedOut, late, dups, bad, noMA atomic.Uint64
}

// udpAddr is one address of the server and its sockets. Under UDPPeer.mu.
type udpAddr struct {
	addr    string
	socks   []*udpSocket
	dialing bool
	waiting []*udpSend // FIFO of requests waiting for an Identifier
}

type udpSocket struct {
	c    net.Conn
	free idRing256
	pend [IDsPerSocket]*udpSend
	last [IDsPerSocket]lastUse
	// prev is the use of each Identifier before last: a reply to it (a
	// duplicate, or late) that comes once the Identifier went to another
	// request fails that request's verification, and is told apart from
	// a reply that verifies against neither.
	prev [IDsPerSocket]lastUse
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

// udpSend is one request at this server: waiting for an Identifier (s
// nil), in flight, or ended and holding its Identifier for a late reply
// (over). Its fields are under UDPPeer.mu.
type udpSend struct {
	rc       *rcall
	at       *udpAddr
	s        *udpSocket
	id       byte
	pkt      []byte
	auth     [radius.AuthenticatorLen]byte
	attempts int // sends so far
	max      int
	noMA     int
	badAuth  int  // replies on its Identifier that failed verification
	over     bool // retries exhausted or the call ended: no more sends
	timer    *time.Timer
	board    call.Boarding // undone when a HandOver takes it before it is sent
}

// idRing256 is a FIFO of free Identifiers: the least recently released
// first.
type idRing256 struct {
	buf        [IDsPerSocket]byte
	head, size int
}

func newRing256() idRing256 {
	var r idRing256
	for i := range r.buf {
		r.buf[i] = byte(i)
	}
	r.size = IDsPerSocket
	return r
}

func (r *idRing256) pop() (byte, bool) {
	if r.size == 0 {
		return 0, false
	}
	id := r.buf[r.head]
	r.head = (r.head + 1) % IDsPerSocket
	r.size--
	return id, true
}

func (r *idRing256) push(id byte) {
	r.buf[(r.head+r.size)%IDsPerSocket] = id
	r.size++
}

// NewUDPPeer returns the peer of the server at rawURL (radius://host:port).
// No socket is opened before the first request.
func NewUDPPeer(rawURL string, cfg UDPConfig) (*UDPPeer, error) {
	addr, err := ParseUDPURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("radpeer: %w: %w", ErrConfig, err)
	}
	c, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	p := &UDPPeer{url: rawURL, cfg: c, auth: &udpAddr{addr: addr}, sending: make(map[*rcall]*udpSend)}
	if c.AccountingAddr != "" && c.AccountingAddr != addr {
		p.acct = &udpAddr{addr: c.AccountingAddr}
	}
	p.h.Init(p, p.retire)
	return p, nil
}

// CheckUDP reports whether NewUDPPeer would take rawURL and cfg, with the
// error it would return, without making the peer.
func CheckUDP(rawURL string, cfg UDPConfig) error {
	if _, err := ParseUDPURL(rawURL); err != nil {
		return fmt.Errorf("radpeer: %w: %w", ErrConfig, err)
	}
	_, err := cfg.validate()
	return err
}

// Name returns the server's URL.
func (p *UDPPeer) Name() string { return p.url }

// Config returns the configuration with the defaults filled in.
func (p *UDPPeer) Config() UDPConfig { return p.cfg }

// InService reports whether the peer takes requests: until Close. Which
// servers answer is the dispatcher's to track (package policy's states).
func (p *UDPPeer) InService() bool { return !p.closed.Load() }

// Avoids reports whether c must not be sent here: it was sent to this
// server before (each server at most once).
func (p *UDPPeer) Avoids(c *call.Call) bool { return c.Avoids(&p.h, p) }

// HandOver hands the requests waiting for an Identifier here (never
// sent to this server), but those keep reports true for (keep may be
// nil), to Config.Failover with reason (call.Carrier). They go in the
// order they came to each address: the authentication address's, then
// the accounting address's when the server has one (the two never share
// a queue, as the throttle's classes do not). A dispatcher that decided
// the server does not answer (a server policy's down-timeout) gets them
// back at once instead of their waiting for Identifiers held by
// unanswered requests and then being sent to it. They are not refused here: the server may get them
// again once it is back in service. The requests in flight are left to
// their retransmissions, each handed to Failover on its own once they go
// unanswered (Timeout x Retries, which is also a server policy's default
// down-timeout), as a RADIUS client retries a server before the next.
// Without a Failover, or once closing, it moves nothing. done, if not
// nil, is called on HandOver's goroutine once the requests moved have
// gone to Failover (see call.Carrier).
func (p *UDPPeer) HandOver(reason string, keep func(*call.Call) bool, done func()) {
	if done != nil {
		defer done()
	}
	if p.cfg.Failover == nil {
		return
	}
	var out []*call.Call
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		return
	}
	for _, at := range []*udpAddr{p.auth, p.acct} {
		if at == nil {
			continue
		}
		stay := at.waiting[:0]
		for _, w := range at.waiting {
			switch {
			case w.over || w.rc.IsDone():
				// pruned
			case keep != nil && keep(&w.rc.Call):
				stay = append(stay, w)
			default:
				w.over = true
				delete(p.sending, w.rc)
				w.rc.Unboard(&p.h, w.board)
				out = append(out, &w.rc.Call)
			}
		}
		clear(at.waiting[len(stay):])
		at.waiting = stay
	}
	p.checkDrained()
	p.mu.Unlock()
	if len(out) > 0 {
		p.cfg.Failover(p, out, reason)
	}
}

// SubmitAll is Submit for a batch, in order (call.Carrier): the calls
// sent here before come back in refused; on error none was sent.
func (p *UDPPeer) SubmitAll(calls []*call.Call) (refused []*call.Call, err error) {
	return submitEach(p.Submit, calls)
}

// Exchange sends r and waits for its verified reply: up to Retries
// attempts, Timeout apart, or until ctx ends. It fails with a
// *TimeoutError when no attempt got a reply.
func (p *UDPPeer) Exchange(ctx context.Context, r *radius.Request) (*Response, error) {
	rc := newCall(r)
	if err := p.Submit(&rc.Call); err != nil {
		return nil, err
	}
	return rc.wait(ctx, time.Duration(p.cfg.Retries+1)*p.cfg.Timeout)
}

// Submit sends c, a call of NewCall, without waiting: its verified reply
// completes it (call.Carrier). It fails with ErrAlreadySent when c was
// sent to this server before, ErrBusy when no Identifier is free, no
// socket may be added and MaxWaiting requests wait already, ErrClosed
// after Close. A call already complete is not sent.
func (p *UDPPeer) Submit(c *call.Call) error {
	rc := rcallOf(c)
	if rc == nil {
		return fmt.Errorf("RADIUS server %s: %w", p.url, ErrOtherProtocol)
	}
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		return fmt.Errorf("RADIUS server %s: %w", p.url, ErrClosed)
	}
	at := p.auth
	if rc.Accounting && p.acct != nil {
		at = p.acct
	}
	if c.RefusedBy(p) { // each server at most once
		p.mu.Unlock()
		return fmt.Errorf("RADIUS server %s: %w", p.url, ErrAlreadySent)
	}
	free := at.freeSlot()
	if free == nil && len(at.waiting) >= p.cfg.MaxWaiting {
		at.waiting = deleteDone(at.waiting)
	}
	if n := len(at.waiting); free == nil && n >= p.cfg.MaxWaiting+p.dialAllowance(at) {
		p.mu.Unlock()
		err := fmt.Errorf("RADIUS server %s: %w (%d waiting)", p.url, ErrBusy, n)
		c.TurnAway(err) // with no other server to take it, a dispatcher ends it with err
		return err
	}
	rc.Lock()
	board, err := rc.BoardLocked(&p.h)
	rc.Unlock()
	switch {
	case errors.Is(err, call.ErrComplete):
		p.mu.Unlock()
		return nil
	case err != nil:
		p.mu.Unlock()
		return fmt.Errorf("RADIUS server %s: %w", p.url, ErrAlreadySent)
	}
	snd := &udpSend{rc: rc, at: at, max: p.cfg.Retries, board: board}
	if n := c.Attempts(); n > 0 {
		snd.max = n
	}
	p.sending[rc] = snd
	if free == nil {
		at.waiting = append(at.waiting, snd)
		dial := !at.dialing && len(at.socks) < p.cfg.MaxSockets
		if dial {
			at.dialing = true
			// On a goroutine of its own: a failed dial hands the waiting
			// requests to Failover, which must not run on Submit's caller
			// (a dispatcher in the middle of a batch).
			p.dials.Add(1)
			p.ndials.Add(1)
			go func() {
				ws, err := p.openSocket(at)
				p.ndials.Add(-1)
				p.dials.Done()
				if ws != nil {
					p.dialFailed(ws, err)
				}
			}()
		}
		p.mu.Unlock()
		return nil
	}
	id, _ := free.free.pop()
	if err := p.place(snd, free, id); err != nil {
		p.mu.Unlock()
		rc.Fail(err) // no packet: no server can take it
		p.endDone(1)
		return nil
	}
	p.mu.Unlock()
	p.transmit(snd)
	return nil
}

// dialAllowance is how many more requests may wait while sockets are
// still to be opened: those the sockets still allowed will take. p.mu is
// held.
func (p *UDPPeer) dialAllowance(at *udpAddr) int {
	return (p.cfg.MaxSockets - len(at.socks)) * IDsPerSocket
}

func deleteDone(w []*udpSend) []*udpSend {
	out := w[:0]
	for _, s := range w {
		if !s.rc.IsDone() {
			out = append(out, s)
		}
	}
	clear(w[len(out):])
	return out
}

// freeSlot returns the first socket with a free Identifier. p.mu is held.
func (at *udpAddr) freeSlot() *udpSocket {
	for _, s := range at.socks {
		if s.free.size > 0 {
			return s
		}
	}
	return nil
}

// place gives snd Identifier id of s and encodes its packet. p.mu is
// held. A request that cannot be encoded (too long, a bad attribute) can
// be sent nowhere: it is taken off, the Identifier given back, and the
// caller fails it with the error after the lock.
func (p *UDPPeer) place(snd *udpSend, s *udpSocket, id byte) error {
	pkt, auth, err := snd.rc.encode(id, p.cfg.Secret)
	if err != nil {
		snd.over = true
		s.free.push(id)
		delete(p.sending, snd.rc)
		p.ending.Add(1) // the caller fails it
		return fmt.Errorf("RADIUS server %s: %w", p.url, err)
	}
	snd.s, snd.id = s, id
	snd.pkt, snd.auth = pkt, auth
	s.pend[id] = snd
	s.prev[id] = s.last[id]
	s.last[id] = lastUse{auth: auth, code: snd.rc.req.Code, used: true}
	snd.timer = time.AfterFunc(p.cfg.Timeout, func() { p.expire(snd) })
	return nil
}

// placed is what a release or a new socket did for the requests waiting
// for an Identifier: those to transmit, and those that failed to encode,
// each with its error. Carried out after p.mu by run.
type placed struct {
	send []*udpSend
	fail []*udpSend
	errs []error
}

func (pl *placed) add(snd *udpSend, err error) {
	if err != nil {
		pl.fail, pl.errs = append(pl.fail, snd), append(pl.errs, err)
	} else {
		pl.send = append(pl.send, snd)
	}
}

// run transmits and fails what pl holds; p.mu is not held.
func (p *UDPPeer) run(pl placed) {
	for _, snd := range pl.send {
		p.transmit(snd)
	}
	for i, snd := range pl.fail {
		snd.rc.Fail(pl.errs[i])
	}
	if len(pl.fail) > 0 {
		p.endDone(len(pl.fail))
	}
}

// transmit sends snd's packet once more (its first send included).
func (p *UDPPeer) transmit(snd *udpSend) {
	p.mu.Lock()
	if snd.over || snd.s == nil {
		p.mu.Unlock()
		return
	}
	snd.attempts++
	first := snd.attempts == 1
	pkt, c := snd.pkt, snd.s.c
	p.mu.Unlock()
	if first {
		p.sent.Add(1)
	} else {
		p.retrans.Add(1)
	}
	// A write error (an ICMP port unreachable reported on a connected
	// socket) is an unanswered attempt: the timer decides.
	_, _ = c.Write(pkt)
}

// expire runs when snd's attempt got no reply within Timeout: send it
// again, or, its attempts spent, refuse it; and once over, release its
// Identifier after one more Timeout for a late reply.
func (p *UDPPeer) expire(snd *udpSend) {
	p.mu.Lock()
	// p.shut, not p.closed: during Close's drain a request goes on being
	// retransmitted and given up on, or the drain could only end with
	// replies (one lost reply held Close until its ctx ended).
	if p.shut || snd.s == nil || snd.s.pend[snd.id] != snd {
		p.mu.Unlock()
		return // answered, released, or Close took it
	}
	if snd.over {
		pl := p.releaseLocked(snd, false)
		p.mu.Unlock()
		p.run(pl)
		return
	}
	if snd.attempts < snd.max {
		snd.timer.Reset(p.cfg.Timeout)
		p.mu.Unlock()
		p.transmit(snd)
		return
	}
	snd.over = true
	snd.timer.Reset(p.cfg.Timeout) // the late-reply reservation
	delete(p.sending, snd.rc)
	p.ending.Add(1)
	terr := &TimeoutError{Server: p.url, Attempts: snd.attempts, Timeout: p.cfg.Timeout, NoMessageAuthenticator: snd.noMA, FailedVerification: snd.badAuth}
	p.mu.Unlock()
	p.timedOut.Add(1)
	p.giveUp(snd.rc, terr, fmt.Sprintf("no reply to %d attempt(s), %v apart", snd.attempts, p.cfg.Timeout))
}

// giveUp hands rc, which this server could not answer, to Failover as
// refused here with err, or fails it with err without one; rc counts in
// ending, which it leaves once refused or failed, before Failover runs:
// Close's drain does not wait for a hand-over, which may itself close
// the peer (a subscriber of the dispatcher's events may). p.mu is not
// held.
func (p *UDPPeer) giveUp(rc *rcall, err error, reason string) {
	if p.cfg.Failover == nil {
		rc.Fail(err)
		p.endDone(1)
		return
	}
	refused := rc.Refuse(&p.h, nil, 0, err)
	p.endDone(1)
	if refused {
		p.cfg.Failover(p, []*call.Call{&rc.Call}, reason)
	}
}

// releaseLocked frees snd's Identifier, to the first request waiting for
// one or to the tail of the socket's ring. p.mu is held; the caller runs
// what it returns once it lets go.
func (p *UDPPeer) releaseLocked(snd *udpSend, answered bool) (pl placed) {
	s, id := snd.s, snd.id
	if s == nil || s.pend[id] != snd {
		return pl
	}
	s.pend[id] = nil
	s.last[id].answered = answered
	if snd.timer != nil {
		snd.timer.Stop()
	}
	// p.shut, not p.closed: during Close's drain the requests waiting for
	// an Identifier still get the ones freed, or they would wait, and hold
	// Close, until its ctx ended.
	if p.shut {
		return pl
	}
	at := snd.at
	for len(at.waiting) > 0 {
		w := at.waiting[0]
		at.waiting[0] = nil
		at.waiting = at.waiting[1:]
		if w.over || w.rc.IsDone() {
			continue
		}
		err := p.place(w, s, id)
		pl.add(w, err)
		if err == nil {
			return pl
		}
		// place gave the Identifier back to the ring: take it again for
		// the next waiter.
		id, _ = s.free.pop()
	}
	s.free.push(id)
	return pl
}

// openSocket opens a socket to at and gives its Identifiers to the
// requests waiting there; it opens more while requests still wait and the
// bound allows. When a dial fails, it returns the requests that were
// waiting, taken off, for dialFailed, and the error.
func (p *UDPPeer) openSocket(at *udpAddr) ([]*udpSend, error) {
	for {
		// Bounded by one attempt's Timeout: a host name's lookup runs on
		// the goroutine of the Submit that found every Identifier taken.
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Timeout)
		conn, err := p.cfg.Dial(ctx, at.addr)
		cancel()
		p.mu.Lock()
		at.dialing = false
		if err != nil {
			// The waiting requests go to another server, as if this one
			// had not replied.
			ws := at.waiting
			at.waiting = nil
			for _, w := range ws {
				w.over = true
				delete(p.sending, w.rc)
			}
			p.ending.Add(int64(len(ws)))
			p.mu.Unlock()
			if ws == nil {
				ws = []*udpSend{}
			}
			return ws, fmt.Errorf("RADIUS server %s: opening a socket to %s: %w", p.url, at.addr, err)
		}
		// p.shut, not p.closed: a socket opened during Close's drain
		// serves the requests waiting for it; once Close collected the
		// sockets to close, it would be left open.
		if p.shut {
			p.mu.Unlock()
			conn.Close()
			return nil, nil
		}
		s := &udpSocket{c: conn, free: newRing256()}
		at.socks = append(at.socks, s)
		var pl placed
		for len(at.waiting) > 0 && s.free.size > 0 {
			w := at.waiting[0]
			at.waiting[0] = nil
			at.waiting = at.waiting[1:]
			if w.over || w.rc.IsDone() {
				continue
			}
			id, _ := s.free.pop()
			pl.add(w, p.place(w, s, id))
		}
		again := len(at.waiting) > 0 && len(at.socks) < p.cfg.MaxSockets
		at.dialing = again
		p.wg.Add(1)
		go p.read(s)
		p.mu.Unlock()
		p.run(pl)
		if !again {
			return nil, nil
		}
	}
}

// dialFailed refuses ws, the requests that waited for a socket whose dial
// failed with err, and hands them to Failover in one batch (fails them
// without one), as if this server had not replied. Every one of them has
// left ending before Failover runs, so that a Failover closing the peer
// does not wait for the others. p.mu is not held.
func (p *UDPPeer) dialFailed(ws []*udpSend, err error) {
	serve.Log(p.cfg.Logger, slog.LevelWarn, serve.KindReadFailed, "RADIUS client: cannot open a UDP socket", "server", p.url, "err", err)
	var out []*call.Call
	for _, w := range ws {
		switch {
		case w.rc.IsDone():
		case p.cfg.Failover == nil:
			w.rc.Fail(err)
		case w.rc.Refuse(&p.h, nil, 0, err):
			out = append(out, &w.rc.Call)
		}
	}
	if len(ws) > 0 {
		p.endDone(len(ws))
	}
	if len(out) > 0 {
		p.cfg.Failover(p, out, err.Error())
	}
}

// retire: c, in flight here, completed without this server's reply (its
// caller's deadline, another server's answer): no more sends; its
// Identifier stays reserved for one more Timeout.
func (p *UDPPeer) retire(c *call.Call, _ bool) {
	rc := rcallOf(c)
	p.mu.Lock()
	defer p.mu.Unlock()
	snd := p.sending[rc]
	if snd == nil {
		return
	}
	delete(p.sending, rc)
	snd.over = true
	if snd.s != nil && snd.timer != nil {
		snd.timer.Reset(p.cfg.Timeout)
	}
	p.checkDrained()
}

// read delivers the replies arriving on s until it is closed.
func (p *UDPPeer) read(s *udpSocket) {
	defer p.wg.Done()
	buf := make([]byte, radius.MaxLength+1)
	for {
		n, err := s.c.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// p.shut, not p.closed: a failed read during Close's drain
			// must not stop the replies that end it.
			p.mu.Lock()
			shut := p.shut
			p.mu.Unlock()
			if shut {
				return
			}
			continue // ICMP errors on a connected socket: the timers decide
		}
		p.datagram(s, buf[:n])
	}
}

// datagram handles one datagram from the server: anything but a verified
// reply to a request of ours is dropped and counted.
func (p *UDPPeer) datagram(s *udpSocket, b []byte) {
	// RFC 2865 section 3: the octets past the Length field are padding, to
	// be ignored on reception (as UDPServer does); Validate alone dropped
	// a padded reply as malformed.
	b = unpad(b)
	if err := radius.Validate(b); err != nil {
		p.bad.Add(1)
		serve.Log(p.cfg.Logger, slog.LevelWarn, serve.KindBadFrame, "RADIUS reply dropped: malformed", "server", p.url, "err", err)
		return
	}
	if radius.IsRequest(radius.Code(b)) {
		p.bad.Add(1)
		serve.Log(p.cfg.Logger, slog.LevelWarn, serve.KindBadRequest, "RADIUS request from the server dropped: a client socket takes no requests",
			"server", p.url, "code", radius.Code(b).String())
		return
	}
	id := radius.Identifier(b)
	p.mu.Lock()
	snd, last, prev := s.pend[id], s.last[id], s.prev[id]
	var auth [radius.AuthenticatorLen]byte
	code := last.code
	if snd != nil {
		auth = snd.auth
	}
	p.mu.Unlock()
	if snd == nil {
		// No request holds this Identifier: a reply to one answered already
		// (duplicate) or released after it was given up on, the last or
		// the one before, or garbage.
		if !p.replyToEarlier(b, last) && !p.replyToEarlier(b, prev) {
			p.unmatched(b)
		}
		return
	}
	if ok, noMA := p.verify(b, code, auth); !ok {
		if !noMA && p.replyToEarlier(b, prev) {
			// A reply to the Identifier's previous request (the copy of
			// a retransmission answered again): not a sign of a
			// mismatched secret, nor anything against this request.
			return
		}
		p.mu.Lock()
		if noMA {
			snd.noMA++
		} else {
			snd.badAuth++
		}
		p.mu.Unlock()
		if !noMA {
			p.unmatched(b)
		}
		return
	}
	raw := append([]byte(nil), b...)
	pkt, err := radius.Decode(raw, p.cfg.Secret)
	if err != nil {
		p.bad.Add(1)
		serve.Log(p.cfg.Logger, slog.LevelWarn, serve.KindBadFrame, "RADIUS reply dropped: cannot be decoded", "server", p.url, "err", err)
		return
	}
	if p.cfg.Replied != nil {
		p.cfg.Replied(p) // before the answer: its caller may look at what it changed
	}
	p.mu.Lock()
	if s.pend[id] != snd {
		p.mu.Unlock() // released between the two looks: late
		p.late.Add(1)
		return
	}
	over, attempts := snd.over, snd.attempts
	counted := p.sending[snd.rc] == snd // in ending until answered
	if counted {
		delete(p.sending, snd.rc)
		p.ending.Add(1)
	}
	snd.over = true
	pl := p.releaseLocked(snd, true)
	p.mu.Unlock()
	p.run(pl)
	resp := &Response{Raw: raw, Packet: pkt, RequestAuthenticator: auth, Server: SchemeUDP + "://" + snd.at.addr, Attempts: attempts}
	ok, owner := snd.rc.answer(resp, &p.h, &p.answered)
	switch {
	case !ok && over:
		p.late.Add(1)
	case !ok:
		p.dups.Add(1)
	case over:
		p.late.Add(1) // given up on here, and still the answer
	}
	if owner != nil && owner != &p.h {
		owner.Retire(&snd.rc.Call, false) // answered here while in flight at another server
	}
	if counted {
		p.endDone(1)
	}
}

// verify checks reply b against a send of code req with authenticator
// auth; a reply dropped for want of a Message-Authenticator is counted
// and logged (noMA), any other failure is the caller's to count.
func (p *UDPPeer) verify(b []byte, req lradius.Code, auth [radius.AuthenticatorLen]byte) (ok, noMA bool) {
	if !radius.Answers(req, radius.Code(b)) {
		return false, false
	}
	err := radius.VerifyResponse(b, auth, p.cfg.Secret, p.cfg.RequireMessageAuthenticator.AnswerNeedsMA(req))
	if errors.Is(err, radius.ErrNoMessageAuthenticator) {
		p.noMA.Add(1)
		serve.Log(p.cfg.Logger, slog.LevelWarn, serve.KindBadAuth,
			"RADIUS reply dropped: no Message-Authenticator (BlastRADIUS); a server that never sends one needs RequireMessageAuthenticator never",
			"server", p.url, "code", radius.Code(b).String(), "id", radius.Identifier(b))
		return false, true
	}
	return err == nil, false
}

// replyToEarlier handles b, a reply on an Identifier not held by the
// request it answers, when it verifies against u, an earlier use of that
// Identifier: counted as a duplicate (u was answered) or a late reply,
// and Replied told (a reply without a required Message-Authenticator is
// counted and logged by verify). False when u is unused or b does not
// verify against it: the caller counts it.
func (p *UDPPeer) replyToEarlier(b []byte, u lastUse) bool {
	if !u.used {
		return false
	}
	ok, noMA := p.verify(b, u.code, u.auth)
	if !ok {
		return noMA
	}
	if p.cfg.Replied != nil {
		p.cfg.Replied(p)
	}
	if u.answered {
		p.dups.Add(1)
	} else {
		p.late.Add(1)
	}
	return true
}

// unmatched counts and logs, at a bounded rate, a reply that matches no
// send or fails its verification.
func (p *UDPPeer) unmatched(b []byte) {
	p.bad.Add(1)
	serve.Log(p.cfg.Logger, slog.LevelWarn, serve.KindUnmatched, "RADIUS reply dropped: it matches no request, or fails verification (shared secret mismatch?)",
		"server", p.url, "code", radius.Code(b).String(), "id", radius.Identifier(b))
}

// endDone: n requests counted in ending have been answered, failed or
// refused; the last one lets Close's drain end. It reads closed after
// its decrement and Close sets closed before it reads ending: one of the
// two sees the other. p.mu is not held.
func (p *UDPPeer) endDone(n int) {
	if p.ending.Add(-int64(n)) == 0 && p.closed.Load() {
		p.mu.Lock()
		p.checkDrained()
		p.mu.Unlock()
	}
}

// checkDrained signals Close once nothing is in flight, or still being
// answered, failed or refused (ending). p.mu is held.
func (p *UDPPeer) checkDrained() {
	if p.drained != nil && len(p.sending) == 0 && p.ending.Load() == 0 {
		select {
		case <-p.drained:
		default:
			close(p.drained)
		}
	}
}

// Stats returns the counters.
func (p *UDPPeer) Stats() UDPStats {
	p.mu.Lock()
	var st UDPStats
	for _, at := range []*udpAddr{p.auth, p.acct} {
		if at == nil {
			continue
		}
		st.Sockets += len(at.socks)
		st.Waiting += len(at.waiting)
		for _, s := range at.socks {
			st.InFlight += IDsPerSocket - s.free.size
		}
	}
	p.mu.Unlock()
	st.Sent, st.Retransmissions, st.Answered = p.sent.Load(), p.retrans.Load(), p.answered.Load()
	st.TimedOut, st.Late, st.Duplicates, st.BadReplies = p.timedOut.Load(), p.late.Load(), p.dups.Load(), p.bad.Load()
	st.NoMA = p.noMA.Load()
	return st
}

// Close stops taking requests, lets those in flight finish until ctx
// ends, then closes the sockets: the requests still in flight fail with
// ErrClosed. It returns once the sockets' readers have ended; a socket
// still being opened is waited for until ctx ends (ctx's error then). A
// later Close waits for the first one's drain, or returns ctx's error
// when ctx ends first. Close may be called from Failover: the drain does
// not wait for the hand-over that called it.
func (p *UDPPeer) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.drained != nil {
		d := p.drained
		p.mu.Unlock()
		select {
		case <-d: // drained already: a done ctx does not matter
		default:
			select {
			case <-d:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return p.waitGoroutines(ctx)
	}
	p.closed.Store(true)
	p.drained = make(chan struct{})
	p.checkDrained()
	d := p.drained
	p.mu.Unlock()
	select {
	case <-d:
	case <-ctx.Done():
	}
	p.mu.Lock()
	p.shut = true
	var rest []*rcall
	for rc := range p.sending {
		rest = append(rest, rc)
	}
	clear(p.sending)
	p.checkDrained()
	var socks []*udpSocket
	for _, at := range []*udpAddr{p.auth, p.acct} {
		if at == nil {
			continue
		}
		socks = append(socks, at.socks...)
		at.waiting = nil
		for _, s := range at.socks {
			for _, snd := range s.pend {
				if snd != nil && snd.timer != nil {
					snd.timer.Stop()
				}
			}
		}
	}
	p.mu.Unlock()
	for _, rc := range rest {
		rc.Finish(nil, 0, fmt.Errorf("RADIUS server %s: %w", p.url, ErrClosed), &p.h, nil)
	}
	for _, s := range socks {
		s.c.Close()
	}
	return p.waitGoroutines(ctx)
}

// waitGoroutines waits for the socket readers, which end once Close has
// closed their sockets, and for the sockets still being opened (a dial
// takes up to Timeout) until ctx ends.
func (p *UDPPeer) waitGoroutines(ctx context.Context) error {
	p.wg.Wait()
	if p.ndials.Load() == 0 {
		return nil
	}
	done := make(chan struct{})
	go func() {
		p.dials.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
