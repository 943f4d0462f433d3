package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/call"
)

// The reading baton's hand-over phase of TestSim: the moment a caller
// that read its own answer, holding the baton, hands it on (peer's
// release, handTo; call.Await's taking up of an Offer). The answer-latency
// invariant (sim_latency_test.go) sees a baton left lying there: an
// answer that arrives next on that connection is read only at the
// parked reader's look, 5 to 10 ms later.
//
// Each round, on one server's connection (s1): a caller A sends a
// request alone, takes the free baton and reads its answer; its caller
// then holds the baton, done with its call, for a while (the CallerRead
// hook: a pause on a goroutine that reads, counted against that
// connection like the pause after a queue). Meanwhile, one of:
//   - a caller W sends a request alone (written inline, so it registers
//     waiting for the baton) whose deadline is the instant A's hold ends,
//     and a request X behind it whose answer comes just after: the baton
//     goes to W as its wait ends, so W's Await must take it up (and hand
//     it on), or handTo must see that W left Await. W's wait ends at the
//     end of A's hold (A's holder then yields 0 to 7 times), or as A
//     hands it the baton (testhook.Handing: its deadline's watch fires,
//     or another goroutine ends the call, as a throttle's expiry does;
//     then 0 to 3 yields);
//   - with a throttle whose accounting rate is limited, in half the
//     rounds: a slot's worth of requests to another server, then a
//     request E to s1, written inline by its caller
//     while A holds the baton, its answer coming a moment after A's
//     hold: A must hand the baton on (to E's caller, registered
//     waiting, or to the reader when the registration it finds is
//     stale: a call that completed). (The throttle's rate is each
//     server's: E is not held back for the next slot; the dispatcher
//     writing a request inline while a caller holds the baton is not
//     reached.)
//
// The simulator's pauses are off during the phase (the rounds are timed
// to the instant), and it draws from sources of its own: the rest of
// the schedule stays as it was.

// simB2Req is what the phase wants of one of its requests.
type simB2Req struct {
	pin    string        // Destination-Host
	limit  time.Duration // its deadline (not patient), when not zero
	at     time.Time     // the servers answer it then (zero: as they would)
	holder bool          // its caller holds the baton once it read its answer
	ctx    *simCutCtx    // its context (limit is its deadline)
	waiter bool          // the round's W
	class  string        // "acct" (an Accounting-Request with its record), "auth" (a Credit-Control-Request): its throttle class (else drawn)
	slack  time.Duration // how late past limit its Send may return (else simSlack)
	drop   bool          // the servers never answer it (a silent server's)
}

// simSlot is the throttle's rate slot (Throttle.Slot's default).
const simSlot = 50 * time.Millisecond

// simCutCtx is a context whose deadline passes when the phase says
// (fire), at the instant it names: the holder ends W's wait itself, then
// yields, so that the cut lands anywhere in its hand-over.
//
// It is a context.WithCancel underneath: context.AfterFunc (the call's
// watch of its context) registers with it. Of a context of another type,
// AfterFunc starts a goroutine that makes the AfterFunc's channel in this
// schedule's bubble, and the watch that holds it is shared by the whole
// process (one slot, the watch of the last context waited under): a call
// of a schedule running beside this one that takes the slot over stops
// the watch, and would close that channel from the other bubble, which
// the runtime refuses (fatal).
type simCutCtx struct {
	context.Context
	cancel context.CancelFunc
	dl     time.Time
}

func newSimCutCtx(dl time.Time) *simCutCtx {
	ctx, cancel := context.WithCancel(context.Background())
	return &simCutCtx{Context: ctx, cancel: cancel, dl: dl}
}

func (c *simCutCtx) Deadline() (time.Time, bool) { return c.dl, true }
func (c *simCutCtx) Err() error {
	if c.Context.Err() != nil {
		return context.DeadlineExceeded
	}
	return nil
}
func (c *simCutCtx) fire() { c.cancel() }

