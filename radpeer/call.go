package radpeer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// Errors a call can end with. Match them with errors.Is.
// The errors a call ends with are package peer's, so that code handling
// Diameter and RADIUS calls matches one set; the RADIUS-only ones follow.
var (
	// ErrNotInService: no connection of the server is OKAY.
	ErrNotInService = peer.ErrNotInService
	// ErrConnectionLost: the connection closed before the answer came and
	// no failover hook took the request.
	ErrConnectionLost = peer.ErrConnectionLost
	// ErrTimeout: no answer before the deadline.
	ErrTimeout = peer.ErrTimeout
	// ErrClosed: the Peer was closed.
	ErrClosed = peer.ErrClosed
	// ErrBusy: every Identifier of every connection is in use, no further
	// connection may be opened and the wait queue is full.
	ErrBusy = errors.New("RADIUS peer busy: no free Identifier and the wait queue is full")
	// ErrAlreadySent: the request was sent on a connection of this server
	// that is still OKAY, or recycled and still open, or on every OKAY one
	// (RFC 6613 2.6.1): it goes to another server, or waits.
	ErrAlreadySent = peer.ErrAlreadySent
	// ErrOtherProtocol: a call of another protocol was submitted.
	ErrOtherProtocol = peer.ErrOtherProtocol
	// ErrConfig is matched by configuration errors; it is package peer's.
	ErrConfig = peer.ErrConfig
)

// NotInServiceError says in which watchdog state the server was; it
// matches ErrNotInService.
type NotInServiceError = peer.NotInServiceError

// Response is a verified answer.
type Response struct {
	// Raw is the packet as received.
	Raw []byte
	// Packet is Raw decoded, with the Secret of the connection it came
	// on (to decrypt hidden attributes with RequestAuthenticator).
	Packet *lradius.Packet
	// RequestAuthenticator is the authenticator of the send it answers.
	RequestAuthenticator [radius.AuthenticatorLen]byte
	// Peer is the server that answered (nil over UDP).
	Peer *Peer
	// Server is the radius:// URL of the address that answered over UDP
	// (a server's accounting address for Accounting-Requests when it has
	// one); "" over TCP and TLS: see Peer.
	Server string
	// Attempts is how many times the packet had been sent when the reply
	// came (UDP; 1 over TCP and TLS).
	Attempts int
}

// rcall is a RADIUS request on its way to an answer: the shared
// lifecycle (call.Call) and the request. It completes exactly once: the
// first of a verified answer, an error or the caller's deadline wins, so
// a caller never sees two answers even when a failover left the request
// pending on two connections. Each send (the first, and a replay on
// another server after a failover) gets an Identifier of its connection
// and is encoded and signed afresh with that connection's secret: a new
// Request Authenticator and Message-Authenticator, hidden attributes
// re-encrypted.
type rcall struct {
	call.Call
	req *radius.Request // read only
	// made is when the call was made: an Accounting-Request's
	// Acct-Delay-Time grows by the whole seconds since (encoded).
	made time.Time
	// resp is the answer that completes the call, set once by the first
	// verified answer, before Finish.
	resp atomic.Pointer[Response]
}

// requestNumbers numbers the calls of this process (nextRef).
var requestNumbers atomic.Uint32

// nextRef returns the next request number: never 0, which names no
// request; it wraps after 2^32-1 calls.
func nextRef() uint32 {
	for {
		if n := requestNumbers.Add(1); n != 0 {
			return n
		}
	}
}

// newCall wraps a request, its routing key (User-Name, Acct-Session-Id)
// filled in, and its request number as its Ref. The call keeps r: do not
// change it afterwards.
func newCall(r *radius.Request) *rcall {
	c := &rcall{req: r}
	c.Init()
	c.Proto = c
	c.Ref = nextRef()
	if r.Code == lradius.CodeAccountingRequest {
		c.made = time.Now()
	}
	for _, a := range r.Attributes {
		switch a.Type {
		case radius.AttrUserName:
			c.Key.NAI = a.Attribute
		case radius.AttrAcctSessionID:
			c.Key.SessionID = a.Attribute
		}
	}
	c.Accounting = r.Code == lradius.CodeAccountingRequest
	return c
}

