package client

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// The answer-latency invariant of TestSim. Inside a synctest bubble
// virtual time does not pass while a goroutine can run, so a connection
// whose client end someone reads takes in the answer a server writes at
// the instant the server's handler returned it: a healthy read path costs
// no virtual time at all. An answer read later than simReadBound after
// its server's handler returned it, with nothing pending that holds the
// connection's reading up, lay unread: no goroutine was reading that
// connection (the reading baton left free, or handed to a caller that
// never took it, until the parked reader looked again).
//
// What holds the reading up, and excuses an answer (each is looked at
// over the whole span from the handler's return to the client's read):
//   - the server frozen (its writes held) at some instant of the span:
//     at either end, or frozen and thawed within it (a freeze that
//     began just after its handler returned, even at the same virtual
//     instant, holds the answer in the server's writer until the thaw,
//     while the client's reader waits on the connection);
//   - a simulator pause of the connection's client end: the pause after
//     the client reads an answer (readLog), and the pause on a sending
//     goroutine after its request was queued there (testhook.AfterQueue;
//     it is before the send offers its caller the baton, or wakes the
//     parked reader);
//   - the client's handler running for a request of that server (it
//     runs on the reader until the guard moves it);
//   - anywhere in the schedule, a peer's watchdog event, or one of the
//     simulator's pauses that may run on a reading goroutine (the
//     balancer's clock in a dispatch: a refusal read by a reader or a
//     caller holding the baton is sent elsewhere on its goroutine; the
//     slow subscriber of the watchdog events).
//
// An answer ready before its own caller began to wait for it counts from
// that wait's start (from its read when the caller has not begun): until
// then the caller is placing other requests, those the throttle released
// among them, and a request it wrote inline with the baton free is for it
// to read when it waits.
//
// And an answer to a request no longer pending on that connection is
// not the baton's to hurry (the reader of a connection with nothing
// pending parks, and notices a late answer at its look, 5 to 10 ms
// later: by design): the request sent again since, its Send returned
// before the answer was ready, a failover record moving it off that
// server since the send, a wait for a peer since, or the server policy's
// hand-over of that server's requests since. (A request sent with its context ended
// already, whose answer no caller would read, is not sent at all.)
//
// simReadBound is the bound: 1 ms, far above the virtual nanoseconds an
// inline write's deadline (tryPipe) or a tryPause (20 us) adds.
const simReadBound = time.Millisecond

// simSpan is a kind of pause: how many are under way, and when the last
// one ended.
type simSpan struct {
	active  int
	lastEnd time.Time
}

// overlaps reports whether a pause of s was under way at some instant of
// [from, to] (to is now).
func (s *simSpan) overlaps(from time.Time) bool {
	return s != nil && (s.active > 0 || !s.lastEnd.Before(from))
}

// simReady is when a server's handler returned an answer, and whether
// the server was frozen then.
type simReady struct {
	at     time.Time
	frozen bool
}

type simAnsKey struct {
	host     string
	e2e, hbh uint32
}

// simLat is a schedule's record for the latency invariant.
type simLat struct {
	mu       sync.Mutex
	ready    map[simAnsKey]simReady // when a server's handler returned an answer, until the client reads it
	onRead   map[*simOwed]*simSpan  // pauses after a read, by client connection
	onQueue  map[any]*simSpan       // pauses after a request was queued, by the peer's connection
	handler  map[string]*simSpan    // the client's handler running, by server
	other    simSpan                // the other pauses, and watchdog events, anywhere
	checked  int                    // answers checked
	excused  int                    // of them, read late with a fault pending
	returned map[uint32]time.Time   // when each Send returned
	awaiting map[uint32]time.Time   // when each Send's caller began to wait for its answer
	asks     map[[2]uint32]simAsk   // the servers' requests the client read, until it answers them
	quick    atomic.Bool            // the client's handler answers within 10 ms (the baton's phase)
}

