package client

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/watchdog"
)

// avail is the Client's one view of where requests may go: each member's
// watchdog state, whether its peer takes new requests, and whether its
// policy state lets them in. It is immutable: refresh builds the next one
// whenever a peer's state or a policy state changes, swaps it in, and
// closes the old one's changed channel, which wakes every request that
// waited for a change (waitFor), WaitReady, and the throttle's
// dispatcher. The balancer's table, the policy's availability and the
// throttle's are derived from it, in the same step.
type avail struct {
	gen   uint64
	ros   *roster          // the members the view is of; its slices are by member index
	state []watchdog.State // per member; Down when not dialed
	open  []bool           // per member: dialed and in service
	takes []bool           // per member: open, and the policy lets requests in
	// probes: per member, open, and its policy waits for a real request
	// to probe it (policy.Group.WantsProbe): the throttle may send it one,
	// and a request waiting for a server may be that one (a server whose
	// hold-down ends changes the view, though it takes nothing else yet).
	probes []bool
	nopen  int // members open
	// retries: the retry ticks so far (Client.retries): a round in a view
	// with more than its waiter saw forgets the refusals of its requests
	// lost and refused everywhere, so that every waiter does at the same
	// tick, in line order.
	retries uint64
	// pick is the balancer's routing snapshot taken with this view: it
	// picks among the members the view has in service (zero without a
	// balancer).
	pick loadbalance.Picker
	// changed is closed when a newer view replaces this one.
	changed chan struct{}
}

func newAvail(ros *roster) *avail {
	n := len(ros.all)
	v := &avail{ros: ros, state: make([]watchdog.State, n), open: make([]bool, n), takes: make([]bool, n), probes: make([]bool, n), changed: make(chan struct{})}
	for i := range v.state {
		v.state[i] = watchdog.Down
	}
	return v
}

func (v *avail) same(w *avail) bool {
	return v.ros == w.ros && slices.Equal(v.state, w.state) && slices.Equal(v.open, w.open) && slices.Equal(v.takes, w.takes) &&
		slices.Equal(v.probes, w.probes)
}

// gained reports whether a member takes requests in v that did not in
// old.
func (v *avail) gained(old *avail) bool {
	for i, t := range v.takes {
		if t && (i >= len(old.takes) || !old.takes[i]) {
			return true
		}
	}
	return false
}

// refresh looks at every member's peer and policy state and, when
// anything changed, swaps in a new view, tells the balancer, the policy
// and the throttle, and wakes what waits for a change. Every change of
// a peer's state, of a policy state, and of the dialed peers comes here.
func (c *Client) refresh() { c.rebuild(false, nil) }

// refreshForFailover is refresh for peer k, which left service with a
// failover to follow (OKAY to SUSPECT or DOWN): its hand-over comes next
// on the same notifier (onFailover). Until then the throttle releases
// nothing (handing): the requests k's queue sent back, and any sent
// meanwhile, wait behind k's replays, which go to the head of the queue
// (Q3), rather than leave ahead of them.
func (c *Client) refreshForFailover(k call.Carrier) { c.rebuild(false, k) }

// bump is refresh for a change the view does not show (a connection of a
// RADIUS server in service closed: requests that had to avoid it may go
// to the server again): it swaps in a new view even if it looks the same.
func (c *Client) bump() { c.rebuild(true, nil) }

