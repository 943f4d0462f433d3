package dedup

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"
)

// mappedBytes counts the bytes of the arena chunks that newChunk mapped
// outside the Go heap and freeChunk has not returned, over all stores.
var mappedBytes atomic.Int64

// arena holds a shard's answers: a ring of byte chunks written in
// completion order, each answer one record (recordHeader, then the answer
// bytes) in one chunk. The chunks refer to nothing, and neither does a
// slot (it names its record by chunk and offset), so the garbage collector
// scans neither the ring nor the answers, and an evicted answer makes no
// garbage: its bytes are reused when the ring comes round to them.
//
// The head is the oldest record that may be live. A record whose slot no
// longer names it is dead; dead records are dropped from the head a few
// per write (see shard.reclaim), so the head stays near the oldest live
// answer and the chunks behind it are free for the tail. The tail moves on
// only to a free chunk: when the next chunk still holds the head, a new
// chunk is inserted in the ring if the arena is under its size bound (so
// the arena grows, one chunk at a time and without copying, to what the
// live answers and the gaps between them need), else the head's records
// are evicted, oldest first, until its chunk is free. Each record is
// written once and dropped once, so every operation is O(1) amortised.
//
// Answers complete out of insertion order (a mark is answered up to the
// mark TTL after it was inserted), so a record can outlive records written
// after it; the gaps that the dead ones leave are reclaimed when the head
// reaches them. The arena's bound is the shard's memory budget plus one
// record, which holds every answer that the budget admits while the gaps
// are smaller than the budget's per-entry overhead.
type arena struct {
	chunks [][]byte // by chunk id
	next   []int32  // ring order: the chunk after chunk id
	end    []int32  // where the records of chunk id end, once the tail has left it
	size   int64    // bytes of all chunks
	max    int64    // bound of size: past it, space is made by evicting
	// minChunk and maxChunk bound the size of a new chunk: minChunk
	// holds the largest record; chunks start at that and double up to
	// maxChunk.
	minChunk, maxChunk int
	hc, ho             int32 // head: chunk id and offset of the oldest record
	tc, to             int32 // tail: chunk id and offset where the next record goes
	owned              *chunkList
}

// chunkList is every chunk of a store's arenas, which it frees once the
// store is unreachable (see NewMemory). It refers to nothing else, so
// that it does not keep the store reachable.
type chunkList struct {
	mu     sync.Mutex
	chunks [][]byte
}

func (l *chunkList) add(c []byte) {
	l.mu.Lock()
	l.chunks = append(l.chunks, c)
	l.mu.Unlock()
}

// free returns the chunks to the operating system.
func (l *chunkList) free() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.chunks {
		freeChunk(c)
	}
	l.chunks = nil
}

// recordHeader is the size of a record's header: the sequence number of
// the slot it was written for and the answer's length, both little-endian
// uint32s.
const recordHeader = 8

// maxArenaChunk is the size beyond which chunks stop doubling, unless a
// record needs more.
const maxArenaChunk = 64 << 10

// init sets the arena's bounds for a shard of the given budget whose
// answers are at most maxAnswer bytes, its chunks to be listed in owned. It
// allocates nothing.
func (a *arena) init(budget int64, maxAnswer int, owned *chunkList) {
	a.owned = owned
	a.minChunk = max(1<<bits.Len(uint(maxAnswer+recordHeader-1)), 1<<10)
	a.maxChunk = max(a.minChunk, min(maxArenaChunk, 1<<max(bits.Len64(uint64(budget/8))-1, 0)))
	a.max = budget + int64(maxAnswer) + recordHeader
}

// empty reports whether the arena holds no record.
func (a *arena) empty() bool { return a.hc == a.tc && a.ho == a.to }

// addChunk inserts a new chunk after the tail's and returns its id.
func (a *arena) addChunk() int32 {
	n := a.minChunk
	if a.size > int64(n) {
		n = int(min(int64(a.maxChunk), int64(1)<<bits.Len64(uint64(a.size-1))))
		n = max(n, a.minChunk)
	}
	id := int32(len(a.chunks))
	c := newChunk(n)
	a.owned.add(c)
	a.chunks = append(a.chunks, c)
	a.end = append(a.end, 0)
	a.size += int64(n)
	if id == 0 {
		a.next = append(a.next, 0)
		return 0
	}
	a.next = append(a.next, a.next[a.tc])
	a.next[a.tc] = id
	return id
}

