package serial

import (
	"runtime"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Values are handled in the order scheduled, from several goroutines
// scheduling under one lock, never on the scheduling goroutine, and the
// Queue holds no goroutine once idle.
func TestOrderOffTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []int
		var on []bool
		callers := map[int]bool{}
		q := New(func(v int) {
			mu.Lock()
			got = append(got, v)
			on = append(on, callers[goid()])
			mu.Unlock()
		})
		var order sync.Mutex // the owner's lock: scheduling order is its order
		next := 0
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				mu.Lock()
				callers[goid()] = true
				mu.Unlock()
				for range 100 {
					order.Lock()
					q.Schedule(next)
					next++
					order.Unlock()
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		for i, v := range got {
			if v != i {
				t.Fatalf("value %d handled at %d", v, i)
			}
		}
		assert.Len(t, got, 800)
		assert.NotContains(t, on, true, "a value was handled on a goroutine that scheduled")
	})
}

// Done closes after End once the values scheduled before it are handled,
// not before; a handler may schedule more, which are handled too.
func TestDoneAfterQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var handled []int
		var q *Queue[int]
		q = New(func(v int) {
			if v == 1 {
				<-release
				q.Schedule(3)
			}
			handled = append(handled, v)
		})
		q.Schedule(1)
		q.Schedule(2)
		q.End()
		synctest.Wait()
		select {
		case <-q.Done():
			t.Fatal("Done before the queued values were handled")
		default:
		}
		close(release)
		<-q.Done()
		assert.Equal(t, []int{1, 2, 3}, handled)
	})
}

// ScheduleBeforeEnd queues as Schedule does until End, and drops what
// comes after it: nothing is handled once Done is closed.
func TestScheduleBeforeEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var handled []int
		q := New(func(v int) { handled = append(handled, v) })
		assert.True(t, q.ScheduleBeforeEnd(1))
		q.End()
		assert.False(t, q.ScheduleBeforeEnd(2), "after End")
		<-q.Done()
		synctest.Wait()
		assert.Equal(t, []int{1}, handled)
	})
}

// End on an idle Queue closes Done at once.
func TestEndIdle(t *testing.T) {
	q := New(func(int) {})
	q.End()
	<-q.Done()
}

// goid identifies the running goroutine for the test only (its stack's
// first line), to tell the scheduling goroutines from the handler's.
func goid() int {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	id := 0
	for _, c := range b[len("goroutine "):n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + int(c-'0')
	}
	return id
}

// A Bounded queue whose handler blocks holds at most its bound: the
// values past it are dropped and Schedule says so; once the handler
// returns, the values kept are handled in order.
func TestBoundedDropsPastItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var got []int
		q := Bounded(func(v int) {
			if v == 0 {
				<-release
			}
			got = append(got, v)
		}, 3)
		assert.True(t, q.Schedule(0))
		synctest.Wait() // the handler blocks on 0; nothing waits
		for v := 1; v <= 3; v++ {
			assert.True(t, q.Schedule(v))
		}
		assert.False(t, q.Schedule(4), "past the bound")
		close(release)
		q.End()
		<-q.Done()
		assert.Equal(t, []int{0, 1, 2, 3}, got)
	})
}

// ScheduleUnder drops a value once the queue holds its max, while
// Schedule still queues past it: what must not be lost is not.
func TestScheduleUnderDropsPastItsMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var got []int
		q := New(func(v int) {
			if v == 0 {
				<-release
			}
			got = append(got, v)
		})
		assert.True(t, q.Schedule(0))
		synctest.Wait() // the handler blocks on 0, taken off the queue
		assert.True(t, q.ScheduleUnder(1, 2))
		assert.True(t, q.ScheduleUnder(2, 2))
		assert.False(t, q.ScheduleUnder(3, 2), "two waiting: at its max")
		assert.True(t, q.Schedule(4), "Schedule is not bound by it")
		assert.False(t, q.ScheduleUnder(5, 3), "three waiting")
		assert.True(t, q.ScheduleUnder(6, 4))
		close(release)
		q.End()
		<-q.Done()
		assert.Equal(t, []int{0, 1, 2, 4, 6}, got)
	})
}

// A handler that ends its goroutine (runtime.Goexit, as t.FailNow does)
// does not leave the queue stuck: the values after it are handled on a
// new goroutine, in order, once each.
func TestHandlerEndingItsGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []int
		q := New(func(v int) {
			got = append(got, v)
			if v == 1 {
				runtime.Goexit()
			}
		})
		for v := range 4 {
			q.Schedule(v)
		}
		q.End()
		<-q.Done()
		assert.Equal(t, []int{0, 1, 2, 3}, got)
	})
}
