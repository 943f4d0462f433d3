package client

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/watchdog"
)

// Server policy (package policy, the Nokia 7750 SR states, S1-S5) and
// throttling (package throttle, the Cisco ASR5K limits, Q1-Q5) on top of
// the watchdog: a server gets a request only if its watchdog is OKAY, its
// policy state takes traffic, and its rate and outstanding limits allow.
//
// Both are off unless configured. The policy decides per request at pick
// time; the throttle's scheduler sits behind c.tmu and is polled by the
// goroutine that enqueues (so an unthrottled moment costs no goroutine
// hop) and by one dispatcher goroutine that wakes at the next slot or
// deadline.

// Throttle configures per-server limits, the same for every server.
// Requests wait in one instance queue and a queue per server, each in
// the order they were sent. When a server leaves service with requests
// pending there (its watchdog gives up on it, or a server policy's
// down-timeout does), those come back in the order they were sent and
// go out ahead of every request still waiting, including those queued
// for that server and those sent as it left. Until they are back, the
// throttle releases nothing; it waits at most 2 seconds for them (they
// come back at once unless something is wrong), then goes on and logs a
// warning.
type Throttle struct {
	// Auth and Accounting are the limits of each class; a zero
	// MaxOutstanding means throttle.DefaultMaxOutstanding (256). A
	// RADIUS server's MaxOutstanding is capped, per class, at the
	// Identifiers of its connections (255 each) or UDP sockets (256
	// each). The two classes share them, unless a radius:// server has
	// an AccountingURL: when both are busy, requests past the
	// Identifiers free wait at the server for one, outside the queues
	// (and the queue alarm) of the throttle.
	Auth, Accounting throttle.Limits
	// Slot is the rate slot length, one that divides one second
	// (throttle.Slots: 50 ms to 1 s); zero means 50 ms.
	Slot time.Duration
	// AlarmHigh and AlarmLow raise and clear a per-server queue alarm;
	// zero AlarmHigh means no alarm.
	AlarmHigh, AlarmLow int
	// MaxQueued bounds the requests waiting in the throttle's queues
	// (instance and servers'); past it a new request fails at once with
	// ErrQueueFull (a replay after a failover always gets back in). Zero
	// means no bound.
	MaxQueued int
}

// ErrQueueFull: Throttle.MaxQueued requests wait in the throttle already.
var ErrQueueFull = errors.New("throttle queue full")

// policyTick bounds how late a policy timer (down-timeout, hold-down) is
// noticed.
const policyTick = 100 * time.Millisecond

// giveBackRetry is how soon the scheduler is polled again after requests
// refused as they were placed went back into it (giveBack): the view
// that refused them may have changed before they were back, so no change
// is left to wake the dispatcher, and its timer was set while they were
// out of the scheduler.
const giveBackRetry = policyTick

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// item is a request inside the throttle's queues.
type item struct {
	cl     *call.Call // Held
	dl     time.Time
	class  throttle.Class
	server int  // where it holds an outstanding place; -1 none (under tmu)
	ended  bool // its Send has returned (under tmu)
	// movedFrom and movedWhy: a failover took it off movedFrom and queued
	// it here; the record of where it went is written when the throttle
	// sends it on (execute, which takes them before it places the send:
	// a refusal of that send may mark its own move meanwhile). Under tmu.
	movedFrom *member
	movedWhy  string
	// age: its place in the scheduler's line (throttle.Dispatch.Age,
	// Scheduler.ReplayAge), for putting it back there when it cannot be
	// sent after all or was held (under tmu).
	age uint64
	// held: it is in Client.held (under tmu).
	held bool
	// back: it came back to the scheduler, a replay or one given back
	// after a refusal (holdLocked looked at it): when no peer can take it
	// the Pick callback answers throttle.Nowhere for it, rather than
	// leave it to the round-robin, which would queue it for a server it
	// must avoid (under tmu).
	back bool
}

func (it *item) Held() *call.Call { return it.cl }

func (it *item) Deadline() time.Time { return it.dl }

// setupLimits builds the policy group and the scheduler. c.mu is held.
func (c *Client) setupLimits() error {
	all := c.ros.Load().all
	names := make([]string, len(all))
	for i, m := range all {
		names[i] = m.spec.Name
	}
	if c.cfg.Policy != nil {
		g, err := policy.NewGroup(names, *c.cfg.Policy)
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		// Unavailable until its peer is in service (serverState): the
		// dispatcher starts before the peers are dialed or connected, and
		// a keep-alive due then found no connection to carry it and was
		// dropped while the policy counted it as sent, its down-timeout
		// running: an idle, healthy server went out of service at the
		// down-timeout after New.
		for i := range names {
			g.SetAvailable(i, false)
		}
		c.group = g
	}
	if t := c.cfg.Throttle; t != nil {
		if t.MaxQueued < 0 {
			return errors.New("client: Throttle.MaxQueued must not be negative")
		}
		servers := make([]throttle.Server, len(all))
		for i, m := range all {
			servers[i] = c.throttleServer(m)
		}
		s, err := throttle.New(throttle.Config[*item]{
			Servers: servers, Slot: t.Slot, AlarmHigh: t.AlarmHigh, AlarmLow: t.AlarmLow,
			OnAlarm: c.onAlarm,
			Pick: func(it *item, _ throttle.Class) (int, bool) {
				v := c.view()
				if m, ok := c.pinned(it.cl, v); ok {
					return m.index, true // there or nowhere, as pick says
				}
				if m := c.pick(it.cl, v); m != nil {
					if onPicked != nil {
						onPicked(it.cl, m)
					}
					return m.index, false
				}
				if onPicked != nil {
					onPicked(it.cl, nil) // none: held, or the scheduler's round-robin
				}
				if it.back {
					// It avoids the peers the scheduler has available
					// (the connection it was sent on, those that refused
					// it): queued for one of them, it would wait there
					// for a place, to be refused, or for that server to
					// leave, while another came back. Handed back
					// instead (poll), it is held until a peer can take it
					// (unhold). v is the view the scheduler follows
					// (pollLocked).
					return throttle.Nowhere, false
				}
				return -1, false
			},
		})
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		now := c.monoNow()
		for i := range all {
			s.SetAvailable(i, false, now) // until the watchdog says OKAY
		}
		c.sched = s
	}
	if c.group != nil || c.sched != nil {
		c.wake = make(chan struct{}, 1)
		c.stopDispatch = make(chan struct{})
		c.dispatchDone = make(chan struct{})
		go c.dispatcher()
	}
	return nil
}

