package serve

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLimiterBurstThenSuppressedCount(t *testing.T) {
	var l rateLimiter
	t0 := time.Unix(1000, 0)
	allowed := 0
	for i := 0; i < 1000; i++ {
		if ok, _ := l.allow(KindBadFrame, t0.Add(time.Duration(i)*time.Millisecond)); ok {
			allowed++
		}
	}
	assert.Equal(t, logBurst, allowed, "a flood within one window writes logBurst lines")
	ok, n := l.allow(KindBadFrame, t0.Add(logWindow+time.Second))
	assert.True(t, ok)
	assert.Equal(t, 1000-logBurst, n, "the next window's first line says how many were dropped")
	ok, _ = l.allow(KindPaused, t0)
	assert.True(t, ok, "kinds are limited separately")
}

func TestLogBoundsOutputAndCountsEverything(t *testing.T) {
	var buf bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&buf, nil))
	before := Count(KindWriteTimeout)
	for i := 0; i < 10000; i++ {
		Log(lg, slog.LevelWarn, KindWriteTimeout, "closing", "i", i)
	}
	assert.LessOrEqual(t, strings.Count(buf.String(), "\n"), logBurst)
	assert.Equal(t, uint64(10000), Count(KindWriteTimeout)-before, "every occurrence is counted, written or not")
	assert.Equal(t, Count(KindWriteTimeout), Counts()["write_timeout"])
	Log(nil, slog.LevelWarn, KindWriteTimeout, "no logger")
	assert.Equal(t, uint64(10001), Count(KindWriteTimeout)-before, "counted without a logger too")
}

func TestLaneBoundsRunningAndWaiting(t *testing.T) {
	release := make(chan struct{})
	var ran atomic.Int32
	var refused []int
	var wg sync.WaitGroup
	l := NewLane[int](func(int) { <-release; ran.Add(1) }, func(i int) { refused = append(refused, i) }, 2, 3, &wg)
	for i := range 5 {
		l.Submit(0, i)
	}
	assert.Empty(t, refused, "one source alone may use every worker and the whole queue: 2 run and 3 wait")
	l.Submit(0, 5)
	assert.Equal(t, []int{5}, refused, "a sixth is refused: Submit never blocks")
	st := l.Stats()
	assert.Equal(t, LaneStats{Running: 2, Waiting: 3, Peak: 3, Refused: 1}, st)
	close(release)
	wg.Wait()
	assert.Equal(t, int32(5), ran.Load(), "every accepted job ran")
	assert.Equal(t, 0, l.Stats().Running)
	l.Submit(0, 6)
	wg.Wait()
	assert.Equal(t, []int{5}, refused, "room again once drained")
}

// runOrder returns a lane of one worker whose first job waits for gate,
// and the order its jobs ran and were refused in, read once wg is done.
func runOrder(queue int, gate chan struct{}, wg *sync.WaitGroup) (l *Lane[string, string], ran, refused *[]string) {
	var mu sync.Mutex
	ran, refused = new([]string), new([]string)
	first := true
	l = NewLane[string](func(j string) {
		mu.Lock()
		wait := first
		first = false
		mu.Unlock()
		if wait {
			<-gate
		}
		mu.Lock()
		*ran = append(*ran, j)
		mu.Unlock()
	}, func(j string) {
		mu.Lock()
		*refused = append(*refused, j)
		mu.Unlock()
	}, 1, queue, wg)
	return l, ran, refused
}

func TestLaneRunsInOrderOnFewGoroutines(t *testing.T) {
	gate := make(chan struct{})
	var wg sync.WaitGroup
	l, ran, _ := runOrder(100, gate, &wg)
	var want []string
	for i := range 50 {
		j := fmt.Sprint(i)
		want = append(want, j)
		l.Submit("one source", j)
	}
	close(gate)
	wg.Wait()
	assert.Equal(t, want, *ran, "one running at a time: one source's jobs run in submission order")
	assert.Equal(t, uint64(1), l.Started(), "one worker ran them all")
}

