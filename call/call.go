// Package call is the request lifecycle that every protocol peer
// (Diameter's package peer; RADIUS's radpeer, over streams and UDP)
// shares with the layer that dispatches requests over them (package
// client): one Call
// per request across all its sends, a state machine with its legal
// transitions, exactly-once completion, the caller's wait, the
// connections the request was sent on and the peers that refused it.
//
// A protocol peer is a [Carrier]: the dispatcher asks it whether it takes
// requests, submits calls to it and is handed back, through a [Failover]
// function, the calls that left it. The carrier does its own work at send
// time (Diameter: Hop-by-Hop id, T flag, a copy per resend; RADIUS: an
// Identifier, encoding and signing with the server's secret) under the
// Call's lock, through BoardLocked, Leave and Finish. This package imports
// no protocol package.
//
// Most programs use package client, which drives all of this. A Call's
// methods are safe for concurrent use.
package call

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// State is where a request is in its life. A Call is in exactly one
// state; it changes only along the transitions of legal, each made under
// the Call's mutex, so that the goroutines that can act on one request (a
// connection's reader matching an answer, a failover moving it, the
// caller's deadline, a dispatcher re-sending it) never both act.
type State uint8

const (
	// Queued: created, not yet sent on any connection.
	Queued State = iota
	// InFlight: sent on one connection, pending there for its answer.
	InFlight
	// Moved: taken off the connection it was pending on (a failover, a
	// graceful disconnect, a too-busy answer), on its way to another. It
	// is pending nowhere; a late answer on an old connection still
	// completes it.
	Moved
	// Parked: waiting for a connection in service that it was never sent
	// on.
	Parked
	// Answered: an answer was delivered. Final.
	Answered
	// Failed: an error was delivered (deadline, close, unreachable). Final.
	Failed
)

var stateNames = [...]string{"queued", "in-flight", "moved", "parked", "answered", "failed"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", s)
}

// legal[from][to]. The rules behind them:
//   - a request is in flight on at most one connection at a time, and it
//     leaves a connection (Moved) before it is sent on another;
//   - it is never sent again on a connection it was sent on (Board checks
//     the sent-on list), whatever state it comes from;
//   - an answer can complete it in any state but the final ones, because
//     an old connection may answer late while it is moved or parked.
var legal = [6][6]bool{
	Queued:   {InFlight: true, Parked: true, Failed: true},
	InFlight: {Answered: true, Moved: true, Failed: true},
	Moved:    {InFlight: true, Parked: true, Answered: true, Failed: true},
	Parked:   {InFlight: true, Answered: true, Failed: true},
}

// Errors of Board and Wait.
var (
	// ErrTimeout: no answer before the request's deadline.
	ErrTimeout = errors.New("no answer before the deadline")
	// ErrAlreadySent: the call was sent on that connection before.
	ErrAlreadySent = errors.New("request already sent on this connection")
	// ErrComplete: the call has completed.
	ErrComplete = errors.New("request complete")
	// ErrInFlight: the call is pending on another connection; it must
	// leave it first.
	ErrInFlight = errors.New("request in flight on another connection")
)

// ErrConfig is matched by every configuration error of the peers, of
// either protocol, and of the Client over them.
var ErrConfig = errors.New("invalid configuration")

// DefaultTimeout bounds a Wait given no timeout and no deadline.
const DefaultTimeout = 10 * time.Second

// Carrier is a protocol peer (a server and its connections) as the
// dispatcher sees it. Its values are compared: a peer is one pointer.
type Carrier interface {
	// Name names the peer: its Diameter identity or its URL.
	Name() string
	// InService reports whether the peer takes new requests now.
	InService() bool
	// Submit sends c without waiting: its answer completes it. A call
	// already complete is not sent and Submit returns nil. Submit never
	// calls the peer's Failover on its caller's goroutine: a dispatcher
	// submits in the middle of a batch.
	Submit(c *Call) error
	// SubmitAll is Submit for a batch, in order; the calls the peer
	// refused (sent there before) come back for another peer. On error
	// none was sent.
	SubmitAll(calls []*Call) (refused []*Call, err error)
	// Avoids reports whether c must not be sent to this peer now.
	Avoids(c *Call) bool
	// HandOver gives up on the calls pending on the peer, but those keep
	// reports true for (keep may be nil): they go to its Failover with
	// reason, as when its watchdog gives up (in send order for each of its
	// connections), while its connections stay. A dispatcher calls it
	// when it decided that the peer does not answer (a server policy's
	// down-timeout). keep runs under the peer's locks: it must not call
	// the peer. A carrier whose calls go on by themselves when
	// unanswered (RADIUS over UDP) may do nothing. done, if not nil, is
	// called once, never under the peer's locks, when the calls handed
	// over have gone to Failover: on the goroutine that gave them, after
	// them, or as HandOver returns when there were none.
	HandOver(reason string, keep func(*Call) bool, done func())
}

