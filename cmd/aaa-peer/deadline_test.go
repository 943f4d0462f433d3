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
			d, ok := dl.at(at).Deadline()
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
	a, b := dl.at(base), dl.at(base.Add(maxDeadlineSlice-time.Nanosecond))
	if a != b {
		t.Fatal("two requests of one slice got different contexts")
	}
	if c := dl.at(base.Add(maxDeadlineSlice)); c == a {
		t.Fatal("a request of the next slice got the previous slice's context")
	}
	var wg sync.WaitGroup
	ctxs := make([]context.Context, 64)
	late := base.Add(5 * maxDeadlineSlice)
	for i := range ctxs {
		wg.Go(func() { ctxs[i] = dl.at(late) })
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
	ctx := dl.at(time.Now())
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
	ctx = dl.at(time.Now())
	cancel()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("parent cancelled: err %v, want Canceled", ctx.Err())
	}
	dl.close()

	dl = newDeadlines(context.Background(), time.Hour)
	ctx = dl.at(time.Now())
	dl.close()
	if ctx.Err() == nil {
		t.Fatal("close left a slice's context running")
	}
}
