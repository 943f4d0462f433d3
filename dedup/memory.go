package dedup

import (
	"context"
	"encoding/binary"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// Memory is the in-process Store: a power-of-two number of shards, each a
// map from Key to the entry's position in a FIFO ring ordered by insertion
// time. Lookup, insertion and eviction are O(1): expired entries are dropped
// lazily when looked up and, a few per insertion, from the old end of the
// ring; when a shard is full its oldest entry is evicted.
//
// An entry is about 48 bytes in the ring plus about 30 in the map, plus the
// answer bytes. Abandoned or taken-over entries leave a dead slot that
// counts towards the bound until it reaches the old end of the ring.
type Memory struct {
	cfg    config
	base   time.Time // clock origin: times are nanoseconds since base
	maxAge int64
	mark   int64
	mask   uint64
	shards []shard
}

var _ Store = (*Memory)(nil)

// NewMemory returns an in-memory Store. It honours WithMaxEntries,
// WithMaxAge, WithMarkTTL, WithClock and WithShards.
func NewMemory(opts ...Option) *Memory {
	cfg := newConfig(opts)
	n := 1 << bits.Len(uint(cfg.shards-1)) // round up to a power of two
	for n > 1 && n > cfg.maxEntries {
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
	for i := range m.shards {
		limit := cfg.maxEntries / n
		if i < cfg.maxEntries%n {
			limit++
		}
		m.shards[i].limit = limit
		m.shards[i].m = make(map[Key]uint32)
	}
	return m
}

// flight is the in-flight mark shared by the keys of one First request; its
// identity is the owner token.
type flight struct {
	deadline int64 // Memory.now() value
	mu       sync.Mutex
	ended    bool
	done     chan struct{} // created by the first waiter
}

// wait returns a channel closed when the flight ends.
func (f *flight) wait() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done == nil {
		f.done = make(chan struct{})
		if f.ended {
			close(f.done)
		}
	}
	return f.done
}

// end wakes the waiters; idempotent.
func (f *flight) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ended {
		f.ended = true
		if f.done != nil {
			close(f.done)
		}
	}
}

// slot is one ring entry. A slot whose key is zero is dead.
type slot struct {
	key    Key
	answer string  // set when completed
	born   int64   // Memory.now() at first arrival
	fl     *flight // non-nil while in flight
}

type shard struct {
	mu    sync.Mutex
	m     map[Key]uint32 // key -> sequence number of its slot
	ring  []slot         // power-of-two length, grown up to limit
	head  uint32         // sequence number of the oldest slot (wraps)
	tail  uint32         // sequence number of the next slot (wraps)
	hpos  int            // ring index of head
	limit int
	_     [40]byte // keep shards on separate cache lines
}

// maxPopPerInsert bounds the dead or expired slots dropped per insertion,
// keeping every operation O(1).
const maxPopPerInsert = 8

func (s *shard) at(seq uint32) *slot {
	return &s.ring[(s.hpos+int(seq-s.head))&(len(s.ring)-1)]
}

// held returns the slot of sequence number seq if it is still in the ring
// and holds key k.
func (s *shard) held(seq uint32, k Key) *slot {
	if seq-s.head >= s.tail-s.head {
		return nil
	}
	if sl := s.at(seq); sl.key == k {
		return sl
	}
	return nil
}

// lookup returns the live slot of k, dropping it if expired.
func (s *shard) lookup(k Key, now, maxAge int64) *slot {
	seq, ok := s.m[k]
	if !ok {
		return nil
	}
	sl := s.at(seq)
	if now-sl.born >= maxAge || (sl.fl != nil && now >= sl.fl.deadline) {
		s.kill(sl)
		return nil
	}
	return sl
}

// kill removes a live slot from the map and marks it dead.
func (s *shard) kill(sl *slot) {
	delete(s.m, sl.key)
	if sl.fl != nil {
		sl.fl.end()
	}
	*sl = slot{}
}

// popHead drops the oldest slot.
func (s *shard) popHead() {
	sl := &s.ring[s.hpos]
	if !sl.key.IsZero() {
		s.kill(sl)
	}
	s.head++
	s.hpos = (s.hpos + 1) & (len(s.ring) - 1)
}

