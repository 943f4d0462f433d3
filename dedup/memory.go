package dedup

import (
	"context"
	"encoding/binary"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"
)

// Memory is the in-process Store: a power-of-two number of shards, each a
// FIFO ring of entries ordered by insertion time plus a hash index from Key
// to ring position. Lookup, insertion and eviction are O(1): expired entries
// are dropped lazily when looked up and, a few per insertion, from the old
// end of the ring; when a shard is full its oldest entry is evicted, which
// costs no index work (index entries pointing before the ring's old end are
// free). The ring and index of a shard double as it fills, up to its share
// of max entries; each doubling rebuilds that shard's index. Each shard
// also has its share of the memory budget (WithMaxBytes), counting
// EntryOverhead per entry plus its answer bytes: past it, the oldest
// entries are evicted the same way.
//
// An in-flight mark of a request still running (within its mark TTL) is
// not evicted: its duplicates would then run the request a second time.
// Eviction moves such a mark from the old end of the ring to the new one
// and evicts the next entry; a mark moves once per round of the ring, so
// eviction stays O(1) amortised while running requests hold a minority of
// the shard's entries. A shard thus holds at most its
// share of max entries, marks included; if all of them are marks of running
// requests, Begin refuses a new request with ErrFull until one ends or
// expires. The budget in bytes bounds the answers: running requests' marks
// (EntryOverhead each, no arena space) come on top of it and push no
// answer out, so eviction for bytes, too, moves a mark once per round.
//
// A lookup of a new key reads one cache line of the index (see shard); the
// default clock is a coarse monotonic one read with an atomic load (see
// coarseClock).
//
// Answers are copied into a per-shard arena of byte chunks, written in
// completion order and reused in place once their entries are gone (see
// arena), so the ring, the index and the answers hold no pointer: the
// garbage collector does not scan them, evicting an answer makes no
// garbage, and a full store's memory stays as it is. A duplicate's answer
// is copied out of the arena for its caller. The arenas are mapped outside
// the Go heap, and so are the indexes of a large store, together, on huge
// pages where the system has them: a lookup then waits on memory once, not
// also on the translation of its address.
//
// An entry costs 40 bytes in the ring, 16 in the index and 8 of record
// header in the arena, plus the answer bytes. Abandoned or taken-over
// entries leave a dead slot that counts towards the bound until it reaches
// the old end of the ring.
type Memory struct {
	cfg    config
	base   time.Time // clock origin: times are nanoseconds since base
	maxAge int64
	mark   int64
	mask   uint64
	shards []shard
	clk    *coarseClock // nil with WithClock
}

var _ ReusingStore = (*Memory)(nil)

// NewMemory returns an in-memory Store. It honours WithMaxEntries,
// WithMaxBytes, WithMaxAnswerSize, WithMaxAge, WithMarkTTL, WithClock and
// WithShards.
func NewMemory(opts ...Option) *Memory {
	cfg := newConfig(opts)
	n := 1 << bits.Len(uint(cfg.shards-1)) // round up to a power of two
	for n > 1 && (n > cfg.maxEntries || cfg.maxBytes/int64(n) < minShareEntries*(EntryOverhead+int64(cfg.maxAnswer))) {
		n >>= 1
	}
	m := &Memory{
		cfg:    cfg,
		base:   cfg.now(),
		maxAge: int64(cfg.maxAge),
		mark:   int64(cfg.markTTL),
		mask:   uint64(n - 1),
		shards: make([]shard, n),
	}
	if !cfg.clockSet {
		m.clk = newCoarseClock(m.base)
	}
	// The arenas' chunks are outside the Go heap (see newChunk): return
	// them once the store is unreachable. Nothing else refers to them: a
	// duplicate's answer is a copy. The cleanup is attached to the shards,
	// not to m: arena bytes are only touched under a shard's lock, and the
	// unlock that follows keeps the shards alive until then, even in a
	// method that no longer uses m.
	chunks := new(chunkList)
	runtime.AddCleanup(&m.shards[0], (*chunkList).free, chunks)
	defer m.mapIndexes(chunks)
	for i := range m.shards {
		limit := cfg.maxEntries / n
		if i < cfg.maxEntries%n {
			limit++
		}
		m.shards[i].limit = limit
		budget := cfg.maxBytes / int64(n)
		if int64(i) < cfg.maxBytes%int64(n) {
			budget++
		}
		m.shards[i].budget = budget
		m.shards[i].ar.init(budget, cfg.maxAnswer, chunks)
	}
	return m
}

// hugeIndexes is the size of all the indexes of a store at their largest
// from which they are mapped together on huge pages (see mapIndexes).
const hugeIndexes = 8 << 20

// mapIndexes gives the shards of a store whose indexes can grow to
// hugeIndexes or more their indexes' memory at its largest in one mapping
// backed by huge pages, listed in chunks to be freed with the arenas. A
// new key's lookup misses the cache on its index bucket anyway; on a 4 KiB
// page of an index of many megabytes it also misses the address
// translation cache, a second wait for memory.
func (m *Memory) mapIndexes(chunks *chunkList) {
	sizes := make([]int, len(m.shards))
	total := 0
	for i := range m.shards {
		ring := 1 << bits.Len(uint(m.shards[i].limit-1))
		sizes[i] = max(ring/4, 1)
		total += sizes[i]
	}
	const bucketSize = int(unsafe.Sizeof(bucket{}))
	if total*bucketSize < hugeIndexes {
		return
	}
	mem, mapping := mapHuge(total * bucketSize)
	if mem == nil {
		return
	}
	chunks.add(mapping)
	all := unsafe.Slice((*bucket)(unsafe.Pointer(&mem[0])), total)
	for i := range m.shards {
		m.shards[i].indexMem, all = all[:0:sizes[i]], all[sizes[i]:]
	}
}