// Failover receives the calls that left a peer, in send order, with why:
// its connection failed or its watchdog gave up on it, it answered them
// too busy, or (RADIUS over UDP) it never replied to any attempt. It runs
// without the peer's locks: send each call elsewhere, park it, or fail it.
type Failover func(from Carrier, calls []*Call, reason string)

// Payload is the protocol's own record of a call, which embeds the Call:
// what its carrier encodes at each send.
type Payload interface {
	// Lifecycle returns the Call the record embeds.
	Lifecycle() *Call
}

// Reader is a Payload whose caller may read its own answer. A carrier
// that wrote the request on the caller's goroutine, with nothing else
// pending on that connection, can let the caller read the connection too
// while it waits: its answer then wakes it from the network directly,
// rather than through another goroutine that read it.
type Reader interface {
	Payload
	// ReadAnswer runs on the caller's goroutine in Await: before Await
	// first parks, again each time Offer wakes it, and once more if an
	// Offer came as the call completed or as its wait was cut short (the
	// call has ended by then). It may read the connection until
	// the call completes or Interrupt is called; whatever it took for
	// that (the right to read the connection) it must hand on before it
	// returns.
	ReadAnswer()
	// Interrupt is called, on any goroutine, when the call completes or
	// its wait is cut short while its caller is in ReadAnswer: a
	// ReadAnswer waiting for the network must return soon.
	Interrupt()
}

// Conn is a connection's handle in the calls sent on it: a protocol
// embeds one in each of its connections, Inits it, and names the
// connection by its address (one word in each call, however many
// connections it was sent on).
type Conn struct {
	peer   Carrier
	retire func(c *Call, timedOut bool)
}

// Init makes cn a connection of peer; retire is told that a call in
// flight on the connection completed without its answer (an error, or
// the caller's deadline when timedOut): take it out of the pending map
// there. It runs without the call's lock.
func (cn *Conn) Init(peer Carrier, retire func(c *Call, timedOut bool)) {
	cn.peer, cn.retire = peer, retire
}

// Peer returns the peer whose connection cn is.
func (cn *Conn) Peer() Carrier { return cn.peer }

// Retire tells the connection that c completed without its answer.
func (cn *Conn) Retire(c *Call, timedOut bool) { cn.retire(c, timedOut) }

// Key is what a dispatcher routes a request on, filled in by its protocol
// when the call is made. The byte slices alias the request: read only.
type Key struct {
	// NAI is the balancing key (User-Name), SessionID the conversation's
	// (Session-Id, Acct-Session-Id); nil when absent.
	NAI, SessionID []byte
	// Dest names the one host the request may go to (Diameter's
	// Destination-Host), "" when none.
	Dest string
}

// result is what completed a call: an answer or err.
type result struct {
	ans  []byte
	code uint32
	err  error
}

// Call is one request and its lifecycle. It completes exactly once: the
// first of an answer, an error, or the caller's deadline wins. Init it
// before use; its methods are then safe for concurrent use.
type Call struct {
	// Key, Ref, Accounting and Proto are set by the protocol before the
	// call is shared and read only afterwards.
	Key Key
	// Proto is the protocol's own record of the call.
	Proto Payload

	holder atomic.Pointer[Holder]
	// wake wakes Wait once the state is final (its L is &mu).
	wake sync.Cond
	// wprev, wnext link the call into the list of its watch while it
	// waits under a context that can end (under that watch's mu);
	// flagWatched (in flags) says an Await has it linked: one at a
	// time, the call having one pair of links.
	wprev, wnext *Call

	// Under mu (the fields are ordered for a small struct: one is made
	// per request):
	first, by Carrier
	owner     *Conn     // InFlight: where it is pending
	sentOn    []*Conn   // every connection it boarded, oldest first
	sentOn0   [2]*Conn  // sentOn's first array: most requests are sent once or twice
	rf        *refusals // nil until a peer refuses it: most calls are never refused
	res       result    // set once, with the final state
	cut       error     // Wait is to end the call with it (cutShort)
	mu        sync.Mutex
	// With a Reader (under mu): awaiting counts the Awaits running,
	// offered says one of them is to run ReadAnswer (Offer), inRead that
	// one does.
	awaiting int32
	offered  bool
	inRead   bool

	// Ref names the request across its sends in failover records: the
	// Diameter End-to-End id, or the number a RADIUS request was given
	// when made; 0 when the protocol has none.
	Ref uint32
	// flags: flagDone, the state is final (read without the mutex);
	// flagWatched, an Await has the call linked in its context's watch;
	// flagTaken, a peer took it (FirstTaken).
	flags atomic.Uint32
	sends atomic.Int32 // written under mu; Sends and Avoids read it without
	// attempts bounds the sends of the request to its next peer over a
	// datagram transport (see SetAttempts).
	attempts atomic.Int32
	state    State // under mu
	// refused: it left its last connection refused (too busy), see
	// Boarding. Under mu.
	refused bool
	// lost: it left a connection it was in flight on without a refusal
	// (a failover, a drain): a server may have applied it, so no other
	// server's refusal may conclude it (Conclude). Under mu.
	lost bool
	// leftRefused: its last leave was a refusal (Refuse), not a loss
	// (Leave). Under mu.
	leftRefused bool
	// Accounting: the request is accounting traffic (the throttle's
	// class), not authentication or authorization.
	Accounting bool
	// Deadline is when the caller stops waiting for the answer, as the
	// dispatcher set it (zero: unknown).
	Deadline time.Time
}