// sendReturned records when the Send of request id returned.
func (w *simWorld) sendReturned(id uint32) {
	w.lat.mu.Lock()
	w.lat.init()
	w.lat.returned[id] = time.Now()
	w.lat.mu.Unlock()
}

// simBeforeAwait is beforeAwait: when the Send of cl began to wait.
func simBeforeAwait(cl *call.Call) {
	w := simWorldOf(cl.Ref)
	if w == nil {
		return
	}
	w.lat.mu.Lock()
	w.lat.init()
	w.lat.awaiting[cl.Ref] = time.Now()
	w.lat.mu.Unlock()
}

// movedSince reports whether request id, sent to host at since, may have
// left that connection since: a failover record moved it off host, it
// waited for a peer, or the server policy handed host's requests over.
// A record of its move to host does not count, nor does another
// request's move: a caller whose call left a connection stops reading
// it and hands its baton on, so no move elsewhere holds an answer up.
func (w *simWorld) movedSince(id uint32, host string, since time.Time) bool {
	w.mu.Lock()
	waited := slices.ContainsFunc(w.waitedAt[id], func(t time.Time) bool { return !t.Before(since) })
	out := slices.ContainsFunc(w.outAt[host], func(t time.Time) bool { return !t.Before(since) })
	w.mu.Unlock()
	if waited || out {
		return true
	}
	for _, r := range recordsOf(w.c) {
		if !r.Time.Before(since) && message.EqualIdentity(r.From, host) && slices.Contains(r.EndToEnd, id) {
			return true
		}
	}
	return false
}

func (l *simLat) init() {
	if l.ready == nil {
		l.ready = map[simAnsKey]simReady{}
		l.onRead = map[*simOwed]*simSpan{}
		l.onQueue = map[any]*simSpan{}
		l.handler = map[string]*simSpan{}
		l.returned = map[uint32]time.Time{}
		l.awaiting = map[uint32]time.Time{}
		l.asks = map[[2]uint32]simAsk{}
	}
}

func spanOf[K comparable](m map[K]*simSpan, k K) *simSpan {
	s := m[k]
	if s == nil {
		s = &simSpan{}
		m[k] = s
	}
	return s
}

// pause runs simPause(max) as a pause of the span s returns (under
// l.mu): counted under way while it runs, and ended when it slept.
func (l *simLat) pause(s func() *simSpan, max time.Duration) {
	l.mu.Lock()
	l.init()
	s().active++
	l.mu.Unlock()
	slept := simPause(max)
	l.mu.Lock()
	sp := s()
	sp.active--
	if slept {
		sp.lastEnd = time.Now()
	}
	l.mu.Unlock()
}

// otherPause is simPause(max) on a goroutine that may be reading a
// connection, counted as one of w's other pauses.
func (w *simWorld) otherPause(max time.Duration) {
	if w.b2.quiet.Load() {
		return // the hand-over phase times its rounds to the instant
	}
	w.lat.pause(func() *simSpan { return &w.lat.other }, max)
}

// watchdogEvent counts a peer's watchdog event with the other pauses: a
// state change moves requests, and its step may hold a reader.
func (w *simWorld) watchdogEvent() {
	w.lat.mu.Lock()
	w.lat.other.lastEnd = time.Now()
	w.lat.mu.Unlock()
}

// simAfterQueue is testhook.AfterQueue: the pause after a request was
// queued, counted against the connection it was queued on.
func simAfterQueue(e2e uint32) {
	w := simWorldOf(e2e)
	if w == nil {
		simPause(20 * time.Millisecond)
		return
	}
	if w.b2.quiet.Load() {
		return
	}
	w.mu.Lock()
	var conn any
	if s := w.sends[e2e]; len(s) > 0 {
		conn = s[len(s)-1].conn
	}
	w.mu.Unlock()
	w.lat.pause(func() *simSpan { return spanOf(w.lat.onQueue, conn) }, 20*time.Millisecond)
}

