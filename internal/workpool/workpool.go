// Package workpool runs jobs on worker goroutines that live while there is
// work.
package workpool

import (
	"sync"
	"time"
)

// Linger is how long a worker with nothing to do waits for a job before
// it ends, measured from the last job submitted: a pool that was busy
// less than Linger ago keeps its workers (and their grown stacks) parked,
// an idle one keeps none.
const Linger = 10 * time.Millisecond

// Pool runs every submitted job once, on a worker goroutine. While jobs
// are queued, one worker is always on its way to take the next: a worker
// taking a job wakes a parked worker, or starts one, when more are queued
// and no other worker is coming for them. A worker that finds the queue
// empty parks, and parked workers end once no job came for Linger. A busy pool thus reuses a few goroutines, with
// stacks already grown to what the jobs need, instead of starting one per
// job, and an idle pool keeps none. A slow job holds only its own worker:
// the jobs behind it go to the other workers or to a new one.
//
// The pool bounds neither its workers nor its queue: there is at most one
// worker per job submitted and not finished, plus the parked ones, so the
// caller's bound on unfinished jobs bounds both.
//
// A Pool is safe for concurrent use.
type Pool[T any] struct {
	run func(T)
	wg  *sync.WaitGroup

	mu      sync.Mutex
	cond    sync.Cond // parked workers wait on it, with mu
	jobs    []T       // queued jobs: jobs[head:]
	head    int
	workers int // counted workers: running a job, taking one, or parked
	busy    int // of which running a job
	parked  int // of which parked with no wake-up owed
	retire  int // workers released from parking, to end when they wake
	closed  bool
	started uint64

	submitted uint64 // jobs submitted so far
	mark      uint64 // submitted when the sweep was armed
	sweep     *time.Timer
	armed     bool
}

// keepCap is the largest queue buffer an idle pool keeps.
const keepCap = 64

// New returns a pool running run on each job. When wg is not nil, every
// worker is counted in it (Add when started, Done when it ends), so that
// wg.Wait waits for the jobs too, and for parked workers until Close;
// Submit then follows wg's rule that Add may start from zero only when no
// Wait is running.
func New[T any](run func(T), wg *sync.WaitGroup) *Pool[T] {
	q := &Pool[T]{run: run, wg: wg}
	q.cond.L = &q.mu
	return q
}

// Submit queues j and makes sure a worker will run it. Jobs submitted
// after Close are still run, by a worker that then ends.
func (q *Pool[T]) Submit(j T) {
	q.mu.Lock()
	if q.head > 0 && len(q.jobs) == cap(q.jobs) {
		// Reuse the buffer's consumed front before append grows it.
		n := copy(q.jobs, q.jobs[q.head:])
		clear(q.jobs[n:])
		q.jobs, q.head = q.jobs[:n], 0
	}
	q.jobs = append(q.jobs, j)
	q.submitted++
	start := q.needTakerLocked()
	q.mu.Unlock()
	if start {
		go q.work()
	}
}

// needTakerLocked makes sure some worker is on its way to the queue when
// it is not empty: it wakes a parked worker, or counts a new one, which
// the caller starts when it reports true. Workers so join one at a time,
// as long as the work outlasts them, rather than one per queued job.
func (q *Pool[T]) needTakerLocked() bool {
	if q.head == len(q.jobs) || q.workers-q.busy-q.parked > 0 {
		return false // nothing queued, or a worker is taking a job already
	}
	if q.parked > 0 {
		q.parked--
		q.cond.Signal()
		return false
	}
	q.workers++
	q.started++
	if q.wg != nil {
		q.wg.Add(1)
	}
	return true
}

// work runs queued jobs, parking while there is none, until released.
func (q *Pool[T]) work() {
	if q.wg != nil {
		defer q.wg.Done()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.head < len(q.jobs) {
			j := q.jobs[q.head]
			var zero T
			q.jobs[q.head] = zero // the job is not kept past its run
			q.head++
			q.busy++
			start := q.needTakerLocked() // the next job must not wait for this one
			q.mu.Unlock()
			if start {
				go q.work()
			}
			q.run(j)
			q.mu.Lock()
			q.busy--
			continue
		}
		q.jobs, q.head = q.jobs[:0], 0
		if q.closed {
			q.workers--
			q.idleLocked()
			return
		}
		q.parked++
		q.armLocked()
		q.cond.Wait()
		if q.retire > 0 {
			q.retire-- // released by sweep or Close, no longer counted
			return
		}
		// Woken by Submit, which took us out of parked.
	}
}

// armLocked makes sure a sweep will look at the parked workers.
func (q *Pool[T]) armLocked() {
	if q.armed {
		return
	}
	q.armed, q.mark = true, q.submitted
	if q.sweep == nil {
		q.sweep = time.AfterFunc(Linger, q.sweepParked)
	} else {
		q.sweep.Reset(Linger)
	}
}

// sweepParked ends the parked workers when no job came since it was
// armed, and looks again later otherwise.
func (q *Pool[T]) sweepParked() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armed = false
	if q.parked == 0 {
		return // the next worker to park arms it again
	}
	if q.submitted != q.mark {
		q.armLocked()
		return
	}
	q.releaseLocked()
}

// releaseLocked ends every parked worker.
func (q *Pool[T]) releaseLocked() {
	if q.parked == 0 {
		return
	}
	q.workers -= q.parked
	q.retire += q.parked
	q.parked = 0
	q.cond.Broadcast()
	q.idleLocked()
}

// idleLocked gives back a burst's queue buffer once no worker is left.
func (q *Pool[T]) idleLocked() {
	if q.workers == 0 && cap(q.jobs) > keepCap {
		q.jobs, q.head = nil, 0
	}
}

// Close ends the parked workers now, and every other worker once the
// queue is empty, instead of after Linger.
func (q *Pool[T]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	if q.sweep != nil {
		q.sweep.Stop()
		q.armed = false
	}
	q.releaseLocked()
}

// Workers returns the number of workers running a job, taking one or
// parked.
func (q *Pool[T]) Workers() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.workers
}

// Started returns the number of workers started so far.
func (q *Pool[T]) Started() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.started
}
