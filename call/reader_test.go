package call

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// treader is a Payload whose caller may read: read runs as its
// ReadAnswer, and the calls of both methods are counted.
type treader struct {
	c          *Call
	reads      atomic.Int32
	interrupts atomic.Int32
	read       func(r *treader)
}

func (r *treader) Lifecycle() *Call { return r.c }
func (r *treader) ReadAnswer() {
	r.reads.Add(1)
	if r.read != nil {
		r.read(r)
	}
}
func (r *treader) Interrupt() { r.interrupts.Add(1) }

func newReaderCall(read func(r *treader)) (*Call, *treader) {
	c := newCall()
	r := &treader{c: c, read: read}
	c.Proto = r
	return c, r
}

// A caller that reads its own answer in ReadAnswer returns from Await
// with it, never parking; its own completion is no Interrupt that it
// needs, but the call cannot tell, so the carrier gets one.
func TestAwaitRunsReadAnswerBeforeParking(t *testing.T) {
	cn := newConn("a")
	c, r := newReaderCall(func(r *treader) { r.c.Finish([]byte("ans"), 0, nil, &cn.Conn, nil) })
	boarded(t, c, cn)
	res := c.Await(context.Background(), time.Second)
	require.NoError(t, res.Err)
	assert.Equal(t, []byte("ans"), res.Ans)
	assert.Equal(t, int32(1), r.reads.Load())
	assert.Equal(t, int32(1), r.interrupts.Load())

	// A call already complete runs none.
	res = c.Await(context.Background(), time.Second)
	assert.Equal(t, []byte("ans"), res.Ans)
	assert.Equal(t, int32(1), r.reads.Load())
}

// Offer wakes a parked Await to run ReadAnswer again; without an Await
// it reports false and nothing runs.
func TestOfferWakesAwaitToReadAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cn := newConn("a")
		c, r := newReaderCall(func(r *treader) {
			if r.reads.Load() == 2 {
				r.c.Finish([]byte("ans"), 0, nil, &cn.Conn, nil)
			}
		})
		boarded(t, c, cn)
		assert.False(t, c.Offer(), "no caller waits yet")
		done := make(chan Result, 1)
		go func() { done <- c.Await(context.Background(), time.Minute) }()
		synctest.Wait()
		assert.Equal(t, int32(1), r.reads.Load(), "once before parking")
		require.True(t, c.Offer())
		res := <-done
		require.NoError(t, res.Err)
		assert.Equal(t, int32(2), r.reads.Load())
		assert.False(t, c.Offer(), "Await has returned")
	})
}

// A caller in ReadAnswer is told (Interrupt) when its deadline cuts the
// wait short and when another goroutine completes its call; one parked
// is not (the condition wakes it).
func TestInterruptReachesACallerInReadAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cn := newConn("a")
		stop := make(chan struct{})
		c, r := newReaderCall(func(r *treader) { <-stop })
		boarded(t, c, cn)
		done := make(chan Result, 1)
		go func() { done <- c.Await(context.Background(), time.Second) }()
		synctest.Wait()
		assert.Zero(t, r.interrupts.Load())
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, int32(1), r.interrupts.Load(), "the deadline")
		close(stop)
		res := <-done
		require.ErrorIs(t, res.Err, ErrTimeout)

		stop2 := make(chan struct{})
		c2, r2 := newReaderCall(func(r *treader) { <-stop2 })
		boarded(t, c2, cn)
		go func() { done <- c2.Await(context.Background(), time.Minute) }()
		synctest.Wait()
		c2.Finish([]byte("ans"), 0, nil, &cn.Conn, nil)
		assert.Equal(t, int32(1), r2.interrupts.Load(), "completed elsewhere")
		close(stop2)
		res = <-done
		assert.Equal(t, []byte("ans"), res.Ans)

		c3, r3 := newReaderCall(nil) // returns at once: Await parks
		boarded(t, c3, cn)
		go func() { done <- c3.Await(context.Background(), time.Minute) }()
		synctest.Wait()
		c3.Finish([]byte("ans"), 0, nil, &cn.Conn, nil)
		<-done
		assert.Zero(t, r3.interrupts.Load())
	})
}

// An Offer that comes as the call completes still runs ReadAnswer once
// (the carrier handed the caller something it must hand on), after the
// call is complete.
func TestOfferAtCompletionIsTakenUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cn := newConn("a")
		var doneAtLast atomic.Bool
		c, r := newReaderCall(func(r *treader) {
			if r.reads.Load() == 2 {
				doneAtLast.Store(r.c.IsDone())
			}
		})
		boarded(t, c, cn)
		done := make(chan Result, 1)
		go func() { done <- c.Await(context.Background(), time.Minute) }()
		synctest.Wait()
		c.mu.Lock() // the Offer and the completion land together
		c.offered = true
		c.state, c.res = Answered, result{ans: []byte("ans")}
		c.flags.Or(flagDone)
		c.mu.Unlock()
		c.wake.Broadcast()
		<-done
		assert.Equal(t, int32(2), r.reads.Load())
		assert.True(t, doneAtLast.Load())
	})
}

// An Offer that lands with the cut of the caller's deadline, both before
// the parked caller runs again, is taken up only once the call has ended:
// a carrier's ReadAnswer for a call still pending reads until its answer
// comes, and nothing would interrupt it, the cut being past.
func TestOfferWithTheDeadlineReadsOnlyOnceEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cn := newConn("a")
		var doneAtLast atomic.Bool
		c, r := newReaderCall(func(r *treader) {
			if r.reads.Load() == 1 {
				return // registers for the baton and parks
			}
			doneAtLast.Store(r.c.IsDone())
			// A socket read: until the call is done elsewhere or the
			// read is interrupted, at most an hour.
			for range 3600 {
				if r.c.IsDone() || r.interrupts.Load() > 0 {
					return
				}
				time.Sleep(time.Second)
			}
		})
		boarded(t, c, cn)
		start := time.Now()
		done := make(chan Result, 1)
		go func() { done <- c.Await(context.Background(), time.Minute) }()
		synctest.Wait()
		c.mu.Lock() // the Offer and the cut land together
		c.offered = true
		c.cut = ErrTimeout
		c.mu.Unlock()
		c.wake.Broadcast()
		res := <-done
		require.ErrorIs(t, res.Err, ErrTimeout)
		assert.Less(t, time.Since(start), time.Second, "read past the cut")
		assert.Equal(t, int32(2), r.reads.Load(), "the Offer taken up")
		assert.True(t, doneAtLast.Load(), "taken up before the call ended")
	})
}
