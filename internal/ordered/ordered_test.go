package ordered

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Changes made one after the other under the caller's lock, by many
// goroutines, are published in the order of the changes, each once, and
// never two at a time. Each goroutine makes its next change once its last
// is published, so that the queue stays under its bound (past it order
// is given up: TestBoundWhileAPublishBlocks).
func TestChangesPublishedInOrder(t *testing.T) {
	const goroutines, each = 8, 2000
	var q Queue[int]
	var state sync.Mutex // the caller's lock, under which the changes are made
	next := 0
	var got []int
	var published atomic.Int64
	var inside sync.Mutex // held by publish: TryLock fails if two publish at once
	publish := func(v int) {
		defer published.Add(1)
		if !inside.TryLock() {
			t.Error("two goroutines publishing at once")
			return
		}
		got = append(got, v)
		inside.Unlock()
	}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				state.Lock()
				v := next
				next++
				q.Lock() // before letting go of the change's lock
				state.Unlock()
				q.PublishLocked(publish, v)
				for published.Load() <= int64(v) {
					runtime.Gosched()
				}
			}
		})
	}
	wg.Wait()
	if len(got) != goroutines*each {
		t.Fatalf("%d events published, want %d", len(got), goroutines*each)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("event %d is change %d", i, v)
		}
	}
}

// A publish that queues an event of its own (a subscriber causing a
// change) does not deadlock: its event follows the one being published.
func TestPublishFromPublish(t *testing.T) {
	var q Queue[string]
	var got []string
	var publish func(string)
	publish = func(s string) {
		got = append(got, s)
		if s == "a" {
			q.Lock()
			q.PublishLocked(publish, "a'")
		}
	}
	q.Lock()
	q.PublishLocked(publish, "a", "b")
	if want := []string{"a", "b", "a'"}; !slices.Equal(got, want) {
		t.Errorf("published %q, want %q", got, want)
	}
}

// Nothing to publish: the lock is let go, nothing happens.
func TestPublishNothing(t *testing.T) {
	var q Queue[int]
	q.Lock()
	q.PublishLocked(func(int) { t.Error("published") })
	q.Lock() // would block had the lock been kept
	q.Unlock()
}

// While a publish blocks, the others' events queue up to MaxQueued; past
// it each goroutine publishes its own at once, none lost; once the
// blocked publish returns the queued ones follow, in their order.
func TestBoundWhileAPublishBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q Queue[int]
		release := make(chan struct{})
		var mu sync.Mutex
		var got []int
		publish := func(v int) {
			if v == 0 {
				<-release
			}
			mu.Lock()
			got = append(got, v)
			mu.Unlock()
		}
		go func() { q.Lock(); q.PublishLocked(publish, 0) }()
		synctest.Wait()
		const more = MaxQueued + 100
		for v := 1; v <= more; v++ {
			q.Lock()
			q.PublishLocked(publish, v)
		}
		queued, publishing, over := q.Stats()
		if queued != MaxQueued || !publishing || over != more-MaxQueued {
			t.Fatalf("queued %d, publishing %v, overflowed %d; want %d, true, %d", queued, publishing, over, MaxQueued, more-MaxQueued)
		}
		mu.Lock()
		if want := seq(MaxQueued+1, more); !slices.Equal(got, want) {
			t.Errorf("published past the bound %v, want %v", got, want)
		}
		mu.Unlock()
		close(release)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		want := append(seq(MaxQueued+1, more), 0)
		want = append(want, seq(1, MaxQueued)...)
		if !slices.Equal(got, want) {
			t.Errorf("published %d events, want %d in order", len(got), len(want))
		}
		if queued, publishing, _ := q.Stats(); queued != 0 || publishing {
			t.Errorf("after: queued %d, publishing %v", queued, publishing)
		}
	})
}

// A publish that ends its goroutine (runtime.Goexit, as t.FailNow does)
// leaves the rest of its batch queued for the next goroutine that
// publishes, in order, once.
func TestPublisherEnds(t *testing.T) {
	var q Queue[int]
	var got []int
	publish := func(v int) {
		got = append(got, v)
		if v == 1 {
			runtime.Goexit()
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Lock()
		q.PublishLocked(publish, 1, 2, 3)
	}()
	<-done
	if queued, publishing, _ := q.Stats(); queued != 2 || publishing {
		t.Fatalf("queued %d, publishing %v; want 2, false", queued, publishing)
	}
	q.Lock()
	q.PublishLocked(publish, 4)
	if want := []int{1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
}

func seq(from, to int) []int {
	var s []int
	for v := from; v <= to; v++ {
		s = append(s, v)
	}
	return s
}