// Sources take turns: a source that queued many jobs delays another's by
// one job, not by its whole backlog; each source's jobs keep their order.
func TestLaneSourcesTakeTurns(t *testing.T) {
	gate := make(chan struct{})
	var wg sync.WaitGroup
	l, ran, refused := runOrder(100, gate, &wg)
	for i := range 10 {
		l.Submit("a", fmt.Sprint("a", i))
	}
	l.Submit("b", "b0")
	l.Submit("b", "b1")
	l.Submit("c", "c0")
	close(gate)
	wg.Wait()
	assert.Equal(t, []string{"a0", "a1", "b0", "c0", "a2", "b1", "a3", "a4", "a5", "a6", "a7", "a8", "a9"}, *ran)
	assert.Empty(t, *refused)
	assert.Equal(t, 0, l.Stats().Waiting)
}

// A full queue: a job from a source with fewer waiting pushes out the
// newest job of the source with the most; a job from the source with the
// most, or about as many, is refused itself.
func TestLanePushesOutTheGreediest(t *testing.T) {
	gate := make(chan struct{})
	var wg sync.WaitGroup
	l, ran, refused := runOrder(4, gate, &wg)
	for i := range 6 {
		l.Submit("a", fmt.Sprint("a", i)) // a0 runs, a1-a4 wait, a5 refused
	}
	l.Submit("b", "b0") // a: 4 waiting, b: 0: a4 pushed out
	l.Submit("b", "b1") // a: 3, b: 1: a3 pushed out
	l.Submit("b", "b2") // a: 2, b: 2: b2 refused
	l.Submit("a", "a6") // a is not under b: refused
	l.Submit("c", "c0") // a: 2, b: 2, c: 0: the newest of one of them pushed out
	assert.Equal(t, []string{"a5", "a4", "a3", "b2", "a6"}, (*refused)[:5])
	require.Len(t, *refused, 6)
	assert.Contains(t, []string{"a2", "b1"}, (*refused)[5])
	st := l.Stats()
	assert.Equal(t, 4, st.Waiting, "never more than the queue waiting")
	assert.Equal(t, uint64(6), st.Refused, "pushed out jobs are counted as refused")
	close(gate)
	wg.Wait()
	assert.Len(t, *ran, 5)
	assert.Equal(t, "a0", (*ran)[0])
	assert.Contains(t, *ran, "c0", "the source with none waiting got its job in")
}

// The job pushed out is the newest of the source with the most waiting,
// also after a tie: a and b have 3 waiting each, c's job pushes one of
// them down to 2, and d's must push out of the one still at 3.
func TestLanePushesOutTheMostAfterATie(t *testing.T) {
	gate := make(chan struct{})
	var wg sync.WaitGroup
	l, _, refused := runOrder(6, gate, &wg)
	l.Submit("x", "x0") // runs, waits for gate
	for i := 1; i <= 3; i++ {
		l.Submit("a", fmt.Sprint("a", i))
	}
	for i := 1; i <= 3; i++ {
		l.Submit("b", fmt.Sprint("b", i))
	}
	l.Submit("c", "c1")
	l.Submit("d", "d1")
	require.Len(t, *refused, 2)
	assert.ElementsMatch(t, []string{"a3", "b3"}, *refused, "the second push-out falls on the source with 3 waiting, not on the one down to 2")
	close(gate)
	wg.Wait()
}

// checkLane checks a Lane's index against its sources: each source on the
// list of its length, top the longest, the lengths adding up to waiting.
func checkLane[K comparable, T any](t *testing.T, l *Lane[K, T]) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	total, most := 0, 0
	for _, s := range l.sources {
		n := s.len()
		total += n
		most = max(most, n)
		on := false
		for r := l.byLen[n]; r != nil; r = r.lnext {
			on = on || r == s
		}
		if !on {
			t.Fatalf("source %v with %d waiting is not on that list", s.key, n)
		}
	}
	require.Equal(t, l.waiting, total, "waiting")
	require.Equal(t, most, l.top, "top")
	require.LessOrEqual(t, l.waiting, l.queue)
}

