package dedup

import (
	"context"
	"testing"
	"time"
)

func complete(t *testing.T, s Store, k Key, body string) {
	t.Helper()
	o := begin(t, s, k)
	wantKind(t, o, First)
	if err := o.Complete(msg(1, 1, body)); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryAgeExpiry(t *testing.T) {
	clk := newFakeClock()
	s := NewMemory(WithClock(clk.Now))
	k := RequestKey("c", 1)
	o := begin(t, s, k)
	clk.Advance(3 * time.Minute) // a slow handler: age counts from first arrival
	if err := o.Complete(msg(1, 1, "a")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(DefaultMaxAge - 3*time.Minute - time.Nanosecond)
	wantKind(t, begin(t, s, k), Duplicate)
	clk.Advance(time.Nanosecond)
	o = begin(t, s, k)
	wantKind(t, o, First)
	_ = o.Abandon()
}

func TestMemoryMarkExpiryFakeClock(t *testing.T) {
	clk := newFakeClock()
	s := NewMemory(WithClock(clk.Now), WithMarkTTL(10*time.Second))
	k := RequestKey("c", 1)
	hung := begin(t, s, k)
	wantKind(t, hung, First)
	clk.Advance(10*time.Second - time.Nanosecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := s.Begin(ctx, k) // still in flight: waits, until ctx ends
	cancel()
	if err != context.DeadlineExceeded {
		t.Fatalf("Begin while in flight: %v", err)
	}
	clk.Advance(time.Nanosecond)
	o := begin(t, s, k) // mark expired: taken over at once
	wantKind(t, o, First)
	// A hung owner that never took over ends up with its mark lost.
	if err := hung.Complete(msg(1, 1, "late")); err != ErrMarkLost {
		t.Fatalf("late Complete: %v", err)
	}
	_ = o.Abandon()
}

// TestMemoryEvictionOrder: with one shard of 3 entries, the oldest entry goes
// first.
func TestMemoryEvictionOrder(t *testing.T) {
	clk := newFakeClock()
	s := NewMemory(WithClock(clk.Now), WithShards(1), WithMaxEntries(3))
	k := []Key{RequestKey("c", 1), RequestKey("c", 2), RequestKey("c", 3), RequestKey("c", 4)}
	for i := range k {
		complete(t, s, k[i], "a")
		clk.Advance(time.Second)
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("Len %d, want 3", n)
	}
	for _, i := range []int{1, 2, 3} { // a Duplicate does not insert
		wantKind(t, begin(t, s, k[i]), Duplicate)
	}
	complete(t, s, k[0], "b") // evicts k[1], the oldest
	complete(t, s, k[1], "b") // evicts k[2]
	wantKind(t, begin(t, s, k[3]), Duplicate)
	wantKind(t, begin(t, s, k[0]), Duplicate)
	wantKind(t, begin(t, s, k[1]), Duplicate)
	complete(t, s, k[2], "b") // evicts k[3]
	if n := s.Len(); n != 3 {
		t.Fatalf("Len %d, want 3", n)
	}
	o := begin(t, s, k[3])
	wantKind(t, o, First)
	_ = o.Abandon()
}

// TestMemoryBoundManyShards: the total never exceeds max entries, and the
// newest entries are kept.
func TestMemoryBoundManyShards(t *testing.T) {
	s := NewMemory(WithShards(8), WithMaxEntries(1000))
	const n = 10000
	for i := 0; i < n; i++ {
		complete(t, s, RequestKey("c", uint32(i)), "a")
		if l := s.Len(); l > 1000 {
			t.Fatalf("after %d inserts Len %d > 1000", i+1, l)
		}
	}
	for i := n - 400; i < n; i++ {
		wantKind(t, begin(t, s, RequestKey("c", uint32(i))), Duplicate)
	}
	o := begin(t, s, RequestKey("c", 0))
	wantKind(t, o, First)
	_ = o.Abandon()
}

// TestMemoryExpiredDroppedFromOldEnd: expired entries are reclaimed by later
// insertions, a bounded number each, without being looked up.
func TestMemoryExpiredDroppedFromOldEnd(t *testing.T) {
	clk := newFakeClock()
	s := NewMemory(WithClock(clk.Now), WithShards(1), WithMaxAge(time.Minute))
	for i := 0; i < 100; i++ {
		complete(t, s, RequestKey("old", uint32(i)), "a")
	}
	clk.Advance(2 * time.Minute)
	complete(t, s, RequestKey("new", 0), "a")
	if l := s.Len(); l != 100-maxPopPerInsert+1 {
		t.Fatalf("Len %d after one insert, want %d", l, 100-maxPopPerInsert+1)
	}
	for i := 1; i < 20; i++ {
		complete(t, s, RequestKey("new", uint32(i)), "a")
	}
	if l := s.Len(); l != 20 {
		t.Fatalf("Len %d, want 20", l)
	}
}

// TestMemoryDeadSlots: abandoned marks leave dead slots that are reclaimed
// from the old end before live entries are evicted.
func TestMemoryDeadSlots(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxEntries(2))
	a := begin(t, s, RequestKey("c", 1))
	_ = a.Abandon()
	complete(t, s, RequestKey("c", 2), "a")
	complete(t, s, RequestKey("c", 3), "a")
	wantKind(t, begin(t, s, RequestKey("c", 2)), Duplicate)
	wantKind(t, begin(t, s, RequestKey("c", 3)), Duplicate)
}

// TestMemoryEvictedInFlight: evicting an in-flight mark wakes its waiters
// (they become First), and the owner's Complete stores the answer anew.
func TestMemoryEvictedInFlight(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxEntries(1), WithMarkTTL(time.Minute))
	k1, k2 := RequestKey("c", 1), RequestKey("c", 2)
	o1 := begin(t, s, k1)
	res := make(chan *Outcome, 1)
	go func() {
		o, _ := s.Begin(context.Background(), k1)
		res <- o
	}()
	time.Sleep(20 * time.Millisecond)
	o2 := begin(t, s, k2) // evicts k1's mark
	w := <-res
	wantKind(t, w, First) // and evicts k2's mark in turn
	_ = w.Abandon()
	if err := o1.Complete(msg(1, 1, "one")); err != nil {
		t.Fatal(err)
	}
	wantKind(t, begin(t, s, k1), Duplicate)
	_ = o2.Abandon()
}

func TestMemoryShardsRounding(t *testing.T) {
	for _, tc := range []struct{ shards, max, want int }{
		{64, 1 << 20, 64}, {5, 100, 8}, {64, 3, 2}, {64, 1, 1}, {1, 10, 1},
	} {
		s := NewMemory(WithShards(tc.shards), WithMaxEntries(tc.max))
		if len(s.shards) != tc.want {
			t.Errorf("shards=%d max=%d: %d shards, want %d", tc.shards, tc.max, len(s.shards), tc.want)
		}
		total := 0
		for i := range s.shards {
			total += s.shards[i].limit
		}
		if total != tc.max {
			t.Errorf("shards=%d max=%d: limits sum to %d", tc.shards, tc.max, total)
		}
	}
}

// crafted returns a key whose index buckets are 0 and 1 in any shard (bytes
// 8..16 zero), with distinct tags.
func crafted(i int) Key {
	var k Key
	k[0] = 0 // shard 0
	k[4], k[5], k[6] = byte(i), byte(i>>8), 0xaa
	return k
}

// TestMemoryIndexOverflow: when both buckets of a key are full of live
// entries, the oldest of them is evicted.
func TestMemoryIndexOverflow(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxEntries(64))
	for i := 0; i < 17; i++ {
		complete(t, s, crafted(i), "a")
	}
	if n := s.Len(); n != 16 {
		t.Fatalf("Len %d, want 16", n)
	}
	for i := 1; i < 17; i++ {
		wantKind(t, begin(t, s, crafted(i)), Duplicate)
	}
	o := begin(t, s, crafted(0))
	wantKind(t, o, First)
	_ = o.Abandon()
}