// rebuild makes the new view; leaving, if not nil, is a peer whose
// hand-over is to follow (refreshForFailover).
func (c *Client) rebuild(force bool, leaving call.Carrier) {
	c.avMu.Lock()
	old := c.av.Load()
	ros := c.ros.Load()
	n := len(ros.all)
	v := &avail{gen: old.gen + 1, ros: ros, state: make([]watchdog.State, n), open: make([]bool, n), takes: make([]bool, n), probes: make([]bool, n), retries: c.retries}
	for i, m := range ros.all {
		v.state[i] = watchdog.Down
		if _, st, ok := m.stateOf(); ok && !m.removed.Load() {
			v.state[i] = st
		}
		k := m.carrier()
		v.open[i] = k != nil && k.InService() && !m.removed.Load()
		if v.open[i] {
			v.nopen++
		}
	}
	// The policy learns availability first: whether its state takes
	// requests may follow from it.
	if c.group != nil {
		for i := range ros.all {
			if i >= len(old.open) || v.open[i] != old.open[i] || old.gen == 0 {
				c.group.SetAvailable(i, v.open[i])
			}
		}
	}
	for i := range ros.all {
		v.takes[i] = v.open[i] && (c.group == nil || c.group.State(i).Takes())
		v.probes[i] = v.open[i] && c.group != nil && c.group.WantsProbe(i)
	}
	// A view like the last is not published, but for a peer leaving
	// service with its hand-over to follow: another peer's change may
	// have built a view with its new state already (the state is read
	// as it is now), and the throttle is to wait for its hand-over
	// all the same.
	if !force && leaving == nil && v.same(old) && v.retries == old.retries {
		c.avMu.Unlock()
		return
	}
	v.changed = make(chan struct{})
	// The derived views change under avMu, so that they follow the views
	// in order; their events are scheduled under it, in that order, and
	// delivered off it (notes).
	var evs []Event
	if c.sched != nil {
		now := c.monoNow()
		c.tmu.Lock()
		for i := range ros.all {
			// A server waiting for its probe takes that one request: the
			// scheduler would otherwise never send it there, and it would
			// stay probing for good (pinned requests with it).
			c.sched.SetAvailable(i, v.takes[i] || v.probes[i], now)
		}
		c.schedGen = v.gen // stored below: until then picks read the view before
		evs, c.alarms = c.alarms, nil
		wake := c.dueSoonerLocked(now) // a server gone sent its queue back
		if leaving != nil {
			c.handing = append(c.handing, handOverWait{k: leaving, since: now})
		}
		if len(c.handing) > 0 {
			// A peer no member has any more (removed, replaced) may
			// never hand over: the throttle does not wait for it.
			c.handing = slices.DeleteFunc(c.handing, func(w handOverWait) bool {
				return !slices.ContainsFunc(ros.all, func(m *member) bool { return !m.removed.Load() && m.carrier() == w.k })
			})
		}
		if onAwaitHandOver != nil && leaving != nil && slices.ContainsFunc(c.handing, func(w handOverWait) bool { return w.is(leaving, false) }) {
			onAwaitHandOver(c, leaving)
		}
		c.tmu.Unlock()
		if wake && leaving == nil {
			c.poke()
		}
		if beforeViewStore != nil {
			beforeViewStore()
		}
	}
	if c.bal != nil {
		for i, m := range ros.all {
			if m.removed.Load() {
				continue // out of the balancer (SetPeers); its name may be another member's now
			}
			if st := v.balancerState(i); i >= len(old.state) || st != old.balancerState(i) || old.gen == 0 {
				if e, ok := c.setBalancerStateLocked(m, st); ok {
					evs = append(evs, e)
				}
			}
		}
	}
	if c.bal != nil {
		// With the states just set. The balancer changes otherwise only
		// in SetPeers, whose new roster makes a new view.
		v.pick = c.bal.Picker()
	}
	c.av.Store(v)
	close(old.changed)
	c.note(evs...)
	if c.sched != nil {
		if v.ros != old.ros {
			c.repick(v)
		}
		// After the store: a request held against the view before this
		// one is looked at again here, whatever its holder read.
		c.unhold(v, v.retries != old.retries)
	}
	c.avMu.Unlock()
}

// repick has the scheduler pick again where the requests queued for the
// servers that take none in view v go, after a new roster: those pinned
// to a member (Destination-Host) may go to another now (a member
// replaced, its name removed). The scheduler does so by itself for a
// server whose availability changes. After the store of v: the next
// poll picks against it.
func (c *Client) repick(v *avail) {
	now := c.monoNow()
	c.tmu.Lock()
	for i := range v.ros.all {
		if !v.takes[i] && !v.probes[i] {
			c.sched.Repick(i, now)
		}
	}
	wake := c.dueSoonerLocked(now)
	c.unlockThrottle()
	if wake {
		c.poke()
	}
}

// balancerState is member i's state for the balancer: its watchdog's,
// but Down while its policy holds it out of service (or probing) with
// the connection up. The policy is then the one that found the server
// failing (over UDP, the only one), and the balancer must hear it: its
// table moves the server's buckets, remembering the conversations that
// stay, rather than the server staying in the table and every request of
// its buckets going wherever pick's next choice happens to be.
func (v *avail) balancerState(i int) loadbalance.State {
	if v.open[i] && !v.takes[i] {
		return loadbalance.Down
	}
	return balancerState(v.state[i])
}