// Random submissions from a few sources to a lane whose one worker is
// held: after each, the index is right, and every push-out took from a
// source with the most waiting, at least two more than the submitter's.
func TestLanePushOutsRandom(t *testing.T) {
	for seed := range int64(200) {
		r := rand.New(rand.NewSource(seed))
		gate := make(chan struct{})
		var wg sync.WaitGroup
		var l *Lane[int, [2]int]
		var lens map[int]int // each source's waiting jobs before the Submit
		var cur [2]int       // the job submitted
		refusals := 0
		l = NewLane[int](func([2]int) { <-gate }, func(j [2]int) {
			refusals++
			most := 0
			for _, n := range lens {
				most = max(most, n)
			}
			switch {
			case j == cur && most >= lens[cur[0]]+2:
				t.Fatalf("seed %d: job %v refused while source with %d waiting could make room (the submitter's %d)", seed, j, most, lens[cur[0]])
			case j != cur && (lens[j[0]] != most || most < lens[cur[0]]+2):
				t.Fatalf("seed %d: pushed out job %v of a source with %d waiting; the most %d, the submitter's %d", seed, j, lens[j[0]], most, lens[cur[0]])
			}
		}, 1, 1+r.Intn(12), &wg)
		l.Submit(-1, [2]int{-1, 0}) // holds the worker
		for i := range 200 {
			cur = [2]int{r.Intn(5), i}
			lens = map[int]int{}
			l.mu.Lock()
			for k, s := range l.sources {
				lens[k] = s.len()
			}
			l.mu.Unlock()
			l.Submit(cur[0], cur)
			checkLane(t, l)
		}
		require.Positive(t, refusals, "seed %d: the queue was never full", seed)
		close(gate)
		wg.Wait()
		checkLane(t, l)
	}
}

func TestLaneNoQueue(t *testing.T) {
	block := make(chan struct{})
	var wg sync.WaitGroup
	var refused []int
	l := NewLane[int](func(int) { <-block }, func(i int) { refused = append(refused, i) }, 1, -1, &wg)
	l.Submit(1, 1)
	l.Submit(2, 2)
	assert.Equal(t, []int{2}, refused, "negative queue: none wait, whatever the source")
	close(block)
	wg.Wait()
}

