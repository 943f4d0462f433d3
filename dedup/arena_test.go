package dedup

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// modelEntry is the reference model's view of a key.
type modelEntry struct {
	born     time.Duration // since the start
	inFlight bool
	notKept  bool
	answer   string
}

// modelRun drives a one-shard Memory and a reference model (a map of
// entries, expired by age and mark TTL) with the operations that next
// chooses: Begin of one of keys keys, Complete (with an answer of a size
// chosen in [1, 2*maxAnswer], so some are not kept) or Abandon of an open
// Outcome, and clock steps. Begin's result, its answer, and Complete's error
// are compared with the model's after every step, and the shard's
// accounting and arena are checked (checkArena).
//
// With exact, the store is sized so that neither its entry bound nor its
// budget ever evicts, and the model must match it exactly; without, the
// bounds evict and the model checks only what eviction cannot change: a
// duplicate's answer is the last one completed for its key, and a key just
// completed is held.
//
// It returns the bytes written to the arena and the arena's size, so that
// callers can check that it went round its chunks.
func modelRun(t *testing.T, exact bool, keys, steps int, next func(n int) int) (written, size int64) {
	t.Helper()
	const maxAnswer = 600
	const maxAge, markTTL = time.Minute, 10 * time.Second
	budget, limit := int64(64<<10), 1000
	if !exact {
		budget, limit = 6000, 24
	}
	clk := newFakeClock()
	start := clk.Now()
	s := NewMemory(WithShards(1), WithMaxEntries(limit), WithMaxBytes(budget), WithMaxAnswerSize(maxAnswer),
		WithClock(clk.Now), WithMaxAge(maxAge), WithMarkTTL(markTTL))
	defer s.Close()
	sh := &s.shards[0]
	model := map[Key]*modelEntry{}
	// The last answer completed per key, "" if not kept, for what
	// eviction cannot change.
	last := map[Key]string{}
	open := map[Key]*Outcome{}
	now := func() time.Duration { return clk.Now().Sub(start) }
	// live returns the model's unexpired entry of k.
	live := func(k Key) *modelEntry {
		e := model[k]
		if e == nil {
			return nil
		}
		if age := now() - e.born; age >= maxAge || e.inFlight && age >= markTTL {
			delete(model, k)
			return nil
		}
		return e
	}
	keyOf := func(i int) Key { return RequestKey("model", uint32(i)) }
	ctx := context.Background()
	for step := range steps {
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("step %d: %s", step, fmt.Sprintf(format, args...))
		}
		switch op := next(10); {
		case op < 5: // Begin
			k := keyOf(next(keys))
			e := live(k)
			if e != nil && e.inFlight {
				break // it would wait
			}
			o, err := s.Begin(ctx, k)
			if errors.Is(err, ErrAnswerNotKept) {
				if ans, ok := last[k]; !ok || ans != "" || exact && (e == nil || !e.notKept) {
					fail("Begin: %v; the last answer completed: %q", err, last[k])
				}
				break
			}
			switch {
			case exact && e != nil && e.notKept:
				fail("Begin of a key answered but not kept: %v %v", err, o.Kind())
			case err != nil:
				fail("Begin: %v", err)
			case o.Duplicate():
				if exact && e == nil {
					fail("Duplicate of a key the model does not hold")
				}
				if string(o.Answer()) != last[k] {
					fail("answer %q, want %q", o.Answer(), last[k])
				}
			case exact && e != nil:
				fail("First of a key the model holds answered")
			default:
				if prev := open[k]; prev != nil {
					_ = prev.Abandon() // taken over: a no-op
				}
				open[k] = o
				model[k] = &modelEntry{born: now(), inFlight: true}
			}
		case op < 8: // Complete
			for k, o := range open {
				delete(open, k)
				n := 1 + next(2*maxAnswer)
				ans := bytes.Repeat([]byte{byte(step)}, max(n, 4))
				binary.BigEndian.PutUint32(ans, uint32(step)) // tell answers apart
				ans = ans[:n]
				e := model[k]
				if exact && (e == nil || now()-e.born >= markTTL) {
					// Whether the store has dropped an expired mark yet
					// is not the model's business: end it.
					_ = o.Abandon()
					delete(model, k)
					break
				}
				fresh := e != nil && now()-e.born < markTTL
				err := o.Complete(ans)
				switch {
				case n > maxAnswer:
					if !errors.Is(err, ErrAnswerTooLarge) {
						fail("Complete of %d bytes: %v", n, err)
					}
					if e != nil {
						e.inFlight, e.notKept = false, true
					}
					last[k] = ""
				case err != nil:
					if !exact && errors.Is(err, ErrMarkLost) {
						break
					}
					fail("Complete: %v", err)
				default:
					written += int64(n + recordHeader)
					if e != nil {
						e.inFlight, e.answer = false, string(ans)
					}
					last[k] = string(ans)
					if !exact && fresh { // the newest entry is never the one evicted
						o2, err := s.Begin(ctx, k)
						if err != nil || !o2.Duplicate() || !bytes.Equal(o2.Answer(), ans) {
							fail("key just completed: %v %v", err, o2)
						}
					}
				}
				break
			}
		case op < 9: // Abandon
			for k, o := range open {
				delete(open, k)
				_ = o.Abandon()
				if e := live(k); e != nil && e.inFlight {
					delete(model, k)
				}
				break
			}
		default:
			clk.Advance(time.Duration(next(20)) * time.Second)
		}
		sh.mu.Lock()
		checkArena(t, sh)
		sh.mu.Unlock()
		if exact {
			held := 0
			for k := range model {
				if live(k) != nil {
					held++
				}
			}
			if s.Len() < held {
				fail("store holds %d entries, the model %d", s.Len(), held)
			}
		}
	}
	return written, sh.ar.size
}