// Init readies c for use.
func (c *Call) Init() {
	c.wake.L = &c.mu
	c.sentOn = c.sentOn0[:0]
}

// to changes the state; c.mu is held. An illegal transition is a bug: it
// panics rather than lose or duplicate a request.
func (c *Call) to(next State) {
	if !legal[c.state][next] {
		panic(fmt.Sprintf("call: request %d: illegal transition %s -> %s", c.Ref, c.state, next))
	}
	c.state = next
	if next >= Answered {
		c.flags.Or(flagDone)
	}
}

func (c *Call) final() bool { return c.state >= Answered }

// Lock and Unlock hold the call's mutex for the protocol's work at send
// time (the *Locked methods). Lock order: a connection's mutex, then the
// call's.
func (c *Call) Lock()   { c.mu.Lock() }
func (c *Call) Unlock() { c.mu.Unlock() }

// Boarding is what BoardLocked tells the protocol about the send it
// starts.
type Boarding struct {
	// Prev is the state the call left (Unboard goes back to it).
	Prev State
	// Sends counts the sends before this one.
	Sends int
	// AfterRefusal: the previous connection refused the call (answered it
	// too busy): that request was not lost.
	AfterRefusal bool
	// Lost: an earlier send left its connection without a refusal (a
	// failover, a drain): a server may have applied it, so every later
	// send is a possible duplicate, whatever refused the latest.
	Lost bool
}

// BoardLocked makes c in flight on cn: the only way a request reaches a
// connection. c's mutex is held (Lock). It fails without changing
// anything with ErrComplete, ErrInFlight (pending elsewhere: it must
// leave first) or ErrAlreadySent (sent on cn before).
func (c *Call) BoardLocked(cn *Conn) (Boarding, error) {
	b := Boarding{Prev: c.state, Sends: int(c.sends.Load()), AfterRefusal: c.refused, Lost: c.lost}
	switch {
	case c.final():
		return b, ErrComplete
	case c.state == InFlight:
		return b, ErrInFlight
	case slices.Contains(c.sentOn, cn) && !c.reusableLocked(cn):
		return b, ErrAlreadySent
	}
	c.owner = cn
	if rf := c.rf; rf != nil {
		if i := slices.Index(rf.on, cn); i >= 0 {
			// Sent there again: this send is pending there, not refused.
			rf.on = slices.Delete(rf.on, i, i+1)
		}
		rf.turned = nil
	}
	c.sentOn = append(c.sentOn, cn)
	c.sends.Add(1)
	c.refused = false
	if c.first == nil {
		c.first = cn.peer
	}
	c.to(InFlight)
	return b, nil
}

// reusableLocked reports whether cn, a connection c was sent on, may carry
// it again: its send there ended in a refusal its peer no longer stands
// by (ForgetRefusals). c.mu is held.
func (c *Call) reusableLocked(cn *Conn) bool {
	return c.rf != nil && slices.Contains(c.rf.on, cn) && !slices.Contains(c.rf.by, cn.peer)
}

// refusals are what the peers that refused a call said, and why it left
// the last connection it left; kept apart, as most calls are never
// refused nor moved, and one Call is made per request.
type refusals struct {
	by      []Carrier // peers that refused it
	on      []*Conn   // connections whose send ended in a refusal
	answer  []byte    // the last refusal's answer
	code    uint32    // its code, as its carrier read it (Result.Code)
	err     error     // the last refusal's error when it had no answer
	leftFor error     // why it left its last connection (Leave); nil: unknown
	// turned: why a peer turned it away unsent since its last send, or
	// since a peer took it (TurnAway); nil if none. Here, not in Call,
	// which it would take past its size class: it is rare.
	turned error
}