// insert appends a slot for k, which must not be in the map, and returns
// its sequence number.
func (s *shard) insert(k Key, answer string, fl *flight, now, maxAge int64) uint32 {
	for i := 0; i < maxPopPerInsert && s.head != s.tail; i++ {
		h := &s.ring[s.hpos]
		if !h.key.IsZero() && now-h.born < maxAge {
			break
		}
		s.popHead()
	}
	n := int(s.tail - s.head)
	if n >= s.limit {
		s.popHead()
		n--
	}
	if n == len(s.ring) {
		s.grow()
	}
	seq := s.tail
	s.m[k] = seq
	*s.at(seq) = slot{key: k, answer: answer, born: now, fl: fl}
	s.tail++
	return seq
}

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
}

func (m *Memory) shardOf(k Key) int {
	return int(binary.LittleEndian.Uint64(k[:8]) & m.mask)
}

// lockAll locks the distinct shards of keys in ascending order (no
// deadlock) and returns their indexes.
func (m *Memory) lockAll(keys []Key, buf []int) []int {
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
// monotonic, so wall clock steps do not expire or prolong entries.
func (m *Memory) now() int64 { return int64(m.cfg.now().Sub(m.base)) }

// memFirst is an Outcome of the memory store together with its in-flight
// mark and the slots of its first keys, allocated at once.
type memFirst struct {
	o   Outcome
	fl  flight
	seq [2]uint32 // slot sequence numbers of o.keys[0:2]
}

// Begin implements Store.
func (m *Memory) Begin(ctx context.Context, keys ...Key) (*Outcome, error) {
	mf := &memFirst{}
	o := &mf.o
	if err := o.setKeys(keys); err != nil {
		return nil, err
	}
	keys = o.keys
	var buf [4]int
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		idx := m.lockAll(keys, buf[:])
		now := m.now()
		var busy *flight
		for _, k := range keys {
			sl := m.shards[m.shardOf(k)].lookup(k, now, m.maxAge)
			if sl == nil {
				continue
			}
			if sl.fl == nil {
				o.kind, o.answer = Duplicate, []byte(sl.answer)
				m.unlockAll(idx)
				return o, nil
			}
			if busy == nil {
				busy = sl.fl
			}
		}
		if busy == nil {
			mf.fl.deadline = now + m.mark
			for i, k := range keys {
				seq := m.shards[m.shardOf(k)].insert(k, "", &mf.fl, now, m.maxAge)
				if i < len(mf.seq) {
					mf.seq[i] = seq
				}
			}
			m.unlockAll(idx)
			o.kind, o.st, o.token = First, m, mf
			return o, nil
		}
		done := busy.wait()
		left := time.Duration(busy.deadline - now)
		m.unlockAll(idx)
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-done:
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// slotOf returns the slot of mf's i-th key if it still holds mf's mark.
func (m *Memory) slotOf(mf *memFirst, i int, k Key) *slot {
	s := &m.shards[m.shardOf(k)]
	var sl *slot
	if i < len(mf.seq) {
		sl = s.held(mf.seq[i], k)
	} else if seq, ok := s.m[k]; ok {
		sl = s.at(seq)
	}
	if sl != nil && sl.fl == &mf.fl {
		return sl
	}
	return nil
}

func (m *Memory) complete(o *Outcome, answer []byte) error {
	mf := o.token.(*memFirst)
	ans := string(answer)
	var buf [4]int
	idx := m.lockAll(o.keys, buf[:])
	lost := false
	for i, k := range o.keys {
		if sl := m.slotOf(mf, i, k); sl != nil {
			sl.answer = ans
			sl.fl = nil
			continue
		}
		s := &m.shards[m.shardOf(k)]
		if _, ok := s.m[k]; ok {
			lost = true // taken over by another request, which owns it now
			continue
		}
		// Evicted or expired (and dropped) while in flight: store anew.
		s.insert(k, ans, nil, m.now(), m.maxAge)
	}
	m.unlockAll(idx)
	mf.fl.end()
	if lost {
		return ErrMarkLost
	}
	return nil
}

func (m *Memory) abandon(o *Outcome) error {
	mf := o.token.(*memFirst)
	var buf [4]int
	idx := m.lockAll(o.keys, buf[:])
	for i, k := range o.keys {
		if sl := m.slotOf(mf, i, k); sl != nil {
			m.shards[m.shardOf(k)].kill(sl)
		}
	}
	m.unlockAll(idx)
	mf.fl.end()
	return nil
}

// Len returns the number of entries held, including expired entries not yet
// dropped.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// Close implements Store; the in-memory store needs no cleanup.
func (m *Memory) Close() error { return nil }
