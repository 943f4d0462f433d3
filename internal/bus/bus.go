// Package bus is the fan-out behind peer.Bus and client.Bus: subscribers
// are called synchronously on the publishing goroutine, with the
// publisher's context, from a copy-on-write list, so that Publish never
// takes a lock.
package bus

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// MaxKinds bounds the kinds a Bus counts.
const MaxKinds = 32

// Bus fans values of type E out to its subscribers and counts them by
// kind. The zero value is ready to use. Its methods are safe for
// concurrent use.
type Bus[E any] struct {
	mu     sync.Mutex                // serialises Subscribe and cancel
	subs   atomic.Pointer[[]*sub[E]] // copy-on-write: Publish never locks
	counts [MaxKinds]atomic.Uint64
}

type sub[E any] struct{ fn func(context.Context, E) }

// Subscribe registers fn and returns a function that unregisters it.
// Calling that function more than once is harmless.
func (b *Bus[E]) Subscribe(fn func(context.Context, E)) (cancel func()) {
	s := &sub[E]{fn: fn}
	b.mu.Lock()
	defer b.mu.Unlock()
	var cur []*sub[E]
	if p := b.subs.Load(); p != nil {
		cur = *p
	}
	next := append(append([]*sub[E](nil), cur...), s)
	b.subs.Store(&next)
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		cur := *b.subs.Load()
		next := make([]*sub[E], 0, len(cur))
		for _, x := range cur {
			if x != s {
				next = append(next, x)
			}
		}
		b.subs.Store(&next)
	}
}

// Publish counts e under kind (ignored from MaxKinds on) and calls every
// subscriber with ctx and e, in subscription order.
func (b *Bus[E]) Publish(ctx context.Context, kind uint8, e E) {
	if int(kind) < MaxKinds {
		b.counts[kind].Add(1)
	}
	if p := b.subs.Load(); p != nil {
		for _, s := range *p {
			s.fn(ctx, e)
		}
	}
}

// Count returns how many values were published under kind.
func (b *Bus[E]) Count(kind uint8) uint64 {
	if int(kind) < MaxKinds {
		return b.counts[kind].Load()
	}
	return 0
}

// publisherKey is the context key of a publisher of type T.
type publisherKey[T any] struct{}

// WithPublisher returns parent carrying publisher: the context its
// events are published with, so that a subscriber given it can tell whose
// delivery goroutine it runs on (a Close called there must not wait for
// the events that come after).
func WithPublisher[T comparable](parent context.Context, publisher T) context.Context {
	return context.WithValue(parent, publisherKey[T]{}, publisher)
}

// PublishedBy reports whether ctx carries publisher (WithPublisher).
func PublishedBy[T comparable](ctx context.Context, publisher T) bool {
	v, ok := ctx.Value(publisherKey[T]{}).(T)
	return ok && v == publisher
}

// Publisher returns the publisher of type T ctx carries, if any.
func Publisher[T any](ctx context.Context) (T, bool) {
	v, ok := ctx.Value(publisherKey[T]{}).(T)
	return v, ok
}

// ErrDone is Await's error when done closed before cond held.
var ErrDone = errors.New("ended")

// Await waits until cond is true, looking again each time the
// subscription made by subscribe calls wake (a state change). It returns
// ErrDone if done closes first with cond still false, ctx's error if ctx
// ends first.
func Await(ctx context.Context, subscribe func(wake func()) (cancel func()), cond func() bool, done <-chan struct{}) error {
	ch := make(chan struct{}, 1)
	cancel := subscribe(func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	defer cancel()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-done:
			if cond() {
				return nil
			}
			return ErrDone
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
