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