// Many sources submitting at once, jobs of different lengths: every job
// runs or is refused, once; each source's jobs that run keep their order
// (one worker, so that the order they run in is the order they left the
// queue in); the queue never holds more than its bound; an idle lane keeps
// few sources.
func TestLaneConcurrentSources(t *testing.T) {
	const sources, perSource, queue = 8, 400, 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := make(map[[2]int]int)
	last := make([]int, sources)
	for i := range last {
		last[i] = -1
	}
	var l *Lane[int, [2]int]
	l = NewLane[int](func(j [2]int) {
		if w := l.Stats().Waiting; w > queue {
			t.Errorf("%d waiting, over the queue's %d", w, queue)
		}
		if j[1]%7 == 0 {
			time.Sleep(50 * time.Microsecond)
		}
		mu.Lock()
		seen[j]++
		if j[1] <= last[j[0]] {
			t.Errorf("source %d ran job %d after job %d", j[0], j[1], last[j[0]])
		}
		last[j[0]] = j[1]
		mu.Unlock()
	}, func(j [2]int) {
		mu.Lock()
		seen[j]++
		mu.Unlock()
	}, 1, queue, &wg)
	var subs sync.WaitGroup
	for src := range sources {
		subs.Add(1)
		go func() {
			defer subs.Done()
			for i := range perSource {
				l.Submit(src, [2]int{src, i})
				if i%50 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	subs.Wait()
	wg.Wait()
	require.Len(t, seen, sources*perSource, "every job ran or was refused")
	for j, n := range seen {
		if n != 1 {
			t.Fatalf("job %v ran or was refused %d times", j, n)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	assert.Empty(t, l.sources, "no source left once nothing waits")
	assert.Zero(t, l.top)
	assert.LessOrEqual(t, len(l.spare), keepSources)
}

// Connections that cannot be pushed out (no evict function) are refused
// over the limits.
func TestAdmissionLimits(t *testing.T) {
	a := &Admission{Max: 3, PerAddr: 2, MaxConns: -1}
	x := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}
	y := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 2}
	t1, ok := a.Admit(x, nil, nil)
	require.True(t, ok)
	t2, ok := a.Admit(x, nil, nil)
	require.True(t, ok)
	_, ok = a.Admit(x, nil, nil)
	assert.False(t, ok, "a third from one address is over PerAddr")
	t3, ok := a.Admit(y, nil, nil)
	require.True(t, ok)
	_, ok = a.Admit(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 3)}, nil, nil)
	assert.False(t, ok, "a fourth in all is over Max")
	assert.Equal(t, uint64(2), a.Refused())
	assert.Equal(t, 3, a.Opening())
	t1.Admitted()
	t1.Admitted() // once only
	assert.Equal(t, 2, a.Opening())
	assert.Equal(t, 3, a.Open(), "admitted, still open")
	_, ok = a.Admit(x, nil, nil)
	assert.True(t, ok, "room from x again")
	t2.Ended()
	t3.Ended()
	t1.Ended()
	t1.Ended() // once only
	assert.Equal(t, 1, a.Opening())
	assert.Equal(t, 1, a.Open())
	var none *Ticket
	none.Admitted() // a listener without an Admission has nil Tickets
	none.Ended()
}

// An IPv6 /64 is one source for the per-address limits: a host has a
// /64 to itself, and counted by its addresses it would pass every
// per-address limit at will. Another /64 has its own count; IPv4 and
// IPv4-mapped addresses count alone.
func TestAdmissionCountsAnIPv6SlashSixtyFourAsOneSource(t *testing.T) {
	a := &Admission{Max: -1, PerAddr: 2, MaxConns: -1, MaxConnsPerAddr: 3}
	at := func(s string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(s), Port: 1} }
	var tickets []*Ticket
	for _, s := range []string{"2001:db8::1", "2001:db8::ffff:2"} {
		tk, ok := a.Admit(at(s), nil, nil)
		require.True(t, ok, s)
		tickets = append(tickets, tk)
	}
	_, ok := a.Admit(at("2001:db8::3"), nil, nil)
	assert.False(t, ok, "a third opening from the same /64 is over PerAddr")
	_, ok = a.Admit(at("2001:db8:0:1::1"), nil, nil)
	assert.True(t, ok, "another /64 counts apart")
	tickets[0].Admitted()
	tickets[1].Admitted()
	tk, ok := a.Admit(at("2001:db8::4"), nil, nil)
	require.True(t, ok)
	tk.Admitted()
	_, ok = a.Admit(at("2001:db8::5"), nil, nil)
	assert.False(t, ok, "a fourth open from the /64 is over MaxConnsPerAddr")
	for _, s := range []string{"10.0.0.1", "10.0.0.2", "::ffff:10.0.0.3"} {
		_, ok = a.Admit(at(s), nil, nil)
		assert.True(t, ok, "%s: IPv4 addresses count alone", s)
	}
	assert.Equal(t, netip.MustParseAddr("2001:db8::"), SourceOf(netip.MustParseAddr("2001:db8::abcd:1")))
	ll := netip.MustParseAddr("fe80::1%eth0")
	assert.Equal(t, ll, SourceOf(ll), "link-local: every link's hosts share fe80::/64, so each counts alone")
}