// minShareEntries is how many entries of the per-entry limit a shard's
// share of the memory budget holds at least (NewMemory uses fewer shards
// rather than less).
const minShareEntries = 16

// slot is one ring entry. A slot whose key is zero is dead. It refers to
// nothing: its answer is in the shard's arena, an in-flight mark is the
// slFlight bit, expiring at born + the mark TTL, and its waiters' channel,
// if any, is in the shard's waits. The ring thus keeps no object alive and
// holds no pointer: the collector does not scan it.
type slot struct {
	key  Key
	born int64 // Memory.now() at first arrival
	// The answer, once completed: alen bytes in the shard's arena, in
	// the record at chunk, off (see arena). alen is 0 for a mark and
	// for an answer not kept.
	chunk, off int32
	alen       uint32
	state      uint8 // slFlight | slWaited | slNotKept
}

const (
	// slFlight: the slot is an in-flight mark, owned by the First outcome
	// that holds its sequence number.
	slFlight = 1 << iota
	// slWaited: a duplicate waits for the mark through this slot, on
	// waits[seq], which its end (completion, abandon, eviction, expiry)
	// closes. An unwaited mark ends without touching the map: evicting
	// it reads no more than the ring.
	slWaited
	// slNotKept: the request was answered, but its answer was over the
	// per-entry limit and is not kept (alen is 0).
	slNotKept
)

// entry is one index entry, 0 if empty: the low shard.sbits bits of the
// sequence number of a key's ring slot, and above them as many bits of the
// key's tag as fit, never all zero (see shard.entryOf). An entry whose
// slot has left the ring is free: evicting from the old end of the ring
// costs no index work. The sequence number is that of the latest slot
// with those low bits (see shard.seqOf), which is the entry's own as long
// as it was written less than 2^sbits insertions ago: shard.sweep clears
// every free entry well before that.
type entry uint32

// bucket is one cache line of index entries.
type bucket [16]entry

// hasTag reports whether an entry of b has the tag bits t (see
// shard.tagBits) above its low sbits bits. It compares two entries at a
// time, as the halves of a 64-bit word, without a branch: a lookup of a
// new key finds no tag, and so costs no loop. (The zero-half test of each
// word, (x - 1<<32|1) &^ x, sets the top bit of every half that is 0, and
// may set it in a half above one that is: never a false "no".)
func (b *bucket) hasTag(t uint32, sbits uint8) bool {
	const ones, highs = 0x0000000100000001, 0x8000000080000000
	w := (*[8]uint64)(unsafe.Pointer(b)) // a bucket is 8-byte aligned (see TestBucketAlignment)
	pat := uint64(t<<sbits) * ones
	low := uint64(1<<sbits-1) * ones
	x0, x1, x2, x3 := (w[0]^pat)&^low, (w[1]^pat)&^low, (w[2]^pat)&^low, (w[3]^pat)&^low
	x4, x5, x6, x7 := (w[4]^pat)&^low, (w[5]^pat)&^low, (w[6]^pat)&^low, (w[7]^pat)&^low
	acc := (x0-ones)&^x0 | (x1-ones)&^x1 | (x2-ones)&^x2 | (x3-ones)&^x3 |
		(x4-ones)&^x4 | (x5-ones)&^x5 | (x6-ones)&^x6 | (x7-ones)&^x7
	return acc&highs != 0
}

// shard is a FIFO ring of slots ordered by insertion time, indexed by a
// two-choice hash table of buckets sized for a load of at most 1/4: a key
// goes to its first bucket, and to its second only when the first has no
// free entry, which then gets its overflow bit set. A key is thus looked up
// with one cache-line read (two if its first bucket has overflowed, which
// with 16 entries a bucket at load 1/4 is fewer than 1 bucket in 10000),
// and a tag match is confirmed by comparing the full key in its slot.
//
// Overflow bits cannot be cleared when an entry is freed, since entries
// leave the index by falling out of the ring. Instead they are kept per ring
// epoch (epoch e is the sequence numbers [e*L, (e+1)*L), L = len(ring)): a
// bit set for an entry of sequence number seq goes to the bitmap of parity
// seq/L, and that bitmap is cleared when the tail enters epoch seq/L+2, by
// when every entry of epoch seq/L has left the ring (the ring holds at most
// L slots). A bucket has overflowed if its bit is set in either bitmap.
type shard struct {
	mu    sync.Mutex
	ring  []slot   // power-of-two length, grown up to limit
	index []bucket // power-of-two length, len(ring)/2 (at least 1)
	over  []uint64 // overflow bits: word w of bucket bits [64w, 64w+64) for epoch parity p at over[2w+p]
	head  uint32   // sequence number of the oldest slot (wraps)
	tail  uint32   // sequence number of the next slot (wraps)
	hpos  int      // ring index of head
	live  int      // slots holding a key
	limit int
	// bytes is what the live slots count against budget, the shard's
	// share of the memory budget: EntryOverhead each plus their answers.
	bytes  int64
	budget int64
	shift  uint8 // log2(len(ring)): seq>>shift is seq's epoch
	sbits  uint8 // low bits of sequence numbers in an entry: shift+2, at least 8
	// flights counts the in-flight slots (slFlight), expired or not.
	flights uint32
	// noExpiry: no mark of a shard full of running marks expires before
	// this time (see evictExpiredMark).
	noExpiry int64
	slab     []Outcome // see newOutcome
	// waits holds the channel of each waited slot (slWaited), by
	// sequence number; nil until a duplicate first waits.
	waits map[uint32]chan struct{}
	ar    arena // the answers
	// indexMem, if not nil, is the memory of the index at its largest,
	// in the store's huge-page mapping (see mapIndexes); the index is a
	// prefix of it.
	indexMem []bucket
	_        [56]byte // to a whole number of cache lines (see TestShardSize)
}