// Unboard undoes BoardLocked when the request could not be queued on cn
// after all. It takes c's mutex.
func (c *Call) Unboard(cn *Conn, b Boarding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != InFlight || c.owner != cn {
		return
	}
	c.owner = nil
	c.sentOn = c.sentOn[:len(c.sentOn)-1]
	if c.sends.Add(-1) == 0 {
		c.first = nil
	}
	c.refused = b.AfterRefusal
	c.state = b.Prev // the one step back BoardLocked made
}

// Leave takes c off cn (a failover, a drain): Moved, pending nowhere.
// False if c is not in flight on cn. cause, if not nil, is why cn was
// given up (no DWA within Tw, the connection down, a server that looked
// as if it does not share the secret): should c then fail (its deadline,
// its caller's, a throttle's expiry), its error wraps cause too, so that
// the caller learns more than that time ran out.
func (c *Call) Leave(cn *Conn, cause error) bool { return c.leave(cn, false, nil, 0, cause) }

// Unsend takes c off cn, as Leave does, when its request never reached
// cn's wire: its carrier took it out of cn's write queue before it was
// written (a failover, a drain). It is then as if c had never boarded
// cn: cn may carry it again, and its next send counts only the sends
// before (a first send carries no retransmission mark). refused is the
// Boarding's AfterRefusal of the send taken back. Moved, pending
// nowhere; cause as for Leave. False if c is not in flight on cn.
func (c *Call) Unsend(cn *Conn, refused bool, cause error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != InFlight || c.owner != cn {
		return false
	}
	c.owner = nil
	c.leftRefused = false
	if i := slices.Index(c.sentOn, cn); i >= 0 { // twice if resent there after a forgotten refusal: either
		c.sentOn = slices.Delete(c.sentOn, i, i+1)
	}
	if c.rf != nil && slices.Contains(c.sentOn, cn) && !slices.Contains(c.rf.on, cn) {
		// Resent there after its refusal there was forgotten: BoardLocked
		// took cn out of rf.on; as before that send, cn may carry it.
		c.rf.on = append(c.rf.on, cn)
	}
	if c.sends.Add(-1) == 0 {
		c.first = nil
	}
	c.refused = refused
	if cause != nil && c.rf == nil {
		c.rf = new(refusals)
	}
	if c.rf != nil {
		c.rf.leftFor = cause
	}
	c.to(Moved)
	return true
}

// Refuse takes c off cn because cn's peer refused it: with answer (a
// too-busy answer) and the code its carrier read from it (Result.Code),
// or without one with err (no reply to any attempt). It is not offered
// to that peer again (RefusedBy), and answer or err is what Conclude
// delivers when no other peer is left. False if c is not in flight on
// cn.
func (c *Call) Refuse(cn *Conn, answer []byte, code uint32, err error) bool {
	return c.leave(cn, true, answer, code, err)
}

func (c *Call) leave(cn *Conn, refused bool, answer []byte, code uint32, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != InFlight || c.owner != cn {
		return false
	}
	c.owner = nil
	c.leftRefused = refused
	if refused {
		c.refused = answer != nil
		if c.rf == nil {
			c.rf = new(refusals)
		}
		c.rf.by = append(c.rf.by, cn.peer)
		c.rf.answer, c.rf.code, c.rf.err = answer, code, err
		// Refused, it is pending there no more: that connection may carry
		// it again once the peer's refusal is forgotten (ForgetRefusals).
		c.rf.on = append(c.rf.on, cn)
	} else {
		c.lost = true
		if err != nil && c.rf == nil {
			c.rf = new(refusals)
		}
		if c.rf != nil {
			c.rf.leftFor = err
		}
	}
	c.to(Moved)
	return true
}

// TurnAway records that a peer turned the call away without sending it,
// for a passing reason (err: a RADIUS server with no Identifier free and
// its waiting places taken). Unlike a refusal it does not keep the call
// from that peer, and it holds only until the call's next send: when no
// peer takes it now, it ends with err (Conclude) rather than wait for a
// change that freeing Identifiers does not make. It records nothing when
// the call is complete or in flight. TurnAway(nil) forgets it: a carrier
// that takes the call into a queue of its own, before it boards, says so.
func (c *Call) TurnAway(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.final() || c.state == InFlight {
		return
	}
	if c.rf == nil {
		if err == nil {
			return
		}
		c.rf = new(refusals)
	}
	c.rf.turned = err
}