// onAlarm is the throttle's alarm callback, called under c.tmu: the
// event waits in c.alarms for unlockThrottle, so that no subscriber runs
// under c.tmu (QueueDepths takes it).
func (c *Client) onAlarm(a throttle.Alarm) {
	what := "cleared"
	if a.Raised {
		what = "raised"
	}
	// a.Time is a reading of monoNow's: the event gets the wall clock's.
	c.alarms = append(c.alarms, Event{Time: time.Now(), Server: a.Server, Kind: EventQueueAlarm, Raised: a.Raised, Depth: a.Depth,
		Reason: fmt.Sprintf("queue alarm %s at depth %d", what, a.Depth)})
}

// unlockThrottle schedules the alarms raised or cleared under c.tmu, in
// the order they were, and lets go of it, then settles the requests a
// poll held meanwhile (heldByPollLocked). Every unlock of c.tmu goes
// through here.
func (c *Client) unlockThrottle() {
	if len(c.alarms) > 0 {
		c.note(c.alarms...)
		c.alarms = c.alarms[:0]
	}
	lapsed := c.lapsed
	c.lapsed = nil
	unsettled := c.unsettled
	c.unsettled = nil
	c.tmu.Unlock()
	for _, it := range unsettled {
		if c.ctx.Err() != nil {
			// Closed: failQueued may have run already; nothing puts it
			// back now (as in throttled and giveBack).
			it.cl.Fail(errClientClosed)
			continue
		}
		c.settle(it)
	}
	for _, name := range lapsed {
		logger(c.cfg, c.radius).Warn("client: a peer's hand-over of its requests did not come; the throttle stops waiting for it",
			"peer", name, "waited", handOverWaitMax)
	}
}

// publishPolicyLocked schedules the events of a change the policy group
// just made, c.pmu held (taken before the group's call, so that the
// events of changes made side by side keep the order of the changes),
// lets go of c.pmu, and lets the requests and timers follow the new
// states.
func (c *Client) publishPolicyLocked(evs []policy.Event) {
	if len(evs) == 0 {
		c.pmu.Unlock()
		return
	}
	var silent []policy.Event
	for _, e := range evs {
		c.note(Event{Time: e.Time, Server: e.Server, Kind: EventPolicy, Policy: &e, Reason: e.Reason})
		if e.To == policy.OutOfService && (e.Reason == policy.ReasonDownTimeout || e.Reason == policy.ReasonNoFirstReply) {
			silent = append(silent, e)
		}
	}
	c.pmu.Unlock()
	// The throttle releases nothing until the requests of the servers
	// that went silent are back (awaitHandOver), so that they leave
	// ahead of those the servers' queues send back below, as a
	// watchdog failover's do (refreshForFailover).
	awaited := make([]call.Carrier, len(silent))
	for j, e := range silent {
		awaited[j] = c.awaitHandOver(e.Index)
	}
	// Whether a server takes requests, or waits for its probe, may have
	// changed: the view follows (and wakes the requests waiting for a
	// change, the throttle's dispatcher).
	c.refresh()
	// A server that replied to nothing for the down-timeout will not
	// answer what is pending there either, though its watchdog may say
	// OKAY (it answers DWRs, or sends its own): those requests go to
	// another server now, against the view that no longer has it, rather
	// than wait out their deadlines. Not a probe's timeout: the probe is
	// a single message, never sent again. Not the requests whose
	// Destination-Host names that server: they may go nowhere else, and
	// its connection is up. Not while closing: the drain gives the
	// requests in flight their time.
	for j, e := range silent {
		c.handOver(e.Index, "out of service: "+e.Reason, awaited[j])
	}
	c.poke() // a new state may mean a new timer
}

