package serve

import (
	"sync"

	"github.com/aaatp/aaatp/internal/workpool"
)

// Lane runs jobs with at most Max running at once; up to Queue more wait
// for a running one to end; beyond that a job is refused. A listener
// gives each kind of work a Lane of its own (authentication and
// accounting, say), so that handlers stuck on a slow store fill their own
// lane and never the other's, and the reader that submits never waits for
// a handler.
//
// Every job comes from a source (a connection, a client's address), and
// the sources take turns: the waiting jobs of one source run in the order
// submitted, and a worker that ends a job takes the oldest job of the next
// source in turn. When Queue jobs wait, a new job pushes out the newest
// waiting job of the source with the most waiting, if that source has at
// least two more than the new job's source; otherwise the new job is
// refused. So
// a source that pipelines more than the lane can run (a greedy or broken
// peer, or one whose handlers wait on a slow store) delays the other
// sources' jobs by about one job each, not by its whole backlog, and the
// refusals fall on it, not on them. The lane is work-conserving: one
// source alone may use every worker and the whole queue.
//
// A job submitted with SubmitWeak is one anyone could have sent (an
// Access-Request that carries no proof of the shared secret, over UDP
// from any address): weak jobs wait apart, at most half of Queue, and
// never run before a strong job that waits. When the queue is full a
// strong job pushes out the newest weak job of the source with the most
// weak jobs waiting, if any waits; a weak job may push out only another
// weak job (by the rule above, among the weak), never a strong one. So a
// flood of weak jobs from many sources neither refuses nor pushes out
// the strong jobs of the sources that hold the secret.
//
// A Lane runs its jobs on a workpool.Pool, at most max at once, and a
// worker that ends a job takes the next queued one: a busy lane reuses
// its goroutines and their grown stacks, an idle one keeps none once
// workpool.Linger has passed, or Close is called. Its methods are safe
// for concurrent use.
type Lane[K comparable, T any] struct {
	run, refuse func(T)
	max, queue  int
	pool        *workpool.Pool[T]

	weakMax int // weak jobs waiting at most

	mu         sync.Mutex
	busy       int        // jobs running (goroutines)
	fair[K, T]            // the strong jobs waiting
	weak       fair[K, T] // the weak jobs waiting (SubmitWeak)
	refused    uint64
	peak       int // most jobs waiting at once
}

// fair is jobs waiting in a Lane, by source, the sources taking turns.
type fair[K comparable, T any] struct {
	waiting int // jobs waiting, of every source
	sources map[K]*source[K, T]
	turn    *source[K, T]   // the source whose job runs next; the ring of sources with jobs waiting
	byLen   []*source[K, T] // byLen[n]: the sources with n jobs waiting (n >= 1), a list
	top     int             // the most jobs a source has waiting
	spare   []*source[K, T] // sources to reuse
}

// source is the jobs of one source waiting in a Lane, on its ring of
// sources that have some and on the list of those with as many.
type source[K comparable, T any] struct {
	key          K
	q            []T // waiting jobs: q[head:]
	head         int
	prev, next   *source[K, T] // the ring
	lprev, lnext *source[K, T] // the list of byLen[len()]
}

func (s *source[K, T]) len() int { return len(s.q) - s.head }

// Defaults of a Lane's bounds.
const (
	DefaultLaneMax   = 256
	DefaultLaneQueue = 4096
)

// keepJobs and keepSources bound what an idle lane keeps for reuse.
const (
	keepJobs    = 64
	keepSources = 64
)