// RefuseLate records a refusal (answer: too busy, unable to deliver;
// code: its code, as for Refuse) that came on cn after the call left it:
// cn's peer did not apply the request, so it is pending on cn no more.
// While the call waits for a peer, cn may carry it again once the
// refusal is forgotten (ForgetRefusals), and until then the call avoids
// that peer as after any refusal. While it is in flight on another connection, cn may carry it
// again at once, and the refusal is not the peer's on the call: that send
// answers it, and a failover of that send must not take the request for
// refused by this peer. It records nothing and returns false when the
// call is complete, in flight on cn (a send of its own there answers it)
// or never sent on cn.
func (c *Call) RefuseLate(cn *Conn, answer []byte, code uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.final() || c.owner == cn || !slices.Contains(c.sentOn, cn) {
		return false
	}
	if c.rf == nil {
		c.rf = new(refusals)
	}
	if !slices.Contains(c.rf.on, cn) {
		c.rf.on = append(c.rf.on, cn)
	}
	if c.state == InFlight {
		return true
	}
	if !slices.Contains(c.rf.by, cn.peer) {
		c.rf.by = append(c.rf.by, cn.peer)
	}
	c.rf.answer, c.rf.code = answer, code
	return true
}

// Finish completes c with the answer ans that came on from, with the
// code its carrier read from it (Result.Code), or with err (from may then
// be nil), unless it is complete, counting it in cnt (when not nil)
// before the caller can see the result. It returns whether it did and,
// when c was still in flight on a connection other than from, that
// connection: the caller takes it out of its pending map there.
func (c *Call) Finish(ans []byte, code uint32, err error, from *Conn, cnt *atomic.Uint64) (ok bool, owner *Conn) {
	var by Carrier
	if from != nil {
		by = from.peer
	}
	return c.finish(ans, code, err, by, from, cnt, false)
}

// FailOn completes c with err if it is in flight on cn, and reports
// whether it did: an answer there that cannot be read ends the request,
// but one on a connection it left does not end a request that went on
// elsewhere.
func (c *Call) FailOn(cn *Conn, err error) bool {
	ok, _ := c.finish(nil, 0, err, cn.peer, cn, nil, true)
	return ok
}

// finish completes c; onlyOn: only if it is in flight on from.
func (c *Call) finish(ans []byte, code uint32, err error, by Carrier, from *Conn, cnt *atomic.Uint64, onlyOn bool) (ok bool, owner *Conn) {
	c.mu.Lock()
	if c.final() || onlyOn && (c.state != InFlight || c.owner != from) {
		c.mu.Unlock()
		return false, nil
	}
	if c.state == InFlight && c.owner != from {
		owner = c.owner
	}
	c.owner = nil
	if err != nil {
		if rf := c.rf; rf != nil && rf.leftFor != nil && !errors.Is(err, rf.leftFor) {
			// A deadline, a throttle's expiry: say why it left the
			// connection it was last sent on as well.
			err = fmt.Errorf("%w, after a failover: %w", err, rf.leftFor)
		}
		c.to(Failed)
	} else {
		c.by = by
		c.to(Answered)
	}
	c.res = result{ans, code, err}
	if cnt != nil {
		cnt.Add(1) // before the caller can see the result: it waits for mu
	}
	intr := c.inRead
	c.mu.Unlock()
	c.wake.Broadcast()
	if intr {
		c.Proto.(Reader).Interrupt()
	}
	return true, owner
}

// Fail completes the call with err unless it is complete, and reports
// whether it did.
func (c *Call) Fail(err error) bool { return c.end(nil, 0, err, nil, false) }

// end is Finish from outside any connection (an error, a refusal, the
// deadline): the connection the call was in flight on is told.
func (c *Call) end(ans []byte, code uint32, err error, by Carrier, timedOut bool) bool {
	ok, owner := c.finish(ans, code, err, by, nil, nil, false)
	if ok && owner != nil {
		owner.Retire(c, timedOut)
	}
	return ok
}

// Conclude completes a call that peers refused with the last refusal
// (its answer, or its error): what the caller gets when no other peer is
// left to try. False if it has none or is complete, and false for an
// answer when the call was lost on a connection before (a failover, a
// drain): a server may have applied it, and a refusal would tell the
// caller it was not (RFC 6733 7.1.3), so it waits for a server instead,
// within its deadline. An error (no reply over UDP) claims nothing and
// still concludes; so does a peer's turning it away unsent since its last
// send (TurnAway), the latest word on it.
func (c *Call) Conclude() bool {
	c.mu.Lock()
	var ans []byte
	var code uint32
	var err error
	var from Carrier
	if rf := c.rf; rf != nil {
		ans, code, err = rf.answer, rf.code, rf.err
		if n := len(rf.by); n > 0 {
			from = rf.by[n-1]
		}
	}
	if c.lost {
		ans = nil
	}
	if rf := c.rf; ans == nil && rf != nil && rf.turned != nil {
		err = rf.turned
	}
	c.mu.Unlock()
	switch {
	case ans != nil:
		return c.end(ans, code, nil, from, false)
	case err != nil:
		return c.end(nil, 0, err, nil, false)
	}
	return false
}