// awaitHandOver has the throttle release nothing until member i's peer
// has handed its requests over (handing; handOver ends the wait), and
// returns that peer; nil without a throttle, while closing, or without a
// peer.
func (c *Client) awaitHandOver(i int) call.Carrier {
	if c.sched == nil {
		return nil
	}
	v := c.view()
	if c.ctx.Err() != nil || i >= len(v.ros.all) {
		return nil
	}
	k := v.ros.all[i].carrier()
	if k == nil {
		return nil
	}
	c.tmu.Lock()
	c.handing = append(c.handing, handOverWait{k: k, policy: true, since: c.monoNow()})
	if onAwaitHandOver != nil {
		onAwaitHandOver(c, k)
	}
	c.unlockThrottle()
	return k
}

// The throttle's steps, for tests (the simulator checks the order of a
// failover's replays against them). Each, when set, runs under c.tmu and
// must not block: onReleased for a request the scheduler released to a
// server; onRequeued for a request coming back into the scheduler (a
// replay, or one given back); onHeld for one held out of it instead, no
// peer able to take it; onAwaitHandOver as the throttle begins to wait
// for peer k's hand-over (releasing nothing until it comes);
// onDispatcherPoll each time the dispatcher has looked at the
// scheduler, with whether it released anything.
var (
	onDispatcherPoll func(c *Client, released bool)
	onReleased       func(cl *call.Call)
	onRequeued       func(cl *call.Call)
	onHeld           func(cl *call.Call)
	onAwaitHandOver  func(c *Client, k call.Carrier)
)

// handOver hands the requests pending on member i but those whose
// Destination-Host names it to another server (see publishPolicyLocked);
// nothing while closing. awaited, if not nil, is the peer awaitHandOver
// returned: the throttle's wait for it ends once the requests are handed
// over (and queued there), or at once when there are none.
func (c *Client) handOver(i int, reason string, awaited call.Carrier) {
	var done func()
	if awaited != nil {
		done = func() { c.endWait(awaited, true) }
	}
	v := c.view()
	var k call.Carrier
	var m *member
	if c.ctx.Err() == nil && i < len(v.ros.all) {
		m = v.ros.all[i]
		k = m.carrier()
	}
	if k == nil {
		if done != nil {
			done()
		}
		return
	}
	k.HandOver(reason, func(cl *call.Call) bool {
		to, ok := c.pinned(cl, v)
		return ok && to == m
	}, done)
}

// handOverWait is a wait of the throttle for peer k's hand-over: after
// its watchdog's change (refreshForFailover), or, policy, a server
// policy's down-timeout (awaitHandOver).
type handOverWait struct {
	k      call.Carrier
	policy bool
	since  time.Time // when it began (monoNow)
}

// is reports whether w is a wait for k's hand-over of that kind.
func (w handOverWait) is(k call.Carrier, policy bool) bool { return w.k == k && w.policy == policy }

// handOverWaitMax bounds a wait for a hand-over. A hand-over follows its
// change on the peer's notifier at once, so a wait this long means one
// that will not come: the throttle stops waiting, counts it as missed
// and logs it, rather than hold every request for good. A variable for
// tests.
var handOverWaitMax = 2 * time.Second

// handedOver ends the wait for k's hand-over after its watchdog's change
// (refreshForFailover), its replays queued.
func (c *Client) handedOver(k call.Carrier) { c.endWait(k, false) }

// endWait ends the first wait for k's hand-over of that kind (policy),
// if still there, and wakes the dispatcher to release what waited. A
// hand-over nobody waited for (a request refused too busy, handed on)
// wakes nobody: it queued its requests, and polled, itself (throttled).
func (c *Client) endWait(k call.Carrier, policy bool) {
	c.tmu.Lock()
	i := slices.IndexFunc(c.handing, func(w handOverWait) bool { return w.is(k, policy) })
	if i >= 0 {
		c.handing = slices.Delete(c.handing, i, i+1)
	}
	c.unlockThrottle()
	if i >= 0 {
		c.poke()
	}
}

// lapseWaitsLocked ends the waits for a hand-over that began
// handOverWaitMax or more before now (see handOverWaitMax), counting
// them; unlockThrottle logs them. It reports whether a wait is left.
// c.tmu is held.
func (c *Client) lapseWaitsLocked(now time.Time) bool {
	c.handing = slices.DeleteFunc(c.handing, func(w handOverWait) bool {
		if now.Sub(w.since) < handOverWaitMax {
			return false
		}
		c.missedHandOvers++
		c.lapsed = append(c.lapsed, w.k.Name())
		return true
	})
	return len(c.handing) > 0
}

// handOverMissed ends the waits for k's hand-over after its watchdog's
// changes at its next change that starts none, counting them. A safety
// net: every change that starts a wait is followed by its hand-over, on
// k's notifier ahead of the next change, so a wait still there missed
// it, and would otherwise hold the throttle until k is gone, or the
// wait's bound (lapseWaitsLocked). A policy's wait ends with its
// HandOver's done, which always comes, or at that bound.
func (c *Client) handOverMissed(k call.Carrier) {
	if c.sched == nil {
		return
	}
	c.tmu.Lock()
	n := len(c.handing)
	c.handing = slices.DeleteFunc(c.handing, func(w handOverWait) bool { return w.is(k, false) })
	missed := n - len(c.handing)
	c.missedHandOvers += uint64(missed)
	c.unlockThrottle()
	if missed > 0 {
		logger(c.cfg, c.radius).Warn("client: a peer left service without handing its requests over; the throttle stops waiting for them",
			"peer", k.Name(), "waits", missed)
		c.poke()
	}
}

