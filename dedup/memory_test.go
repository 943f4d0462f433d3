package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/aaatp/aaatp/wire"
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

// TestMemoryPartialTakeoverStoresNothing: an accounting request's marks
// expire and its record, re-sent under a new End-to-End id, takes the
// record key over. The first request's late Complete stores nothing under
// either key and drops its mark on its request key, waking the request's
// duplicate waiting on it, which then waits for the new owner and gets its
// answer. If the new owner abandons instead, a late Complete stores the
// answer under every key.
func TestMemoryPartialTakeoverStoresNothing(t *testing.T) {
	for _, owner := range []string{"completes", "abandons"} {
		t.Run(owner, func(t *testing.T) {
			clk := newFakeClock()
			s := NewMemory(WithClock(clk.Now), WithMarkTTL(10*time.Second), WithShards(4))
			defer s.Close()
			a, b := RequestKey("nas", 1), RequestKey("nas", 2)
			rec := AccountingRecord{SessionID: "nas;1", RecordType: 2, RecordNumber: 1}.Key()
			first := begin(t, s, a, rec)
			wantKind(t, first, First)
			clk.Advance(10 * time.Second)
			second := begin(t, s, b, rec) // takes rec over; a's mark stays
			wantKind(t, second, First)
			if owner == "abandons" {
				_ = second.Abandon()
				if err := first.Complete(msg(1, 1, "first")); err != nil {
					t.Fatalf("late Complete, the record's owner gone: %v", err)
				}
				for _, k := range []Key{a, rec} {
					if d := begin(t, s, k); !d.Duplicate() || !bytes.HasSuffix(d.Answer(), []byte("first")) {
						t.Fatalf("%v: %v %q, want the first's answer", k, d.Kind(), d.Answer())
					}
				}
				return
			}
			if err := first.Complete(msg(1, 1, "first")); err != ErrMarkLost {
				t.Fatalf("late Complete: %v, want ErrMarkLost", err)
			}
			for i := range s.shards {
				sh := &s.shards[i]
				sh.mu.Lock()
				checkArena(t, sh)
				sh.mu.Unlock()
			}
			// A duplicate of the first request now waits for the new
			// owner of the record, not for the first's dropped mark.
			res := make(chan *Outcome, 1)
			go func() {
				o, err := s.Begin(context.Background(), a, rec)
				if err != nil {
					t.Error(err)
				}
				res <- o
			}()
			select {
			case o := <-res:
				t.Fatalf("duplicate of the first request: %v %q before the record's owner completed", o.Kind(), o.Answer())
			case <-time.After(30 * time.Millisecond):
			}
			if err := second.Complete(msg(1, 2, "second")); err != nil {
				t.Fatal(err)
			}
			if o := <-res; o == nil || !o.Duplicate() || !bytes.HasSuffix(o.Answer(), []byte("second")) {
				t.Fatalf("duplicate of the first request: %v, want the second's answer", o)
			}
			o := begin(t, s, a)
			wantKind(t, o, First) // nothing was ever stored under a
			_ = o.Abandon()
		})
	}
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

// TestMemoryEvictedInFlight: a shard whose every entry is a running
// request's in-flight mark evicts none of them: a new request gets ErrFull
// (with two keys, neither is left marked) while a duplicate keeps waiting.
// Once its mark TTL is past, a mark is evicted; its owner's late Complete,
// with no room left to store the answer anew, is then as if stored and
// evicted at once.
func TestMemoryEvictedInFlight(t *testing.T) {
	clk := newFakeClock()
	s := NewMemory(WithShards(1), WithMaxEntries(2), WithMarkTTL(time.Minute), WithClock(clk.Now))
	k1, k2, k3, k4 := RequestKey("c", 1), RequestKey("c", 2), RequestKey("c", 3), RequestKey("c", 4)
	o1 := begin(t, s, k1)
	res := make(chan *Outcome, 1)
	go func() {
		o, _ := s.Begin(context.Background(), k1)
		res <- o
	}()
	for waiting(s) == 0 {
		time.Sleep(time.Millisecond)
	}
	o2 := begin(t, s, k2)
	for _, keys := range [][]Key{{k3}, {k3, k4}} {
		if o, err := s.Begin(context.Background(), keys...); !errors.Is(err, ErrFull) {
			t.Fatalf("Begin %d keys of a shard full of marks: %v %v, want ErrFull", len(keys), o, err)
		}
		var o Outcome
		if err := s.BeginInto(context.Background(), &o, keys...); !errors.Is(err, ErrFull) || o.Kind() != 0 {
			t.Fatalf("BeginInto: %v %v, want ErrFull", o.Kind(), err)
		}
	}
	if n := s.Len(); n != 2 {
		t.Fatalf("Len %d, want the 2 marks", n)
	}
	if err := o1.Complete(msg(1, 1, "one")); err != nil {
		t.Fatal(err)
	}
	wantKind(t, <-res, Duplicate)

	clk.Advance(30 * time.Second)
	o3 := begin(t, s, k3) // evicts k1's answer
	clk.Advance(30 * time.Second)
	o4 := begin(t, s, k4) // k2's mark expired: evicted
	wantKind(t, o4, First)
	if err := o2.Complete(msg(1, 2, "two")); err != nil { // no room for it: k3 and k4 run
		t.Fatal(err)
	}
	if _, err := s.Begin(context.Background(), k2); !errors.Is(err, ErrFull) {
		t.Fatalf("Begin: %v, want ErrFull", err)
	}
	_ = o3.Abandon()
	o := begin(t, s, k2) // not stored
	wantKind(t, o, First)
	_, _ = o.Abandon(), o4.Abandon()
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
	const both = 2 * len(bucket{}) // the two buckets of every crafted key
	for i := 0; i < both+1; i++ {
		complete(t, s, crafted(i), "a")
	}
	if n := s.Len(); n != both {
		t.Fatalf("Len %d, want %d", n, both)
	}
	for i := 1; i < both+1; i++ {
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

// TestMemoryOverflowBit: a key placed in its second bucket (its first is
// full) sets the first's overflow bit and is still found; it can be removed
// from there; the bit is cleared once two ring epochs have passed and the
// overflowed entries have left the ring.
func TestMemoryOverflowBit(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxEntries(64))
	sh := &s.shards[0]
	const per = len(bucket{})
	for i := 0; i < per; i++ { // fills bucket 0, the first bucket of every crafted key
		complete(t, s, crafted(i), "a")
	}
	if sh.overflowed(0) {
		t.Fatal("bucket 0 overflowed before it was full")
	}
	complete(t, s, crafted(per), "a") // goes to bucket 1
	if !sh.overflowed(0) {
		t.Fatal("bucket 0 not marked overflowed")
	}
	if sh.overflowed(1) {
		t.Fatal("bucket 1 marked overflowed")
	}
	for i := 0; i < per+1; i++ {
		wantKind(t, begin(t, s, crafted(i)), Duplicate)
	}
	// An in-flight key in the second bucket, abandoned: removed from there.
	o := begin(t, s, crafted(per+1))
	wantKind(t, o, First)
	e := sh.find(crafted(per + 1))
	if e == nil || !inBucket(&sh.index[1], e) {
		t.Fatal("crafted(per+1) not found in its second bucket")
	}
	_ = o.Abandon()
	if sh.find(crafted(per+1)) != nil {
		t.Fatal("abandoned key still indexed")
	}
	for _, e := range sh.index[1] {
		if sh.inUse(e) && sh.at(sh.seqOf(e)).key == crafted(per+1) {
			t.Fatal("abandoned key's entry not freed")
		}
	}
	o = begin(t, s, crafted(per+1))
	wantKind(t, o, First)
	_ = o.Abandon()
	// Two epochs (2*64 insertions) later every crafted key has left the
	// ring and the bit is clear; meanwhile it stays set.
	for i := 0; i < 64; i++ {
		complete(t, s, RequestKey("later", uint32(i)), "a")
	}
	for i := 64; i < 2*64+8; i++ {
		complete(t, s, RequestKey("later", uint32(i)), "a")
	}
	if sh.find(crafted(per)) != nil {
		t.Fatal("crafted(per) still held")
	}
	if sh.overflowed(0) {
		t.Fatal("overflow bit of bucket 0 not cleared after two epochs")
	}
	for i := 2*64 + 8 - 40; i < 2*64+8; i++ {
		wantKind(t, begin(t, s, RequestKey("later", uint32(i))), Duplicate)
	}
}

// TestMemoryOverflowBitSurvivesGrow: the index rebuilt by a growing ring
// keeps overflowed keys findable.
func TestMemoryOverflowBitSurvivesGrow(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxEntries(1024))
	n := len(bucket{}) + 4 // 4 in bucket 1
	for i := 0; i < n; i++ {
		complete(t, s, crafted(i), "a")
	}
	for i := 0; i < 600; i++ { // several doublings
		complete(t, s, RequestKey("fill", uint32(i)), "a")
	}
	if !s.shards[0].overflowed(0) {
		t.Fatal("bucket 0 not overflowed after rebuild")
	}
	for i := 0; i < n; i++ {
		wantKind(t, begin(t, s, crafted(i)), Duplicate)
	}
}

// TestMemoryUnwaitedMarkMovedKeepsWaiting: making room in a full shard
// moves one key's mark of a two-key flight, which nobody waits through,
// to the new end of the ring, rather than evicting it: a duplicate waiting
// through the other key keeps waiting, the owner's Complete stores the
// answer under both keys, and the duplicate gets it.
func TestMemoryUnwaitedMarkMovedKeepsWaiting(t *testing.T) {
	s := NewMemory(WithShards(2), WithMaxEntries(4), WithMarkTTL(time.Minute))
	a, b, c, d := crafted(1), crafted(2), crafted(3), crafted(4)
	a[0], b[0], c[0], d[0] = 0, 1, 1, 1 // shards 0, 1, 1, 1
	owner := begin(t, s, a, b)
	wantKind(t, owner, First)
	res := make(chan *Outcome, 1)
	go func() {
		o, _ := s.Begin(context.Background(), a)
		res <- o
	}()
	for waiting(s) == 0 {
		time.Sleep(time.Millisecond)
	}
	complete(t, s, c, "c")
	complete(t, s, d, "d") // the shard is full: b's mark moves, c goes
	wantKind(t, begin(t, s, d), Duplicate)
	o := begin(t, s, c)
	wantKind(t, o, First)
	_ = o.Abandon()
	select {
	case o := <-res:
		t.Fatalf("waiter returned %v while a is in flight", o.Kind())
	case <-time.After(30 * time.Millisecond):
	}
	s.shards[1].mu.Lock()
	sl, seq := s.slotOf(owner, 1, b)
	moved := seq != owner.seq[1]
	s.shards[1].mu.Unlock()
	if sl == nil || !moved {
		t.Fatalf("b's mark: slot %v, moved %v", sl, moved)
	}
	if err := owner.Complete(msg(1, 1, "ab")); err != nil {
		t.Fatal(err)
	}
	wantKind(t, <-res, Duplicate)
	wantKind(t, begin(t, s, b), Duplicate)
}

// TestMemoryStaleOutcome: Outcomes come from slabs but are never reused, so
// a finished Outcome used again (a late Abandon or Complete) does not touch
// the Outcomes handed out after it.
func TestMemoryStaleOutcome(t *testing.T) {
	s := NewMemory(WithShards(1))
	old := begin(t, s, RequestKey("c", 0))
	if err := old.Complete(msg(1, 1, "x")); err != nil {
		t.Fatal(err)
	}
	var live []*Outcome
	for i := 1; i <= 3*slabSize; i++ {
		o := begin(t, s, RequestKey("c", uint32(i)))
		wantKind(t, o, First)
		live = append(live, o)
		if o == old {
			t.Fatal("Outcome reused")
		}
	}
	if err := old.Abandon(); err != nil {
		t.Fatal(err)
	}
	if err := old.Complete(msg(1, 1, "y")); err != ErrFinished {
		t.Fatalf("stale Complete: %v", err)
	}
	if !old.First() || old.Kind() != First || old.Answer() != nil {
		t.Fatal("stale Outcome changed")
	}
	for i, o := range live {
		if err := o.Complete(msg(1, 1, "z")); err != nil {
			t.Fatalf("Outcome %d: %v", i+1, err)
		}
	}
	wantKind(t, begin(t, s, RequestKey("c", 0)), Duplicate)
}

// TestMemoryWaitChannelsReleased: the channel a duplicate waits on is
// closed and dropped however the mark ends (completed, abandoned, moved
// to make room and then completed, expired), so waits never holds more
// than the marks being waited on.
func TestMemoryWaitChannelsReleased(t *testing.T) {
	ends := map[string]func(s *Memory, owner *Outcome){
		"completed": func(_ *Memory, o *Outcome) { _ = o.Complete(msg(1, 1, "x")) },
		"abandoned": func(_ *Memory, o *Outcome) { _ = o.Abandon() },
		"moved, completed": func(s *Memory, o *Outcome) {
			for i := range 4 { // the mark moves, its channel with it
				_ = begin(t, s, RequestKey("other", uint32(i))).Abandon()
			}
			_ = o.Complete(msg(1, 1, "x"))
		},
		"expired": func(*Memory, *Outcome) { time.Sleep(2 * time.Second) },
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := NewMemory(WithShards(1), WithMaxEntries(2), WithMarkTTL(time.Second))
				defer s.Close()
				k := RequestKey("c", 1)
				owner := begin(t, s, k)
				res := make(chan Kind, 1)
				go func() {
					o, err := s.Begin(context.Background(), k)
					if err != nil {
						t.Error(err)
					}
					res <- o.Kind()
					if o.First() {
						_ = o.Abandon()
					}
				}()
				synctest.Wait()
				sh := &s.shards[0]
				sh.mu.Lock()
				waiting := len(sh.waits)
				sh.mu.Unlock()
				if waiting != 1 {
					t.Fatalf("%d wait channels while a duplicate waits, want 1", waiting)
				}
				end(s, owner)
				got := <-res
				if want := map[string]Kind{"completed": Duplicate, "moved, completed": Duplicate}[name]; want == 0 && got != First || want != 0 && got != want {
					t.Fatalf("waiter got %v", got)
				}
				synctest.Wait()
				sh.mu.Lock()
				left := len(sh.waits)
				sh.mu.Unlock()
				if left != 0 {
					t.Fatalf("%d wait channels left after the mark %s", left, name)
				}
			})
		})
	}
}