// MaxConns bounds the connections open, admitted ones included: a
// connection admitted leaves room among those opening, not among those
// open, until it ends.
func TestAdmissionBoundsOpenConnections(t *testing.T) {
	var buf bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&buf, nil))
	a := &Admission{MaxConns: 3, MaxConnsPerAddr: -1}
	var tickets []*Ticket
	for i := range 3 {
		tk, ok := a.Admit(&net.TCPAddr{IP: net.IPv4(10, 0, 0, byte(i))}, lg, nil)
		require.True(t, ok)
		tk.Admitted()
		tickets = append(tickets, tk)
	}
	assert.Equal(t, 0, a.Opening())
	_, ok := a.Admit(&net.TCPAddr{IP: net.IPv4(10, 0, 1, 0)}, lg, nil)
	assert.False(t, ok, "three admitted connections open: a fourth is over MaxConns")
	assert.Contains(t, buf.String(), "too many connections open")
	assert.Contains(t, buf.String(), "max_connections=3")
	tickets[0].Ended()
	_, ok = a.Admit(&net.TCPAddr{IP: net.IPv4(10, 0, 1, 0)}, lg, nil)
	assert.True(t, ok, "room once one ended")
	assert.Equal(t, uint64(1), a.Refused())
	// MaxConnsPerAddr: one host cannot take every place.
	c := &Admission{MaxConns: 10, MaxConnsPerAddr: 2}
	x := &net.TCPAddr{IP: net.IPv4(10, 3, 0, 1)}
	var fromX []*Ticket
	for range 2 {
		tk, ok := c.Admit(x, lg, nil)
		require.True(t, ok)
		tk.Admitted()
		fromX = append(fromX, tk)
	}
	_, ok = c.Admit(x, lg, nil)
	assert.False(t, ok, "a third admitted connection from one address is over MaxConnsPerAddr")
	assert.Contains(t, buf.String(), "too many connections open from one address")
	_, ok = c.Admit(&net.TCPAddr{IP: net.IPv4(10, 3, 0, 2)}, lg, nil)
	assert.True(t, ok, "another address has room")
	fromX[0].Ended()
	_, ok = c.Admit(x, lg, nil)
	assert.True(t, ok, "room from x once one of its connections ended")

	b := &Admission{MaxConnsPerAddr: -1}
	for i := range DefaultMaxConns {
		tk, ok := b.Admit(&net.TCPAddr{IP: net.IPv4(10, 1, byte(i>>8), byte(i))}, nil, nil)
		require.True(t, ok)
		tk.Admitted()
	}
	_, ok = b.Admit(&net.TCPAddr{IP: net.IPv4(10, 2, 0, 0)}, nil, nil)
	assert.False(t, ok, "zero is DefaultMaxConns")
	d := &Admission{}
	for range DefaultMaxConnsPerAddr {
		tk, ok := d.Admit(x, nil, nil)
		require.True(t, ok)
		tk.Admitted()
	}
	_, ok = d.Admit(x, nil, nil)
	assert.False(t, ok, "zero is DefaultMaxConnsPerAddr")
}

// failingListener fails its first n accepts with EMFILE, then returns
// conns until closed.
type failingListener struct {
	fails  atomic.Int32
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (f *failingListener) Accept() (net.Conn, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Err: syscall.EMFILE}
	}
	select {
	case c := <-f.conns:
		return c, nil
	case <-f.closed:
		return nil, net.ErrClosed
	}
}
func (f *failingListener) Addr() net.Addr { return &net.TCPAddr{} }
func (f *failingListener) Close()         { f.once.Do(func() { close(f.closed) }) }

func TestAcceptBacksOffAndGoesOn(t *testing.T) {
	ln := &failingListener{conns: make(chan net.Conn, 1), closed: make(chan struct{})}
	ln.fails.Store(5)
	var buf bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&buf, nil))
	got := make(chan net.Conn, 1)
	done := make(chan error)
	start := time.Now()
	go func() {
		done <- Accept[net.Conn](ln, &Admission{}, lg, func() bool { return false },
			net.Conn.RemoteAddr, func(c net.Conn) { c.Close() },
			func(c net.Conn, tk *Ticket) { tk.Ended(); got <- c })
	}()
	a, b := net.Pipe()
	defer a.Close()
	ln.conns <- b
	select {
	case c := <-got:
		assert.Same(t, b, c, "the connection after five EMFILEs is served")
	case <-time.After(5 * time.Second):
		t.Fatal("the accept loop stopped after EMFILE")
	}
	// 5, 10, 20, 40, 80 ms of back-off.
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "it backs off")
	assert.Contains(t, buf.String(), "too many open files")
	ln.Close()
	require.NoError(t, <-done, "a closed listener ends it with nil")
	b.Close()
}