// encode encodes the request for a new send with Identifier id: an
// Accounting-Request with its Acct-Delay-Time increased by the whole
// seconds since the call was made (radius.Request.WithAcctDelay), so that
// a record re-sent to another server, or sent late after waiting, says
// how late it is. A record that the attribute would take past the
// largest packet goes as its caller made it, rather than nowhere. A
// retransmission re-sends the packet of its send unchanged.
func (c *rcall) encode(id byte, secret []byte) ([]byte, [radius.AuthenticatorLen]byte, error) {
	r := c.req
	if !c.made.IsZero() {
		secs := time.Since(c.made) / time.Second
		if secs > math.MaxUint32 {
			secs = math.MaxUint32
		}
		r = c.req.WithAcctDelay(uint32(secs))
	}
	b, auth, err := radius.EncodeRequest(r, id, secret)
	if err != nil && r != c.req {
		return radius.EncodeRequest(c.req, id, secret)
	}
	return b, auth, err
}

// Lifecycle returns the Call c embeds (call.Payload).
func (c *rcall) Lifecycle() *call.Call { return &c.Call }

// rcallOf returns the RADIUS record of a call, nil when it is another
// protocol's.
func rcallOf(c *call.Call) *rcall {
	r, _ := c.Proto.(*rcall)
	return r
}

// NewCall makes a call of a RADIUS request for a dispatcher (package
// client), its routing key (User-Name, Acct-Session-Id) filled in. Its Ref
// is the request's number: unique among the calls this process made
// (numbered from 1, never 0, wrapping after 2^32-1 of them), the same
// across all its sends, so that failover records name it as they name a
// Diameter request by its End-to-End id. It is not sent: a RADIUS packet
// carries only the Identifier of each send.
//
// An Accounting-Request's Acct-Delay-Time (RFC 2866 5.2) is kept up to
// date: each send encoded afresh (the first, a re-send to another server
// or on another connection) carries the caller's value plus the whole
// seconds since NewCall, and a record sent a second or more late gets the
// attribute when the caller left it out; a retransmission to the same
// server repeats its packet byte for byte (RFC 5080 2.2.1). Servers'
// duplicate detection is not affected: AccountingKey leaves the
// attribute out. The call keeps r: do not change it afterwards.
func NewCall(r *radius.Request) *call.Call { return &newCall(r).Call }

// ResponseOf returns the answer that completed c, a call of NewCall; nil
// when c did not complete with an answer.
func ResponseOf(c *call.Call) *Response {
	if r := rcallOf(c); r != nil && c.State() == call.Answered {
		return r.resp.Load()
	}
	return nil
}

// answer completes cl with resp, the answer that came on from, unless an
// answer or an error completed it before; it counts it in cnt. See
// call.Call.Finish.
func (c *rcall) answer(resp *Response, from *call.Conn, cnt *atomic.Uint64) (ok bool, owner *call.Conn) {
	if !c.resp.CompareAndSwap(nil, resp) {
		return false, nil
	}
	var code uint32
	if len(resp.Raw) > 0 {
		code = uint32(resp.Raw[0]) // the packet's Code
	}
	return c.Finish(resp.Raw, code, nil, from, cnt)
}

// wait is call.Call.Wait with the answer as a *Response.
func (c *rcall) wait(ctx context.Context, timeout time.Duration) (*Response, error) {
	if _, err := c.Wait(ctx, timeout); err != nil {
		return nil, err
	}
	return c.resp.Load(), nil
}