// TestMemorySequenceWrap: sequence numbers wrap around 2^32.
func TestMemorySequenceWrap(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxEntries(8))
	sh := &s.shards[0]
	sh.head, sh.tail = ^uint32(0)-4, ^uint32(0)-4
	for i := 0; i < 20; i++ {
		complete(t, s, RequestKey("c", uint32(i)), "a")
	}
	for i := 12; i < 20; i++ {
		wantKind(t, begin(t, s, RequestKey("c", uint32(i))), Duplicate)
	}
	o := begin(t, s, RequestKey("c", 11))
	wantKind(t, o, First)
	_ = o.Abandon()
	if sh.tail > 100 {
		t.Fatalf("tail %d did not wrap", sh.tail)
	}
}

// TestMemoryManyKeys: more than two keys per request (beyond the inline
// slot cache) work the same.
func TestMemoryManyKeys(t *testing.T) {
	s := NewMemory()
	keys := []Key{RequestKey("c", 1), RequestKey("c", 2), RequestKey("c", 3), RequestKey("c", 4)}
	o := begin(t, s, keys...)
	wantKind(t, o, First)
	if err := o.Complete(msg(1, 1, "x")); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		wantKind(t, begin(t, s, k), Duplicate)
	}
	o = begin(t, s, RequestKey("d", 1), RequestKey("d", 2), RequestKey("d", 3))
	_ = o.Abandon()
	for i := uint32(1); i <= 3; i++ {
		o := begin(t, s, RequestKey("d", i))
		wantKind(t, o, First)
		_ = o.Abandon()
	}
	if n := s.Len(); n != 4 {
		t.Fatalf("Len %d, want 4", n)
	}
}