// Park records that the call waits for a connection in service; false if
// it is complete (or in flight, which must not be parked).
func (c *Call) Park() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != Queued && c.state != Moved {
		return c.state == Parked
	}
	c.to(Parked)
	return true
}

// Wait waits for the answer until ctx is done, or timeout when ctx has no
// deadline (zero: DefaultTimeout). A call that ends without an answer
// fails with an error matching ErrTimeout, or only ctx's error when ctx
// was cancelled before its deadline; the connection it was pending
// on is told (Retire, timedOut). It may be called again: it returns the
// same result.
//
// It waits without a channel of its own: the completion wakes it through
// the call's mutex, and ctx's end through the watch of ctx's Done channel,
// shared by every call waiting under that context (see watchFor).
func (c *Call) Wait(ctx context.Context, timeout time.Duration) (ans []byte, err error) {
	r := c.Await(ctx, timeout)
	return r.Ans, r.Err
}

// Result is how a call completed, as Await returns it.
type Result struct {
	// Ans is the answer, Err the error (see Wait).
	Ans []byte
	Err error
	// Code says how the request went, as the answer's carrier read it
	// while checking the answer: a Diameter answer's Result-Code, or its
	// Experimental-Result-Code when it has none (0 when it has neither);
	// a RADIUS response's Code. 0 without an answer.
	Code uint32
	// First is the peer the call was first sent by, By the one whose
	// answer completed it (nil when none); Sends counts the connections
	// it boarded.
	First, By Carrier
	Sends     int
}

// Await is Wait with what a dispatcher accounts for once the call
// completed, read in the same look.
func (c *Call) Await(ctx context.Context, timeout time.Duration) Result {
	if _, ok := ctx.Deadline(); !ok {
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		t := time.AfterFunc(timeout, func() { c.cutShort(fmt.Errorf("%w (%v)", ErrTimeout, timeout)) })
		defer t.Stop()
	}
	if done := ctx.Done(); done != nil && !c.IsDone() {
		if ctx.Err() != nil {
			// Ended before this wait: its Done channel may be the one
			// closed channel that every context ended before its first
			// Done call returns, which identifies no watch (watchFor).
			c.cutShort(ctxError(ctx))
		} else if c.flags.Or(flagWatched)&flagWatched == 0 {
			defer c.flags.And(^uint32(flagWatched)) // after remove
			if w, err := watchFor(ctx, done, c); err != nil {
				c.cutShort(err)
			} else {
				defer w.remove(c)
			}
		} else {
			// Another Await of c has it linked in a watch: this one
			// watches ctx on its own.
			stop := context.AfterFunc(ctx, func() { c.cutShort(ctxError(ctx)) })
			defer stop()
		}
	}
	rd, _ := c.Proto.(Reader)
	c.mu.Lock()
	if rd != nil {
		c.awaiting++
		if !c.final() && c.cut == nil && !c.inRead {
			c.offered = true
		}
	}
	// One ReadAnswer at a time, whatever the number of Awaits: a second
	// one returning would clear inRead under the first, which then no
	// completion and no deadline would interrupt.
	for !c.final() && c.cut == nil {
		if c.offered && !c.inRead {
			c.readLocked(rd)
			continue
		}
		c.wake.Wait()
	}
	if !c.final() {
		// The waiter ends it, so that the connection is told before Wait
		// returns, and before it takes up an Offer that came with the
		// cut: a read for a call still pending would wait for its answer
		// past the deadline, and nothing would interrupt it.
		err := c.cut
		c.mu.Unlock()
		c.end(nil, 0, err, nil, true)
		c.mu.Lock()
	}
	for c.offered { // an Offer that came as the call ended: taken up all the same
		if c.inRead { // by this Await once the other's read returns, or by the other
			c.wake.Wait()
			continue
		}
		c.readLocked(rd)
	}
	if rd != nil {
		c.awaiting--
	}
	r := Result{Ans: c.res.ans, Code: c.res.code, Err: c.res.err, // ours, or the answer that won the race
		First: c.first, By: c.by, Sends: int(c.sends.Load())}
	c.mu.Unlock()
	return r
}

// readLocked runs r's ReadAnswer for an Offer; c.mu is held, and let go
// meanwhile.
func (c *Call) readLocked(r Reader) {
	c.offered, c.inRead = false, true
	c.mu.Unlock()
	r.ReadAnswer()
	c.mu.Lock()
	c.inRead = false
	if c.awaiting > 1 {
		c.wake.Broadcast() // another Await may wait for this read to end
	}
}