// NewLane returns a lane running run on each job, at most max at once
// (DefaultLaneMax if max <= 0) with at most queue waiting
// (DefaultLaneQueue if queue == 0, none if queue < 0). refuse is called,
// once, for each job the lane will not run: refused when it came, or
// pushed out of the queue later by another source's job; it runs on the
// goroutine of the Submit that decided it, after the lane's lock, and must
// not block. When wg is not nil, each worker goroutine is counted in it,
// so that wg.Wait waits for the jobs, and for parked workers until Close.
func NewLane[K comparable, T any](run, refuse func(T), max, queue int, wg *sync.WaitGroup) *Lane[K, T] {
	if max <= 0 {
		max = DefaultLaneMax
	}
	switch {
	case queue == 0:
		queue = DefaultLaneQueue
	case queue < 0:
		queue = 0
	}
	l := &Lane[K, T]{run: run, refuse: refuse, max: max, queue: queue, weakMax: queue / 2}
	if queue == 1 {
		l.weakMax = 1
	}
	l.fair.sources = make(map[K]*source[K, T])
	l.weak.sources = make(map[K]*source[K, T])
	l.pool = workpool.New(l.work, wg)
	return l
}

// Close ends the lane's parked workers now rather than after
// workpool.Linger; jobs running or queued still run. Submit may still be
// called: its jobs run on a worker that then ends.
func (l *Lane[K, T]) Close() { l.pool.Close() }

// Submit runs j, from source k, now if fewer than Max jobs run, and
// otherwise queues it behind k's other waiting jobs. When Queue jobs wait
// already, either j is refused or it takes the place of a weak job, or of
// another source's newest job, which is refused; refuse is called for the
// refused one before Submit returns. Submit never waits for a job to end.
func (l *Lane[K, T]) Submit(k K, j T) { l.submit(k, j, false) }

// SubmitWeak is Submit for a job anyone could have sent (see Lane): it
// waits apart, at most half of Queue, behind every strong job, and is the
// first pushed out.
func (l *Lane[K, T]) SubmitWeak(k K, j T) { l.submit(k, j, true) }

func (l *Lane[K, T]) submit(k K, j T, weak bool) {
	l.mu.Lock()
	if l.busy < l.max {
		l.busy++
		l.mu.Unlock()
		l.pool.Submit(j)
		return
	}
	f := &l.fair
	if weak {
		f = &l.weak
	}
	if l.fair.waiting+l.weak.waiting >= l.queue || weak && l.weak.waiting >= l.weakMax {
		var v *fair[K, T]
		switch {
		case !weak && l.weak.waiting > 0:
			v = &l.weak // a strong job before any weak one
		case f.victim(f.sources[k]) != nil:
			v = f
		}
		if v == nil {
			l.refused++
			l.mu.Unlock()
			l.refuse(j)
			return
		}
		out := v.popNewest()
		l.refused++
		defer l.refuse(out) // after the unlock below
	}
	f.push(k, j)
	l.peak = max(l.peak, l.fair.waiting+l.weak.waiting)
	l.mu.Unlock()
}

// push queues j behind the jobs of source k. l.mu is held.
func (f *fair[K, T]) push(k K, j T) {
	s := f.sources[k]
	if s == nil {
		s = f.join(k)
	}
	if s.head > 0 && len(s.q) == cap(s.q) {
		n := copy(s.q, s.q[s.head:])
		clear(s.q[n:])
		s.q, s.head = s.q[:n], 0
	}
	s.q = append(s.q, j)
	f.moved(s, s.len()-1)
	f.waiting++
}

// popNewest takes out the newest job of a source with the most waiting.
// l.mu is held.
func (f *fair[K, T]) popNewest() T {
	v := f.byLen[f.top]
	out := v.q[len(v.q)-1]
	var zero T
	v.q[len(v.q)-1] = zero
	v.q = v.q[:len(v.q)-1]
	f.moved(v, v.len()+1)
	f.waiting--
	if v.len() == 0 {
		f.leave(v)
	}
	return out
}

// popTurn takes out the oldest job of the source in turn, and passes the
// turn on. l.mu is held.
func (f *fair[K, T]) popTurn() T {
	s := f.turn
	var zero T
	j := s.q[s.head]
	s.q[s.head] = zero
	s.head++
	f.moved(s, s.len()+1)
	f.waiting--
	f.turn = s.next
	if s.len() == 0 {
		f.leave(s)
	}
	return j
}