// checkArena verifies a locked shard's accounting against its ring, and
// its arena: every live answered slot names a record of its own sequence
// number and length inside the arena's chunks, no two share one, and the
// arena is within its bound (plus the one chunk by which it may pass it).
func checkArena(t *testing.T, s *shard) {
	t.Helper()
	var live int
	var bytes int64
	seen := map[[2]int32]bool{}
	for seq := s.head; seq != s.tail; seq++ {
		sl := s.at(seq)
		if sl.key.IsZero() {
			continue
		}
		live++
		bytes += EntryOverhead + int64(sl.alen)
		if sl.alen == 0 {
			continue
		}
		place := [2]int32{sl.chunk, sl.off}
		if seen[place] {
			t.Fatalf("two slots name the record at %v", place)
		}
		seen[place] = true
		c := s.ar.chunks[sl.chunk]
		if int(sl.off)+recordHeader+int(sl.alen) > len(c) {
			t.Fatalf("slot %d's record at %v runs past its chunk", seq, place)
		}
		if got := binary.LittleEndian.Uint32(c[sl.off:]); got != seq {
			t.Fatalf("slot %d names a record of slot %d", seq, got)
		}
		if got := binary.LittleEndian.Uint32(c[sl.off+4:]); got != sl.alen {
			t.Fatalf("slot %d of %d bytes names a record of %d", seq, sl.alen, got)
		}
	}
	if live != s.live || bytes != s.bytes {
		t.Fatalf("live %d bytes %d, counted %d and %d", live, bytes, s.live, s.bytes)
	}
	if s.bytes > s.budget+EntryOverhead+int64(s.ar.max) {
		t.Fatalf("bytes %d over budget %d by more than one entry", s.bytes, s.budget)
	}
	if s.ar.size > s.ar.max+int64(s.ar.maxChunk) {
		t.Fatalf("arena of %d bytes, bound %d", s.ar.size, s.ar.max)
	}
}

// TestMemoryModel compares Memory with a reference model over random
// operation sequences (see modelRun): exactly while nothing is evicted
// (expiry, out-of-order completion, abandons, answers not kept and the
// arena going round its chunks), and for what eviction cannot change
// under a small budget and entry bound.
func TestMemoryModel(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 7))
		t.Run(fmt.Sprint("exact/", seed), func(t *testing.T) {
			written, size := modelRun(t, true, 60, 4000, rng.IntN)
			if written < 2*size {
				t.Fatalf("%d bytes written to an arena of %d: it did not go round", written, size)
			}
		})
		t.Run(fmt.Sprint("evicting/", seed), func(t *testing.T) {
			modelRun(t, false, 60, 4000, rng.IntN)
		})
	}
}