// touch prefetches the cache lines that the lookup and the insertion of
// a new key at place p miss on: its first bucket and the ring's old end,
// back to back, so that the two cache misses overlap instead of following
// each other. It also prefetches the line after the old end, which this
// shard's next insertion will need: by then it sits in the cache, as the
// 64 shards' rings advance too far apart for the hardware prefetcher to
// follow (3-5% faster at 1M entries). And it prefetches the first lines at
// the arena's tail, where the answer of the request will most likely be
// written when it completes: a write to a line not in the cache stalls on
// reading it first, and the arenas of 64 shards, like their rings, advance
// too far apart for the prefetcher. Prefetches, not loads: a load that
// misses holds up the lock's release, which waits for every earlier load,
// while a prefetch holds up nothing.
func (s *shard) touch(p place) {
	if len(s.ring) == 0 {
		return
	}
	prefetch(uintptr(unsafe.Pointer(&s.index[p.i1])))
	prefetch(uintptr(unsafe.Pointer(&s.ring[s.hpos].born)))
	prefetch(uintptr(unsafe.Pointer(&s.ring[(s.hpos+2)&(len(s.ring)-1)].born)))
	if a := &s.ar; a.chunks != nil {
		// Three lines, about an answer's worth; fewer at a chunk's end.
		c := a.chunks[a.tc][a.to:]
		switch {
		case len(c) > 128:
			prefetch(uintptr(unsafe.Pointer(&c[0])))
			prefetch(uintptr(unsafe.Pointer(&c[64])))
			prefetch(uintptr(unsafe.Pointer(&c[128])))
		case len(c) > 0:
			prefetch(uintptr(unsafe.Pointer(&c[0])))
		}
	}
}

// maxPopPerInsert bounds the dead or expired slots dropped per insertion,
// keeping every operation O(1).
const maxPopPerInsert = 8

func (s *shard) at(seq uint32) *slot {
	return &s.ring[(s.hpos+int(seq-s.head))&(len(s.ring)-1)]
}

// inRing reports whether seq is a sequence number in the ring.
func (s *shard) inRing(seq uint32) bool { return seq-s.head < s.tail-s.head }

// held returns the slot of sequence number seq if it is still in the ring
// and holds key k.
func (s *shard) held(seq uint32, k Key) *slot {
	if !s.inRing(seq) {
		return nil
	}
	if sl := s.at(seq); sl.key == k {
		return sl
	}
	return nil
}

// hashes returns the key's tag and the numbers of its two buckets. Keys
// are uniform (SHA-256); bytes 0..3 choose the shard.
func (s *shard) hashes(k Key) (tag, i1, i2 uint32) {
	tag = binary.LittleEndian.Uint32(k[4:8]) | 1
	mask := uint32(len(s.index) - 1)
	i1 = binary.LittleEndian.Uint32(k[8:12]) & mask
	i2 = binary.LittleEndian.Uint32(k[12:16]) & mask
	if i2 == i1 {
		i2 ^= 1 & mask
	}
	return tag, i1, i2
}

// place is where a key goes in its shard's index: its tag and its two
// buckets, as hashes returns them for an index of n buckets. It is
// computed once per key and operation, and is valid until the index is
// rebuilt with another size (see grow).
type place struct{ tag, i1, i2, n uint32 }

func (s *shard) placeOf(k Key) place {
	tag, i1, i2 := s.hashes(k)
	return place{tag, i1, i2, uint32(len(s.index))}
}

// overflowed reports whether a key of bucket i has been placed in its
// second bucket and may still be in the ring.
func (s *shard) overflowed(i uint32) bool {
	w := 2 * (i >> 6)
	return (s.over[w]|s.over[w+1])>>(i&63)&1 != 0
}

// setOverflow records that the key of sequence number seq, whose first
// bucket is i, was placed in its second bucket.
func (s *shard) setOverflow(i, seq uint32) {
	s.over[2*(i>>6)+(seq>>s.shift)&1] |= 1 << (i & 63)
}

// newEpoch clears the overflow bits of the epoch two before the one seq
// starts, whose entries have all left the ring.
func (s *shard) newEpoch(seq uint32) {
	p := int(seq>>s.shift) & 1
	for w := p; w < len(s.over); w += 2 {
		s.over[w] = 0
	}
}

// tagBits returns the bits of tag that an entry keeps, above its sbits
// low bits: never 0, so that an entry is never 0 (empty).
func (s *shard) tagBits(tag uint32) uint32 { return tag>>s.sbits | 1 }

// entryOf returns the entry of the slot seq of a key of the given tag.
func (s *shard) entryOf(tag, seq uint32) entry {
	return entry(s.tagBits(tag)<<s.sbits | seq&(1<<s.sbits-1))
}