// balancerState is the balancer's state for a watchdog state.
func balancerState(st watchdog.State) loadbalance.State {
	switch st {
	case watchdog.Okay:
		return loadbalance.InService
	case watchdog.Suspect:
		return loadbalance.Suspended
	}
	return loadbalance.Down
}

// maxWaiting bounds the requests waiting for a peer to come into service;
// past it a request that finds none fails at once with ErrNoPeer rather
// than the waiting growing without bound. A variable for tests.
var maxWaiting = 1 << 16

// toWait deals with requests no peer can take now and returns those that
// are to wait, in order, and those it concluded: one that peers refused as
// too busy gets the last refusal (no peer is left to try); the others
// wait.
func toWait(calls []*call.Call) (wait, concluded []*call.Call) {
	for _, cl := range calls {
		switch {
		case cl.Conclude():
			concluded = append(concluded, cl)
		case cl.Park():
			wait = append(wait, cl)
		}
	}
	return wait, concluded
}

// strand has requests that no peer can take in view v wait, together and
// in order, for v to change (F3); see toWait for those that do not wait. If
// v changed while they looked, their waiter places them again at once. It
// returns those it had wait, those toWait concluded and those it failed as
// undeliverable (deliverable), for the failover records: what was decided
// for each, not what their state says a moment later (a waiting call may
// end, or be placed by its waiter, at once).
func (c *Client) strand(calls []*call.Call, v *avail) (wait, concluded, undeliverable []*call.Call) {
	calls, undeliverable = c.deliverable(calls, v)
	wait, concluded = toWait(calls)
	if len(wait) == 0 {
		return nil, concluded, undeliverable
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		failAll(wait, errClientClosed)
		return nil, concluded, undeliverable
	}
	if onStrand != nil {
		onStrand(wait)
	}
	if n := c.waiting.Add(int64(len(wait))); n > int64(maxWaiting) {
		over := min(int(n)-maxWaiting, len(wait))
		c.waiting.Add(-int64(over))
		failAll(wait[len(wait)-over:], fmt.Errorf("%w: %d requests already waiting", ErrNoPeer, maxWaiting))
		wait = wait[:len(wait)-over]
	}
	if len(wait) == 0 {
		c.mu.Unlock()
		return nil, concluded, undeliverable
	}
	// Its round for v was the one that found no peer for its requests.
	// Its own copy: waitFor compacts it as its requests end, and wait
	// is the caller's (dispatchAll reads it after we return).
	w := &waiter{calls: slices.Clone(wait), prev: c.lastWaiter, round: v.gen, retries: v.retries, tick: make(chan struct{})}
	if w.prev != nil {
		w.prev.next = w
	}
	c.lastWaiter = w
	c.waiters.Add(1)
	c.mu.Unlock()
	go c.waitFor(w, v)
	return wait, concluded, undeliverable
}

// deliverable fails the calls that name in Destination-Host a peer the
// connection limit closed (undeliverable) and returns the others, and
// those it failed.
func (c *Client) deliverable(calls []*call.Call, v *avail) (rest, failed []*call.Call) {
	if c.cfg.MaxConnections == 0 {
		return calls, nil
	}
	for i, cl := range calls {
		if !c.undeliverable(cl, v) {
			if failed != nil {
				rest = append(rest, cl)
			}
			continue
		}
		if failed == nil {
			rest = append(make([]*call.Call, 0, len(calls)), calls[:i]...)
		}
		failed = append(failed, cl)
	}
	if failed == nil {
		return calls, nil
	}
	return rest, failed
}

// undeliverable fails cl, and reports whether it did, when it names in
// Destination-Host a peer the connection limit closed and that is not
// dialed again (DIAMETER_UNABLE_TO_DELIVER, as the requests in flight to
// it when it closed): that peer is one of ours, so cl goes nowhere else
// (RFC 6733 6.1), and it may not be dialed again before cl's deadline.
func (c *Client) undeliverable(cl *call.Call, v *avail) bool {
	if c.cfg.MaxConnections == 0 {
		return false
	}
	if m, ok := c.pinned(cl, v); !ok || m.p() != nil || m.released.Load() == nil {
		return false
	}
	cl.Fail(fmt.Errorf("%w: Destination-Host %s was closed to respect the limit of %d connections", ErrUnableToDeliver, cl.Key.Dest, c.cfg.MaxConnections))
	return true
}

