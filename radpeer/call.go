package radpeer

import (
	"context"
	"errors"
	"time"

	"github.com/aaatp/aaatp/internal/call"
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
	// that is still OKAY, or on every OKAY one (RFC 6613 2.6.1): it goes
	// to another server, or waits.
	ErrAlreadySent = errors.New("request already sent on a connection of this server that is in service")
	// ErrConfig is matched by configuration errors.
	ErrConfig = errors.New("radpeer: invalid configuration")
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
}

// newCall wraps a request, its routing key (User-Name, Acct-Session-Id)
// filled in. The call keeps r: do not change it afterwards.
func newCall(r *radius.Request) *rcall {
	c := &rcall{req: r}
	c.Init()
	c.Proto = c
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

func rcallOf(c *call.Call) *rcall { return c.Proto.(*rcall) }

// wait is call.Call.Wait with the answer as a *Response.
func (c *rcall) wait(ctx context.Context, timeout time.Duration) (*Response, error) {
	_, aux, err := c.Wait(ctx, timeout)
	if err != nil {
		return nil, err
	}
	return aux.(*Response), nil
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

// carrier is a Peer as the dispatching layer sees it (call.Carrier).
type carrier struct{ p *Peer }

func (k carrier) InService() bool           { return k.p.InService() }
func (k carrier) Submit(c *call.Call) error { return k.p.submit(rcallOf(c)) }
func (k carrier) Avoids(c *call.Call) bool  { return k.p.avoids(c) }
func (k carrier) SubmitAll(calls []*call.Call) (refused []*call.Call, err error) {
	for i, c := range calls {
		switch err := k.p.submit(rcallOf(c)); {
		case err == nil:
		case errors.Is(err, ErrAlreadySent):
			refused = append(refused, c)
		case i == 0:
			return nil, err
		default:
			refused = append(refused, calls[i:]...) // the peer left service meanwhile
			return refused, nil
		}
	}
	return refused, nil
}

func init() {
	call.RADIUS.New = func(r *radius.Request) *call.Call { return &newCall(r).Call }
	call.RADIUS.Carrier = func(p any) call.Carrier { return carrier{p.(*Peer)} }
	call.RADIUS.WithFailover = func(cfg any, f call.Failover) { cfg.(*Config).onFailover = f }
}
