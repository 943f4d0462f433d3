// Package serial runs callbacks one at a time, in the order they were
// given, on a goroutine of its own: the way a peer delivers its events and
// failover hand-overs, never on the goroutine (a reader, a caller) nor
// under the lock that decided them.
package serial

import "sync"

// Queue hands each value given to Schedule to its handler, one at a time
// and in the order scheduled, on a goroutine the Queue starts when it has
// work and that ends when it has none, so an idle Queue holds no
// goroutine. Schedule never runs the handler itself: it may be called
// under the caller's locks, and values scheduled under one lock keep the
// order of the changes they report. End says the owner has ended; Done is
// closed once every value scheduled before End has been handled. Values
// scheduled after End are still handled (ScheduleBeforeEnd drops them).
// A Queue is safe for concurrent use.
//
// The queue grows with what its owner schedules faster than the handler
// runs; owners schedule per state change and per hand-over, and what they
// schedule per message goes through ScheduleUnder, which a bound keeps.
type Queue[T any] struct {
	handle func(T)
	max    int // values waiting at most; 0: no bound

	mu      sync.Mutex
	q       []T
	running bool // a goroutine is handling the queue
	ended   bool
	done    chan struct{}
	doneO   sync.Once
}

// New returns a Queue that hands values to handle.
func New[T any](handle func(T)) *Queue[T] {
	return &Queue[T]{handle: handle, done: make(chan struct{})}
}

// Bounded returns a Queue that hands values to handle and holds at most
// max values waiting: past it, Schedule drops the value. For an owner
// whose values may come faster than its handler takes them (a handler
// that blocks), with the loss counted.
func Bounded[T any](handle func(T), max int) *Queue[T] {
	s := New(handle)
	s.max = max
	return s
}

// Schedule queues v for the handler; false when a Bounded queue is full
// and v was dropped.
func (s *Queue[T]) Schedule(v T) bool { return s.schedule(v, false, 0) }

// ScheduleUnder is Schedule for a value that may be dropped when the
// queue already holds max values or more (it returns false then): what an
// owner schedules per message, so that a handler that lags cannot make
// the queue grow with the traffic, while the values it must never drop
// (Schedule) still go in.
func (s *Queue[T]) ScheduleUnder(v T, max int) bool { return s.schedule(v, false, max) }

// ScheduleBeforeEnd is Schedule for an owner whose values mean nothing
// once it has ended (events after a Done that promised the last one):
// after End, v is dropped and it returns false.
func (s *Queue[T]) ScheduleBeforeEnd(v T) bool { return s.schedule(v, true, 0) }

func (s *Queue[T]) schedule(v T, beforeEnd bool, under int) bool {
	s.mu.Lock()
	if (s.max > 0 && len(s.q) >= s.max) || (under > 0 && len(s.q) >= under) || (beforeEnd && s.ended) {
		s.mu.Unlock()
		return false
	}
	s.q = append(s.q, v)
	if !s.running {
		s.running = true
		go s.run()
	}
	s.mu.Unlock()
	return true
}

// End marks the owner's end: Done closes once the queue is empty.
func (s *Queue[T]) End() {
	s.mu.Lock()
	s.ended = true
	if !s.running {
		s.doneO.Do(func() { close(s.done) })
	}
	s.mu.Unlock()
}

// Done is closed after End once everything scheduled before it was
// handled.
func (s *Queue[T]) Done() <-chan struct{} { return s.done }

func (s *Queue[T]) run() {
	var q []T
	var zero T
	i, ok := 0, false
	defer func() {
		if ok {
			return
		}
		// The handler panicked or ended its goroutine (runtime.Goexit, as
		// t.FailNow does in a test): the values after the one it was
		// handling go back to the head of the queue, to a new goroutine,
		// rather than stay behind a handler that is gone.
		s.mu.Lock()
		if i < len(q) {
			s.q = append(q[i+1:len(q):len(q)], s.q...)
		}
		if len(s.q) > 0 {
			go s.run()
		} else {
			s.running = false
			if s.ended {
				s.doneO.Do(func() { close(s.done) })
			}
		}
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		q, s.q, i = s.q, q[:0], 0
		if len(q) == 0 {
			s.running = false
			if s.ended {
				s.doneO.Do(func() { close(s.done) })
			}
			s.mu.Unlock()
			ok = true
			return
		}
		s.mu.Unlock()
		for ; i < len(q); i++ {
			s.handle(q[i])
			q[i] = zero
		}
	}
}