func (c *Client) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// admit asks the policy whether m may take a request now; probe says it is
// the single probe of S4.
func (c *Client) admit(m *member) (ok, probe bool) {
	if c.group == nil {
		return true, false
	}
	c.pmu.Lock()
	o := c.group.Allow(m.index, time.Now())
	c.publishPolicyLocked(o.Events())
	return o.Allow, o.Probe
}

// sent and replied feed the policy's down-timeout (S2). sent is told
// after the request was submitted, with the mark replyMark gave before:
// its reply may have been told already, on the reader's goroutine, and
// must not be followed by a down-timeout that waits for it (the server,
// idle then, would be held down at the down-timeout).
func (c *Client) sent(m *member, mark uint64) {
	if c.group != nil {
		c.pmu.Lock()
		o := c.group.OnSentSince(m.index, time.Now(), mark)
		c.publishPolicyLocked(o.Events())
		if o.State == policy.OutOfService {
			// Admitted while m was in service, sent after the
			// down-timeout put it out and handed its requests over: it
			// follows them rather than wait there for its deadline.
			c.handOver(m.index, "out of service: sent as the server left service", nil)
		}
	}
}

// replyMark returns m's mark of the replies told so far, for sent.
func (c *Client) replyMark(m *member) uint64 {
	if c.group == nil {
		return 0
	}
	return c.group.ReplyMark(m.index)
}

// repliedHook is the Replied hook of a peer whose template has user's:
// the policy's, when there is one, then user's.
func (c *Client) repliedHook(user func(call.Carrier)) func(call.Carrier) {
	switch {
	case c.group == nil:
		return user
	case user == nil:
		return c.replied
	}
	return func(p call.Carrier) {
		c.replied(p)
		user(p)
	}
}

func (c *Client) replied(p call.Carrier) {
	if c.group == nil || p == nil {
		return
	}
	if m := c.memberOf(p); m != nil {
		c.pmu.Lock()
		o := c.group.OnReply(m.index, time.Now())
		c.publishPolicyLocked(o.Events())
	}
}

// newItem makes the throttle's record of a request and tags the call
// with it, so that every dispatch of the call goes through the throttle.
func (c *Client) newItem(cl *call.Call, dl time.Time) *item {
	class := throttle.Auth
	if cl.Accounting {
		class = throttle.Accounting
	}
	it := &item{cl: cl, dl: dl, class: class, server: -1}
	cl.SetHolder(it)
	if onThrottled != nil {
		onThrottled(cl)
	}
	return it
}

// throttled is dispatch's admission through the throttle: each request
// joins the scheduler's instance queue, a first send at its tail, a
// replay (a failover's, in order) ahead of every new request and behind
// the replays before it, giving back the place it held on the server it
// left; whatever the scheduler releases now is placed. A request the
// scheduler released before comes back as a replay, also one a server
// hands back before sending it (a radius:// server's requests waiting
// for an Identifier): it holds a place there. A replay no peer can take
// now is held out of the scheduler (holdLocked), or ends with its
// refusal (settle).
func (c *Client) throttled(its ...*item) {
	its = slices.DeleteFunc(its, func(it *item) bool { return it.cl.IsDone() })
	if c.cfg.MaxConnections > 0 {
		// Not queued for a peer the connection limit closed: they fail
		// as undeliverable, as they do without a throttle (strand). As
		// for one complete just now, its Send's return gives its place
		// back.
		v := c.view()
		its = slices.DeleteFunc(its, func(it *item) bool { return c.undeliverable(it.cl, v) })
	}
	if len(its) == 0 {
		return
	}
	var replays []*item
	back := its[:0]
	c.tmu.Lock()
	for _, it := range its { // it.server is c.tmu's
		if it.cl.Sends() == 0 && it.server < 0 {
			back = append(back, it)
		} else {
			replays = append(replays, it)
		}
	}
	if c.ctx.Err() != nil {
		// Closed: Close released the queues (failQueued) before or
		// after this; what comes now is not queued for nobody to send.
		c.unlockThrottle()
		failAll(heldCalls(replays), errClientClosed)
		failAll(heldCalls(back), errClientClosed)
		return
	}
	var held []*item
	v := c.view()
	// A request whose Send returned since the IsDone check above has
	// given its place back (release): it is neither freed twice nor
	// queued nor held.
	replays = slices.DeleteFunc(replays, func(it *item) bool { return it.ended })
	back = slices.DeleteFunc(back, func(it *item) bool { return it.ended })
	for _, it := range replays {
		if it.server >= 0 {
			c.sched.Done(it.server, it.class)
			it.server = -1
		}
		it.age = c.sched.ReplayAge()
		if c.holdLocked(it, v) {
			held = append(held, it)
			continue
		}
		c.sched.Requeue(it, it.class, it.age)
		if onRequeued != nil {
			onRequeued(it.cl)
		}
	}
	var full []*item
	for _, it := range back {
		if most := c.cfg.Throttle.MaxQueued; most > 0 && c.sched.Len() >= most {
			full = append(full, it)
			continue
		}
		it.age = c.sched.Enqueue(it, it.class)
	}
	now := c.monoNow()
	place := c.pollLocked(now)
	// What is left waits for the scheduler's next wake-up: wake the
	// dispatcher only if that is now sooner than its timer (a deadline
	// sooner than any), not for every request queued.
	sooner := c.dueSoonerLocked(now)
	c.unlockThrottle()
	for _, it := range held {
		c.settle(it)
	}
	if onWait != nil {
		for _, it := range replays {
			onWait(it.cl, c.view(), "replayed through the throttle's queue")
		}
	}
	for _, it := range full {
		it.cl.Fail(fmt.Errorf("%w: %d requests waiting", ErrQueueFull, c.cfg.Throttle.MaxQueued))
	}
	if place {
		c.placeReleased()
	}
	if sooner {
		c.poke()
	}
}

