package peer

import (
	"sync"
	"sync/atomic"
	"time"
)

// handlerGuard watches the readers that run Handlers (InlineHandlerTime)
// for the connections that share a Config: a Server's, or one Peer's. Its
// goroutine, started by the first Handler after a quiet spell, looks at
// the readers when that Handler reaches the limit and then every
// max(InlineHandlerTime, guardTick) while readers enter Handlers, and
// ends after a look at which none did and none runs (the next one starts
// it again), or when the last connection ends. A reader entering a
// Handler only stores when it did (conn.inlineAt) and, under load, loads
// a flag: no timer is set or fired per request, which cost a busy
// connection a wake-up of the network poller and a timer goroutine every
// InlineHandlerTime. A look that finds a reader in a Handler hands the
// reading over if the Handler has run for the limit, or sets that
// connection's own timer (conn.guard) for the moment it does. A Handler
// that blocks is so handed over at the limit, or at the first look after
// it started if that is later: at most guardTick after it started.
type handlerGuard struct {
	limit   time.Duration
	entered atomic.Bool // a reader entered a Handler since the last tick
	ticking atomic.Bool // the goroutine runs (or is starting)

	mu    sync.Mutex
	conns map[*conn]struct{} // the connections whose reader ran a Handler; each leaves when its reader ends
	runs  int                // goroutines started (for tests)
	empty chan struct{}      // the last connection left: the goroutine ends now
}

// guardTick is the guard's period when InlineHandlerTime is shorter: a
// wake-up every 500 us while requests flow cost a one-request-at-a-time
// connection several microseconds per request; one every 5 ms costs
// little, and a Handler that blocks holds its connection up at most that
// long, far below anything the peer times (Tw, its request timeouts).
const guardTick = 5 * time.Millisecond

func newHandlerGuard(limit time.Duration) *handlerGuard {
	return &handlerGuard{limit: limit, conns: make(map[*conn]struct{}), empty: make(chan struct{}, 1)}
}

// watch adds c, whose reader is about to run its first Handler.
func (g *handlerGuard) watch(c *conn) {
	g.mu.Lock()
	g.conns[c] = struct{}{}
	g.mu.Unlock()
}

// unwatch removes c, whose reader has ended.
func (g *handlerGuard) unwatch(c *conn) {
	g.mu.Lock()
	delete(g.conns, c)
	if len(g.conns) == 0 {
		signal(g.empty)
	}
	g.mu.Unlock()
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// entering is a reader's note that it enters a Handler: the guard's
// goroutine starts unless it runs. Each tick clears entered,
// so under load this is one load per request.
func (g *handlerGuard) entering() {
	if g.entered.Load() {
		return
	}
	g.entered.Store(true)
	if !g.ticking.Load() && g.ticking.CompareAndSwap(false, true) {
		g.mu.Lock()
		g.runs++
		g.mu.Unlock()
		go g.run()
	}
}

// run ticks while readers enter Handlers, and ends when none did for a
// tick or the last connection leaves. Each side sets its flag and then
// looks at the other's, as entering sets entered and then looks at idle
// and ticking: one of the two sees the other.
func (g *handlerGuard) run() {
	t := time.NewTimer(g.limit) // the Handler that started it is seen at its limit
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-g.empty:
		}
		t.Reset(max(g.limit, guardTick))
		running := false
		g.mu.Lock()
		for c := range g.conns {
			if c.inlineAt.Load() != 0 {
				running = true
				if !c.guardArmed.Load() && c.guardArmed.CompareAndSwap(false, true) {
					c.checkInline() // hands over, or sets c.guard for the limit
				}
			}
		}
		n := len(g.conns)
		g.mu.Unlock()
		if n == 0 {
			// A connection that joins from now on has its reader start
			// another goroutine, unless this one, looking again, sees it
			// (watch comes before entering). entered is cleared first: a
			// reader that entered a Handler since the last tick, on a
			// connection that has left since, must not leave it set, or
			// every later entering would return early and no goroutine
			// would ever start again (no Handler handed over).
			g.entered.Store(false)
			g.ticking.Store(false)
			g.mu.Lock()
			n = len(g.conns)
			g.mu.Unlock()
			if n == 0 || !g.ticking.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		if g.entered.Swap(false) || running {
			continue
		}
		g.ticking.Store(false)
		if !g.entered.Load() || !g.ticking.CompareAndSwap(false, true) {
			return
		}
	}
}