// Offer wakes the caller waiting for c in Await to run its Reader's
// ReadAnswer again (the carrier has something for it: the connection to
// read). False if no caller is in Await: then none runs for this Offer.
func (c *Call) Offer() bool {
	c.mu.Lock()
	ok := c.awaiting > 0
	if ok {
		c.offered = true
	}
	c.mu.Unlock()
	if ok {
		c.wake.Broadcast()
	}
	return ok
}

// cutShort wakes Wait to end the call with err (its deadline, its
// context's end), unless it completes first.
func (c *Call) cutShort(err error) {
	c.mu.Lock()
	if c.cut == nil {
		c.cut = err
	}
	intr := c.inRead
	c.mu.Unlock()
	c.wake.Broadcast()
	if intr {
		c.Proto.(Reader).Interrupt()
	}
}

// SetAttempts bounds how many times the next peer the call is submitted
// to may send it over a datagram transport (RADIUS over UDP retransmits):
// 1 for a probe, which is never retransmitted; 0 for the peer's own
// number. The dispatcher sets it before each Submit.
func (c *Call) SetAttempts(n int) { c.attempts.Store(int32(n)) }

// Attempts returns what SetAttempts set.
func (c *Call) Attempts() int { return int(c.attempts.Load()) }

// State returns where the request is in its lifecycle.
func (c *Call) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// IsDone reports whether the call has completed.
func (c *Call) IsDone() bool { return c.flags.Load()&flagDone != 0 }

// FirstTaken reports whether this is the first time a peer took the call
// (its Submit returned nil), and records that one did: a dispatcher counts
// a request as sent once, on the peer that took it first, though a
// carrier may hold it in a queue of its own, unsent, and hand it over.
func (c *Call) FirstTaken() bool { return c.flags.Or(flagTaken)&flagTaken == 0 }

// The bits of Call.flags.
const (
	flagDone = 1 << iota
	flagWatched
	flagTaken
)

// Sends returns how many times the request boarded a connection.
func (c *Call) Sends() int { return int(c.sends.Load()) }

// First returns the peer the call was first sent by, nil before.
func (c *Call) First() Carrier {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

// AnsweredBy returns the peer whose answer completed the call, nil when
// it ended without one.
func (c *Call) AnsweredBy() Carrier {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by
}

// SentOn reports whether the call boarded cn.
func (c *Call) SentOn(cn *Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.sentOn, cn)
}

// SentOnAny reports whether the call boarded a connection for which f
// is true; f runs under the call's lock.
func (c *Call) SentOnAny(f func(*Conn) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.sentOn, f)
}

// AppendSentOn appends to dst the connections the call boarded for which
// f is true, oldest first.
func (c *Call) AppendSentOn(dst []*Conn, f func(*Conn) bool) []*Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cn := range c.sentOn {
		if f(cn) {
			dst = append(dst, cn)
		}
	}
	return dst
}

// InFlightOn reports whether the call is pending on cn.
func (c *Call) InFlightOn(cn *Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == InFlight && c.owner == cn
}

// RefusedAfterLoss reports whether the call was lost on a connection (a
// failover, a drain) and peers refused it since: Conclude will not end
// it with their refusals, and it must not wait for ever on peers that
// refused it while they are in service (see ForgetRefusals).
func (c *Call) RefusedAfterLoss() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost && c.rf != nil && len(c.rf.by) > 0
}

// ForgetRefusals lets the peers that refused the call be offered it
// again (their refusal said too busy, not never), on the connections
// that refused it too.
func (c *Call) ForgetRefusals() {
	c.mu.Lock()
	if c.rf != nil {
		c.rf.by, c.rf.answer, c.rf.code, c.rf.err = nil, nil, 0, nil
	}
	c.mu.Unlock()
}

// Refusers returns the peers that refused the call, in order.
func (c *Call) Refusers() []Carrier {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rf == nil {
		return nil
	}
	return slices.Clone(c.rf.by)
}

// LeftRefused reports whether the call left its last connection refused
// by its peer (Refuse), rather than lost there (Leave): a hand-over of it
// is a premature failover. A refusal read after it was lost there
// (RefuseLate) does not make it one.
func (c *Call) LeftRefused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leftRefused
}

// RefusedBy reports whether peer refused the call (Refuse).
func (c *Call) RefusedBy(peer Carrier) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rf != nil && slices.Contains(c.rf.by, peer)
}