// seqOf returns the sequence number of entry e: the latest at or before
// the tail with e's low bits.
func (s *shard) seqOf(e entry) uint32 {
	return s.tail - (s.tail-uint32(e))&(1<<s.sbits-1)
}

// match returns the entry of b with k's tag whose slot holds k, or nil.
func (s *shard) match(b *bucket, tag uint32, k Key) *entry {
	t := s.tagBits(tag)
	if !b.hasTag(t, s.sbits) { // the usual case for a new key, without a loop
		return nil
	}
	for i := range b {
		e := &b[i]
		if uint32(*e)>>s.sbits != t {
			continue
		}
		if seq := s.seqOf(*e); s.inRing(seq) && s.at(seq).key == k {
			return e
		}
	}
	return nil
}

// sweepEvery is how many insertions a shard makes per bucket it sweeps.
const sweepEvery = 8

// sweep clears the free entries of one bucket of the index, the next in
// turn as the sequence numbers go: every bucket once per sweepEvery *
// len(index) insertions, two rings' worth (len(index) is len(ring)/4). An
// entry becomes free at the latest len(ring) insertions after its own
// (its slot has left the ring), so it is cleared fewer than 3*len(ring)+8
// insertions after it was written, before its low bits (sbits >= shift+2,
// at least 8) could be taken for a later slot's (see seqOf). seq is the
// sequence number being inserted, a multiple of sweepEvery.
func (s *shard) sweep(seq uint32) {
	mask := uint32(len(s.index) - 1)
	b := &s.index[(seq/sweepEvery)&mask]
	tail, low, n := s.tail, uint32(1)<<s.sbits-1, s.tail-s.head
	for i := range b {
		if e := uint32(b[i]); (tail-e)&low-1 >= n { // not in the ring (see free)
			b[i] = 0
		}
	}
	// The bucket of the next sweep, sweepEvery insertions from now.
	prefetch(uintptr(unsafe.Pointer(&s.index[(seq/sweepEvery+1)&mask])))
}

// find returns the index entry of k, or nil.
func (s *shard) find(k Key) *entry { return s.findAt(k, s.placeOf(k)) }

// findAt is find of k at its place p.
func (s *shard) findAt(k Key, p place) *entry {
	if len(s.index) == 0 {
		return nil
	}
	if e := s.match(&s.index[p.i1], p.tag, k); e != nil || !s.overflowed(p.i1) {
		return e
	}
	return s.match(&s.index[p.i2], p.tag, k)
}

// lookup returns the live slot of k, at its place p, and its sequence
// number, dropping it if expired: past maxAge, or an in-flight mark past
// its TTL mark.
func (s *shard) lookup(k Key, p place, now, maxAge, mark int64) (*slot, uint32) {
	e := s.findAt(k, p)
	if e == nil {
		return nil, 0
	}
	seq := s.seqOf(*e)
	sl := s.at(seq)
	if now-sl.born >= maxAge || (sl.state&slFlight != 0 && now-sl.born >= mark) {
		*e = 0
		s.kill(seq)
		return nil, 0
	}
	return sl, seq
}

// waitOn returns the channel that the end of the in-flight slot seq
// closes, creating it for the first waiter.
func (s *shard) waitOn(seq uint32) <-chan struct{} {
	sl := s.at(seq)
	if sl.state&slWaited == 0 {
		sl.state |= slWaited
		if s.waits == nil {
			s.waits = make(map[uint32]chan struct{})
		}
		s.waits[seq] = make(chan struct{})
	}
	return s.waits[seq]
}

// land ends the mark of the in-flight slot seq, waking its waiters.
func (s *shard) land(seq uint32, sl *slot) {
	if sl.state&slWaited != 0 {
		close(s.waits[seq])
		delete(s.waits, seq)
	}
	if sl.state&slFlight != 0 {
		s.flights--
	}
	sl.state = 0
}

// kill marks the live slot seq dead (its index entry must be cleared or
// left to fall out of the ring), waking the waiters of its mark.
func (s *shard) kill(seq uint32) {
	sl := s.at(seq)
	s.land(seq, sl)
	s.bytes -= EntryOverhead + int64(sl.alen)
	*sl = slot{}
	s.live--
}

// trim evicts the oldest slots while the shard is over its memory budget,
// but never the slot keep (the one just stored): the shard exceeds its
// budget by at most that entry, and by the marks of running requests,
// which it does not evict (see evictOldest): it moves those it meets to
// the new end of the ring, and stops if all the slots are marks. The
// marks' overhead is left out of the count it brings under the budget:
// moving a mark frees nothing, so with marks alone over the budget every
// call would move every mark ahead of keep, O(marks) per request; this
// way a mark moves once per round of the ring, as in evictOldest. (The
// expired marks are left out too, which only leaves them to be dropped
// as they reach the old end.)
func (s *shard) trim(keep uint32, now, mark int64) {
	for s.bytes-int64(s.flights)*EntryOverhead > s.budget && s.head != keep && s.head != s.tail {
		if !s.running(now, mark) {
			s.popHead()
		} else if s.flights < s.tail-s.head {
			s.moveHead()
		} else {
			return
		}
	}
}