// readyAt wraps server s's handler: the time its answer is ready.
func (w *simWorld) readyAt(s *simServer, h peer.Handler) peer.Handler {
	return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		ans := h(ctx, p, req)
		if ans != nil {
			w.lat.mu.Lock()
			w.lat.init()
			w.lat.ready[simAnsKey{s.host, wire.EndToEnd(req), wire.HopByHop(req)}] = simReady{time.Now(), s.f.faults.Frozen()}
			w.lat.mu.Unlock()
		}
		return ans
	}
}

// clientHandler wraps the client's handler: its runs, by server.
func (w *simWorld) clientHandler(h peer.Handler) peer.Handler {
	return func(ctx context.Context, p *peer.Peer, req []byte) (ans []byte) {
		host := p.Name()
		l := &w.lat
		l.mu.Lock()
		l.init()
		spanOf(l.handler, host).active++
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			s := l.handler[host]
			s.active--
			s.lastEnd = time.Now()
			l.mu.Unlock()
		}()
		return h(ctx, p, req)
	}
}

// answerRead checks an answer the client just read on r (m, an
// application answer), then runs the read's pause.
func (r readLog) answerRead(m []byte) {
	w := r.w
	k := simAnsKey{r.host, wire.EndToEnd(m), wire.HopByHop(m)}
	now := time.Now()
	var conn any
	last := false // the answer is to the request's latest send
	var sentAt time.Time
	w.mu.Lock()
	for i, s := range w.sends[k.e2e] {
		if s.hbh == k.hbh {
			conn, sentAt, last = s.conn, s.at, i == len(w.sends[k.e2e])-1
		}
	}
	w.mu.Unlock()
	l := &w.lat
	l.mu.Lock()
	l.init()
	rd, ok := l.ready[k]
	at := rd.at
	frozen := false
	for _, s := range w.servers {
		if ok && s.host == r.host && s.f.frozenWithin(at) {
			frozen = true
		}
	}
	delete(l.ready, k)
	// An answer ready before its own caller began to wait counts from
	// that wait's start: until then the caller was placing other
	// requests (those the throttle released, on its goroutine), perhaps
	// asleep in the simulator's pick-to-submit pause, and a request it
	// wrote inline with the baton free is for it to read. A caller that
	// waits while its answer lies unread is still caught.
	from := at
	if aw, began := l.awaiting[k.e2e]; !began {
		from = now
	} else if aw.After(at) {
		from = aw
	}
	late := ok && now.Sub(from) > simReadBound
	// Held up: the server frozen, a pause of the client's end, its
	// handler, another pause or a watchdog event.
	held := frozen || rd.frozen || l.onRead[r.owed].overlaps(at) || l.onQueue[conn].overlaps(at) ||
		l.handler[r.host].overlaps(at) || l.other.overlaps(at)
	ret, returned := l.returned[k.e2e]
	if ok {
		l.checked++
	}
	l.mu.Unlock()
	switch {
	case !late:
	case held:
	case !last || returned && !ret.After(at):
		// Not pending there any more: sent again elsewhere, or its
		// Send returned (a deadline) before the answer was ready.
	case w.movedSince(k.e2e, r.host, sentAt):
		// Moved off that connection (a failover), parked, refused: a
		// late answer there, on a connection with nothing of its own
		// pending, is noticed at the parked reader's look.
	default:
		w.violation("answer to request %d (hop-by-hop %d) from %s read by the client %v after the server's handler returned it at %v (bound %v), with nothing holding that connection's reading up (server not frozen, no simulator pause of the client's end, no handler of the client running for it, no watchdog event) and the request pending there: the answer lay unread, no goroutine reading the connection",
			k.e2e, k.hbh, r.host, now.Sub(at), at.Format("04:05.000000"), simReadBound)
		late = false
	}
	if late {
		l.mu.Lock()
		l.excused++
		l.mu.Unlock()
	}
	if !w.b2.quiet.Load() {
		l.pause(func() *simSpan { return spanOf(l.onRead, r.owed) }, 5*time.Millisecond)
	}
}

