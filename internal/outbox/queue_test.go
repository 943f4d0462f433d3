package outbox

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gate is a transport whose WriteMessages waits for go-ahead (a slow
// peer) and that cannot write without waiting; it keeps what is written.
type gate struct {
	mu      sync.Mutex
	written []string
	open    chan struct{} // a receive lets one batch through
	started chan int      // each batch's length, as its write starts
}

func newGate() *gate { return &gate{open: make(chan struct{}), started: make(chan int, 100)} }

func (g *gate) WriteMessages(msgs ...[]byte) error {
	g.started <- len(msgs)
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range msgs {
		g.written = append(g.written, string(m))
	}
	return nil
}
func (g *gate) ReadMessage() ([]byte, error) { select {} }
func (g *gate) Close() error                 { return nil }
func (g *gate) LocalAddr() net.Addr          { return nil }
func (g *gate) RemoteAddr() net.Addr         { return nil }
func (g *gate) Network() string              { return "gate" }

func (g *gate) all() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.written...)
}

// flushed waits until o holds nothing to write.
func flushed(t *testing.T, o *Outbox) {
	t.Helper()
	require.Eventually(t, func() bool {
		o.Mu.Lock()
		defer o.Mu.Unlock()
		return !o.writing && len(o.q) == 0
	}, 5*time.Second, time.Millisecond)
}

// CloseAfterFlush writes what was queued before it, then ends the
// connection with onEnd(nil), once; nothing is written inline meanwhile.
func TestCloseAfterFlush(t *testing.T) {
	var held sync.Mutex
	p := &lockProbe{held: &held}
	var o Outbox
	ended := make(chan error, 2)
	o.Init(p, nil, func(err error) { ended <- err })
	defer o.Close(true)
	o.Mu.Lock() // hold the writer back until the end is asked for
	o.q = append(o.q, []byte("one"), []byte("two"))
	o.Mu.Unlock()
	o.CloseAfterFlush()
	inline, ok := o.Post([]byte("dpa"), true, true, nil)
	assert.True(t, ok)
	assert.False(t, inline, "a lone message went inline though an end is due")
	select {
	case err := <-ended:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("onEnd not called after the flush")
	}
	written, _ := p.snapshot()
	var got []string
	for _, w := range written {
		got = append(got, string(w))
	}
	assert.Equal(t, []string{"one", "two", "dpa"}, got)
	time.Sleep(10 * time.Millisecond)
	assert.Empty(t, ended, "onEnd called again")
}

// A server's backlog counts a request from Held until its answer is
// written; WaitRoom holds the reader while the backlog is at its bound and
// lets it go when an answer is written, or when done closes. Answer with
// more leaves its answer for the writer the reader kicks (WaitRoom kicks
// one too, so answers never wait on the paused reader).
func TestAnswerAndWaitRoom(t *testing.T) {
	g := newGate()
	var o Outbox
	bp := &serve.Backlog{Limit: 2}
	idle := 0
	o.Init(g, bp, func(err error) { t.Errorf("connection ended: %v", err) })
	o.Idle = func() { idle++ }
	defer func() { close(g.open); o.Close(true) }()

	noWait := func(int) { t.Error("WaitRoom paused below the bound") }
	assert.False(t, o.WaitRoom(nil, noWait))
	o.Held(false)
	assert.False(t, o.WaitRoom(nil, noWait))
	o.Held(false)
	assert.True(t, o.Answer([]byte("ans1"), false, true, false), "queued for the reader's kick")
	o.Mu.Lock()
	assert.False(t, o.writing, "Answer with more started a writer")
	assert.Equal(t, 2, bp.Unanswered())
	o.Mu.Unlock()

	paused := make(chan int, 1)
	waited := make(chan bool)
	go func() { waited <- o.WaitRoom(nil, func(n int) { paused <- n }) }()
	assert.Equal(t, 2, <-paused, "unanswered at the pause")
	assert.Equal(t, 1, <-g.started, "WaitRoom kicked no writer for the queued answer")
	select {
	case <-waited:
		t.Fatal("the reader went on before an answer was written")
	case <-time.After(20 * time.Millisecond):
	}
	g.open <- struct{}{}
	assert.True(t, <-waited)
	o.Mu.Lock()
	assert.Equal(t, 1, bp.Unanswered())
	o.Mu.Unlock()

	// An answer alone, on a transport that cannot write inline, goes to
	// a writer; the backlog empties once it is written, arming Idle.
	assert.True(t, o.Answer([]byte("ans2"), false, false, true))
	<-g.started
	g.open <- struct{}{}
	flushed(t, &o)
	o.Mu.Lock()
	assert.Equal(t, 0, bp.Unanswered())
	assert.Positive(t, idle, "Idle not called when the backlog emptied")
	o.Mu.Unlock()
	assert.Equal(t, []string{"ans1", "ans2"}, g.all())

	// done ends the wait too.
	o.Held(false)
	o.Held(false)
	done := make(chan struct{})
	go func() { waited <- o.WaitRoom(done, func(int) {}) }()
	close(done)
	assert.True(t, <-waited)

	// A closed outbox takes no answer, and the request leaves the backlog.
	o.Close(false)
	assert.False(t, o.Answer([]byte("ans3"), false, false, true))
	o.Mu.Lock()
	assert.Equal(t, 1, bp.Unanswered())
	o.Mu.Unlock()
	assert.False(t, o.WaitRoom(nil, noWait), "a closed outbox holds no reader")
}