func failAll(calls []*call.Call, err error) {
	for _, cl := range calls {
		cl.Fail(err)
	}
}

// beforeRefresh, when set, runs as a peer's state change is about to be
// looked at (onPeerEvent, onRADIUSEvent, no lock held): a test can pause
// between the change and the view's.
var beforeRefresh func()

// beforeViewStore, when set, runs in rebuild between the scheduler's
// change to a new view and that view's store (avMu held, tmu not): a
// test can pause there, where the scheduler is ahead of the view.
var beforeViewStore func()

// beforeStrand, when set, runs once requests (calls) found no peer,
// before strand has them wait: a test can change a peer's state inside
// that window, which strand must see (the view they were placed against
// is then not the current one).
var beforeStrand func(calls []*call.Call)

// onStrand, when set, is told of the requests that start waiting.
var onStrand func([]*call.Call)

// onWait, when set, is told why placeAll left a request waiting in view
// v, and of each replay that joins the throttle's queue: a test's failure
// can then say which path kept it back.
var onWait func(cl *call.Call, v *avail, why string)

// onThrottled, when set, is told of each request the throttle admits: a
// test can then count the requests in flight on each server.
var onThrottled func(cl *call.Call)

// onPicked, when set, is told of the server the throttle's pick chose for
// a request: where it goes, or whose queue it waits in; nil when it chose
// none (no peer can take the request now): one that came back to the
// scheduler (a replay, or given back) is then handed back and held
// (throttle.Nowhere, heldByPollLocked) while the scheduler has a server
// available; a new one is queued for one of its available servers,
// round-robin (throttle.Config.Pick), where it waits until released
// there, refused and given back (giveBack).
var onPicked func(cl *call.Call, m *member)

// A waiter holds requests that found no peer, on its own goroutine
// (waitFor), until the view changes; then it dispatches them again, in
// order, in a round, and keeps those that still find none. Waiters go in
// the order they started waiting: each round of one waits for the round
// of the live waiters before it for the same view (after).
type waiter struct {
	calls   []*call.Call // its goroutine's
	retries uint64       // the retry ticks it has seen (avail.retries); its goroutine's

	// Under Client.mu: the live waiters, in the order they started
	// waiting (a waiter that left keeps its prev, for after), and where
	// each is.
	prev, next *waiter
	round      uint64        // the generation of the view of its last round
	gone       bool          // it left the line
	tick       chan struct{} // closed and replaced at each round
}