// simBaton2 is a schedule's record of the phase.
type simBaton2 struct {
	quiet atomic.Bool // the phase runs: the simulator's pauses are off

	mu   sync.Mutex
	next *simB2Req            // for the next send with the "b2" option
	reqs map[uint32]*simB2Req // the phase's requests
	// The round's holder (a request) and its hold: hold long, then
	// yields Goscheds; held gets the instant its hold ends.
	holder uint32
	hold   time.Duration
	yields int
	held   chan time.Time
	cut    *simCutCtx // W's, fired as the hold ends
	// handCut: W's, fired instead by the holder as it hands W the
	// baton (testhook.Handing), then handYields Goscheds.
	handCut    *simCutCtx
	handID     uint32
	handYields int
	// handFail: the holder ends W's call itself (Fail, as a throttle's
	// expiry does from another goroutine) rather than its deadline's
	// watch: the call ends before W's Await wakes. wCall is W's call
	// (beforeSent).
	handFail bool
	wCall    *call.Call
}

// simBeforeSent is beforeSent: W's call, for handFail.
func simBeforeSent(calls []*call.Call) {
	if simBaton2Phases.Load() == 0 {
		return
	}
	for _, cl := range calls {
		if w := simWorldOf(cl.Ref); w != nil {
			w.b2.mu.Lock()
			if w.b2.handID == cl.Ref {
				w.b2.wCall = cl
			}
			w.b2.mu.Unlock()
		}
	}
}

// simBaton2Phases counts the hand-over phases running.
var simBaton2Phases atomic.Int32