// evictOldest drops the oldest slot that is not the in-flight mark of a
// running request, moving the marks it meets on the way to the new end of
// the ring; it reports false, evicting nothing, if every slot is such a
// mark. Evicting a mark would end its flight: a duplicate waiting for it,
// or arriving later, would be First while the request still runs, and the
// handler would run twice at once. A mark moves once per round of the
// ring, so this is O(1) amortised while marks are a minority of the
// shard. When they are all the shard holds, it evicts one whose mark TTL
// is past, wherever it is (see evictExpiredMark).
func (s *shard) evictOldest(now, mark int64) bool {
	for s.running(now, mark) {
		if s.flights >= s.tail-s.head {
			return s.evictExpiredMark(now, mark)
		}
		s.moveHead()
	}
	s.popHead()
	return true
}

// evictExpiredMark evicts a mark whose TTL is past from a shard whose
// slots are all marks, the oldest running; it reports false if none is.
// Moves leave the ring out of birth order, so an expired mark may be
// behind a running one: it looks through them all (O(limit)), moves those
// before it to the new end and drops it. Finding none, it records when
// the first of them expires (s.noExpiry), and looks again only from
// then: a shard full of running requests refuses the others in O(1),
// and is looked through once per mark that expires (marks that end
// leave room, which takes no look).
func (s *shard) evictExpiredMark(now, mark int64) bool {
	if now < s.noExpiry {
		return false
	}
	n := s.tail - s.head
	first := int64(math.MaxInt64)
	for i := range n {
		sl := s.at(s.head + i)
		if now-sl.born >= mark {
			for range i {
				s.moveHead()
			}
			s.popHead()
			return true
		}
		first = min(first, sl.born)
	}
	s.noExpiry = first + mark
	return false
}

// running reports whether the oldest slot is the in-flight mark of a
// request that may still be running: its mark TTL is not past.
func (s *shard) running(now, mark int64) bool {
	h := &s.ring[s.hpos]
	return h.state&slFlight != 0 && now-h.born < mark
}

// moveHead moves the oldest slot, an in-flight mark, to the new end of the
// ring under the next sequence number. Its waiters' channel moves with it;
// its owner finds it by key and birth time (see Memory.slotOf). Its index
// entry for the old sequence number is free once the head has passed it.
func (s *shard) moveHead() {
	old, sl := s.head, s.ring[s.hpos]
	s.ring[s.hpos] = slot{} // as popHead leaves it; the tail may be here
	s.head++
	s.hpos = (s.hpos + 1) & (len(s.ring) - 1)
	seq := s.nextSeq()
	*s.at(seq) = sl
	if sl.state&slWaited != 0 {
		s.waits[seq] = s.waits[old]
		delete(s.waits, old)
	}
	s.indexPut(s.placeOf(sl.key), seq)
}

// nextSeq takes the sequence number of a new slot at the tail, with the
// upkeep of the index that each sequence number brings.
func (s *shard) nextSeq() uint32 {
	seq := s.tail
	if seq&(uint32(len(s.ring))-1) == 0 {
		s.newEpoch(seq)
	}
	if seq%sweepEvery == 0 {
		s.sweep(seq)
	}
	s.tail++
	return seq
}

// remove kills the live slot seq holding k and frees its index entry.
func (s *shard) remove(k Key, seq uint32) {
	tag, i1, i2 := s.hashes(k)
	bs := [2]*bucket{&s.index[i1], &s.index[i2]}
	n := 1
	if s.overflowed(i1) {
		n = 2
	}
	want := s.entryOf(tag, seq)
	for _, b := range bs[:n] {
		for i := range b {
			if b[i] == want {
				b[i] = 0
			}
		}
	}
	s.kill(seq)
}

// popHead drops the oldest slot; its index entry becomes free by itself.
func (s *shard) popHead() {
	if !s.ring[s.hpos].key.IsZero() {
		s.kill(s.head)
	}
	s.head++
	s.hpos = (s.hpos + 1) & (len(s.ring) - 1)
}

// insert appends a slot for k, at its place p, which must not be held,
// with answer (none if empty) or, if state is slFlight, as an in-flight
// mark; it returns its sequence number, or false if the shard is full of
// running requests' marks (see evictOldest).
func (s *shard) insert(k Key, p place, answer []byte, state uint8, now, maxAge, mark int64) (uint32, bool) {
	for i := 0; i < maxPopPerInsert && s.head != s.tail; i++ {
		h := &s.ring[s.hpos]
		if !h.key.IsZero() && now-h.born < maxAge {
			break
		}
		s.popHead()
	}
	n := int(s.tail - s.head)
	if n >= s.limit {
		if !s.evictOldest(now, mark) {
			return 0, false
		}
		n--
	}
	if n == len(s.ring) {
		s.grow()
	}
	if p.n != uint32(len(s.index)) { // grown since p was computed
		p = s.placeOf(k)
	}
	seq := s.nextSeq()
	sl := s.at(seq)
	// Field by field: a composite literal is built on the stack and
	// copied, whose reads of its partial writes the processor cannot
	// forward (a stall of some 10% of a cached insertion).
	sl.key, sl.born, sl.state = k, now, state
	sl.chunk, sl.off, sl.alen = 0, 0, 0
	s.live++
	if state&slFlight != 0 {
		s.flights++
	}
	s.bytes += EntryOverhead + int64(len(answer))
	s.indexPut(p, seq)
	if len(answer) > 0 {
		s.put(seq, sl, answer)
	}
	if s.bytes > s.budget {
		s.trim(seq, now, mark)
	}
	return seq, true
}