// The reading baton's own case: one caller sending one request at a
// time, so that its request goes out alone, inline, and its caller reads
// the connection for the answer, while the servers send the client
// requests of their own. A request a reading caller meets is for the
// reader to handle (the client's handler answers it); one dropped there
// is never answered. simAskBound is how long the client may take to
// answer a server's request it read: its handler's delay and a moment.
const simAskBound = simHandlerDelay + time.Second

// simAsk is a request from a server the client read on a connection.
type simAsk struct {
	o        *simOwed
	host     string
	e2e, hbh uint32
	cmd      uint32
	at       time.Time
}

// requestRead records an application request from a server the client
// read on r.
func (r readLog) requestRead(m []byte) {
	l := &r.w.lat
	l.mu.Lock()
	l.init()
	l.asks[[2]uint32{wire.EndToEnd(m), wire.HopByHop(m)}] = simAsk{r.owed, r.host, wire.EndToEnd(m), wire.HopByHop(m), wire.CommandCode(m), time.Now()}
	l.mu.Unlock()
}

// answerWritten forgets the request answer m answers (r wrote it).
func (r readLog) answerWritten(m []byte) {
	l := &r.w.lat
	l.mu.Lock()
	l.init()
	k := [2]uint32{wire.EndToEnd(m), wire.HopByHop(m)}
	if a, ok := l.asks[k]; ok && a.o == r.owed {
		delete(l.asks, k)
	}
	l.mu.Unlock()
}

// checkAsked reports the requests from the servers read since since and
// simAskBound before now, on a connection still up, that the client did
// not answer.
func (w *simWorld) checkAsked(since time.Time) {
	l := &w.lat
	l.mu.Lock()
	var late []simAsk
	for _, a := range l.asks {
		if !a.at.Before(since) && time.Since(a.at) > simAskBound {
			late = append(late, a)
		}
	}
	l.mu.Unlock()
	for _, a := range late {
		a.o.mu.Lock()
		ended := a.o.ended
		a.o.mu.Unlock()
		if !ended {
			w.violation("request (command %d, end-to-end %d, hop-by-hop %d) from %s, read by the client at %v, not answered %v later, its connection still up (the client's handler answers within %v): dropped on its way to the reader?",
				a.cmd, a.e2e, a.hbh, a.host, a.at.Format("04:05.000000"), time.Since(a.at).Round(time.Millisecond), simHandlerDelay)
		}
	}
}

// waitReturn waits until the Send of request id has returned.
func (w *simWorld) waitReturn(id uint32) {
	w.waitReturnBy(id, time.Time{})
}

