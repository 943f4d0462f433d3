package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestDeadlinesBounds: a request's deadline is never before its start
// plus the timeout and at most one slice (1% of it, at most 10ms) after.
func TestDeadlinesBounds(t *testing.T) {
	for _, timeout := range []time.Duration{50 * time.Microsecond, 300 * time.Millisecond, 74 * time.Second} {
		dl := newDeadlines(context.Background(), timeout)
		slice := min(timeout/100, maxDeadlineSlice)
		now := time.Now()
		for i := range 2000 {
			at := now.Add(time.Duration(i) * 37 * time.Microsecond)
			d, ok := dl.at(at).ctx.Deadline()
			if !ok {
				t.Fatalf("timeout %v: no deadline", timeout)
			}
			if lo, hi := at.Add(timeout), at.Add(timeout+slice); d.Before(lo) || d.After(hi) {
				t.Fatalf("timeout %v, start %v: deadline %v, want within [%v, %v]", timeout, at, d, lo, hi)
			}
		}
		dl.close()
	}
}

// TestDeadlinesShared: the requests of one slice share a context, the next
// slice gets another; contexts are handed out without a data race.
func TestDeadlinesShared(t *testing.T) {
	dl := newDeadlines(context.Background(), 74*time.Second) // 10ms slices
	defer dl.close()
	base := time.Now().Truncate(maxDeadlineSlice)
	a, b := dl.at(base).ctx, dl.at(base.Add(maxDeadlineSlice-time.Nanosecond)).ctx
	if a != b {
		t.Fatal("two requests of one slice got different contexts")
	}
	if c := dl.at(base.Add(maxDeadlineSlice)).ctx; c == a {
		t.Fatal("a request of the next slice got the previous slice's context")
	}
	var wg sync.WaitGroup
	ctxs := make([]context.Context, 64)
	late := base.Add(5 * maxDeadlineSlice)
	for i := range ctxs {
		wg.Go(func() { ctxs[i] = dl.at(late).ctx })
	}
	wg.Wait()
	for _, c := range ctxs {
		if c != ctxs[0] {
			t.Fatal("concurrent requests of one slice got different contexts")
		}
	}
}

// TestDeadlinesExpireAndCancel: a slice's context ends with
// DeadlineExceeded at its deadline, with its parent's cause when the
// parent is cancelled, and at close.
func TestDeadlinesExpireAndCancel(t *testing.T) {
	dl := newDeadlines(context.Background(), 20*time.Millisecond)
	ctx := dl.at(time.Now()).ctx
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not done 5s after a 20ms deadline")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", ctx.Err())
	}
	dl.close()

	parent, cancel := context.WithCancel(context.Background())
	dl = newDeadlines(parent, time.Hour)
	ctx = dl.at(time.Now()).ctx
	cancel()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("parent cancelled: err %v, want Canceled", ctx.Err())
	}
	dl.close()

	dl = newDeadlines(context.Background(), time.Hour)
	ctx = dl.at(time.Now()).ctx
	dl.close()
	if ctx.Err() == nil {
		t.Fatal("close left a slice's context running")
	}
}

// TestDeadlinesReleased: a slice's context ends (its timer and its place
// in the parent freed) once a later slice replaced it and the last of its
// requests is done, and not before, whichever comes last; the current
// slice's stays while requests come and go.
func TestDeadlinesReleased(t *testing.T) {
	dl := newDeadlines(context.Background(), 74*time.Second) // 10ms slices
	defer dl.close()
	base := time.Now().Truncate(maxDeadlineSlice)
	a1, a2 := dl.at(base), dl.at(base)
	if a1 != a2 {
		t.Fatal("two requests of one slice got different slices")
	}
	a1.release()
	if a1.ctx.Err() != nil {
		t.Fatal("the current slice's context ended when one of its requests was done")
	}
	b := dl.at(base.Add(maxDeadlineSlice))
	if a2.ctx.Err() != nil {
		t.Fatal("a replaced slice's context ended while a request still held it")
	}
	a2.release()
	if !errors.Is(a2.ctx.Err(), context.Canceled) {
		t.Fatalf("replaced slice, its last request done: err %v, want Canceled", a2.ctx.Err())
	}
	b.release()
	if b.ctx.Err() != nil {
		t.Fatal("the current slice's context ended with no request left")
	}
	c := dl.at(base.Add(2 * maxDeadlineSlice)) // replaces b, which no request holds
	if !errors.Is(b.ctx.Err(), context.Canceled) {
		t.Fatalf("replaced with no request left: err %v, want Canceled", b.ctx.Err())
	}
	c.release()

	// Many requests of several slices, concurrently: every replaced slice
	// ends once its requests are done, none of them saw it end early.
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[*sliceCtx]bool{}
	for i := range 64 {
		wg.Go(func() {
			for j := range 50 {
				s := dl.at(base.Add(time.Duration(3+(i+j)/20) * maxDeadlineSlice))
				if s.ctx.Err() != nil {
					t.Error("a request got a slice whose context had ended")
				}
				mu.Lock()
				seen[s] = true
				mu.Unlock()
				s.release()
			}
		})
	}
	wg.Wait()
	last := dl.cur.Load()
	for s := range seen {
		if s != last && s.ctx.Err() == nil {
			t.Error("a replaced slice's context outlived its requests")
		}
	}
}
