package outbox

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockProbe is a transport that can write without waiting; each write
// records whether the caller's lock was free at that moment, and keeps
// what was written.
type lockProbe struct {
	held    *sync.Mutex
	mu      sync.Mutex
	written [][]byte
	free    []bool // per write: held could be taken
	short   int    // when > 0, TryWrite takes only this many bytes once
}

func (p *lockProbe) record(msgs ...[]byte) {
	free := p.held.TryLock()
	if free {
		p.held.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.written = append(p.written, append([]byte(nil), m...))
		p.free = append(p.free, free)
	}
}

func (p *lockProbe) TryWrite(msg []byte) (int, error) {
	if p.short > 0 {
		n := p.short
		p.short = 0
		p.record(msg[:n])
		return n, nil
	}
	p.record(msg)
	return len(msg), nil
}

func (p *lockProbe) WriteMessages(msgs ...[]byte) error { p.record(msgs...); return nil }
func (p *lockProbe) ReadMessage() ([]byte, error)       { select {} }
func (p *lockProbe) Close() error                       { return nil }
func (p *lockProbe) LocalAddr() net.Addr                { return nil }
func (p *lockProbe) RemoteAddr() net.Addr               { return nil }
func (p *lockProbe) Network() string                    { return "probe" }

func (p *lockProbe) snapshot() ([][]byte, []bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.written...), append([]bool(nil), p.free...)
}

// Post writes a lone message on its caller's goroutine, after releasing
// the caller's lock: a write that waits on the socket never holds up
// what the lock guards.
func TestPostWritesInlineAfterReleasingTheCallersLock(t *testing.T) {
	var held sync.Mutex
	p := &lockProbe{held: &held}
	var o Outbox
	o.Init(p, nil, func(error) {})
	defer o.Close(true)

	held.Lock()
	inline, ok := o.Post([]byte("lone"), true, false, &held)
	require.True(t, ok)
	require.True(t, inline, "a lone message on a free connection is the caller's to write")
	require.True(t, held.TryLock(), "Post did not release the caller's lock")
	held.Unlock()
	written, free := p.snapshot()
	require.Equal(t, [][]byte{[]byte("lone")}, written)
	assert.True(t, free[0], "the inline write ran under the caller's lock")
	assert.Equal(t, 1, o.Inlined)
	assert.Equal(t, 0, o.Writers)
}

// A message with company, or one posted while a write runs, goes to the
// writer; the caller's lock is released all the same. What the socket
// did not take of an inline write goes out before it, in order.
func TestPostQueuesBehindAWrite(t *testing.T) {
	var held sync.Mutex
	p := &lockProbe{held: &held, short: 2}
	var o Outbox
	o.Init(p, nil, func(error) {})
	defer o.Close(true)

	held.Lock()
	inline, ok := o.Post([]byte("first"), true, false, &held)
	require.True(t, ok && inline)
	held.Lock()
	inline, ok = o.Post([]byte("second"), false, false, &held)
	require.True(t, ok)
	require.False(t, inline, "a message with company went inline")
	require.True(t, held.TryLock(), "Post did not release the caller's lock")
	held.Unlock()
	require.Eventually(t, func() bool {
		o.Mu.Lock()
		defer o.Mu.Unlock()
		return !o.writing && len(o.q) == 0
	}, 5e9, 1e6)
	written, _ := p.snapshot()
	var all []byte
	for _, w := range written {
		all = append(all, w...)
	}
	assert.Equal(t, "firstsecond", string(all))
}

// A closed outbox takes nothing, and still releases the caller's lock.
func TestPostOnClosedOutbox(t *testing.T) {
	var held sync.Mutex
	p := &lockProbe{held: &held}
	var o Outbox
	o.Init(p, nil, func(error) {})
	o.Close(true)
	held.Lock()
	inline, ok := o.Post([]byte("late"), true, false, &held)
	assert.False(t, ok)
	assert.False(t, inline)
	assert.True(t, held.TryLock(), "Post kept the caller's lock")
	written, _ := p.snapshot()
	assert.Empty(t, written)
}

// Withdraw takes whole queued messages only: the rest of a message an
// inline write began stays at the head of the queue, for the bytes
// already on the wire need it after them.
func TestWithdrawLeavesThePartlyWrittenMessage(t *testing.T) {
	var held sync.Mutex
	p := &lockProbe{held: &held}
	var o Outbox
	o.Init(p, nil, func(error) {})
	o.Mu.Lock()
	// As writeInline leaves it after the socket took two bytes of
	// "first", with two messages queued behind (no writer yet).
	o.q = [][]byte{[]byte("rst"), []byte("second"), []byte("third")}
	o.tail = true
	o.writing = true
	o.Mu.Unlock()
	n := o.Withdraw(func([]byte) bool { return true })
	assert.Equal(t, 2, n)
	o.Mu.Lock()
	assert.Equal(t, [][]byte{[]byte("rst")}, o.q)
	o.writing = false
	o.Mu.Unlock()

	// Without a partly written message, every one it names goes.
	o.Mu.Lock()
	o.q, o.tail, o.writing = [][]byte{[]byte("a"), []byte("b"), []byte("c")}, false, true
	o.Mu.Unlock()
	assert.Equal(t, 2, o.Withdraw(func(m []byte) bool { return string(m) != "b" }))
	o.Mu.Lock()
	assert.Equal(t, [][]byte{[]byte("b")}, o.q)
	o.q, o.writing = nil, false
	o.Mu.Unlock()
	o.Close(true)
}
