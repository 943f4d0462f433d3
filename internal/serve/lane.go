package serve

import "sync"

// Lane runs jobs with at most Max running at once; up to Queue more wait,
// in the order submitted, for a running one to end; beyond that Submit
// refuses. A listener gives each kind of work a Lane of its own
// (authentication and accounting, say), so that handlers stuck on a slow
// store fill their own lane and never the other's, and the reader that
// submits never waits for a handler.
//
// A Lane starts a goroutine per running job, at most Max, and a goroutine
// that ends a job takes the next queued one: a busy lane reuses them, an
// idle one keeps none. Its methods are safe for concurrent use.
type Lane[T any] struct {
	run   func(T)
	max   int
	queue int
	wg    *sync.WaitGroup

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
// each running job's goroutine is counted in it, so that wg.Wait waits
// for the jobs.
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
	return &Lane[T]{run: run, max: max, queue: queue, wg: wg}
}

// Submit runs j now if fewer than Max jobs run, queues it if fewer than
// Queue wait, and otherwise refuses it (false): the caller then drops it
// and says so, or answers that it is busy.
func (l *Lane[T]) Submit(j T) bool {
	l.mu.Lock()
	if l.busy < l.max {
		l.busy++
		l.mu.Unlock()
		if l.wg != nil {
			l.wg.Add(1)
		}
		go l.work(j)
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

func (l *Lane[T]) work(j T) {
	if l.wg != nil {
		defer l.wg.Done()
	}
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
