package serve

import (
	"sync"

	"github.com/aaatp/aaatp/internal/workpool"
)

// Lane runs jobs with at most Max running at once; up to Queue more wait,
// in the order submitted, for a running one to end; beyond that Submit
// refuses. A listener gives each kind of work a Lane of its own
// (authentication and accounting, say), so that handlers stuck on a slow
// store fill their own lane and never the other's, and the reader that
// submits never waits for a handler.
//
// A Lane runs its jobs on a workpool.Pool, at most max at once, and a
// worker that ends a job takes the next queued one: a busy lane reuses
// its goroutines and their grown stacks, an idle one keeps none once
// workpool.Linger has passed, or Close is called. Its methods are safe
// for concurrent use.
type Lane[T any] struct {
	run   func(T)
	max   int
	queue int
	pool  *workpool.Pool[T]

	mu      sync.Mutex
	busy    int // jobs running (goroutines)
	q       []T // waiting jobs: q[head:]
	head    int
	refused uint64
	peak    int // most jobs waiting at once
}

// Defaults of a Lane's bounds.
const (
	DefaultLaneMax   = 256
	DefaultLaneQueue = 4096
)

// NewLane returns a lane running run on each job, at most max at once
// (DefaultLaneMax if max <= 0) with at most queue waiting
// (DefaultLaneQueue if queue == 0, none if queue < 0). When wg is not nil,
// each worker goroutine is counted in it, so that wg.Wait waits for the
// jobs, and for parked workers until Close.
func NewLane[T any](run func(T), max, queue int, wg *sync.WaitGroup) *Lane[T] {
	if max <= 0 {
		max = DefaultLaneMax
	}
	switch {
	case queue == 0:
		queue = DefaultLaneQueue
	case queue < 0:
		queue = 0
	}
	l := &Lane[T]{run: run, max: max, queue: queue}
	l.pool = workpool.New(l.work, wg)
	return l
}

// Close ends the lane's parked workers now rather than after
// workpool.Linger; jobs running or queued still run. Submit may still be
// called: its jobs run on a worker that then ends.
func (l *Lane[T]) Close() { l.pool.Close() }

// Submit runs j now if fewer than Max jobs run, queues it if fewer than
// Queue wait, and otherwise refuses it (false): the caller then drops it
// and says so, or answers that it is busy.
func (l *Lane[T]) Submit(j T) bool {
	l.mu.Lock()
	if l.busy < l.max {
		l.busy++
		l.mu.Unlock()
		l.pool.Submit(j)
		return true
	}
	if len(l.q)-l.head >= l.queue {
		l.refused++
		l.mu.Unlock()
		return false
	}
	if l.head > 0 && len(l.q) == cap(l.q) {
		n := copy(l.q, l.q[l.head:])
		clear(l.q[n:])
		l.q, l.head = l.q[:n], 0
	}
	l.q = append(l.q, j)
	l.peak = max(l.peak, len(l.q)-l.head)
	l.mu.Unlock()
	return true
}

// work runs j, then the queued jobs until none is left, on a worker.
func (l *Lane[T]) work(j T) {
	for {
		l.run(j)
		l.mu.Lock()
		if l.head == len(l.q) {
			l.busy--
			l.q, l.head = l.q[:0], 0
			if cap(l.q) > 64 {
				l.q = nil // an idle lane keeps no large buffer
			}
			l.mu.Unlock()
			return
		}
		var zero T
		j, l.q[l.head] = l.q[l.head], zero
		l.head++
		l.mu.Unlock()
	}
}

// LaneStats are a Lane's counters.
type LaneStats struct {
	Running int    `json:"running"`
	Waiting int    `json:"waiting"`
	Peak    int    `json:"peak_waiting"`
	Refused uint64 `json:"refused"` // jobs refused: Max running and Queue waiting
}

// Stats returns the lane's counters.
func (l *Lane[T]) Stats() LaneStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return LaneStats{Running: l.busy, Waiting: len(l.q) - l.head, Peak: l.peak, Refused: l.refused}
}

// Workers returns the lane's worker goroutines now: running a job,
// taking one, or parked.
func (l *Lane[T]) Workers() int { return l.pool.Workers() }

// Started returns how many worker goroutines the lane started so far.
func (l *Lane[T]) Started() uint64 { return l.pool.Started() }