// errClientClosed fails the requests the Client held when it closed:
// waiting for a peer, in the throttle's queues, or handed over by a peer.
var errClientClosed = fmt.Errorf("client closed: %w", peer.ErrClosed)

// heldCalls returns the calls of its.
func heldCalls(its []*item) []*call.Call {
	calls := make([]*call.Call, len(its))
	for i, it := range its {
		calls[i] = it.cl
	}
	return calls
}

// failQueued fails every request waiting in the throttle's queues with
// ErrClosed, once the Client is closing (c.ctx is done): Close fails the
// requests waiting for a peer, and nothing sends these any more (the
// dispatcher has stopped). throttled and execute queue nothing after it.
func (c *Client) failQueued() {
	c.tmu.Lock()
	its := c.sched.Release(c.monoNow(), nil)
	its = append(its, c.held...)
	clear(c.held)
	c.held = c.held[:0]
	c.unlockThrottle()
	failAll(heldCalls(its), errClientClosed)
}

// release frees the outstanding place of a finished throttled request,
// or takes it out of the scheduler if it still waits there.
func (c *Client) release(it *item) {
	c.tmu.Lock()
	it.ended = true // a place the scheduler gives it from now on is freed at once
	wasHeld := it.held
	if it.held {
		c.held = slices.DeleteFunc(c.held, func(x *item) bool { return x == it })
		it.held = false
	}
	server := it.server
	it.server = -1
	if server < 0 {
		if !wasHeld {
			// It may wait in the scheduler still (its caller gave up):
			// taken out, it no longer counts against MaxQueued nor
			// takes a rate slot from the requests behind it.
			c.sched.Cancel(it.class, it.age, c.monoNow())
		}
		c.unlockThrottle()
		return
	}
	if !c.sched.Done(server, it.class) {
		c.unlockThrottle()
		return
	}
	now := c.monoNow()
	place := c.pollLocked(now)
	wake := c.dueSoonerLocked(now) // freed past the slot's quota: the next slot
	c.unlockThrottle()
	if place {
		c.placeReleased()
	}
	if wake {
		c.poke()
	}
}

// dueSoonerLocked reports whether the scheduler is due before the
// dispatcher's timer after a change that can make it so without a poll
// releasing anything now: places freed (Done) past the current slot's
// quota, whose requests wait for the next slot, or a server's queue sent
// back to the instance queue (SetAvailable). The dispatcher set its
// timer while neither could move; the caller pokes it after unlocking
// c.tmu. A request given back after a refusal (giveBack) does not come
// here: released again at once it could be refused again at once, so it
// waits for a new view or giveBackRetry (retryPollLocked), not a busy
// retry. c.tmu is held.
func (c *Client) dueSoonerLocked(now time.Time) bool {
	at, ok := c.nextWakeupLocked(now)
	if !ok || !at.Before(c.wakeAt) {
		return false
	}
	c.wakeAt = at // one poke: the dispatcher sets it again
	return true
}

// nextWakeupLocked is when the dispatcher is to poll again: the
// scheduler's next wake-up, or, while the throttle waits for a
// hand-over, the first wait's bound. Nothing is released during a wait,
// so a request due in the scheduler would have the dispatcher poll in
// vain until the hand-over; its end pokes the dispatcher
// (endWait, handOverMissed). c.tmu is held.
func (c *Client) nextWakeupLocked(now time.Time) (time.Time, bool) {
	if c.viewPendingLocked() {
		return time.Time{}, false
	}
	if len(c.handing) == 0 {
		return c.sched.NextWakeup(now)
	}
	at := c.handing[0].since
	for _, w := range c.handing[1:] {
		at = minTime(at, w.since)
	}
	return at.Add(handOverWaitMax), true
}

// viewPendingLocked reports whether the scheduler follows a view not
// stored yet, or not offered to the held requests yet (rebuild, unhold),
// and if so asks unhold to wake the dispatcher once it is: picked
// against the view before, a request would go round-robin, or be held
// while a younger one goes; released now, one could leave ahead of an
// older request that view is about to give back to the scheduler. Polls
// and the dispatcher's timer wait for it. c.tmu is held.
func (c *Client) viewPendingLocked() bool {
	if c.schedGen == c.unheldGen {
		return false
	}
	c.pollDeferred = true
	return true
}

// pollLocked takes what the scheduler releases now, after what it
// released before, for placing (see Client.released); it reports whether
// the caller is to place them, after unlocking tmu (placeReleased): no
// other goroutine is placing. c.tmu is held.
func (c *Client) pollLocked(now time.Time) bool {
	if c.viewPendingLocked() {
		return false
	}
	if len(c.handing) > 0 {
		// A failover's replays are still to be queued: anything let go
		// now would leave ahead of them. handedOver wakes the
		// dispatcher, which polls again. A wait past its bound ends
		// here: the dispatcher's timer is set for it
		// (nextWakeupLocked).
		if c.lapseWaitsLocked(now) {
			return false
		}
	}
	ds := c.poll(now)
	if len(*ds) == 0 {
		dispatchBufs.Put(ds)
		return false
	}
	c.released = append(c.released, ds)
	if c.placing {
		return false
	}
	c.placing = true
	return true
}