// Over a limit on the connections not admitted yet, Accept closes the
// oldest of them and serves the new one; over a limit that admitted
// connections hold, it closes the new one.
func TestAcceptClosesOverAdmission(t *testing.T) {
	ln := &failingListener{conns: make(chan net.Conn), closed: make(chan struct{})}
	adm := &Admission{Max: 1, MaxConns: 2}
	started := make(chan *Ticket)
	closedConns := make(chan net.Conn, 3)
	done := make(chan error)
	go func() {
		done <- Accept[net.Conn](ln, adm, nil, func() bool { return false },
			func(net.Conn) net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} },
			func(c net.Conn) { closedConns <- c; c.Close() },
			func(c net.Conn, tk *Ticket) { started <- tk })
	}()
	var conns []net.Conn
	pipe := func() net.Conn {
		a, b := net.Pipe()
		conns = append(conns, a, b)
		return b
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// start and closed fail the test rather than hang it when Accept
	// does not do what it should.
	start := func() *Ticket {
		t.Helper()
		select {
		case tk := <-started:
			return tk
		case <-time.After(10 * time.Second):
			t.Fatal("nothing started")
			return nil
		}
	}
	closed := func() net.Conn {
		t.Helper()
		select {
		case c := <-closedConns:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("nothing closed")
			return nil
		}
	}
	b1, b2, b3 := pipe(), pipe(), pipe()
	ln.conns <- b1
	t1 := start()
	ln.conns <- b2
	assert.Same(t, b1, closed(), "the first, not admitted yet, is closed to make room for the second")
	t2 := start()
	assert.True(t, t1.Evicted())
	assert.False(t, t2.Evicted())
	t1.Ended() // as its server sees it closed: nothing given back twice
	assert.Equal(t, 1, adm.Opening())
	assert.Equal(t, 1, adm.Open())
	t2.Admitted()
	ln.conns <- pipe()
	start().Admitted()
	ln.conns <- b3
	assert.Same(t, b3, closed(), "the two places open are held by admitted connections: the new one is closed at once")
	assert.Equal(t, uint64(1), adm.Evicted())
	assert.Equal(t, uint64(1), adm.Refused())
	ln.Close()
	require.NoError(t, <-done)
}

func TestBacklog(t *testing.T) {
	b := &Backlog{Limit: 2}
	b.InHandler = 1
	assert.False(t, b.Full())
	b.Queued = 1
	require.True(t, b.Full())
	ch := b.Pause()
	assert.True(t, b.Waiting())
	b.Wake()
	select {
	case <-ch:
		t.Fatal("woken while still full")
	default:
	}
	b.Queued = 0
	b.Wake()
	select {
	case <-ch:
	default:
		t.Fatal("not woken with room")
	}
	assert.False(t, b.Waiting())
	assert.Equal(t, uint64(1), b.Pauses())
	assert.False(t, (&Backlog{}).Full(), "no limit")
}

// A kind's window holds logBurst lines; lines stamped before the window's
// start (a clock set back) start a window of their own rather than spend
// its budget, so the lines of the first window's clock are still written
// once that clock goes on.
func TestRateLimiterClockSetBack(t *testing.T) {
	var l rateLimiter
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	if ok, _ := l.allow(KindBadAuth, t0); !ok {
		t.Fatal("the first line of a window refused")
	}
	back := t0.Add(-time.Hour)
	written := 0
	for range 3 * logBurst {
		if ok, _ := l.allow(KindBadAuth, back); ok {
			written++
		}
	}
	if written != logBurst {
		t.Fatalf("%d lines written an hour back, want the burst %d", written, logBurst)
	}
	ok, suppressed := l.allow(KindBadAuth, t0.Add(time.Second))
	if !ok {
		t.Fatal("a line in the first window's time refused after lines stamped an hour before it")
	}
	if suppressed != 2*logBurst {
		t.Fatalf("suppressed %d, want the %d over the burst an hour back", suppressed, 2*logBurst)
	}
	for range logBurst - 1 {
		l.allow(KindBadAuth, t0.Add(2*time.Second))
	}
	if ok, _ := l.allow(KindBadAuth, t0.Add(3*time.Second)); ok {
		t.Fatal("more than the burst written in one window")
	}
}