// waitReturnBy is waitReturn until by at the latest (zero: no bound); it
// reports whether the Send of request id returned.
func (w *simWorld) waitReturnBy(id uint32, by time.Time) bool {
	for {
		w.lat.mu.Lock()
		w.lat.init()
		_, ok := w.lat.returned[id]
		w.lat.mu.Unlock()
		if ok {
			return true
		}
		if !by.IsZero() && time.Now().After(by) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// batonPhase runs, once quiet, in the schedules whose callers may read
// (simInline, resumePipe): one caller sends 20 to 40 requests one after
// the other, each answered at once or 50 ms to 1 s later (all the
// servers hold them), a pause of up to 4 ms between two (one in four:
// up to 20 ms), while the servers ask the client requests of their own
// (every 0.3 to 2 s, each server in turn; the client's handler answers
// them within 10 ms here, so that the reader may park again soon after).
// Every request a server asked on a connection that stayed up is
// answered (checkAsked); the answers of the requests are read at once
// (the latency invariant above). Drawn from sources of its own: the
// rest of the schedule stays as it was.
func (w *simWorld) batonPhase(send func(opts ...string) *simReq) {
	if len(w.servers) == 0 || !w.servers[0].f.baton {
		return
	}
	rng := rand.New(rand.NewPCG(w.seed, 0x6261746f))
	arng := rand.New(rand.NewPCG(w.seed, 0x61736b73)) // the asks'
	began := time.Now()
	done := make(chan struct{})
	var asks sync.WaitGroup
	asks.Add(1)
	go func() {
		defer asks.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(time.Duration(300+arng.IntN(1700)) * time.Millisecond):
			}
			s := w.servers[i%len(w.servers)]
			for _, p := range s.peers() {
				req := s.request(";asks")
				asks.Add(1)
				go func() {
					defer asks.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 2*simAskBound)
					defer cancel()
					p.Request(ctx, req)
				}()
			}
		}
	}()
	// Before each request a server's answers take a new time, and one
	// in four a server refuses (3004) for that long: the request moves
	// to another server, sent there by the goroutine that read the
	// refusal (a dispatcher: its caller waits in Await), alone, inline.
	// In one phase in three, two or three callers do so side by side.
	callers := 1
	if rng.IntN(3) == 0 {
		callers = 2 + rng.IntN(2)
	}
	w.tracef("baton phase: %d callers", callers)
	w.lat.quick.Store(true)
	defer w.lat.quick.Store(false)
	var mu sync.Mutex // rng, send
	draw := func() (time.Duration, *simServer, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		d := time.Duration(50+rng.IntN(950)) * time.Millisecond
		if rng.IntN(2) == 0 {
			// At once: within the 5 ms the baton lies free after a
			// caller's release, before the parked reader takes it back.
			d = 0
		}
		var busy *simServer
		if rng.IntN(4) == 0 && len(w.servers) > 1 {
			busy = w.servers[rng.IntN(len(w.servers))]
		}
		// Mostly within batonIdle (5 ms) of the last answer: the baton
		// still lies free then, for the next caller to take.
		gap := time.Duration(rng.IntN(4_000_000))
		if rng.IntN(4) == 0 {
			gap = time.Duration(rng.IntN(20_000_000))
		}
		return d, busy, gap
	}
	var seq sync.WaitGroup
	for range callers {
		seq.Add(1)
		mu.Lock()
		n := 20 + rng.IntN(21)
		mu.Unlock()
		go func() {
			defer seq.Done()
			for range n {
				d, busy, gap := draw()
				for _, s := range w.servers {
					s.mu.Lock()
					s.delay = d
					if s == busy {
						s.kind = "busy"
					}
					s.mu.Unlock()
				}
				mu.Lock()
				r := send("patient", "unpinned")
				mu.Unlock()
				if busy != nil {
					time.Sleep(d)
					busy.mu.Lock()
					busy.kind = "ok"
					busy.mu.Unlock()
				}
				w.waitReturn(r.id)
				time.Sleep(gap)
			}
		}()
	}
	seq.Wait()
	close(done)
	for _, s := range w.servers {
		s.mu.Lock()
		s.delay, s.kind = 0, "ok"
		s.mu.Unlock()
	}
	asks.Wait()
	time.Sleep(simAskBound)
	synctest.Wait()
	w.checkAsked(began)
	w.mu.Lock()
	w.counts.BatonPhase++
	w.mu.Unlock()
}

// TestFrozenWithinSpan: the latency invariant's excuse of a frozen
// server covers a freeze that began after the handler returned and ended
// before the client read the answer (seed 16142: a server frozen at the
// instant its handler returned, thawed 19.8 s later by an older fault's
// thaw, was frozen at neither end of the span).
func TestFrozenWithinSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer("x")
		at := time.Now() // the handler returned
		if f.frozenWithin(at) {
			t.Fatal("a server never frozen counts as frozen")
		}
		f.freeze() // the same virtual instant, after the handler returned
		time.Sleep(20 * time.Second)
		f.unfreeze()
		time.Sleep(time.Millisecond) // the client reads after the thaw
		if !f.frozenWithin(at) {
			t.Fatal("a freeze that began and ended within the span is not seen")
		}
		if later := time.Now(); f.frozenWithin(later) {
			t.Fatal("a freeze that ended before the span counts")
		}
		f.freeze()
		if !f.frozenWithin(time.Now()) {
			t.Fatal("a server frozen now does not count")
		}
		f.unfreeze()
	})
}