// placeReleased places what the scheduler released, batch after batch in
// the order released, until none is left; one goroutine at a time
// (pollLocked). Another goroutine's release meanwhile is placed here too,
// after this one's: it does not wait for its turn.
func (c *Client) placeReleased() {
	for {
		c.tmu.Lock()
		if len(c.released) == 0 {
			c.placing = false
			c.unlockThrottle()
			return
		}
		ds := c.released[0]
		n := copy(c.released, c.released[1:])
		c.released[n] = nil
		c.released = c.released[:n]
		c.unlockThrottle()
		c.execute(ds)
	}
}

// dispatchBufs recycles Poll's result slices: the throttle's per-request
// cost stays allocation-free on the unthrottled fast path.
var dispatchBufs = sync.Pool{New: func() any {
	s := make([]throttle.Dispatch[*item], 0, 8)
	return &s
}}

// poll runs the scheduler; c.tmu is held. Hand the result to execute,
// which recycles it.
func (c *Client) poll(now time.Time) *[]throttle.Dispatch[*item] {
	buf := dispatchBufs.Get().(*[]throttle.Dispatch[*item])
	*buf = c.sched.Poll(now, (*buf)[:0])
	ds := (*buf)[:0]
	for _, d := range *buf {
		if d.Err == throttle.ErrNowhere {
			c.heldByPollLocked(d)
			continue
		}
		ds = append(ds, d)
		switch {
		case d.Err != nil:
		case d.Item.ended: // its Send returned while it was queued
			c.sched.Done(d.Server, d.Item.class)
		default:
			d.Item.server = d.Server // it holds a place there now
			d.Item.age = d.Age
			if onReleased != nil {
				onReleased(d.Item.cl)
			}
		}
	}
	clear((*buf)[len(ds):])
	*buf = ds
	return buf
}

// heldByPollLocked holds the request of d, which the scheduler handed
// back (throttle.ErrNowhere): one that came back to it and that no peer
// could take when its turn came (the Pick callback). The next view that
// gives it a peer puts it back where it stood (unhold), as holdLocked's;
// unlockThrottle settles it (or fails it, the Client closed). c.tmu is
// held.
func (c *Client) heldByPollLocked(d throttle.Dispatch[*item]) {
	it := d.Item
	it.age = d.Age
	if it.ended { // its Send returned: nothing waits for it
		return
	}
	c.keepLocked(it)
	c.unsettled = append(c.unsettled, it)
}

// execute sends what the scheduler released and recycles buf. The
// replays among them that went to the same server for the same failover
// are one failover record, as a failover's replays are without a
// throttle.
func (c *Client) execute(buf *[]throttle.Dispatch[*item]) {
	var moves []FailoverRecord
	defer func() {
		recycle(buf)
		for _, r := range moves {
			c.record(r)
		}
	}()
	for i, d := range *buf {
		it := d.Item
		if d.Err != nil {
			// Its deadline passed in a queue: a timeout to its caller,
			// as one that passes anywhere else. do says "client: ".
			it.cl.Fail(fmt.Errorf("%w: %w", ErrTimeout, d.Err))
			continue
		}
		// The move this send makes, taken before it is placed: once
		// placed, the request can be refused (a premature failover read
		// on another goroutine) before place returns, and that failover
		// marks the move off m, to be recorded where the request goes
		// next, not here.
		c.tmu.Lock()
		from, why := it.movedFrom, it.movedWhy
		it.movedFrom, it.movedWhy = nil, ""
		c.unlockThrottle()
		m := c.ros.Load().all[d.Server]
		if c.place(it.cl, m) {
			if from != nil {
				moves = addMove(moves, from, m, why, it.cl)
			}
			continue
		}
		// Refused after all (policy, a connection lost a moment ago, a
		// server that must not get it again): not sent, so the move is
		// still to be made, unless a failover marked a newer one.
		if from != nil {
			c.tmu.Lock()
			if it.movedFrom == nil {
				it.movedFrom, it.movedWhy = from, why
			}
			c.unlockThrottle()
		}
		c.giveBack((*buf)[i:])
		return
	}
}