// Avoids reports whether the call must not go to peer, whose current
// connection is cn (nil when none): it was sent on cn, or peer refused
// it. A call never sent avoids nothing.
func (c *Call) Avoids(cn *Conn, peer Carrier) bool {
	if c.sends.Load() == 0 {
		return false // without the lock: a first send avoids nothing
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return (cn != nil && slices.Contains(c.sentOn, cn) && !c.reusableLocked(cn)) || (c.rf != nil && slices.Contains(c.rf.by, peer))
}

// Holder is the record a dispatching layer keeps of a call it holds (a
// Client's throttle queue entry, or its mark of a probe), stored on the
// call so that every dispatch of the call finds it. The core only stores
// it.
type Holder interface {
	// Held returns the call the record is of.
	Held() *Call
}

// Holder returns the record SetHolder stored, nil if none.
func (c *Call) Holder() Holder {
	if h := c.holder.Load(); h != nil {
		return *h
	}
	return nil
}

// SetHolder stores the dispatching layer's record of the call.
func (c *Call) SetHolder(h Holder) { c.holder.Store(&h) }

// A watch ends the calls waiting under one context when it is done. The
// calls of a context share it: a dispatcher gives many requests the same
// context (a load generator's deadline slice, a server's lifetime), and a
// select of each waiter on that context's Done channel made every Wait
// take and release the one channel's lock twice, beside a channel of its
// own per call. A call waiting under the context joins the watch's list
// and leaves it when it is woken; the context's end fails those still on
// it (one context.AfterFunc per watch, not per call).
type watch struct {
	done <-chan struct{} // the context's: what identifies it
	ctx  context.Context
	stop func() bool // the AfterFunc's

	mu      sync.Mutex
	head    *Call // the waiting calls, linked through wprev, wnext
	n       int   // len of the list
	err     error // the context ended: what its calls fail with
	evicted bool  // no longer recent: stopped once its list is empty
}

// recent is the watch of the context a call waited under last. One slot:
// the contexts that many requests share are few and long-lived; a
// context per request makes a watch per request, as cheap as an
// AfterFunc per call, and evicts the previous one.
var recent atomic.Pointer[watch]

// watchFor adds c to the watch of ctx, whose Done channel is done, and
// returns it; once c is woken, remove takes it off. If ctx has ended
// already it returns the error c fails with. ctx had not ended when done
// was read: done is then its own, where an ended context's may be shared
// (see Await).
func watchFor(ctx context.Context, done <-chan struct{}, c *Call) (*watch, error) {
	for {
		w := recent.Load()
		if w == nil || w.done != done {
			nw := &watch{done: done, ctx: ctx}
			nw.stop = context.AfterFunc(ctx, nw.fire)
			if !recent.CompareAndSwap(w, nw) {
				nw.retire()
				continue
			}
			if w != nil {
				w.retire()
			}
			w = nw
		}
		if ok, err := w.add(c); ok {
			return w, err
		}
		// evicted between Load and add: take the new one
	}
}

// add links c into w; false if w was evicted (use another). err is not
// nil when the context has ended: c was not linked.
func (w *watch) add(c *Call) (ok bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.err != nil:
		return true, w.err
	case w.evicted:
		return false, nil
	}
	c.wprev, c.wnext = nil, w.head
	if w.head != nil {
		w.head.wprev = c
	}
	w.head = c
	w.n++
	return true, nil
}

// remove unlinks c, which add linked (a no-op if fire took it off), and
// stops an evicted watch left with no call.
func (w *watch) remove(c *Call) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.wprev == nil && w.head != c {
		return // fire unlinked it
	}
	w.unlinkLocked(c)
	if w.n == 0 && w.evicted {
		w.stop()
	}
}

func (w *watch) unlinkLocked(c *Call) {
	if c.wprev != nil {
		c.wprev.wnext = c.wnext
	} else {
		w.head = c.wnext
	}
	if c.wnext != nil {
		c.wnext.wprev = c.wprev
	}
	c.wprev, c.wnext = nil, nil
	w.n--
}

// retire marks w no longer recent: the last call to leave stops it, so
// that a context that lives on (never cancelled) does not keep it.
func (w *watch) retire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.evicted = true
	if w.n == 0 {
		w.stop()
	}
}

// ctxError is what a call waiting under ctx fails with once ctx ended:
// ErrTimeout when its deadline passed; a cancelled request did not time
// out, the caller gave up.
func ctxError(ctx context.Context) error {
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return fmt.Errorf("request canceled: %w", ctx.Err())
}

// fire runs when the context ends: every call still waiting fails with
// the context's error, and ErrTimeout when its deadline passed (a
// cancelled request did not time out: the caller gave up), each Wait
// ending its call; so does every later add.
func (w *watch) fire() {
	recent.CompareAndSwap(w, nil) // so that an ended context is not kept
	w.mu.Lock()
	w.err = ctxError(w.ctx)
	var calls []*Call
	for w.head != nil {
		c := w.head
		w.unlinkLocked(c)
		calls = append(calls, c)
	}
	err := w.err
	w.mu.Unlock()
	for _, c := range calls {
		c.cutShort(err) // its Wait ends it
	}
}