// TestShardSize: shards fill whole cache lines, so that two shards locked
// by different goroutines never share one.
func TestShardSize(t *testing.T) {
	if n := unsafe.Sizeof(shard{}); n%64 != 0 {
		t.Fatalf("shard is %d bytes, not a multiple of 64: adjust its padding", n)
	}
}

// keyIn returns a key of shard 0 whose buckets are b1 and b2, with a tag
// of its own.
func keyIn(i int, b1, b2 byte) Key {
	var k Key
	k[4], k[5], k[6] = byte(i), byte(i>>8), 0x55
	k[8], k[12] = b1, b2
	return k
}

// checkIndex verifies the index of sh against its ring: every live slot's
// key is found, at that slot.
func checkIndex(t *testing.T, sh *shard) {
	t.Helper()
	for seq := sh.head; seq != sh.tail; seq++ {
		sl := sh.at(seq)
		if sl.key.IsZero() {
			continue
		}
		e := sh.find(sl.key)
		if e == nil {
			t.Fatalf("live slot %d not found in the index", seq)
		}
		if sh.seqOf(*e) != seq {
			t.Fatalf("key of slot %d found at slot %d", seq, sh.seqOf(*e))
		}
	}
}

// TestMemoryIndexRandomOps drives small stores whose keys crowd into few
// buckets (overflow bits, both-full evictions, ring growth and epochs all
// happen) with random Begin, Complete, Abandon and clock steps, checking
// after every step that every live key is found at its slot and that a
// duplicate gets the latest answer stored for its key.
func TestMemoryIndexRandomOps(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		clk := newFakeClock()
		s := NewMemory(WithShards(1), WithMaxEntries(40+int(seed)), WithClock(clk.Now), WithMaxAge(time.Minute))
		sh := &s.shards[0]
		open := map[Key]*Outcome{}
		answers := map[Key]string{}
		for step := range 3000 {
			k := keyIn(rng.IntN(120), byte(rng.IntN(4)), byte(rng.IntN(8)))
			switch r := rng.IntN(10); {
			case r < 6:
				if _, busy := open[k]; busy {
					break
				}
				o, err := s.Begin(context.Background(), k)
				if errors.Is(err, ErrFull) { // every slot a running request's mark
					if sh.flights != uint32(sh.limit) {
						t.Fatalf("seed %d step %d: ErrFull with %d marks of %d slots", seed, step, sh.flights, sh.limit)
					}
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if o.Duplicate() {
					if want, ok := answers[k]; ok && string(o.Answer()) != want {
						t.Fatalf("seed %d step %d: answer %q, want %q", seed, step, o.Answer(), want)
					}
					break
				}
				open[k] = o
			case r < 8:
				for k, o := range open {
					ans := fmt.Sprintf("answer %d", step)
					if err := o.Complete([]byte(ans)); err == nil {
						answers[k] = ans
					}
					delete(open, k)
					break
				}
			case r < 9:
				for k, o := range open {
					_ = o.Abandon()
					delete(open, k)
					delete(answers, k)
					break
				}
			default:
				clk.Advance(time.Duration(rng.IntN(20)) * time.Second)
			}
			checkIndex(t, sh)
		}
	}
}

