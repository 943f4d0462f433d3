package call

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitAll starts a Wait of each call under ctx and returns their errors
// once all returned.
func waitAll(ctx context.Context, calls []*Call) func() []error {
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { _, errs[i] = c.Wait(ctx, time.Hour) })
	}
	return func() []error { wg.Wait(); return errs }
}

// waiting returns how many calls wait on the watch of ctx (-1: ctx has
// none).
func waiting(ctx context.Context) int {
	w := recent.Load()
	if w == nil || w.done != ctx.Done() {
		return -1
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for c := w.head; c != nil; c = c.wnext {
		n++
	}
	if n != w.n {
		panic(fmt.Sprintf("watch list of %d calls counts %d", n, w.n))
	}
	return n
}

// Calls waiting under one context share its watch: cancelling the
// context fails each of them once, with the context's error (not
// ErrTimeout: the caller gave up, no deadline passed), and tells each
// connection it timed out; an answer before that
// takes its call off the watch and is what its Wait returns.
func TestWaitSharedContextCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		a := newConn("a")
		calls := make([]*Call, 5)
		for i := range calls {
			calls[i] = newCall()
			boarded(t, calls[i], a)
		}
		results := waitAll(ctx, calls)
		synctest.Wait()
		assert.Equal(t, 5, waiting(ctx))

		ok, _ := calls[0].Finish([]byte("ans"), 0, nil, &a.Conn, nil)
		require.True(t, ok)
		synctest.Wait()
		assert.Equal(t, 4, waiting(ctx), "the answered call left the watch")

		cancel()
		errs := results()
		require.NoError(t, errs[0])
		for _, err := range errs[1:] {
			assert.NotErrorIs(t, err, ErrTimeout, "a cancelled request did not time out")
			assert.ErrorIs(t, err, context.Canceled)
		}
		assert.Equal(t, int32(4), a.timedOut.Load())
		assert.Equal(t, int32(4), a.retired.Load())
		for _, c := range calls[1:] {
			assert.Equal(t, Failed, c.State())
		}

		// A Wait under the ended context fails at once.
		late := newCall()
		_, err := late.Wait(ctx, time.Hour)
		assert.ErrorIs(t, err, context.Canceled)
	})
}

// A context's deadline ends the calls waiting under it at that instant,
// however many share it; a call answered meanwhile keeps its answer, and
// Wait again returns the same result.
func TestWaitSharedContextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		calls := []*Call{newCall(), newCall(), newCall()}
		for _, c := range calls {
			boarded(t, c, newConn(""))
		}
		start := time.Now()
		results := waitAll(ctx, calls)
		time.Sleep(time.Second)
		calls[1].Finish([]byte("ans"), 0, nil, nil, nil)
		errs := results()
		assert.Equal(t, 2*time.Second, time.Since(start))
		assert.ErrorIs(t, errs[0], context.DeadlineExceeded)
		assert.NoError(t, errs[1])
		assert.ErrorIs(t, errs[2], ErrTimeout)
		ans, err := calls[1].Wait(ctx, time.Hour)
		assert.NoError(t, err)
		assert.Equal(t, []byte("ans"), ans)
	})
}

// A watch evicted by another context's is stopped once its last call
// left, so that a context that lives on does not keep one per eviction;
// its calls still end with it while they wait.
func TestWatchEvictedStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		long, cancelLong := context.WithCancel(context.Background())
		defer cancelLong()
		c1 := newCall()
		boarded(t, c1, newConn(""))
		r1 := waitAll(long, []*Call{c1})
		synctest.Wait()
		w1 := recent.Load()
		require.NotNil(t, w1)

		other, cancelOther := context.WithCancel(context.Background())
		c2 := newCall()
		r2 := waitAll(other, []*Call{c2})
		synctest.Wait()
		assert.NotSame(t, w1, recent.Load(), "the new context's watch is recent")
		w1.mu.Lock()
		assert.True(t, w1.evicted)
		assert.Equal(t, 1, w1.n, "c1 still waits on it")
		w1.mu.Unlock()

		c1.Finish([]byte("a"), 0, nil, nil, nil)
		require.NoError(t, r1()[0])
		assert.False(t, w1.stop(), "stopped when its last call left")

		cancelOther()
		assert.ErrorIs(t, r2()[0], context.Canceled)
		assert.Nil(t, recent.Load(), "an ended context's watch is not kept")

		// The long-lived context makes a new watch, and cancelling it
		// ends what waits there.
		c3 := newCall()
		r3 := waitAll(long, []*Call{c3})
		synctest.Wait()
		assert.Equal(t, 1, waiting(long))
		cancelLong()
		assert.ErrorIs(t, r3()[0], context.Canceled)
	})
}