// retireCall: a call in flight on c completed without its answer. Its
// Identifier stays reserved until the answer comes or the connection
// closes: reusing it earlier would make the late answer fail
// verification against the next request (c.h's retire). On a recycled
// connection, the last live call ending closes it.
func (c *conn) retireCall(_ *call.Call, timedOut bool) {
	p := c.l.p
	if timedOut {
		p.stats.timedOut.Add(1)
	}
	if c.recycling.Load() {
		p.mu.Lock()
		p.closeIfDrained(c.l, c)
		p.unlock()
	}
}

// Submit sends c, a call of NewCall, without waiting: its answer
// completes it (call.Carrier). See Exchange for the errors.
func (p *Peer) Submit(c *call.Call) error {
	rc := rcallOf(c)
	if rc == nil {
		return fmt.Errorf("RADIUS server %s: %w", p.url, ErrOtherProtocol)
	}
	return p.submit(rc)
}

// SubmitAll is Submit for a batch, in order (call.Carrier): the calls
// this server may not take now (ErrAlreadySent) come back in refused; on
// error none was sent.
func (p *Peer) SubmitAll(calls []*call.Call) (refused []*call.Call, err error) {
	return submitEach(p.Submit, calls)
}

// submitEach is SubmitAll for a peer that submits one call at a time: the
// calls it may not take (ErrAlreadySent, or ErrBusy: no Identifier free
// for that one, which a server's other address may still have for the
// next) come back in refused, and the rest of the batch once it fails
// otherwise (it left service meanwhile); an error on the first call is
// returned, none sent.
func submitEach(submit func(*call.Call) error, calls []*call.Call) (refused []*call.Call, err error) {
	for i, c := range calls {
		switch err := submit(c); {
		case err == nil:
		case errors.Is(err, ErrAlreadySent), errors.Is(err, ErrBusy):
			refused = append(refused, c)
		case i == 0:
			return nil, err
		default:
			refused = append(refused, calls[i:]...)
			return refused, nil
		}
	}
	return refused, nil
}

// Avoids reports whether c must not be submitted here now (call.Carrier):
// it was sent on a connection of this server that is still OKAY, or on
// one recycled and not closed yet (it is pending there, or was answered
// too late: RFC 6613 2.6.1 forbids sending it on another connection of
// the same server meanwhile), or no OKAY connection is left that it was
// not sent on.
func (p *Peer) Avoids(c *call.Call) bool { return p.avoids(c) }

// HandOver moves every request in flight on the server's connections,
// and those waiting for one, but those keep reports true for (keep may
// be nil), to Config.Failover with reason, as a watchdog failover does
// (in send order for each connection), and keeps the connections and
// their watchdogs (call.Carrier): for a dispatcher that decided, above
// the watchdog, that the server does not answer (a server policy's
// down-timeout). A reply that comes later is still taken, unless the
// request was answered elsewhere first. Without a Failover, or once
// closing, it moves nothing. done, if not nil, is called once the calls
// moved have gone to Failover, on the Peer's notifier (see
// call.Carrier).
func (p *Peer) HandOver(reason string, keep func(*call.Call) bool, done func()) {
	p.mu.Lock()
	if p.cfg.Failover != nil && !p.closing {
		cause := errors.New(reason)
		moves := func(cl *rcall) bool { return keep == nil || !keep(&cl.Call) }
		leave := func(c *conn) []*rcall { return c.leave(moves, cause) }
		for _, l := range p.links {
			for _, c := range slices.Clone(l.draining) {
				p.moveOut(l, leave(c), reason)
				p.closeIfDrained(l, c) // recycled: nothing live left, it goes
			}
			if l.cur != nil {
				p.moveOut(l, leave(l.cur), reason)
			}
		}
		var stay, moved []*rcall
		for _, cl := range p.waiting {
			if moves(cl) {
				moved = append(moved, cl)
			} else {
				stay = append(stay, cl)
			}
		}
		p.waiting = stay
		p.moveOut(p.links[0], moved, reason)
	}
	if done != nil {
		// After the hand-overs above, on the same queue: the notifier
		// calls it in its turn, after them.
		p.notes.Schedule(notice{done: done})
	}
	p.unlock()
}