// FuzzMemoryModel is TestMemoryModel with the operations read from the
// fuzzer's bytes.
func FuzzMemoryModel(f *testing.F) {
	f.Add([]byte{0, 1, 5, 3, 0, 2, 6, 1, 9, 19, 0, 1, 7, 200})
	f.Add(bytes.Repeat([]byte{0, 3, 5, 250, 9, 7}, 50))
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func(n int) int {
			if len(data) < 2 {
				return 0
			}
			v := int(binary.BigEndian.Uint16(data))
			data = data[2:]
			return v % n
		}
		steps := len(data) / 3
		modelRun(t, true, 8, steps, next)
		modelRun(t, false, 8, steps, next)
	})
}

// TestMemoryAnswerNotAliased: the answer a duplicate gets is its own copy:
// neither changed when the entry is evicted and its arena bytes are
// written over, nor shared with another duplicate's.
func TestMemoryAnswerNotAliased(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxBytes(4000), WithMaxAnswerSize(200))
	defer s.Close()
	k := RequestKey("c", 0)
	want := msg(1, 1, "first answer")
	if err := begin(t, s, k).Complete(want); err != nil {
		t.Fatal(err)
	}
	got := begin(t, s, k).Answer()
	other := begin(t, s, k).Answer()
	other[len(other)-1] = 'X'
	for i := 1; i < 200; i++ { // evicts k, and the arena goes round
		complete(t, s, RequestKey("c", uint32(i)), fmt.Sprintf("%040d", i))
	}
	if o := begin(t, s, k); !o.First() {
		t.Fatal("k not evicted")
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("answer changed to %q after eviction", got)
	}
}

// TestMemoryArenaOutOfOrder: marks answered in another order than they
// were inserted in keep their own answers, through budget evictions and
// wrap-arounds of the arena, whose size stays flat.
func TestMemoryArenaOutOfOrder(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxBytes(20_000), WithMaxAnswerSize(300), WithMaxEntries(1000))
	defer s.Close()
	sh := &s.shards[0]
	var size int64
	for round := range 100 {
		var marks []*Outcome
		var keys []Key
		for i := range 20 {
			k := RequestKey(fmt.Sprint("r", round), uint32(i))
			keys = append(keys, k)
			marks = append(marks, begin(t, s, k))
		}
		perm := rand.New(rand.NewPCG(uint64(round), 1)).Perm(len(marks))
		for _, i := range perm {
			if err := marks[i].Complete(msg(1, uint32(i), fmt.Sprintf("%0*d", 50+i*10, round))); err != nil {
				t.Fatal(err)
			}
		}
		for i, k := range keys {
			o := begin(t, s, k)
			if want := msg(1, uint32(i), fmt.Sprintf("%0*d", 50+i*10, round)); !o.Duplicate() || !bytes.Equal(o.Answer(), want) {
				t.Fatalf("round %d key %d: %v %q", round, i, o.Kind(), o.Answer())
			}
		}
		sh.mu.Lock()
		checkArena(t, sh)
		if round == 10 {
			size = sh.ar.size
		}
		if round > 10 && sh.ar.size != size {
			t.Fatalf("round %d: arena of %d bytes, %d at round 10", round, sh.ar.size, size)
		}
		sh.mu.Unlock()
	}
	if b := s.Bytes(); b > 20_000 {
		t.Fatalf("Bytes %d over the budget", b)
	}
}

// TestMemoryArenaEvictsWhenFull: when the gaps that out-of-order answers
// leave fill the arena to its bound, the oldest answers are evicted to
// make room; the store stays within its bound and its newest answers are
// kept.
func TestMemoryArenaEvictsWhenFull(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxBytes(10_000), WithMaxAnswerSize(500), WithMaxEntries(1000))
	defer s.Close()
	sh := &s.shards[0]
	// A long-lived mark answered late, then many answers that age past
	// the budget: the ring evicts them in insertion order, but the late
	// answer's record pins the arena's head behind them.
	for i := range 400 {
		early := begin(t, s, RequestKey("early", uint32(i)))
		complete(t, s, RequestKey("c", uint32(i)), string(make([]byte, 400)))
		if err := early.Complete(msg(1, 1, string(make([]byte, 400)))); err != nil {
			t.Fatal(err)
		}
		sh.mu.Lock()
		checkArena(t, sh)
		sh.mu.Unlock()
	}
	wantKind(t, begin(t, s, RequestKey("early", 399)), Duplicate)
	wantKind(t, begin(t, s, RequestKey("c", 399)), Duplicate)
}