// giveBack puts back in the scheduler ds, released requests the first
// of which was just refused as it was placed, with every batch released
// after them and not placed yet, in one step under c.tmu: each gives
// back its place and goes where it stood, ahead of newer requests and in
// order with the rest; the scheduler tries them again at its next
// wake-up, with the same checks. The scheduler chose for all of them
// from the picture that has just proved stale, and placed now they would
// leave ahead of the refused one, older than they are. A request no peer
// can take now is held (holdLocked), or ends with its refusal when it
// has one (no peer left to try, as in throttled).
func (c *Client) giveBack(ds []throttle.Dispatch[*item]) {
	var held, shut []*item
	var expired []throttle.Dispatch[*item]
	requeued := false
	c.tmu.Lock()
	later := c.released
	c.released = nil
	closed, v := c.ctx.Err() != nil, c.view()
	back := func(ds []throttle.Dispatch[*item]) {
		for _, d := range ds {
			it := d.Item
			switch {
			case d.Err != nil:
				expired = append(expired, d)
				continue
			case it.ended: // its Send returned; poll gave its place back
				continue
			}
			if it.server == d.Server {
				c.sched.Done(d.Server, it.class)
				it.server = -1
			}
			switch {
			case closed: // see throttled
				shut = append(shut, it)
			case c.holdLocked(it, v):
				held = append(held, it)
			default:
				c.sched.Requeue(it, it.class, it.age)
				requeued = true
				if onRequeued != nil {
					onRequeued(it.cl)
				}
			}
		}
	}
	back(ds)
	for _, b := range later {
		back(*b)
	}
	if requeued {
		c.retryPollLocked()
	}
	c.unlockThrottle()
	for _, b := range later {
		recycle(b)
	}
	for _, d := range expired {
		d.Item.cl.Fail(fmt.Errorf("%w: %w", ErrTimeout, d.Err)) // as in execute
	}
	failAll(heldCalls(shut), errClientClosed)
	for _, it := range held {
		c.settle(it)
	}
}

// retryPollLocked has the dispatcher poll the scheduler again
// giveBackRetry from now, unless that is asked for already: requests
// given back are released again then, or at a view change or the
// dispatcher's own timer, whichever comes first. c.tmu is held.
func (c *Client) retryPollLocked() {
	if c.retryPollArmed || c.ctx.Err() != nil {
		return
	}
	c.retryPollArmed = true
	if c.retryPoll != nil {
		c.retryPoll.Reset(giveBackRetry)
		return
	}
	c.retryPoll = time.AfterFunc(giveBackRetry, func() {
		c.tmu.Lock()
		c.retryPollArmed = false
		c.tmu.Unlock()
		c.poke()
	})
}

// recycle empties a result of poll and gives it back to dispatchBufs.
func recycle(buf *[]throttle.Dispatch[*item]) {
	clear(*buf)
	*buf = (*buf)[:0]
	dispatchBufs.Put(buf)
}

// holdLocked holds it, a request coming back to the scheduler (a replay,
// or one refused as it was placed), out of the scheduler when no peer in
// view v can take it: the peers it must avoid (the connection it was
// sent on, the servers that refused it, each RADIUS/UDP server once) are
// the scheduler's available servers still, and released to one of those
// it would be refused again at every wake-up of the scheduler. The next
// view puts it back where it stood (unhold): a peer in service again, a
// new connection, or the retry tick, which forgets the refusals of a
// request lost and refused since by every peer; held requests go back
// together, in their order. The caller settles it after unlocking c.tmu.
// The Client's callers give up on held requests at their deadlines
// (release lets go of them). c.tmu is held.
//
// It marks it as come back (item.back): when it can go nowhere at its
// turn in the scheduler later, it is held then (heldByPollLocked).
func (c *Client) holdLocked(it *item, v *avail) bool {
	it.back = true
	if c.pick(it.cl, v) != nil {
		return false
	}
	c.keepLocked(it)
	return true
}

// keepLocked puts it, out of the scheduler, in c.held. c.tmu is held.
func (c *Client) keepLocked(it *item) {
	it.held = true
	c.held = append(c.held, it)
	if onHeld != nil {
		onHeld(it.cl)
	}
}

// settle ends it, just held, with its refusal when it has one: no peer is
// left to try (refused too busy, or no reply from each RADIUS/UDP
// server). One lost on a connection and refused since by every peer may
// have been applied where it was lost: no refusal ends it, and it asks
// for the retry tick instead. One naming a peer the connection limit
// closed fails as undeliverable. Called without c.tmu.
func (c *Client) settle(it *item) {
	if c.undeliverable(it.cl, c.view()) {
		return
	}
	if !it.cl.Conclude() && it.cl.RefusedAfterLoss() {
		c.retryLater()
	}
}

// unhold puts the held requests that a peer in view v can take back in
// the scheduler, where they stood, after forgetting the refusals of those
// lost and refused everywhere when forget (the retry tick), and wakes the
// dispatcher to send them, or to poll as a poll deferred for v asked
// (pollLocked). Every view the scheduler follows comes here once
// stored (rebuild).
func (c *Client) unhold(v *avail, forget bool) {
	c.tmu.Lock()
	c.unheldGen = v.gen
	deferred := c.pollDeferred
	c.pollDeferred = false
	if len(c.held) == 0 {
		c.unlockThrottle()
		if deferred {
			c.poke()
		}
		return
	}
	keep, moved, tick := c.held[:0], false, false
	for _, it := range c.held {
		if forget && it.cl.RefusedAfterLoss() {
			it.cl.ForgetRefusals()
		}
		if c.pick(it.cl, v) == nil {
			// Refused everywhere since it was held (a late refusal of
			// the connection it was lost on): the tick forgets it.
			tick = tick || it.cl.RefusedAfterLoss()
			keep = append(keep, it)
			continue
		}
		it.held, moved = false, true
		c.sched.Requeue(it, it.class, it.age)
	}
	clear(c.held[len(keep):])
	c.held = keep
	c.unlockThrottle()
	if tick {
		c.retryLater()
	}
	if moved || deferred {
		c.poke()
	}
}

