package radpeer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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

type result struct {
	resp *Response
	err  error
}

// Call is one RADIUS request on its way to an answer. It completes exactly
// once: the first of a verified answer, an error or the caller's
// deadline wins, so a caller never sees two answers even when a failover
// left the request pending on two connections. Each send (the first, and
// a replay on another server after a failover) gets an Identifier of its
// connection and is encoded and signed afresh with that connection's
// secret: a new Request Authenticator and Message-Authenticator, hidden
// attributes re-encrypted.
//
// Its methods are safe for concurrent use.
type Call struct {
	req   *radius.Request
	owner atomic.Pointer[conn] // where it waits now; nil while moved or queued
	// sentOn lists the connections the request was sent on, each guarded
	// by its Peer's mutex (appended by assign): it is never sent there
	// again, nor to another connection of that server while one of them
	// is OKAY.
	sentMu sync.Mutex
	sentOn []*conn
	sends  atomic.Uint32
	first  atomic.Pointer[Peer]
	by     atomic.Pointer[Peer]
	done   atomic.Bool
	res    chan result
}

// NewCall wraps a request. The Call keeps r: do not change it afterwards.
func NewCall(r *radius.Request) *Call {
	return &Call{req: r, res: make(chan result, 1)}
}

// Request returns the request. Read only.
func (c *Call) Request() *radius.Request { return c.req }

// UserName returns the request's User-Name (the balancing key), if any.
func (c *Call) UserName() (string, bool) {
	for _, a := range c.req.Attributes {
		if a.Type == radius.AttrUserName {
			return string(a.Attribute), true
		}
	}
	return "", false
}

// Sends returns how many times the request was sent.
func (c *Call) Sends() int { return int(c.sends.Load()) }

// FirstPeer returns the server the call was first sent to, nil before.
func (c *Call) FirstPeer() *Peer { return c.first.Load() }

// AnsweredBy returns the server whose answer completed the call.
func (c *Call) AnsweredBy() *Peer { return c.by.Load() }

// IsDone reports whether the call has completed.
func (c *Call) IsDone() bool { return c.done.Load() }

// Fail completes the call with err unless it is complete, and reports
// whether it did.
func (c *Call) Fail(err error) bool {
	if !c.claim() {
		return false
	}
	c.deliver(nil, err)
	return true
}

// Wait waits for the answer until ctx is done, or timeout when ctx has no
// deadline (zero: DefaultRequestTimeout). A call ending without an answer
// fails with an error matching ErrTimeout. Its Identifier stays reserved
// until the answer comes or the connection closes: reusing it earlier
// would make the late answer fail verification against the next request.
func (c *Call) Wait(ctx context.Context, timeout time.Duration) (*Response, error) {
	var expired <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		if timeout <= 0 {
			timeout = DefaultRequestTimeout
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	var err error
	select {
	case r := <-c.res:
		return r.resp, r.err
	case <-ctx.Done():
		err = fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	case <-expired:
		err = fmt.Errorf("%w (%v)", ErrTimeout, timeout)
	}
	if c.Fail(err) {
		if o := c.owner.Load(); o != nil {
			o.l.p.stats.timedOut.Add(1)
		}
	}
	r := <-c.res
	return r.resp, r.err
}

// sentOnOf returns the connections of p the call was sent on.
func (c *Call) sentOnOf(p *Peer) []*conn {
	c.sentMu.Lock()
	defer c.sentMu.Unlock()
	var out []*conn
	for _, cn := range c.sentOn {
		if cn.l.p == p {
			out = append(out, cn)
		}
	}
	return out
}

func (c *Call) addSentOn(cn *conn) {
	c.sentMu.Lock()
	c.sentOn = append(c.sentOn, cn)
	c.sentMu.Unlock()
}

func (c *Call) claim() bool { return c.done.CompareAndSwap(false, true) }

func (c *Call) deliver(resp *Response, err error) { c.res <- result{resp, err} }