// TestMemoryCompleteAllocatesNothing: in a full store, a new request's
// BeginInto and Complete allocate nothing: the answer is copied into the
// arena over an evicted one's bytes.
func TestMemoryCompleteAllocatesNothing(t *testing.T) {
	s := NewMemory(WithShards(4), WithMaxEntries(4096))
	defer s.Close()
	ans := msg(1, 1, string(make([]byte, 150)))
	var o Outcome
	var i uint32
	run := func() {
		i++
		if err := s.BeginInto(context.Background(), &o, RequestKey("c", i)); err != nil {
			t.Fatal(err)
		}
		if err := o.Complete(ans); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 * 4096 {
		run()
	}
	if n := testing.AllocsPerRun(1000, run); n != 0 {
		t.Fatalf("%v allocations per request", n)
	}
}

// deadSmallAnswers returns a one-shard store whose arena holds 300 dead
// records of one byte: answered, expired and dropped.
func deadSmallAnswers(t *testing.T) (*Memory, *fakeClock) {
	clk := newFakeClock()
	s := NewMemory(WithShards(1), WithMaxAnswerSize(600), WithClock(clk.Now))
	for i := range 300 {
		complete(t, s, RequestKey("small", uint32(i)), "")
		if err := begin(t, s, RequestKey("tiny", uint32(i))).Complete([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(DefaultMaxAge)
	for i := range 300 { // looked up expired: dropped
		_ = begin(t, s, RequestKey("small", uint32(i))).Abandon()
		_ = begin(t, s, RequestKey("tiny", uint32(i))).Abandon()
	}
	return s, clk
}

// TestMemoryArenaReusesDeadSpace: when the tail reaches a chunk that holds
// only dead records, it drops them and reuses the chunk rather than grow
// the arena.
func TestMemoryArenaReusesDeadSpace(t *testing.T) {
	s, _ := deadSmallAnswers(t)
	defer s.Close()
	sh := &s.shards[0]
	size := sh.ar.size
	for i := range 14 { // fewer than the dead records' chunks hold
		complete(t, s, RequestKey("big", uint32(i)), string(make([]byte, 500)))
	}
	if sh.ar.size != size {
		t.Fatalf("arena grew from %d to %d bytes over dead records", size, sh.ar.size)
	}
	checkArena(t, sh)
}

// TestMemoryArenaReclaimsAsItGoes: each answer stored also drops a few dead
// records from the arena's head, so that it stays at the oldest live
// answer instead of dropping a chunk's worth at once later.
func TestMemoryArenaReclaimsAsItGoes(t *testing.T) {
	s, _ := deadSmallAnswers(t)
	defer s.Close()
	sh := &s.shards[0]
	for i := range 900 / maxPopPerInsert {
		if err := begin(t, s, RequestKey("new", uint32(i))).Complete([]byte("y")); err != nil {
			t.Fatal(err)
		}
	}
	if !sh.headLive() {
		t.Fatal("the arena's head is not at a live answer")
	}
	seq, _ := sh.ar.record()
	if k := sh.at(seq).key; k != RequestKey("new", 0) {
		t.Fatalf("the arena's head is the answer of %v, not the oldest", k)
	}
}

// TestMemoryArenaFreedWhenUnreachable: the arena chunks mapped outside the
// Go heap are returned once the store is unreachable.
func TestMemoryArenaFreedWhenUnreachable(t *testing.T) {
	if processCPU() == 0 {
		t.Skip("chunks come from the Go heap here")
	}
	var owned *chunkList
	func() {
		s := NewMemory(WithShards(4))
		for i := range 1000 {
			complete(t, s, RequestKey("c", uint32(i)), string(make([]byte, 100)))
		}
		owned = s.shards[0].ar.owned
	}()
	waitFreed(t, owned)
}

// waitFreed waits until the chunks of l, a store's, are freed, the store
// having become unreachable; it fails if l held none.
func waitFreed(t *testing.T, l *chunkList) {
	t.Helper()
	l.mu.Lock()
	n := len(l.chunks)
	l.mu.Unlock()
	if n == 0 {
		t.Fatal("the store had no chunks")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		l.mu.Lock()
		n = len(l.chunks)
		l.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d chunks still mapped after the store became unreachable", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMemoryFootprint: Footprint counts the rings, indexes and arenas:
// what a full store holds per entry, its answers' bytes included. Once the
// arenas have gone round (each grows to its live answers plus a chunk or
// two while the oldest chunk still holds live answers), it stays put as
// the full store goes on taking new entries.
func TestMemoryFootprint(t *testing.T) {
	const n, answer = 1 << 14, 200
	s := NewMemory(WithShards(4), WithMaxEntries(n))
	defer s.Close()
	if f := s.Footprint(); f != 0 {
		t.Fatalf("empty store: Footprint %d", f)
	}
	body := string(make([]byte, answer-20))
	for i := range n {
		complete(t, s, RequestKey("c", uint32(i)), body)
	}
	f := s.Footprint()
	if per := f / n; per < 40+16+recordHeader+answer || per > 2*(EntryOverhead+answer) {
		t.Fatalf("Footprint %d B per entry", per)
	}
	for i := range 2 * n {
		complete(t, s, RequestKey("more", uint32(i)), body)
	}
	if g := s.Footprint(); g < f || g > f+4*2*maxArenaChunk {
		t.Fatalf("Footprint went from %d to %d as the arenas went round", f, g)
	}
	f = s.Footprint()
	for i := range 6 * n {
		complete(t, s, RequestKey("yet more", uint32(i)), body)
	}
	if g := s.Footprint(); g != f {
		t.Fatalf("Footprint of the full store moved from %d to %d", f, g)
	}
}

// TestMemoryHugeIndexes: a store large enough to map its indexes together
// (on huge pages, where the system has them) keeps finding every key as
// its indexes grow into that memory and are rebuilt there, and returns the
// memory once unreachable.
func TestMemoryHugeIndexes(t *testing.T) {
	const n = 1 << 19 // 4 shards of 131072 entries: 8 MiB of indexes
	var owned *chunkList
	func() {
		s := NewMemory(WithShards(4), WithMaxEntries(n))
		owned = s.shards[0].ar.owned
		defer s.Close()
		if runtime.GOOS == "linux" && cap(s.shards[0].indexMem) == 0 {
			t.Fatal("indexes not mapped")
		}
		for i := range n + n/2 { // past the bound: evictions too
			complete(t, s, RequestKey("c", uint32(i)), fmt.Sprint(i))
		}
		for i := n/2 + 8192; i < n+n/2; i += 97 { // past the shards' spread of eviction points
			o := begin(t, s, RequestKey("c", uint32(i)))
			if !o.Duplicate() || !bytes.Equal(o.Answer(), msg(1, 1, fmt.Sprint(i))) {
				t.Fatalf("key %d: %v %q", i, o.Kind(), o.Answer())
			}
		}
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			checkIndex(t, sh)
			checkNoStaleEntries(t, sh)
			if cap(sh.indexMem) > 0 && &sh.index[0] != &sh.indexMem[:1][0] {
				t.Fatalf("shard %d's index is not in the mapped memory", i)
			}
			sh.mu.Unlock()
		}
	}()
	waitFreed(t, owned)
}

// checkNoStaleEntries verifies that every index entry of a locked shard
// that names a live slot is that slot's key's, in one of its two buckets:
// a stale entry (left from a smaller index in the same memory, say) could
// have the wrong slot evicted when both of a key's buckets are full.
func checkNoStaleEntries(t *testing.T, s *shard) {
	t.Helper()
	for bi := range s.index {
		for _, e := range s.index[bi] {
			if !s.inUse(e) {
				continue
			}
			sl := s.at(s.seqOf(e))
			if sl.key.IsZero() {
				continue
			}
			tag, i1, i2 := s.hashes(sl.key)
			if uint32(e)>>s.sbits != s.tagBits(tag) || (uint32(bi) != i1 && uint32(bi) != i2) {
				t.Fatalf("bucket %d holds a stale entry for slot %d", bi, s.seqOf(e))
			}
		}
	}
}