// TestMemoryBeginIntoReusesOutcome: one Outcome serves request after
// request through BeginInto, First or Duplicate, waiting or not, with the
// same results as Begin; bad keys and a done context are reported without
// touching the store.
func TestMemoryBeginIntoReusesOutcome(t *testing.T) {
	ctx := context.Background()
	s := NewMemory()
	var o Outcome
	for i := range uint32(50) {
		k := RequestKey("c", i)
		if err := s.BeginInto(ctx, &o, k); err != nil || !o.First() {
			t.Fatalf("request %d: %v %v, want First", i, err, o.Kind())
		}
		if err := o.Complete(msg(1, i, fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if err := s.BeginInto(ctx, &o, k); err != nil || !o.Duplicate() {
			t.Fatalf("request %d again: %v %v, want Duplicate", i, err, o.Kind())
		}
		if got := o.Answer(); !bytes.Equal(got, msg(1, i, fmt.Sprint(i))) {
			t.Fatalf("request %d: answer %q", i, got)
		}
		if err := o.Complete(msg(1, i, "x")); !errors.Is(err, ErrNotFirst) {
			t.Fatalf("Complete of a Duplicate: %v", err)
		}
	}
	// A First on the Outcome, abandoned, then a duplicate waiting through
	// another Outcome while the next First on this one is in flight.
	k := RequestKey("w", 1)
	if err := s.BeginInto(ctx, &o, k); err != nil || !o.First() {
		t.Fatal(err)
	}
	_ = o.Abandon()
	if err := s.BeginInto(ctx, &o, k); err != nil || !o.First() {
		t.Fatal("abandoned key not First again", err)
	}
	res := make(chan Kind, 1)
	go func() {
		var w Outcome
		if err := s.BeginInto(ctx, &w, k); err != nil {
			t.Error(err)
		}
		res <- w.Kind()
	}()
	time.Sleep(20 * time.Millisecond)
	if err := o.Complete(msg(1, 1, "w")); err != nil {
		t.Fatal(err)
	}
	if got := <-res; got != Duplicate {
		t.Fatalf("waiter got %v, want Duplicate", got)
	}
	if err := s.BeginInto(ctx, &o); !errors.Is(err, ErrNoKeys) || o.Kind() != 0 {
		t.Fatalf("no keys: %v, kind %v", err, o.Kind())
	}
	if err := s.BeginInto(ctx, &o, Key{}); !errors.Is(err, ErrZeroKey) {
		t.Fatalf("zero key: %v", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.BeginInto(done, &o, RequestKey("c", 999)); !errors.Is(err, context.Canceled) {
		t.Fatalf("done context: %v", err)
	}
	if err := s.BeginInto(ctx, &o, RequestKey("c", 999)); err != nil || !o.First() {
		t.Fatal("a refused BeginInto left a mark", err)
	}
}

// TestMemoryByteBudget: the memory budget counts EntryOverhead per entry
// plus the answer bytes; over it the oldest entries are evicted first, but
// not the in-flight marks of running requests, and the count goes back to
// 0 as entries go.
func TestMemoryByteBudget(t *testing.T) {
	const answer = 420 // 500 with the overhead
	s := NewMemory(WithShards(1), WithMaxBytes(10_000), WithMaxAnswerSize(answer), WithMaxEntries(1000))
	defer s.Close()
	body := string(make([]byte, answer-wire.HeaderLen))
	for i := 0; i < 100; i++ {
		complete(t, s, RequestKey("c", uint32(i)), body)
		if b := s.Bytes(); b > 10_000 {
			t.Fatalf("after %d answers Bytes %d > budget 10000", i+1, b)
		}
	}
	if n, b := s.Len(), s.Bytes(); n != 20 || b != 20*(EntryOverhead+answer) {
		t.Fatalf("Len %d Bytes %d, want 20 entries of %d bytes", n, b, EntryOverhead+answer)
	}
	for i := 80; i < 100; i++ { // the newest are kept
		wantKind(t, begin(t, s, RequestKey("c", uint32(i))), Duplicate)
	}
	o := begin(t, s, RequestKey("c", 79)) // the older ones were evicted
	wantKind(t, o, First)
	if b := s.Bytes(); b != 20*(EntryOverhead+answer)+EntryOverhead {
		t.Fatalf("with a mark Bytes %d, want 20 answers and one mark", b)
	}
	_ = o.Abandon()
	if b := s.Bytes(); b != 20*(EntryOverhead+answer) {
		t.Fatalf("after Abandon Bytes %d", b)
	}

	// Marks are counted too, but a running request's mark is not evicted
	// (its duplicates would run it again), nor does it push answers out:
	// the answers stay within the budget and 200 marks come on top, by
	// their overhead, within the entry bound. Completing one evicts the
	// oldest answer to keep the answers within the budget, and keeps the
	// other marks.
	marks := make([]*Outcome, 0, 200)
	for i := 0; i < 200; i++ {
		marks = append(marks, begin(t, s, RequestKey("m", uint32(i))))
		if b, n := s.Bytes(), s.Len(); b != 20*(EntryOverhead+answer)+int64(i+1)*EntryOverhead || n != 21+i {
			t.Fatalf("after %d marks Len %d Bytes %d, want the 20 answers and the marks", i+1, n, b)
		}
	}
	for i := 80; i < 100; i++ {
		wantKind(t, begin(t, s, RequestKey("c", uint32(i))), Duplicate)
	}
	if err := marks[199].Complete(msg(1, 1, body)); err != nil {
		t.Fatal(err)
	}
	if n, b := s.Len(), s.Bytes(); n != 219 || b != 199*EntryOverhead+20*(EntryOverhead+answer) {
		t.Fatalf("after Complete Len %d Bytes %d, want the 199 marks and 20 answers", n, b)
	}
	wantKind(t, begin(t, s, RequestKey("m", 199)), Duplicate)
	wantKind(t, begin(t, s, RequestKey("c", 81)), Duplicate)
	o = begin(t, s, RequestKey("c", 80)) // the oldest answer went
	wantKind(t, o, First)
	_ = o.Abandon()
	for _, o := range marks {
		_ = o.Abandon()
	}
	if n, b := s.Len(), s.Bytes(); n != 20 || b != 20*(EntryOverhead+answer) {
		t.Fatalf("Len %d Bytes %d: bytes out of step with entries", n, b)
	}
}

// TestMemoryByteBudgetManyShards: over many shards the total stays within
// the budget plus one entry per shard, and the newest entries are kept.
func TestMemoryByteBudgetManyShards(t *testing.T) {
	const budget, answer = 1 << 20, 1000
	s := NewMemory(WithShards(8), WithMaxBytes(budget), WithMaxAnswerSize(answer))
	defer s.Close()
	if len(s.shards) != 8 {
		t.Fatalf("%d shards, want 8", len(s.shards))
	}
	body := string(make([]byte, answer-wire.HeaderLen))
	for i := 0; i < 5000; i++ {
		complete(t, s, RequestKey("c", uint32(i)), body)
	}
	if b := s.Bytes(); b > budget {
		t.Fatalf("Bytes %d > budget %d", b, budget)
	}
	if b := s.Bytes(); b < budget-8*(EntryOverhead+answer) {
		t.Fatalf("Bytes %d: the budget is not used", b)
	}
	for i := 5000 - 500; i < 5000; i++ {
		wantKind(t, begin(t, s, RequestKey("c", uint32(i))), Duplicate)
	}
}

// TestMemoryBudgetLimitsShards: a budget too small for 16 entries of the
// per-entry limit per shard gets fewer shards, down to one.
func TestMemoryBudgetLimitsShards(t *testing.T) {
	for _, tc := range []struct {
		budget int64
		answer int
		want   int
	}{
		{DefaultMaxBytes, DefaultMaxAnswerSize, DefaultShards},
		{1 << 20, DefaultMaxAnswerSize, 2}, // 1 MiB / (16 * 16464 B)
		{1000, DefaultMaxAnswerSize, 1},
		{64 * 16 * (EntryOverhead + 100), 100, 64},
	} {
		s := NewMemory(WithMaxBytes(tc.budget), WithMaxAnswerSize(tc.answer))
		if len(s.shards) != tc.want {
			t.Errorf("budget %d, answers <= %d: %d shards, want %d", tc.budget, tc.answer, len(s.shards), tc.want)
		}
		s.Close()
	}
}

// TestMemoryAnswerNotKeptCostsOverhead: an answer over the per-entry limit
// costs only its marker's overhead.
func TestMemoryAnswerNotKeptCostsOverhead(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxAnswerSize(100))
	defer s.Close()
	o := begin(t, s, RequestKey("c", 1))
	if err := o.Complete(msg(1, 1, string(make([]byte, 1000)))); !errors.Is(err, ErrAnswerTooLarge) {
		t.Fatal(err)
	}
	if b := s.Bytes(); b != EntryOverhead {
		t.Fatalf("Bytes %d, want %d", b, EntryOverhead)
	}
}

// TestMemoryLockOrder: requests whose two keys are in the same two shards,
// given in either order, lock the shards in one order: run concurrently
// they never deadlock. Keys of one shard lock it once.
func TestMemoryLockOrder(t *testing.T) {
	s := NewMemory(WithShards(2))
	defer s.Close()
	a, b := crafted(1), crafted(2)
	a[0], b[0] = 0, 1
	done, start := make(chan struct{}), make(chan struct{})
	for _, keys := range [][2]Key{{a, b}, {b, a}} {
		go func() {
			defer func() { done <- struct{}{} }()
			<-start
			for i := range 50_000 {
				k1, k2 := keys[0], keys[1]
				k1[8], k2[8] = byte(i), byte(i>>8) // new keys, same shards
				k1[9], k2[9] = byte(i>>8), byte(i)
				k1[10], k2[10] = byte(i>>16), byte(i>>16)
				o, err := s.Begin(context.Background(), k1, k2)
				if err != nil {
					t.Error(err)
					return
				}
				_ = o.Complete(msg(1, 1, "x"))
			}
		}()
	}
	close(start)
	for range 2 {
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("deadlock: Begins of the same two shards in opposite orders")
		}
	}
	same := crafted(3) // shard 0, as a
	o := begin(t, s, a, same)
	if err := o.Complete(msg(1, 1, "y")); err != nil {
		t.Fatal(err)
	}
	wantKind(t, begin(t, s, same), Duplicate)
}

// TestMemoryTwoKeysGrowShard: a request's keys are given their places in
// the index before any is inserted; when the first key's insertion grows
// the shard, whose index is then rebuilt twice as large, the second key is
// placed in the new index, where later lookups find it.
func TestMemoryTwoKeysGrowShard(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxEntries(64))
	for i := range 16 { // the ring's first size, full: the next insertion grows it
		complete(t, s, benchKey(uint64(i)), "a")
	}
	sh := &s.shards[0]
	if len(sh.ring) != 16 || len(sh.index) != 4 {
		t.Fatalf("ring %d, index %d: want 16, 4", len(sh.ring), len(sh.index))
	}
	a := benchKey(100)
	// b's first bucket in the grown index (8 buckets) is not the one it
	// has in the old (4 buckets), nor is its second.
	b := crafted(1)
	b[8], b[12] = 0x0c, 0x0d
	o := begin(t, s, a, b)
	wantKind(t, o, First)
	if len(sh.index) != 8 {
		t.Fatalf("index %d buckets: the first insertion did not grow the shard", len(sh.index))
	}
	if err := o.Complete(msg(1, 1, "b")); err != nil {
		t.Fatal(err)
	}
	wantKind(t, begin(t, s, b), Duplicate)
	wantKind(t, begin(t, s, a), Duplicate)
}

// BenchmarkMemoryBeginIntoFirstSmall is BenchmarkMemoryBeginIntoFirst1M
// with 16K entries, which fit in the CPU caches: the store's instructions
// without the waits on memory (count them with valgrind --tool=cachegrind
// and a fixed -test.benchtime Nx). Its ring comes round within a tick of
// the coarse clock, too soon for the marks left in it to have expired (a
// mark TTL of 1 ms, see BenchmarkMemoryBeginIntoFirst1M): it runs on a
// fake clock, moved on by 1 ms every 1024 requests, read through
// WithClock (an indirect call, a few ns more than the coarse clock).
func BenchmarkMemoryBeginIntoFirstSmall(b *testing.B) {
	const n = 1 << 14
	clk := newFakeClock()
	s := NewMemory(WithMaxEntries(n), WithMarkTTL(time.Millisecond), WithClock(clk.Now))
	fill(b, s, 0, n, benchAnswer)
	next := uint64(n)
	ctx := context.Background()
	var o Outcome
	b.ReportAllocs()
	for b.Loop() {
		next++
		if next%1024 == 0 {
			clk.Advance(time.Millisecond)
		}
		if err := s.BeginInto(ctx, &o, benchKey(next)); err != nil || !o.First() {
			b.Fatal(err, o.Kind())
		}
	}
}

// TestMemoryIndexEntriesSwept: an index entry keeps only the low bits of
// its slot's sequence number, so a free entry (its slot has left the ring)
// must be cleared before the sequence numbers come round to the same low
// bits, or it would name a later slot. Over many rings' worth of
// insertions, completions and abandons, no entry names a slot of another
// key, and the free entries not yet cleared are only those written in the
// last ring plus sweep period: the index does not fill up with them.
func TestMemoryIndexEntriesSwept(t *testing.T) {
	const limit = 64
	s := NewMemory(WithShards(1), WithMaxEntries(limit))
	sh := &s.shards[0]
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 40 << 8 {
		o := begin(t, s, benchKey(rng.Uint64()))
		if rng.IntN(4) == 0 {
			_ = o.Abandon()
		} else {
			_ = o.Complete(msg(1, 1, "a"))
		}
		if i%16 != 0 {
			continue
		}
		checkNoStaleEntries(t, sh)
		stale := 0
		for _, b := range sh.index {
			for _, e := range b {
				if e != 0 && !sh.inUse(e) {
					stale++
				}
			}
		}
		if bound := len(sh.ring) + 1 + sweepEvery*len(sh.index); stale > bound {
			t.Fatalf("after %d insertions: %d free entries not cleared, want at most %d", i+1, stale, bound)
		}
	}
}

// TestBucketAlignment: bucket.hasTag reads a bucket as 64-bit words, so
// every bucket of an index, on the Go heap or in the huge-page mapping, is
// 8-byte aligned, whatever the index's size.
func TestBucketAlignment(t *testing.T) {
	for _, n := range []int{1, 5, 64, 1000, 1 << 19} {
		s := NewMemory(WithShards(4), WithMaxEntries(n))
		for i := range min(n, 5000) {
			complete(t, s, benchKey(uint64(i)), "a")
			for j := range s.shards {
				if idx := s.shards[j].index; len(idx) > 0 && uintptr(unsafe.Pointer(&idx[0]))%8 != 0 {
					t.Fatalf("max entries %d, shard %d: index at %p", n, j, &idx[0])
				}
			}
		}
	}
}

// inUse reports whether e is an entry whose slot is in the ring.
func (s *shard) inUse(e entry) bool { return e != 0 && s.inRing(s.seqOf(e)) }

// TestMemoryMarksOverBudgetNotMovedPerRequest: when the marks of running
// requests alone exceed a shard's byte budget (which the docs allow), a
// request must not move every mark to make room: moving a mark frees no
// byte. Marks move once per round of the ring, as eviction by count does:
// O(1) amortised. A move takes a sequence number, as an insertion does,
// so the moves are what the tail advanced past one per request.
func TestMemoryMarksOverBudgetNotMovedPerRequest(t *testing.T) {
	const marks, requests = 4000, 5000
	s := NewMemory(WithShards(1), WithMaxEntries(1<<14), WithMaxBytes(200<<10), WithMarkTTL(time.Hour))
	defer s.Close()
	ctx := context.Background()
	running := make([]*Outcome, 0, marks)
	for i := range marks {
		running = append(running, begin(t, s, benchKey(uint64(i))))
	}
	sh := &s.shards[0]
	tail0 := sh.tail
	var o Outcome
	for i := range requests {
		if err := s.BeginInto(ctx, &o, benchKey(uint64(marks+i))); err != nil || !o.First() {
			t.Fatal(err, o.Kind())
		}
		if err := o.Complete(benchAnswer); err != nil {
			t.Fatal(err)
		}
		// The answers fill the budget (2048 of them) in a round
		// of the ring, the 4000 marks then moving once: about 2
		// moves per request; a round's worth of slack.
		if moves := int(sh.tail-tail0) - (i + 1); moves > 2*(i+1)+marks {
			t.Fatalf("after %d requests the %d marks moved %d times", i+1, marks, moves)
		}
	}
	if n := s.Len(); n > 1<<14 {
		t.Fatalf("Len %d over max entries", n)
	}
	for _, o := range running { // every mark survived its moves
		if err := o.Complete(benchAnswer); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkMemoryCompleteMarksOverBudget: BeginInto plus Complete in a
// shard whose running requests' marks alone exceed its byte budget (4000
// marks of 80 bytes in 200 KiB): compare with marks=0.
func BenchmarkMemoryCompleteMarksOverBudget(b *testing.B) {
	for _, marks := range []int{0, 4000} {
		b.Run(fmt.Sprintf("marks=%d", marks), func(b *testing.B) {
			s := NewMemory(WithShards(1), WithMaxEntries(1<<14), WithMaxBytes(200<<10), WithMarkTTL(time.Hour))
			defer s.Close()
			ctx := context.Background()
			for i := range marks {
				if _, err := s.Begin(ctx, benchKey(uint64(i))); err != nil {
					b.Fatal(err)
				}
			}
			next := uint64(marks)
			var o Outcome
			b.ReportAllocs()
			for b.Loop() {
				next++
				if err := s.BeginInto(ctx, &o, benchKey(next)); err != nil {
					b.Fatal(err)
				}
				if err := o.Complete(benchAnswer); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestMemoryFullShardEvictsExpiredMarkBehindRunning: a shard full of marks
// whose oldest runs but which holds an expired one further on (moves leave
// the ring out of birth order) evicts the expired mark instead of refusing
// a new request with ErrFull for up to a mark TTL. A shard whose marks all
// run still refuses, and does not look through them again before one can
// have expired.
func TestMemoryFullShardEvictsExpiredMarkBehindRunning(t *testing.T) {
	clk := newFakeClock()
	s := NewMemory(WithShards(1), WithMaxEntries(3), WithClock(clk.Now), WithMarkTTL(10*time.Second))
	defer s.Close()
	ctx := context.Background()
	k := func(i uint32) Key { return RequestKey("c", i) }
	a := begin(t, s, k(1)) // runs for ever
	complete(t, s, k(2), "x")
	clk.Advance(6 * time.Second)
	b := begin(t, s, k(3))
	c := begin(t, s, k(4)) // moves a's mark behind b, evicts k2's answer
	clk.Advance(5 * time.Second)
	o, err := s.Begin(ctx, k(5)) // a's mark expired: evicted
	if err != nil {
		t.Fatalf("Begin with an expired mark in the shard: %v, want First", err)
	}
	wantKind(t, o, First)
	if err := a.Complete(msg(1, 1, "late")); err != nil { // no room: as if stored and evicted
		t.Fatal(err)
	}
	for _, o := range []*Outcome{b, c} { // the running marks are kept
		if err := o.Complete(msg(1, 1, "b")); err != nil {
			t.Fatal(err)
		}
	}
	wantKind(t, begin(t, s, k(3)), Duplicate)

	// All running: ErrFull, one look through the marks until the
	// oldest's TTL is past.
	s = NewMemory(WithShards(1), WithMaxEntries(3), WithClock(clk.Now), WithMarkTTL(10*time.Second))
	defer s.Close()
	for i := range uint32(3) {
		begin(t, s, k(10+i))
		clk.Advance(time.Second)
	}
	sh := &s.shards[0]
	for range 3 {
		if _, err := s.Begin(ctx, k(20)); !errors.Is(err, ErrFull) {
			t.Fatalf("Begin in a shard of running marks: %v, want ErrFull", err)
		}
	}
	if sh.noExpiry != int64(10*time.Second) {
		t.Fatalf("noExpiry %d, want the first mark's expiry %d", sh.noExpiry, int64(10*time.Second))
	}
	clk.Advance(7 * time.Second) // the first mark's TTL is past
	wantKind(t, begin(t, s, k(20)), First)
}

// TestMemoryOutcomeSlabFitsSizeClass: Begin's Outcomes come from slabs
// (see newOutcome), which should fill the allocator's size class they land
// in: a slab a little over a class boundary costs every Begin the gap
// (16 Outcomes of 144 bytes in the 2688-byte class: 168 B per Begin).
func TestMemoryOutcomeSlabFitsSizeClass(t *testing.T) {
	const n = 1 << 12
	s := NewMemory(WithShards(1), WithMaxEntries(n))
	defer s.Close()
	fill(t, s, 0, 2*n, benchAnswer) // the ring at its largest
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range uint64(100 * slabSize) { // whole slabs
		o, err := s.Begin(ctx, benchKey(2*n+i))
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Complete(benchAnswer); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	per := float64(after.TotalAlloc-before.TotalAlloc) / float64(100*slabSize)
	if size := float64(unsafe.Sizeof(Outcome{})); per > 1.05*size {
		t.Fatalf("%.1f bytes allocated per Begin for an Outcome of %.0f bytes", per, size)
	}
}
