package workpool

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A job that blocks holds its own worker only: the jobs submitted after it
// run meanwhile.
func TestSlowJobDoesNotBlockOthers(t *testing.T) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	done := make(chan int, 100)
	q := New(func(i int) {
		if i == 0 {
			<-release
		}
		done <- i
	}, &wg)
	for i := range 100 {
		q.Submit(i)
	}
	for range 99 {
		select {
		case i := <-done:
			if i == 0 {
				t.Fatal("the blocked job finished before it was released")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("jobs behind a blocked one did not run")
		}
	}
	if w := q.Workers(); w < 1 {
		t.Fatalf("%d workers while a job is blocked", w)
	}
	close(release)
	if i := <-done; i != 0 {
		t.Fatalf("last job %d, want the blocked one", i)
	}
	wg.Wait()
	if w := q.Workers(); w != 0 {
		t.Fatalf("%d workers left when idle", w)
	}
}

// Workers never outnumber the jobs submitted and not finished, the bound
// the caller enforces; once they finish, no worker is left and the queue's
// buffer is given back.
func TestWorkersBoundedByUnfinishedJobs(t *testing.T) {
	const n = 300
	var (
		wg      sync.WaitGroup
		running atomic.Int64
		peak    atomic.Int64
		gate    = make(chan struct{})
	)
	q := New(func(struct{}) {
		r := running.Add(1)
		for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
		}
		<-gate
		running.Add(-1)
	}, &wg)
	for range n {
		q.Submit(struct{}{})
		if w := q.Workers(); w > n {
			t.Fatalf("%d workers for %d jobs", w, n)
		}
	}
	// Every job blocks, so each needed a worker of its own.
	deadline := time.Now().Add(10 * time.Second)
	for running.Load() < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if w, s := q.Workers(), q.Started(); w != n || s != n {
		t.Fatalf("%d workers, %d started for %d blocked jobs", w, s, n)
	}
	close(gate)
	wg.Wait()
	q.mu.Lock()
	c := cap(q.jobs)
	q.mu.Unlock()
	if q.Workers() != 0 || c != 0 {
		t.Fatalf("idle pool: %d workers, queue buffer of %d", q.Workers(), c)
	}
}

// Submit reuses the consumed front of the queue's buffer before growing
// it, so a queue that never empties keeps a buffer of the size of its
// longest backlog; a job finding a worker on its way starts none.
func TestSubmitReusesBuffer(t *testing.T) {
	var wg sync.WaitGroup
	var ran atomic.Int64
	q := New(func(i int) { ran.Add(int64(i)) }, &wg)
	q.jobs = []int{0, 0, 0, 7} // three consumed, one queued
	q.head = 3
	q.workers = 1 // pretend: one on its way to the queue
	q.Submit(8)   // no goroutine started: nothing else touches q yet
	if cap(q.jobs) != 4 || q.head != 0 || len(q.jobs) != 2 || q.jobs[0] != 7 || q.jobs[1] != 8 {
		t.Fatalf("queue %v (cap %d) from %d", q.jobs, cap(q.jobs), q.head)
	}
	if q.started != 0 {
		t.Fatalf("%d workers started with one coming", q.started)
	}
	q.workers = 0 // the pretended worker is gone
	q.Submit(9)   // a worker, which takes 7 and 8 and 9 or starts others
	q.Close()
	wg.Wait()
	if w := q.Workers(); w != 0 || ran.Load() != 7+8+9 {
		t.Fatalf("%d workers left, ran jobs summing to %d", w, ran.Load())
	}
}

func waitParked(t *testing.T, q *Pool[int], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		p := q.parked
		q.mu.Unlock()
		if p == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d parked, want %d", p, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A worker that ran out of jobs parks: the next job within Linger goes to
// it, not to a new goroutine; once no job came for Linger, it ends. In a
// synctest bubble, as is TestCloseEndsWorkers, so that the Linger window
// is exact whatever the load (under load a poller that slept past it saw
// no parked worker, and a test goroutine late for the next job saw a
// second worker started).
func TestParkedWorkerReusedThenEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		done := make(chan int, 1)
		q := New(func(i int) { done <- i }, &wg)
		for i := range 20 {
			q.Submit(i)
			if got := <-done; got != i {
				t.Fatalf("ran %d, want %d", got, i)
			}
			waitParked(t, q, 1)
		}
		if s := q.Started(); s != 1 {
			t.Fatalf("%d workers started for 20 jobs one after the other", s)
		}
		wg.Wait() // the parked worker ends after Linger without Close
		if w := q.Workers(); w != 0 {
			t.Fatalf("%d workers after Linger", w)
		}
		q.Submit(99) // and a later job starts a new one
		if got := <-done; got != 99 {
			t.Fatalf("ran %d", got)
		}
		q.Close()
		wg.Wait()
		if s := q.Started(); s != 2 {
			t.Fatalf("%d started", s)
		}
	})
}

// Close ends a parked worker at once, and a pool closed while a job runs
// ends its worker once the job is done.
func TestCloseEndsWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		gate := make(chan struct{})
		q := New(func(i int) {
			if i == 1 {
				<-gate
			}
		}, &wg)
		q.Submit(0)
		waitParked(t, q, 1)
		q.Submit(1) // the parked worker takes it and blocks
		q.Close()
		close(gate)
		ended := make(chan struct{})
		go func() { wg.Wait(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(Linger / 2):
			t.Fatal("workers outlived Close")
		}
	})
}