// free returns the first free entry of b, or nil: 0, or whose sequence
// number is not in the ring (inUse, with the ring's bounds in registers:
// the entry's distance back from the tail is not in [1, tail-head]).
func (s *shard) free(b *bucket) *entry {
	tail, mask, n := s.tail, uint32(1)<<s.sbits-1, s.tail-s.head
	for i := range b {
		if e := uint32(b[i]); e == 0 || (tail-e)&mask-1 >= n {
			return &b[i]
		}
	}
	return nil
}

// indexPut adds seq, the slot of a key at place p, to the key's first
// bucket, or if it is full of live entries to its second bucket, setting
// the first's overflow bit. If both are full, which at load <= 1/4 does not
// happen in practice, the oldest of their entries is evicted.
func (s *shard) indexPut(p place, seq uint32) {
	tag, i1, i2 := p.tag, p.i1, p.i2
	b1, b2 := &s.index[i1], &s.index[i2]
	e := s.free(b1)
	if e == nil {
		e = s.free(b2)
		if e == nil {
			// Both full of live entries: evict the oldest.
			e = &b1[0]
			for _, b := range [2]*bucket{b1, b2} {
				for i := range b {
					if c := &b[i]; s.seqOf(*c)-s.head < s.seqOf(*e)-s.head {
						e = c
					}
				}
			}
			s.kill(s.seqOf(*e))
		}
		if !inBucket(b1, e) { // b2 may be b1 in a one-bucket index
			s.setOverflow(i1, seq)
		}
	}
	*e = s.entryOf(tag, seq)
}

// inBucket reports whether e is one of b's entries.
func inBucket(b *bucket, e *entry) bool {
	for i := range b {
		if &b[i] == e {
			return true
		}
	}
	return false
}

// grow doubles the ring (up to the shard's limit) and rebuilds the index.
func (s *shard) grow() {
	size := max(2*len(s.ring), 16)
	if size > s.limit {
		size = 1 << bits.Len(uint(s.limit-1))
	}
	r := make([]slot, size)
	n := int(s.tail - s.head)
	for i := 0; i < n; i++ {
		r[i] = *s.at(s.head + uint32(i))
	}
	s.ring = r
	s.hpos = 0
	s.shift = uint8(bits.TrailingZeros(uint(size)))
	s.sbits = max(s.shift+2, 8)
	if want := max(size/4, 1); want <= cap(s.indexMem) {
		s.index = s.indexMem[:want]
		clear(s.index)
	} else {
		s.index = make([]bucket, want)
	}
	s.over = make([]uint64, 2*((len(s.index)+63)/64))
	for i := 0; i < n; i++ {
		seq := s.head + uint32(i)
		if sl := s.at(seq); !sl.key.IsZero() {
			s.indexPut(s.placeOf(sl.key), seq)
		}
	}
}

func (m *Memory) shardOf(k Key) int {
	return int(uint64(binary.LittleEndian.Uint32(k[:4])) & m.mask)
}

