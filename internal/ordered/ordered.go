// Package ordered publishes events in the order of the changes that made
// them, without holding a lock while subscribers run.
//
// The changes of a state are made under a lock, but their events are
// published after it is released, so that a subscriber may call back into
// the owner. Two goroutines changing the state one after the other could
// then publish their events in the opposite order. A Queue closes that
// gap: the owner takes the Queue's lock before letting go of the lock of
// the change (or makes the change under the Queue's lock), and hands the
// events to PublishLocked, which queues them in that order. Whichever
// goroutine finds nobody publishing publishes the queue until it is
// empty; the others leave their events to it and return at once. That
// goroutine (a connection's reader, a caller) does nothing else
// meanwhile, for as long as a burst of events lasts.
package ordered

import "sync"

// MaxQueued bounds the events waiting in a Queue. The queue grows only
// while a subscriber runs, by the events that come meanwhile; a subscriber
// that blocks could let it grow without end. Past MaxQueued a goroutine
// publishes its events itself, out of order but not lost.
const MaxQueued = 1024

// Queue publishes events in the order they were queued. The zero Queue is
// ready for use. It is safe for concurrent use.
type Queue[E any] struct {
	mu         sync.Mutex
	queue      []E
	publishing bool   // a goroutine publishes the queue until it is empty
	overflowed uint64 // events published at once past a full queue
}

// Lock takes the Queue's lock. Take it before letting go of the lock under
// which the change was made, or make the change while holding it; then
// hand the change's events to PublishLocked.
func (q *Queue[E]) Lock() { q.mu.Lock() }

// Unlock lets go of the Queue's lock when there is nothing to publish.
func (q *Queue[E]) Unlock() { q.mu.Unlock() }

// PublishLocked queues es and, unless another goroutine is publishing,
// publishes the queue with publish until it is empty. The Queue's lock is
// held (Lock) and is released on return; publish runs without it, so it
// may queue events of its own: they follow the ones being published.
func (q *Queue[E]) PublishLocked(publish func(E), es ...E) {
	if len(es) == 0 {
		q.mu.Unlock()
		return
	}
	if q.publishing && len(q.queue)+len(es) > MaxQueued {
		q.overflowed += uint64(len(es))
		q.mu.Unlock()
		for _, e := range es {
			publish(e)
		}
		return
	}
	q.queue = append(q.queue, es...)
	if q.publishing {
		q.mu.Unlock()
		return
	}
	q.publishing = true
	for len(q.queue) > 0 {
		batch := q.queue
		q.queue = nil
		q.mu.Unlock()
		q.deliver(publish, batch)
		q.mu.Lock()
	}
	q.publishing = false
	q.mu.Unlock()
}

// deliver publishes batch, the lock not held. Should publish panic or end
// its goroutine (runtime.Goexit, as t.FailNow does in a test), the events
// after the one it was given go back to the head of the queue and
// publishing ends, so that the next goroutine to queue an event publishes
// them, rather than the queue filling behind a publisher that is gone.
func (q *Queue[E]) deliver(publish func(E), batch []E) {
	i := 0
	defer func() {
		if i < len(batch) {
			q.mu.Lock()
			q.queue = append(batch[i+1:len(batch):len(batch)], q.queue...)
			q.publishing = false
			q.mu.Unlock()
		}
	}()
	for ; i < len(batch); i++ {
		publish(batch[i])
	}
}

// Stats returns how many events are queued, whether a goroutine is
// publishing them, and how many were published at once past a full queue.
func (q *Queue[E]) Stats() (queued int, publishing bool, overflowed uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue), q.publishing, q.overflowed
}
