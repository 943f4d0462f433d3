package loadbalance

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// conv is one remembered conversation (Session-Id). Its fields other than
// key and hash are updated atomically by Pick on any goroutine.
type conv struct {
	key  string // the Session-Id, retained as given (strings are immutable)
	hash uint64 // maphash of key
	// tag is generation<<tagGenShift | (slot+1)<<8 | bucket: the table
	// generation under which the conversation started, the slot it was
	// diverted to if it started while its bucket's server was suspended
	// (0 if not), and the hash bucket of its first request.
	tag  atomic.Uint64
	last atomic.Int64 // last use, ns since the Balancer's epoch
}

// tagGenShift leaves room for a diverted slot + 1 (at most MaxSlots).
const tagGenShift = 19

var _ [1<<(tagGenShift-8) - 1 - MaxSlots]struct{} // MaxSlots fits

func packTag(gen uint64, bucket uint8) uint64 { return gen<<tagGenShift | uint64(bucket) }

// packDiverted is packTag for a conversation diverted to slot.
func packDiverted(gen uint64, slot int, bucket uint8) uint64 {
	return gen<<tagGenShift | uint64(slot+1)<<8 | uint64(bucket)
}

func tagGen(tag uint64) uint64 { return tag >> tagGenShift }

// tagDiverted returns the slot a conversation was diverted to, or noSlot.
func tagDiverted(tag uint64) int { return int(tag>>8&(1<<(tagGenShift-8)-1)) - 1 }

// sealed fills the empty slots of a session table that is being replaced, so
// that no insert can land in it after the copy (see rehash).
var sealed = &conv{}

// sessTable is a fixed-capacity open-addressing (linear probing) hash table
// of *conv. Readers probe it without locks; inserts claim an empty slot with
// a CAS. Entries are never removed in place: rehash copies the live ones to a
// fresh table and swaps it in.
type sessTable struct {
	slots []atomic.Pointer[conv]
	mask  uint64
	n     atomic.Int64 // slots claimed
}

func newSessTable(capacity int) *sessTable {
	return &sessTable{slots: make([]atomic.Pointer[conv], capacity), mask: uint64(capacity - 1)}
}

const minSessCap = 1024

// sessions is the conversation memory: lock-free lookups and inserts, with
// growth and purging done by rehash under mu. Pick only ever TryLocks mu.
type sessions struct {
	seed      maphash.Seed
	tab       atomic.Pointer[sessTable]
	maxCap    int           // largest slot count (power of two, >= 2*max)
	max       int           // entries limit (Options.MaxSessions)
	untracked atomic.Uint64 // first-seen sessions we could not remember
	mu        sync.Mutex    // serializes rehash
}

func (s *sessions) init(max int) {
	s.seed = maphash.MakeSeed()
	s.max = max
	s.maxCap = minSessCap
	for s.maxCap < 2*max {
		s.maxCap *= 2
	}
	s.tab.Store(newSessTable(minSessCap))
}

func (s *sessions) hash(key string) uint64 { return maphash.String(s.seed, key) }

// find returns the entry for key, or nil. It never locks or allocates.
func (t *sessTable) find(h uint64, key string) *conv {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		p := t.slots[i].Load()
		if p == nil || p == sealed {
			return nil
		}
		if p.hash == h && p.key == key {
			return p
		}
	}
}

func (s *sessions) lookup(h uint64, key string) *conv { return s.tab.Load().find(h, key) }

// insert stores c (whose key and hash are set) unless an entry for the same
// key got there first, and returns the entry now in the memory, or nil when
// the memory is full or being rehashed (the conversation then simply goes
// unremembered until its next request). It never blocks: growth happens
// here only if mu is free (TryLock), costing this one call O(entries).
func (s *sessions) insert(c *conv, now, idle int64) *conv {
	for attempt := 0; attempt < 3; attempt++ {
		t := s.tab.Load()
		n := t.n.Load()
		if n >= int64(len(t.slots)/2) && len(t.slots) < s.maxCap && s.mu.TryLock() {
			if s.tab.Load() == t {
				s.rehash(now, idle, true)
			}
			s.mu.Unlock()
			continue
		}
		if n >= int64(len(t.slots))*3/4 || n >= int64(s.max) {
			break
		}
		for i := c.hash & t.mask; ; i = (i + 1) & t.mask {
			p := t.slots[i].Load()
			if p == nil {
				if t.slots[i].CompareAndSwap(nil, c) {
					t.n.Add(1)
					return c
				}
				p = t.slots[i].Load()
			}
			if p == sealed {
				break // being replaced: retry on the new table
			}
			if p.hash == c.hash && p.key == c.key {
				return p
			}
		}
	}
	s.untracked.Add(1)
	return nil
}

// rehash copies the entries used within idle of now into a fresh table
// (twice as large when grow is set) and publishes it. Caller holds s.mu. It
// first seals every empty slot of the old table, so an insert racing with
// the copy either lands before its slot is read (and is copied) or fails and
// retries on the new table. Entries are shared by pointer, so updates made
// through the old table stay visible. It returns the live entries and the
// number of idle entries it dropped.
func (s *sessions) rehash(now, idle int64, grow bool) (live []*conv, dropped int) {
	old := s.tab.Load()
	live = make([]*conv, 0, old.n.Load())
	for i := range old.slots {
		for {
			p := old.slots[i].Load()
			if p == nil && !old.slots[i].CompareAndSwap(nil, sealed) {
				continue
			}
			if p != nil && p != sealed {
				if now-p.last.Load() <= idle {
					live = append(live, p)
				} else {
					dropped++
				}
			}
			break
		}
	}
	capacity := minSessCap
	for capacity < 2*len(live) && capacity < s.maxCap {
		capacity *= 2
	}
	if grow && capacity < 2*len(old.slots) && 2*len(old.slots) <= s.maxCap {
		capacity = 2 * len(old.slots)
	}
	nt := newSessTable(capacity)
	for _, p := range live {
		i := p.hash & nt.mask
		for nt.slots[i].Load() != nil {
			i = (i + 1) & nt.mask
		}
		nt.slots[i].Store(p)
	}
	nt.n.Store(int64(len(live)))
	s.tab.Store(nt)
	return live, dropped
}

// sweep purges entries idle longer than idle and returns how many it
// removed, how many live entries each generation has (diverted ones
// apart: they need no table) and the buckets of the live diverted ones. It
// rehashes only when something is to be removed. Caller must not hold
// s.mu.
func (s *sessions) sweep(now, idle int64) (removed int, perGen map[uint64]int, diverted bucketSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	perGen = make(map[uint64]int)
	count := func(p *conv) {
		if tag := p.tag.Load(); tagDiverted(tag) != noSlot {
			diverted.add(int(uint8(tag)))
		} else {
			perGen[tagGen(tag)]++
		}
	}
	t := s.tab.Load()
	stale := 0
	for i := range t.slots {
		p := t.slots[i].Load()
		if p == nil || p == sealed {
			continue
		}
		if now-p.last.Load() > idle {
			stale++
			continue
		}
		count(p)
	}
	if stale == 0 {
		return 0, perGen, diverted
	}
	live, removed := s.rehash(now, idle, false)
	clear(perGen)
	diverted = bucketSet{}
	for _, p := range live {
		count(p)
	}
	return removed, perGen, diverted
}

func (s *sessions) count() int { return int(s.tab.Load().n.Load()) }