// victim returns the source whose newest job a job from s (nil: none
// waiting) may push out of a full queue: one with the most jobs waiting,
// if it has at least two more than s. l.mu is held.
func (f *fair[K, T]) victim(s *source[K, T]) *source[K, T] {
	n := 0
	if s != nil {
		n = s.len()
	}
	if f.top < n+2 {
		return nil
	}
	return f.byLen[f.top]
}

// moved puts s, which had from jobs waiting, on the list of those with as
// many as it has now (one more or one less), and keeps top. l.mu is held.
func (l *fair[K, T]) moved(s *source[K, T], from int) {
	to := s.len()
	if from > 0 { // off its list
		if s.lprev != nil {
			s.lprev.lnext = s.lnext
		} else {
			l.byLen[from] = s.lnext
		}
		if s.lnext != nil {
			s.lnext.lprev = s.lprev
		}
		s.lprev, s.lnext = nil, nil
	}
	if to > 0 {
		if to >= len(l.byLen) {
			l.byLen = append(l.byLen, make([]*source[K, T], to+1-len(l.byLen))...)
		}
		s.lnext = l.byLen[to]
		if s.lnext != nil {
			s.lnext.lprev = s
		}
		l.byLen[to] = s
	}
	switch {
	case to > l.top:
		l.top = to
	case from == l.top && l.byLen[from] == nil:
		l.top = to // one less: s has the most now, or none waits
	}
	if l.top == 0 && len(l.byLen) > keepJobs {
		l.byLen = nil // an idle lane keeps no large index
	}
}

// join puts a source with no job waiting on the ring, last in turn.
// l.mu is held.
func (l *fair[K, T]) join(k K) *source[K, T] {
	var s *source[K, T]
	if n := len(l.spare); n > 0 {
		s, l.spare = l.spare[n-1], l.spare[:n-1]
	} else {
		s = new(source[K, T])
	}
	s.key = k
	l.sources[k] = s
	if l.turn == nil {
		s.prev, s.next, l.turn = s, s, s
	} else {
		s.prev, s.next = l.turn.prev, l.turn
		s.prev.next, s.next.prev = s, s
	}
	return s
}

// leave takes a source with no job waiting off the ring. l.mu is held.
func (l *fair[K, T]) leave(s *source[K, T]) {
	if s.next == s {
		l.turn = nil
	} else {
		s.prev.next, s.next.prev = s.next, s.prev
		if l.turn == s {
			l.turn = s.next
		}
	}
	delete(l.sources, s.key)
	var zero K
	s.key, s.prev, s.next = zero, nil, nil
	s.q, s.head = s.q[:0], 0
	if cap(s.q) > keepJobs {
		s.q = nil // an idle lane keeps no large buffer
	}
	if len(l.spare) < keepSources {
		l.spare = append(l.spare, s)
	}
}

// work runs j, then waiting jobs, a source at a time in turn, strong
// jobs before weak ones, until none is left, on a worker.
func (l *Lane[K, T]) work(j T) {
	for {
		l.run(j)
		l.mu.Lock()
		switch {
		case l.fair.waiting > 0:
			j = l.fair.popTurn()
		case l.weak.waiting > 0:
			j = l.weak.popTurn()
		default:
			l.busy--
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
	}
}

// LaneStats are a Lane's counters.
type LaneStats struct {
	Running int    `json:"running"`
	Waiting int    `json:"waiting"`
	Peak    int    `json:"peak_waiting"`
	Refused uint64 `json:"refused"` // jobs refused, when they came or pushed out later
}

// Stats returns the lane's counters.
func (l *Lane[K, T]) Stats() LaneStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return LaneStats{Running: l.busy, Waiting: l.fair.waiting + l.weak.waiting, Peak: l.peak, Refused: l.refused}
}

// Workers returns the lane's worker goroutines now: running a job,
// taking one, or parked.
func (l *Lane[K, T]) Workers() int { return l.pool.Workers() }

// Started returns how many worker goroutines the lane started so far.
func (l *Lane[K, T]) Started() uint64 { return l.pool.Started() }