// lockAll locks the distinct shards of keys in ascending order (no
// deadlock) and returns their indexes.
func (m *Memory) lockAll(keys []Key, buf []int) []int {
	switch len(keys) { // the common cases, without the search and sort
	case 1:
		i := m.shardOf(keys[0])
		m.shards[i].mu.Lock()
		return append(buf[:0], i)
	case 2:
		i, j := m.shardOf(keys[0]), m.shardOf(keys[1])
		if i > j {
			i, j = j, i
		}
		m.shards[i].mu.Lock()
		if i == j {
			return append(buf[:0], i)
		}
		m.shards[j].mu.Lock()
		return append(buf[:0], i, j)
	}
	idx := buf[:0]
	for _, k := range keys {
		i := m.shardOf(k)
		if !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	if len(idx) > 1 {
		slices.Sort(idx)
	}
	for _, i := range idx {
		m.shards[i].mu.Lock()
	}
	return idx
}

func (m *Memory) unlockAll(idx []int) {
	for _, i := range idx {
		m.shards[i].mu.Unlock()
	}
}

// now returns nanoseconds since m.base; with the default clock this is
// monotonic, so wall clock steps do not expire or prolong entries, and
// coarse (see coarseClock): one atomic load.
func (m *Memory) now() int64 {
	if m.clk != nil {
		return m.clk.now()
	}
	return int64(m.cfg.now().Sub(m.base))
}

// nowExact is now without the coarse clock's lag, for a duplicate waking
// from its wait at a mark's deadline.
func (m *Memory) nowExact() int64 {
	if m.clk != nil {
		return m.clk.exact()
	}
	return m.now()
}

// slabSize is the number of Outcomes allocated at once by newOutcome: as
// many as fit in the allocator's 2048-byte size class, with the 8-byte
// header that the runtime puts before an object over 512 bytes holding
// pointers (14 of 144 bytes). A slab just over a class boundary would
// cost every Begin its share of the gap to the next class (16 Outcomes
// of 144 bytes land in the 2688-byte class: 168 bytes per Begin, not 146).
const slabSize = (2048 - 8) / int(unsafe.Sizeof(Outcome{}))

// newOutcome returns a zero Outcome for Begin. They are allocated slabSize
// at a time, which takes the allocation off the path of most Begin calls.
// Each is handed out once and never reused, so an Outcome stays valid (and
// its Complete and Abandon stay no-ops once finished) for as long as its
// holder keeps it; the price is that a slab's memory is freed only when
// none of its Outcomes is referenced any more (at most slabSize-1 others,
// about 2 KB, kept alive by a long-held Outcome; the ring refers to none).
// s must be locked.
func (s *shard) newOutcome() *Outcome {
	if len(s.slab) == 0 {
		s.slab = make([]Outcome, slabSize)
	}
	o := &s.slab[0]
	s.slab = s.slab[1:]
	return o
}

// Begin implements Store.
func (m *Memory) Begin(ctx context.Context, keys ...Key) (*Outcome, error) {
	var kbuf [2]Key
	keys, err := uniqueKeys(keys, kbuf[:0])
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var o *Outcome
	done, left := m.try(keys, m.now(), &o)
	if done != nil {
		if err := m.wait(ctx, keys, &o, done, left); err != nil {
			return nil, err
		}
	}
	switch o.kind {
	case notKept:
		return nil, ErrAnswerNotKept
	case noRoom:
		return nil, ErrFull
	}
	return o, nil
}

// BeginInto implements ReusingStore: Begin without allocating.
func (m *Memory) BeginInto(ctx context.Context, o *Outcome, keys ...Key) error {
	*o = Outcome{}
	if len(keys) == 1 { // setKeys, without its search for repeats
		if keys[0].IsZero() {
			return ErrZeroKey
		}
		o.keyBuf[0] = keys[0]
		o.keys = o.keyBuf[:1]
	} else if err := o.setKeys(keys); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done, left := m.try(o.keys, m.now(), &o)
	if done != nil {
		if err := m.wait(ctx, o.keys, &o, done, left); err != nil {
			return err
		}
	}
	switch o.kind {
	case notKept:
		*o = Outcome{}
		return ErrAnswerNotKept
	case noRoom:
		*o = Outcome{}
		return ErrFull
	}
	return nil
}

// try looks keys up at time now and, unless one is held by a request in
// flight, fills the Outcome *op: Duplicate with the stored answer, or First
// after marking every key in flight. Otherwise it returns a channel closed
// when that flight ends and the time left until its mark expires. A nil
// *op is given an Outcome from the slab, holding keys.
func (m *Memory) try(keys []Key, now int64, op **Outcome) (<-chan struct{}, time.Duration) {
	if len(keys) == 1 {
		return m.tryOne(keys, now, op)
	}
	var buf [4]int
	idx := m.lockAll(keys, buf[:])
	var pbuf [2]place
	ps := pbuf[:0]
	for _, k := range keys {
		s := &m.shards[m.shardOf(k)]
		p := s.placeOf(k)
		ps = append(ps, p)
		s.touch(p)
	}
	// The Outcome is taken after the index loads were started, so that
	// it overlaps their cache misses.
	o := *op
	if o == nil {
		o = m.shards[idx[0]].newOutcome()
		o.keys = append(o.keyBuf[:0], keys...) // keys stays on the stack
		*op = o
	}
	var busy *shard // holder of the first in-flight slot found
	var busySeq uint32
	var busyBorn int64
	for i, k := range keys {
		s := &m.shards[m.shardOf(k)]
		sl, seq := s.lookup(k, ps[i], now, m.maxAge, m.mark)
		if sl == nil {
			continue
		}
		if sl.state&slFlight == 0 {
			if sl.state&slNotKept != 0 {
				o.kind = notKept
			} else {
				// A copy: the arena's bytes are reused once the
				// entry is evicted.
				o.kind, o.answer = Duplicate, append([]byte(nil), s.answerOf(sl)...)
			}
			m.unlockAll(idx)
			return nil, 0
		}
		if busy == nil {
			busy, busySeq, busyBorn = s, seq, sl.born
		}
	}
	if busy == nil {
		o.seq = o.seqBuf[:0]
		for i, k := range keys {
			// A place computed before the shard grew is
			// computed anew by insert.
			seq, ok := m.shards[m.shardOf(k)].insert(k, ps[i], nil, slFlight, now, m.maxAge, m.mark)
			if !ok {
				for j, seq := range o.seq { // the marks set so far
					m.shards[m.shardOf(keys[j])].remove(keys[j], seq)
				}
				m.unlockAll(idx)
				o.kind = noRoom
				return nil, 0
			}
			o.seq = append(o.seq, seq)
		}
		m.unlockAll(idx)
		o.kind, o.fin, o.born = First, m, now
		return nil, 0
	}
	done := busy.waitOn(busySeq)
	left := time.Duration(busyBorn + m.mark - now)
	m.unlockAll(idx)
	return done, left
}

// tryOne is try for one key.
func (m *Memory) tryOne(keys []Key, now int64, op **Outcome) (<-chan struct{}, time.Duration) {
	k := keys[0]
	s := &m.shards[m.shardOf(k)]
	s.mu.Lock()
	p := s.placeOf(k)
	s.touch(p)
	o := *op
	if o == nil {
		o = s.newOutcome()
		o.keys = append(o.keyBuf[:0], k)
		*op = o
	}
	sl, seq := s.lookup(k, p, now, m.maxAge, m.mark)
	switch {
	case sl == nil:
		seq, ok := s.insert(k, p, nil, slFlight, now, m.maxAge, m.mark)
		s.mu.Unlock()
		if !ok {
			o.kind = noRoom
			return nil, 0
		}
		o.seq = append(o.seqBuf[:0], seq)
		o.kind, o.fin, o.born = First, m, now
		return nil, 0
	case sl.state&slFlight == 0:
		if sl.state&slNotKept != 0 {
			o.kind = notKept
		} else {
			o.kind, o.answer = Duplicate, append([]byte(nil), s.answerOf(sl)...)
		}
		s.mu.Unlock()
		return nil, 0
	}
	done := s.waitOn(seq)
	left := time.Duration(sl.born + m.mark - now)
	s.mu.Unlock()
	return done, left
}

// wait is Begin's slow path: a key is held by a request in flight. It waits
// for that request to end or its mark to expire, whichever comes first,
// and tries again, until ctx ends.
func (m *Memory) wait(ctx context.Context, keys []Key, op **Outcome, done <-chan struct{}, left time.Duration) error {
	timer := time.NewTimer(left)
	defer timer.Stop()
	for {
		select {
		case <-done:
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		done, left = m.try(keys, m.nowExact(), op)
		if done == nil {
			return nil
		}
		timer.Reset(left)
	}
}

// slotOf returns the slot of o's i-th key, and its sequence number, if it
// is still o's in-flight mark: the slot of that sequence number, holding
// the key, in flight; or, if the mark has been moved (see evictOldest),
// the key's in-flight slot born when o's marks were. A mark that took the
// key over was born after o's expired, so it is never taken for o's.
func (m *Memory) slotOf(o *Outcome, i int, k Key) (*slot, uint32) {
	s := &m.shards[m.shardOf(k)]
	seq := o.seq[i]
	if sl := s.held(seq, k); sl != nil && sl.state&slFlight != 0 {
		return sl, seq
	}
	if e := s.find(k); e != nil {
		seq = s.seqOf(*e)
		if sl := s.at(seq); sl.state&slFlight != 0 && sl.born == o.born {
			return sl, seq
		}
	}
	return nil, 0
}

// complete stores answer under every key of o, or under none: if another
// request has taken any of them over (its mark expired and a Begin took
// the key, which it owns now, in flight or answered), nothing is stored
// and o's marks still held are dropped, as Abandon drops them, so that the
// request is answered by the one owner of its keys (see ErrMarkLost).
func (m *Memory) complete(o *Outcome, answer []byte) error {
	var state uint8
	ans := answer
	tooLarge := len(answer) > m.cfg.maxAnswer
	if tooLarge {
		state = slNotKept // a marker: answered, answer not kept
		ans = nil
	}
	var buf [4]int
	idx := m.lockAll(o.keys, buf[:])
	if len(o.keys) > 1 && m.takenOver(o) {
		m.release(o)
		m.unlockAll(idx)
		return ErrMarkLost
	}
	lost := false
	for i, k := range o.keys {
		s := &m.shards[m.shardOf(k)]
		if sl, seq := m.slotOf(o, i, k); sl != nil {
			if len(ans) > 0 {
				s.put(seq, sl, ans)
			}
			s.land(seq, sl)
			sl.state = state
			s.bytes += int64(len(ans))
			if s.bytes > s.budget {
				s.trim(seq, m.now(), m.mark)
			}
			continue
		}
		if s.find(k) != nil {
			// Taken over by another request, which owns it now. Only
			// a lone key gets here (see takenOver): storing the keys
			// before it evicts, at most, marks of o.
			lost = true
			continue
		}
		// Expired (and dropped) while in flight: store anew. With no
		// room (the shard is full of running requests' marks), it is as
		// if stored and evicted at once.
		_, _ = s.insert(k, s.placeOf(k), ans, state, m.now(), m.maxAge, m.mark)
	}
	m.unlockAll(idx)
	switch {
	case lost:
		return ErrMarkLost
	case tooLarge:
		return ErrAnswerTooLarge
	}
	return nil
}

// takenOver reports whether another request holds a key of o, whose mark
// it has taken over. The shards of o's keys must be locked.
func (m *Memory) takenOver(o *Outcome) bool {
	for i, k := range o.keys {
		if sl, _ := m.slotOf(o, i, k); sl == nil && m.shards[m.shardOf(k)].find(k) != nil {
			return true
		}
	}
	return false
}

// release drops the marks of o still held, waking their waiters. The
// shards of o's keys must be locked.
func (m *Memory) release(o *Outcome) {
	for i, k := range o.keys {
		if sl, seq := m.slotOf(o, i, k); sl != nil {
			m.shards[m.shardOf(k)].remove(k, seq)
		}
	}
}

func (m *Memory) abandon(o *Outcome) error {
	var buf [4]int
	idx := m.lockAll(o.keys, buf[:])
	m.release(o)
	m.unlockAll(idx)
	return nil
}

// Len returns the number of entries held, including expired entries not yet
// dropped.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += s.live
		s.mu.Unlock()
	}
	return n
}

// Bytes returns what the entries held count against the memory budget
// (see WithMaxBytes), including expired entries not yet dropped.
func (m *Memory) Bytes() int64 {
	var n int64
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += s.bytes
		s.mu.Unlock()
	}
	return n
}

// Footprint returns the bytes of memory the store holds: its rings and
// indexes, on the Go heap, and its answer arenas, mapped outside it where
// the system allows (so that runtime.MemStats does not show them). It is
// what a full store costs, whatever its entries; compare Bytes, what the
// entries count against the budget.
func (m *Memory) Footprint() int64 {
	var n int64
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += int64(len(s.ring))*int64(unsafe.Sizeof(slot{})) + int64(len(s.index))*int64(unsafe.Sizeof(bucket{})) +
			int64(len(s.over))*8 + s.ar.size
		s.mu.Unlock()
	}
	return n
}

// Close implements Store. It stops the clock's timer (which also stops by
// itself when the store is idle); the store remains usable.
func (m *Memory) Close() error {
	if m.clk != nil {
		m.clk.stop()
	}
	return nil
}