// roundDone records w's round in the view of generation gen; gone: it
// has no request left, and leaves the line.
func (c *Client) roundDone(w *waiter, gen uint64, gone bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.round = gen
	close(w.tick)
	w.tick = make(chan struct{})
	if !gone {
		return
	}
	w.gone = true
	if w.prev != nil {
		w.prev.next = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	if c.lastWaiter == w {
		c.lastWaiter = w.prev
	}
	w.next = nil
}

// after waits until the waiter before w has had its round for the view of
// generation gen, or left; that one waited for the one before it. A
// waiter's view is never newer than the current one, so that round comes
// as soon as its turn does.
func (c *Client) after(w *waiter, gen uint64) {
	for {
		c.mu.Lock()
		p := w.prev
		switch {
		case p == nil || (p.round >= gen && !p.gone):
			c.mu.Unlock()
			return
		case p.gone: // left since w looked: the ones before it
			w = p
			c.mu.Unlock()
			continue
		}
		tick := p.tick
		c.mu.Unlock()
		<-tick
	}
}

// joinLine waits, before requests handed over now are placed in view
// v, until every waiter has had its round for v: requests that waited go
// first, in the order they started waiting.
func (c *Client) joinLine(v *avail) {
	c.mu.Lock()
	last := c.lastWaiter
	c.mu.Unlock()
	if last != nil {
		c.after(&waiter{prev: last}, v.gen)
	}
}

// waitFor runs waiter w, whose requests found no peer in view v. It ends
// when none is left: dispatched, failed as the Client closes, or
// completed (their callers gave up: looked at when their deadlines pass).
//
// A request lost on a connection and refused (too busy) since by every
// peer it could go to may have been applied where it was lost: no refusal
// may end it, and its peers, in service, will not change the view. Within
// refusedRetry a retry tick, one for the whole line, forgets its
// refusals, and it is placed again in a round of its waiter, within its
// deadline: the waiters' rounds for that tick go in line order, so
// requests that waited in different waiters leave in the order they
// started waiting, as for any view change.
func (c *Client) waitFor(w *waiter, v *avail) {
	defer c.waiters.Done()
	t := time.NewTimer(untilDeadline(w.calls, c.cfg.RequestTimeout))
	defer t.Stop()
	for {
		if slices.ContainsFunc(w.calls, (*call.Call).RefusedAfterLoss) {
			c.retryLater()
		}
		select {
		case <-v.changed:
		case <-c.ctx.Done():
			c.waiting.Add(-int64(len(w.calls)))
			failAll(w.calls, errClientClosed)
			c.roundDone(w, c.view().gen, true)
			return
		case <-t.C:
			left := slices.DeleteFunc(w.calls, (*call.Call).IsDone)
			c.waiting.Add(-int64(len(w.calls) - len(left)))
			if w.calls = left; len(left) == 0 {
				c.roundDone(w, v.gen, true)
				return
			}
			t.Reset(untilDeadline(w.calls, c.cfg.RequestTimeout))
			continue
		}
		if v = c.round(w); v == nil {
			return
		}
		// The requests the round placed may have held the last deadline:
		// look again by the last of those left.
		t.Reset(untilDeadline(w.calls, c.cfg.RequestTimeout))
	}
}

// retryLater sets the retry tick (see waitFor) unless it is set: after
// refusedRetry a new view with one more tick wakes every waiter.
// Its own lock, a leaf: it is set from under c.mu and avMu alike.
func (c *Client) retryLater() {
	c.retryMu.Lock()
	defer c.retryMu.Unlock()
	if c.retry != nil || c.retryOff {
		return
	}
	c.retry = time.AfterFunc(refusedRetry, func() {
		c.retryMu.Lock()
		c.retry = nil
		c.retryMu.Unlock()
		c.avMu.Lock()
		c.retries++
		c.avMu.Unlock()
		c.refresh()
	})
}

// round dispatches w's requests again in the current view, after the
// waiter before it; it returns that view, for those that found no peer in
// it to wait on, or nil when none is left.
func (c *Client) round(w *waiter) *avail {
	v := c.view()
	c.after(w, v.gen)
	if v.retries != w.retries {
		w.retries = v.retries
		for _, cl := range w.calls {
			if cl.RefusedAfterLoss() {
				cl.ForgetRefusals()
			}
		}
	}
	c.waiting.Add(-int64(len(w.calls)))
	w.calls, _ = toWait(c.placeAll(w.calls, v, nil))
	c.waiting.Add(int64(len(w.calls)))
	gone := len(w.calls) == 0
	c.roundDone(w, v.gen, gone)
	if gone {
		return nil
	}
	return v
}

// untilDeadline is how long until the last of the calls' deadlines, at
// least a moment: by then their callers have given up.
func untilDeadline(calls []*call.Call, dflt time.Duration) time.Duration {
	var last time.Time
	for _, cl := range calls {
		last = maxTime(last, cl.Deadline)
	}
	if last.IsZero() {
		return dflt
	}
	return max(time.Until(last), 10*time.Millisecond)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// WaitReady waits until at least n servers are in service (their watchdog
// OKAY and, in Balance mode, in the balancer's table; a radius:// server,
// which has no watchdog, is in service at once), or ctx is done; it
// returns at once when they already are. Send does not need it (a request
// waits for a server in service within its deadline); it is for starting
// traffic only once the servers wanted are up. n larger than the servers
// configured is an error, n <= 0 returns nil; once the Client is closed it
// returns an error matching ErrClosed.
func (c *Client) WaitReady(ctx context.Context, n int) error {
	for {
		v := c.view()
		if c.ctx.Err() != nil { // closed: its view may not have caught up yet
			return fmt.Errorf("client: %w", ErrClosed)
		}
		// Looked at again at each change: SetPeers may leave fewer.
		if k := len(c.ros.Load().order); n > k {
			return fmt.Errorf("client: WaitReady(%d) with %d servers configured", n, k)
		}
		if v.nopen >= n {
			return nil
		}
		select {
		case <-v.changed:
		case <-c.ctx.Done(): // closed: the check above returns
		case <-ctx.Done():
			return fmt.Errorf("client: %d of the %d servers wanted in service%s: %w", v.nopen, n, c.notInService(), context.Cause(ctx))
		}
	}
}