// record returns the sequence number and answer length of the record at
// the head.
func (a *arena) record() (seq uint32, n int) {
	b := a.chunks[a.hc][a.ho:]
	return binary.LittleEndian.Uint32(b), int(binary.LittleEndian.Uint32(b[4:]))
}

// atChunkEnd reports whether the head is past the last record of a chunk
// the tail has left, and so should move to the next chunk.
func (a *arena) atChunkEnd() bool { return a.hc != a.tc && a.ho == a.end[a.hc] }

// answerOf returns the stored answer of sl, which must hold one. The bytes
// are the arena's: copy them before the shard is unlocked.
func (s *shard) answerOf(sl *slot) []byte {
	off := int(sl.off) + recordHeader
	return s.ar.chunks[sl.chunk][off : off+int(sl.alen)]
}

// owner returns the live slot whose answer is the record at chunk c,
// offset off, which claims to be for sequence number seq; nil if the
// record is dead. A live slot names a record still in the arena, and two
// records never share an offset, so a match is the record's true owner.
func (s *shard) owner(seq uint32, c, off int32) *slot {
	if !s.inRing(seq) {
		return nil
	}
	if sl := s.at(seq); sl.alen != 0 && sl.chunk == c && sl.off == off && !sl.key.IsZero() {
		return sl
	}
	return nil
}

// reclaim drops up to n dead records from the arena's head.
func (s *shard) reclaim(n int) {
	a := &s.ar
	for i := 0; i < n && !a.empty(); i++ {
		if a.atChunkEnd() {
			a.hc, a.ho = a.next[a.hc], 0
			continue
		}
		seq, size := a.record()
		if s.owner(seq, a.hc, a.ho) != nil {
			return
		}
		a.ho += int32(recordHeader + size)
	}
}

// headLive reports whether the arena's head is a record with a live
// owner.
func (s *shard) headLive() bool {
	a := &s.ar
	if a.empty() || a.atChunkEnd() {
		return false
	}
	seq, _ := a.record()
	return s.owner(seq, a.hc, a.ho) != nil
}

// popRecord drops the record at the arena's head, which must not be empty,
// evicting the slot that owns it.
func (s *shard) popRecord() {
	a := &s.ar
	if a.atChunkEnd() {
		a.hc, a.ho = a.next[a.hc], 0
		return
	}
	seq, size := a.record()
	if sl := s.owner(seq, a.hc, a.ho); sl != nil {
		s.remove(sl.key, seq)
	}
	a.ho += int32(recordHeader + size)
}

// put writes answer into the arena as the record of slot seq and makes sl,
// that slot, name it. It may evict the owners of the oldest records (never
// sl, which names no record yet). len(answer) must be in (0, maxAnswer].
func (s *shard) put(seq uint32, sl *slot, answer []byte) {
	a := &s.ar
	s.reclaim(maxPopPerInsert)
	need := int32(recordHeader + len(answer))
	if a.chunks == nil {
		a.addChunk()
	}
	for int(a.to+need) > len(a.chunks[a.tc]) {
		n := a.next[a.tc]
		if n == a.hc { // no free chunk
			switch {
			case a.empty():
				a.ho, a.to = 0, 0 // start the tail's chunk afresh
				continue
			case !s.headLive():
				s.popRecord() // dead: drop it rather than grow
				continue
			case a.size < a.max:
				n = a.addChunk()
			default:
				s.popRecord()
				continue
			}
		}
		a.end[a.tc] = a.to
		a.tc, a.to = n, 0
	}
	b := a.chunks[a.tc][a.to:]
	binary.LittleEndian.PutUint32(b, seq)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(answer)))
	copy(b[recordHeader:], answer)
	sl.chunk, sl.off, sl.alen = a.tc, a.to, uint32(len(answer))
	a.to += need
}