// Racing answers, failures and cancellations of many calls over a few
// shared contexts: every Wait returns exactly the one outcome that won,
// and no call is left on a watch.
func TestWaitRaces(t *testing.T) {
	for round := range 20 {
		ctxs := make([]context.Context, 3)
		cancels := make([]context.CancelFunc, 3)
		for i := range ctxs {
			ctxs[i], cancels[i] = context.WithCancel(context.Background())
		}
		const n = 60
		calls := make([]*Call, n)
		a := newConn("a")
		for i := range calls {
			calls[i] = newCall()
			boarded(t, calls[i], a)
		}
		var answered, failed atomic.Int32
		errs := make([]error, n)
		ans := make([][]byte, n)
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Go(func() { ans[i], errs[i] = c.Wait(ctxs[i%3], time.Minute) })
			wg.Go(func() {
				switch (i + round) % 4 {
				case 0, 1:
					if ok, _ := c.Finish([]byte{byte(i)}, 0, nil, &a.Conn, nil); ok {
						answered.Add(1)
					}
				case 2:
					if c.Fail(errors.New("lost")) {
						failed.Add(1)
					}
				}
			})
		}
		cancels[round%3]()
		time.AfterFunc(time.Millisecond, func() {
			for _, cancel := range cancels {
				cancel()
			}
		})
		wg.Wait()
		got := int32(0)
		for i := range calls {
			if errs[i] == nil {
				got++
				assert.Equal(t, []byte{byte(i)}, ans[i])
			}
		}
		assert.Equal(t, answered.Load(), got, "every answer that won is what its Wait returned")
		if !assert.Equal(t, int32(n)-answered.Load()-failed.Load(), a.timedOut.Load(), "the rest ended by their contexts") {
			for i := range calls {
				t.Logf("%d case %d err %v", i, (i+round)%4, errs[i])
			}
		}
		for _, ctx := range ctxs {
			assert.LessOrEqual(t, waiting(ctx), 0)
		}
	}
}

// Two Awaits of one call at once, under one context or two: the call is
// linked in one watch only, the other Await watches its context alone,
// so the other calls of the shared watch still end with it, and each
// Await returns at the first end.
func TestTwoAwaitsOfOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		x, c := newCall(), newCall()
		boarded(t, x, newConn(""))
		boarded(t, c, newConn(""))
		start := time.Now()
		results := waitAll(ctx, []*Call{x})
		synctest.Wait()
		twice := waitAll(ctx, []*Call{c, c})
		synctest.Wait()
		assert.Equal(t, 2, waiting(ctx), "x and c, c linked once")
		errs := results()
		assert.Equal(t, time.Second, time.Since(start), "x ended with its context")
		assert.ErrorIs(t, errs[0], ErrTimeout)
		for _, err := range twice() {
			assert.ErrorIs(t, err, ErrTimeout)
		}
		assert.Equal(t, time.Second, time.Since(start))

		// Under two contexts: the shorter one ends the call for both.
		short, cancelShort := context.WithTimeout(context.Background(), time.Second)
		defer cancelShort()
		long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
		defer cancelLong()
		y := newCall()
		boarded(t, y, newConn(""))
		start = time.Now()
		a, b := waitAll(long, []*Call{y}), waitAll(short, []*Call{y})
		errs = append(a(), b()...)
		assert.Equal(t, time.Second, time.Since(start))
		for _, err := range errs {
			assert.ErrorIs(t, err, ErrTimeout)
		}
	})
}