// addMove adds cl, moved from one member to another for why, to moves:
// to the record of the same move if there is one.
func addMove(moves []FailoverRecord, from, to *member, why string, cl *call.Call) []FailoverRecord {
	why += "; sent from the throttle's queue"
	for i := range moves {
		if r := &moves[i]; r.From == from.spec.Name && r.To == to.spec.Name && r.Reason == why {
			r.Moved++
			r.EndToEnd = appendRef(r.EndToEnd, cl)
			return moves
		}
	}
	return append(moves, FailoverRecord{Time: time.Now(), From: from.spec.Name, To: to.spec.Name, Outcome: Moved, Moved: 1,
		Reason: why, EndToEnd: appendRef(nil, cl)})
}

// dispatcher wakes for the policy's timers and the throttle's next slot or
// deadline, and for test-user requests (probes, keep-alives).
func (c *Client) dispatcher() {
	defer close(c.dispatchDone)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var sends []policy.TestSend
	var evs []policy.Event
	for {
		v := c.view() // before looking: a change after it wakes us
		now := c.monoNow()
		if c.group != nil {
			c.pmu.Lock()
			// The wall clock's time, as every other call of the
			// policy's: its events carry it. The scheduler's is now.
			sends, evs = c.group.Tick(time.Now(), sends[:0], evs[:0])
			c.publishPolicyLocked(evs)
			for _, s := range sends {
				c.sendTest(s)
			}
		}
		next := now.Add(time.Hour)
		if c.sched != nil {
			c.tmu.Lock()
			n := len(c.released)
			place := c.pollLocked(now)
			if onDispatcherPoll != nil {
				onDispatcherPoll(c, len(c.released) > n)
			}
			if at, ok := c.nextWakeupLocked(now); ok && at.Before(next) {
				next = at
			}
			c.wakeAt = next
			c.unlockThrottle()
			if place {
				c.placeReleased()
			}
		}
		if c.group != nil {
			if at, ok := c.group.NextWakeup(); ok && at.Before(next) {
				next = at
			}
			// OnSent starts a down-timeout without telling us: look again
			// at least every policyTick rather than poke per request.
			next = minTime(next, now.Add(policyTick))
		}
		t.Reset(max(time.Until(next), time.Millisecond))
		for wait := true; wait; {
			select {
			case <-t.C:
				wait = false
			case <-v.changed:
				// A server that can take requests now wakes us. One that
				// left does not: the requests it had queued went back to
				// the instance queue, and that pokes us (refresh, see
				// dueSoonerLocked).
				nv := c.view()
				wait = !nv.gained(v)
				v = nv
			case <-c.wake:
				wait = false
			case <-c.stopDispatch:
				return
			}
		}
	}
}

// sendTest sends the test user's request (a probe or a keep-alive, S4/S5)
// to one server, outside the throttle: exactly one message, no retry.
func (c *Client) sendTest(s policy.TestSend) {
	all := c.ros.Load().all
	if s.Index >= len(all) {
		return // a member SetPeers is adding: not connected yet
	}
	m := all[s.Index]
	k := m.carrier()
	_, st, _ := m.stateOf()
	cl, ok := c.newTest(m)
	if !ok || k == nil || st != watchdog.Okay {
		if s.Kind == policy.SendProbe {
			c.group.CancelProbe(s.Index)
		}
		return
	}
	cl.SetHolder(&testCall{cl}) // not replayed by a failover
	cl.SetAttempts(1)           // one message, never retransmitted
	mark := c.replyMark(m)
	if err := k.Submit(cl); err != nil {
		if s.Kind == policy.SendProbe {
			c.group.CancelProbe(s.Index)
		}
		return
	}
	c.sent(m, mark)
	m.stats.probes.Add(1)
	c.closing.Add(1)
	go func() {
		defer c.closing.Done()
		timeout := c.cfg.Policy.ProbeTimeout
		if timeout <= 0 {
			timeout = c.cfg.RequestTimeout
		}
		cl.Wait(c.ctx, timeout) // its answer was told as it came (Replied)
	}()
}

// QueueDepths returns each server's throttle queue depth and whether its
// alarm is raised (empty without a throttle).
func (c *Client) QueueDepths() []QueueDepth {
	if c.sched == nil {
		return nil
	}
	c.tmu.Lock()
	defer c.unlockThrottle()
	order := c.ros.Load().order
	out := make([]QueueDepth, len(order))
	for i, m := range order {
		st := c.sched.Stats(m.index)
		out[i] = QueueDepth{Server: m.spec.Name, Depth: st.Depth, Alarm: st.Alarmed, MaxDepth: st.MaxDepth, Alarms: st.Alarms}
	}
	return out
}

// QueueDepth is one server's throttle queue.
type QueueDepth struct {
	Server   string `json:"server"`
	Depth    int    `json:"depth"`
	MaxDepth int    `json:"max_depth"`
	Alarm    bool   `json:"alarm"`
	Alarms   uint64 `json:"alarms_raised"`
}

// PolicyStates returns each server's policy state ("" without a policy).
func (c *Client) PolicyStates() []string {
	order := c.ros.Load().order
	out := make([]string, len(order))
	if c.group != nil {
		for i, m := range order {
			out[i] = c.group.State(m.index).String()
		}
	}
	return out
}
