package serve

import (
	"bytes"
	"log/slog"
	"net"
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
	var wg sync.WaitGroup
	l := NewLane(func(int) { <-release; ran.Add(1) }, 2, 3, &wg)
	for i := range 5 {
		require.True(t, l.Submit(i), "job %d: 2 run and 3 wait", i)
	}
	assert.False(t, l.Submit(5), "a sixth is refused: Submit never blocks")
	st := l.Stats()
	assert.Equal(t, LaneStats{Running: 2, Waiting: 3, Peak: 3, Refused: 1}, st)
	close(release)
	wg.Wait()
	assert.Equal(t, int32(5), ran.Load(), "every accepted job ran")
	assert.Equal(t, 0, l.Stats().Running)
	assert.True(t, l.Submit(6), "room again once drained")
	wg.Wait()
}

func TestLaneRunsInOrderOnFewGoroutines(t *testing.T) {
	var mu sync.Mutex
	var order []int
	gate := make(chan struct{})
	var wg sync.WaitGroup
	l := NewLane(func(i int) {
		if i == 0 {
			<-gate
		}
		mu.Lock()
		order = append(order, i)
		mu.Unlock()
	}, 1, 100, &wg)
	for i := range 50 {
		require.True(t, l.Submit(i))
	}
	close(gate)
	wg.Wait()
	want := make([]int, 50)
	for i := range want {
		want[i] = i
	}
	assert.Equal(t, want, order, "one running at a time: the queue runs in submission order")
}

func TestLaneNoQueue(t *testing.T) {
	block := make(chan struct{})
	var wg sync.WaitGroup
	l := NewLane(func(int) { <-block }, 1, -1, &wg)
	assert.True(t, l.Submit(1))
	assert.False(t, l.Submit(2), "negative queue: none wait")
	close(block)
	wg.Wait()
}

func TestAdmissionLimits(t *testing.T) {
	a := &Admission{Max: 3, PerAddr: 2}
	x := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}
	y := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 2}
	r1, ok := a.Admit(x, nil)
	require.True(t, ok)
	r2, ok := a.Admit(x, nil)
	require.True(t, ok)
	_, ok = a.Admit(x, nil)
	assert.False(t, ok, "a third from one address is over PerAddr")
	r3, ok := a.Admit(y, nil)
	require.True(t, ok)
	_, ok = a.Admit(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 3)}, nil)
	assert.False(t, ok, "a fourth in all is over Max")
	assert.Equal(t, uint64(2), a.Refused())
	assert.Equal(t, 3, a.Opening())
	r1()
	r1() // once only
	assert.Equal(t, 2, a.Opening())
	_, ok = a.Admit(x, nil)
	assert.True(t, ok, "room from x again")
	r2()
	r3()
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
			func(c net.Conn, release func()) { release(); got <- c })
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

func TestAcceptClosesOverAdmission(t *testing.T) {
	ln := &failingListener{conns: make(chan net.Conn, 2), closed: make(chan struct{})}
	adm := &Admission{Max: 1}
	var started atomic.Int32
	closedConns := make(chan net.Conn, 2)
	done := make(chan error)
	go func() {
		done <- Accept[net.Conn](ln, adm, nil, func() bool { return false },
			func(net.Conn) net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} },
			func(c net.Conn) { closedConns <- c; c.Close() },
			func(c net.Conn, release func()) { started.Add(1) })
	}()
	a1, b1 := net.Pipe()
	a2, b2 := net.Pipe()
	defer a1.Close()
	defer a2.Close()
	defer b1.Close()
	ln.conns <- b1
	ln.conns <- b2
	select {
	case c := <-closedConns:
		assert.Same(t, b2, c, "the second is over Max: closed at once")
	case <-time.After(5 * time.Second):
		t.Fatal("not refused")
	}
	assert.Equal(t, int32(1), started.Load())
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
