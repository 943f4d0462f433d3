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
// scheduled after End are still handled. A Queue is safe for concurrent
// use.
//
// The queue grows with what its owner schedules faster than the handler
// runs; owners schedule per state change and per hand-over, never per
// message.
type Queue[T any] struct {
	handle func(T)

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

// Schedule queues v for the handler.
func (s *Queue[T]) Schedule(v T) {
	s.mu.Lock()
	s.q = append(s.q, v)
	if !s.running {
		s.running = true
		go s.run()
	}
	s.mu.Unlock()
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
	for {
		s.mu.Lock()
		q, s.q = s.q, q[:0]
		if len(q) == 0 {
			s.running = false
			if s.ended {
				s.doneO.Do(func() { close(s.done) })
			}
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		for i, v := range q {
			s.handle(v)
			q[i] = zero
		}
	}
}
