package bus

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

func TestSubscribePublishCancel(t *testing.T) {
	ctx := context.Background()
	var b Bus[int]
	b.Publish(ctx, 0, 0) // no subscriber: nothing happens
	var got1, got2 []int
	c1 := b.Subscribe(func(_ context.Context, v int) { got1 = append(got1, v) })
	c2 := b.Subscribe(func(_ context.Context, v int) { got2 = append(got2, v) })
	b.Publish(ctx, 1, 1)
	c1()
	c1() // twice is harmless
	b.Publish(ctx, 2, 2)
	c2()
	b.Publish(ctx, MaxKinds, 3) // counted nowhere
	if b.Count(0) != 1 || b.Count(1) != 1 || b.Count(2) != 1 || b.Count(MaxKinds) != 0 {
		t.Errorf("counts %d %d %d %d", b.Count(0), b.Count(1), b.Count(2), b.Count(MaxKinds))
	}
	if len(got1) != 1 || got1[0] != 1 {
		t.Errorf("first subscriber got %v, want [1]", got1)
	}
	if len(got2) != 2 || got2[0] != 1 || got2[1] != 2 {
		t.Errorf("second subscriber got %v, want [1 2]", got2)
	}
}

// A subscriber may cancel itself, or subscribe another, from its callback:
// Publish walks the list it loaded.
func TestCancelFromCallback(t *testing.T) {
	ctx := context.Background()
	var b Bus[int]
	n := 0
	var cancel func()
	cancel = b.Subscribe(func(context.Context, int) { n++; cancel() })
	b.Publish(ctx, 0, 1)
	b.Publish(ctx, 0, 2)
	if n != 1 {
		t.Errorf("called %d times, want 1", n)
	}
}

func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	var b Bus[int]
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			cancel := b.Subscribe(func(context.Context, int) { mu.Lock(); total++; mu.Unlock() })
			defer cancel()
			for range 100 {
				b.Publish(ctx, 0, 1)
			}
		}()
		go func() {
			defer wg.Done()
			for range 100 {
				b.Publish(ctx, 0, 1)
			}
		}()
	}
	wg.Wait()
	if total < 100 { // each subscriber sees at least its own goroutine's 100
		t.Errorf("total %d", total)
	}
}

// Await returns once cond holds after a wake, ErrDone when done closes
// with cond false (nil when it holds by then), ctx's error when it ends.
func TestAwait(t *testing.T) {
	var b Bus[int]
	var state atomic.Int32
	sub := func(wake func()) func() { return b.Subscribe(func(context.Context, int) { wake() }) }
	cond := func() bool { return state.Load() == 2 }
	res := make(chan error, 1)
	go func() { res <- Await(context.Background(), sub, cond, nil) }()
	for state.Load() != 2 {
		state.Add(1)
		b.Publish(context.Background(), 0, 0)
	}
	if err := <-res; err != nil {
		t.Fatalf("cond held: %v", err)
	}
	done := make(chan struct{})
	close(done)
	if err := Await(context.Background(), sub, func() bool { return false }, done); err != ErrDone {
		t.Fatalf("done: %v, want ErrDone", err)
	}
	if err := Await(context.Background(), sub, cond, done); err != nil {
		t.Fatalf("done with cond true: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Await(ctx, sub, func() bool { return false }, nil); err != context.Canceled {
		t.Fatalf("ctx: %v", err)
	}
}

// Each subscriber gets the context its event was published with.
func TestPublishersContext(t *testing.T) {
	type key struct{}
	var b Bus[int]
	var got []any
	defer b.Subscribe(func(ctx context.Context, v int) { got = append(got, ctx.Value(key{})) })()
	b.Publish(context.WithValue(context.Background(), key{}, "first"), 0, 1)
	b.Publish(context.WithValue(context.Background(), key{}, "second"), 0, 2)
	if len(got) != 2 || got[0] != "first" || got[1] != "second" {
		t.Errorf("subscriber saw contexts %v, want [first second]", got)
	}
}

// A context carries one publisher per type: a subscriber tells its
// publisher from another of the same type, and from one of another type.
func TestPublisher(t *testing.T) {
	type peer struct{ int }
	type server struct{ int }
	a, b, s := &peer{1}, &peer{2}, &server{1}
	ctx := WithPublisher(WithPublisher(context.Background(), a), s)
	if !PublishedBy(ctx, a) || PublishedBy(ctx, b) || !PublishedBy(ctx, s) {
		t.Errorf("PublishedBy: a %v, b %v, s %v; want true, false, true", PublishedBy(ctx, a), PublishedBy(ctx, b), PublishedBy(ctx, s))
	}
	if got, ok := Publisher[*peer](ctx); !ok || got != a {
		t.Errorf("Publisher[*peer] = %v, %v; want a", got, ok)
	}
	if _, ok := Publisher[*peer](context.Background()); ok {
		t.Error("a publisher in a context that carries none")
	}
}