// take gives request id, sent with opts, what the phase wants of it.
func (b *simBaton2) take(id uint32, opts []string) *simB2Req {
	if !slices.Contains(opts, "b2") {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.next
	b.next = nil
	if b.reqs == nil {
		b.reqs = map[uint32]*simB2Req{}
	}
	b.reqs[id] = r
	if r.holder {
		b.holder = id
	}
	if r.waiter {
		b.handID = id // before its Send: beforeSent looks for it
	}
	return r
}

func (b *simBaton2) get(id uint32) *simB2Req {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reqs[id]
}

// drops reports whether the servers never answer request id.
func (b *simBaton2) drops(id uint32) bool {
	r := b.get(id)
	return r != nil && r.drop
}

// readyAt is when the servers answer request id, if the phase says.
func (b *simBaton2) readyAt(id uint32) (time.Time, bool) {
	r := b.get(id)
	if r == nil || r.at.IsZero() {
		return time.Time{}, false
	}
	return r.at, true
}

// batonHold runs on the caller of request e2e once it read its answer
// holding the baton (testhook.CallerRead): the round's holder keeps the
// baton, done with its call, for the round's hold.
func (w *simWorld) batonHold(e2e uint32) {
	b := &w.b2
	b.mu.Lock()
	if b.holder == 0 || b.holder != e2e {
		b.mu.Unlock()
		return
	}
	b.holder = 0
	hold, yields, held := b.hold, b.yields, b.held
	b.mu.Unlock()
	var conn any
	w.mu.Lock()
	if s := w.sends[e2e]; len(s) == 1 {
		conn = s[0].conn
		w.counts.Baton2Holds++
	}
	w.mu.Unlock()
	if conn == nil {
		held <- time.Time{}
		return
	}
	l := &w.lat
	l.mu.Lock()
	l.init()
	spanOf(l.onQueue, conn).active++
	l.mu.Unlock()
	held <- time.Now().Add(hold)
	time.Sleep(hold)
	b.mu.Lock()
	cut := b.cut
	b.cut = nil
	b.mu.Unlock()
	if cut != nil {
		cut.fire()
	}
	for range yields {
		runtime.Gosched()
	}
	l.mu.Lock()
	sp := l.onQueue[conn]
	sp.active--
	sp.lastEnd = time.Now()
	l.mu.Unlock()
}

// simHanding is testhook.Handing: a holder hands the baton to the
// waiting call e2e.
func simHanding(e2e uint32) {
	if w := simWorldOf(e2e); w != nil {
		w.b2.handing(e2e)
	}
}

// handing fires W's deadline, when the round says so, as the baton is
// handed to it, and yields.
func (b *simBaton2) handing(e2e uint32) {
	b.mu.Lock()
	cut, n, fail, cl := b.handCut, b.handYields, b.handFail, b.wCall
	if cut == nil || b.handID != e2e {
		b.mu.Unlock()
		return
	}
	b.handCut = nil
	b.mu.Unlock()
	if fail && cl != nil {
		cl.Fail(fmt.Errorf("%w: its deadline, as the holder hands it the baton", ErrTimeout))
	} else {
		cut.fire()
	}
	for range n {
		runtime.Gosched()
	}
}

// batonPhase2 runs the hand-over phase in the schedules whose callers
// may read (as batonPhase), once quiet.
func (w *simWorld) batonPhase2(send func(opts ...string) *simReq) {
	if len(w.servers) == 0 || !w.servers[0].f.baton {
		return
	}
	rng := rand.New(rand.NewPCG(w.seed, 0x62326830))
	crng := rand.New(rand.NewPCG(w.seed, 0x62324330)) // C's, apart: the other rounds draw as they did
	saved := w.rng
	w.rng = rand.New(rand.NewPCG(w.seed, 0x62327371)) // send's draws
	w.b2.quiet.Store(true)
	simBaton2Phases.Add(1)
	defer func() {
		simBaton2Phases.Add(-1)
		w.b2.quiet.Store(false)
		w.rng = saved
	}()
	i1 := rng.IntN(len(w.servers))
	s1, s2 := w.servers[i1].host, w.servers[(i1+1)%len(w.servers)].host
	// With a throttle whose accounting rate is limited: a slot's
	// share of it, and two.
	quota := 0
	if t := w.c.cfg.Throttle; t != nil && t.Accounting.MaxRate > 0 {
		quota = int((int64(t.Accounting.MaxRate)*int64(simSlot)+int64(time.Second)-1)/int64(time.Second)) + 2
	}
	sendB2 := func(r simB2Req) *simReq {
		w.b2.mu.Lock()
		w.b2.next = &r
		w.b2.mu.Unlock()
		return send("patient", "unpinned", "b2")
	}
	wait := func(rs ...*simReq) {
		for _, r := range rs {
			w.waitReturn(r.id)
		}
	}
	for range simBaton2Rounds {
		// E's rounds: half of them, with a throttle.
		queued := quota > 0 && rng.IntN(2) == 0
		if queued {
			// At a slot's start: A's hold spans the next one's.
			time.Sleep(time.Until(time.Now().Truncate(simSlot).Add(simSlot)))
		}
		// A request read by its own caller, or by the reader, which
		// then parks: the baton lies free for A.
		wait(sendB2(simB2Req{pin: s1, class: "auth"}))
		time.Sleep(time.Millisecond)
		if crng.IntN(2) == 0 {
			// C, alone: its caller takes the free baton and reads for
			// it, and its deadline passes before its answer comes, late
			// or never. Its Send returns at the deadline (the deadline's
			// watch stops the read), not at the answer; unanswered, it
			// leaves the connection's pending requests as it returns
			// (nothing is pending once quiet).
			limit := time.Millisecond + time.Duration(crng.Int64N(int64(5*time.Millisecond)))
			drop := crng.IntN(2) == 0
			c := sendB2(simB2Req{pin: s1, class: "auth", limit: limit, slack: simQuietSlack, at: time.Now().Add(limit + 30*time.Millisecond), drop: drop})
			w.tracef("baton2 round: C %d, deadline in %v, dropped %v", c.id, limit, drop)
			if !w.waitReturnBy(c.id, time.Now().Add(limit+time.Second)) {
				// Its caller reads on past its deadline (an answer that
				// never comes): the end of the schedule reports the
				// Send that never returns, and closes the Client.
				w.violation("request %d (deadline %v, read by its caller, never answered: %v) has not returned 1s past its deadline", c.id, limit, drop)
				return
			}
			time.Sleep(40 * time.Millisecond) // its answer came, late, or did not
		}
		hold := time.Millisecond + time.Duration(rng.Int64N(int64(5*time.Millisecond)))
		delta := 100*time.Microsecond + time.Duration(rng.Int64N(int64(2*time.Millisecond)))
		if queued {
			// A's hold ends a moment after the next slot's start.
			slotEnd := time.Now().Truncate(simSlot).Add(simSlot)
			hold = time.Until(slotEnd) + 500*time.Microsecond + time.Duration(rng.Int64N(int64(2500*time.Microsecond)))
		}
		yields := rng.IntN(8)
		held := make(chan time.Time, 1)
		w.b2.mu.Lock()
		w.b2.hold, w.b2.yields, w.b2.held = hold, yields, held
		w.b2.mu.Unlock()
		a := sendB2(simB2Req{pin: s1, holder: true, class: "auth"})
		ret := make(chan struct{})
		go func() { w.waitReturn(a.id); close(ret) }()
		var end time.Time
		select {
		case end = <-held:
		case <-ret:
			w.b2.mu.Lock()
			w.b2.holder = 0
			w.b2.mu.Unlock()
			select {
			case end = <-held:
			default:
			}
		}
		if end.IsZero() {
			<-ret
			continue
		}
		w.tracef("baton2 round: A %d holds until %v (queued %v, yields %d, delta %v)", a.id, end.Format("05.000000"), queued, yields, delta)
		var rs []*simReq
		if queued {
			// A slot's accounting quota of requests to another server,
			// answered at once (the rate is each server's: E to s1
			// goes out at once all the same).
			for range quota {
				rs = append(rs, sendB2(simB2Req{pin: s2, class: "acct"}))
			}
			time.Sleep(20 * time.Microsecond)
			rs = append(rs, sendB2(simB2Req{pin: s1, class: "acct", at: end.Add(delta)}))
		} else {
			// W first, alone: its caller registers waiting for the baton
			// before X is sent (a moment: every goroutine runs until it
			// blocks).
			cut := newSimCutCtx(end)
			// Its deadline's end: at the end of A's hold (the holder yields
			// after it), or as A hands it the baton (testhook.Handing),
			// there through its deadline's watch or by another goroutine
			// ending the call, then yields.
			mode := rng.IntN(4)
			handYields := rng.IntN(4)
			rs = append(rs, sendB2(simB2Req{pin: s1, limit: time.Until(end), ctx: cut, waiter: true, at: end.Add(30 * time.Millisecond)}))
			w.b2.mu.Lock()
			if mode > 0 {
				w.b2.handCut, w.b2.handID, w.b2.handYields, w.b2.handFail = cut, rs[0].id, handYields, mode > 1
			} else {
				w.b2.cut, w.b2.handID = cut, 0
			}
			w.b2.mu.Unlock()
			time.Sleep(20 * time.Microsecond)
			rs = append(rs, sendB2(simB2Req{pin: s1, at: end.Add(delta)}))
		}
		<-ret
		w.b2.mu.Lock()
		if w.b2.handCut != nil {
			// The hold ended without a hand-over to W (it was not
			// registered, or done): its deadline passes now.
			w.b2.handCut.fire()
			w.b2.handCut = nil
		}
		w.b2.handID, w.b2.wCall = 0, nil
		w.b2.mu.Unlock()
		wait(rs...)
		time.Sleep(50 * time.Millisecond)
	}
}

// simQuietSlack is how late past its deadline a Send of the phase may
// return: there are no pauses, and the deadline's watch ends the wait at
// the instant.
const simQuietSlack = time.Millisecond

// simBaton2Rounds is how many rounds the hand-over phase runs.
const simBaton2Rounds = 60
