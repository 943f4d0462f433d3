package peer

// pendingTable maps the Hop-by-Hop ids of the requests pending on a
// connection to their calls. A connection hands its ids out in sequence
// and answers come back about in order, so the live ids sit in a window
// little wider than their number: a direct-mapped array of at least twice
// that many slots holds nearly all of them, each in the slot its low bits
// name, found without hashing. An id whose slot is taken (a request left
// pending far behind the others) goes to a map. On the client's path,
// where every request is put, found and deleted once, that measured
// cheaper than a map alone (BenchmarkPendingTable).
//
// The array grows with the number pending, up to maxPendingSlots, and is
// kept; a connection that never had a request pending (an idle peer's)
// has none. Not safe for concurrent use: the connection's mu guards it.
type pendingTable struct {
	slots []pendingSlot // nil, or a power of two long
	over  map[uint32]*dcall
	n     int
}

type pendingSlot struct {
	id uint32
	cl *dcall // nil: free
}

// maxPendingSlots bounds the array (16 bytes a slot: 64 KiB); past it the
// ids that do not fit go to the map.
const maxPendingSlots = 4096

func (t *pendingTable) len() int { return t.n }

// put adds id, which must not be in t.
func (t *pendingTable) put(id uint32, cl *dcall) {
	if 2*(t.n+1) > len(t.slots) && len(t.slots) < maxPendingSlots {
		t.grow()
	}
	t.n++
	if s := &t.slots[id&uint32(len(t.slots)-1)]; s.cl == nil {
		*s = pendingSlot{id, cl}
		return
	}
	if t.over == nil {
		t.over = make(map[uint32]*dcall)
	}
	t.over[id] = cl
}

// grow doubles the array (8 slots at first) and places every entry again.
func (t *pendingTable) grow() {
	old, over := t.slots, t.over
	t.slots = make([]pendingSlot, max(8, 2*len(old)))
	t.over, t.n = nil, 0
	for _, s := range old {
		if s.cl != nil {
			t.put(s.id, s.cl)
		}
	}
	for id, cl := range over {
		t.put(id, cl)
	}
}

// get returns id's call, nil if id is not in t.
func (t *pendingTable) get(id uint32) *dcall {
	if len(t.slots) == 0 {
		return nil
	}
	if s := t.slots[id&uint32(len(t.slots)-1)]; s.cl != nil && s.id == id {
		return s.cl
	}
	return t.over[id]
}

// del removes id, if in t.
func (t *pendingTable) del(id uint32) {
	if len(t.slots) == 0 {
		return
	}
	if s := &t.slots[id&uint32(len(t.slots)-1)]; s.cl != nil && s.id == id {
		*s = pendingSlot{}
		t.n--
		return
	}
	if _, ok := t.over[id]; ok {
		delete(t.over, id)
		t.n--
	}
}

// each calls fn for every entry, in no order; fn must not change t.
func (t *pendingTable) each(fn func(id uint32, cl *dcall)) {
	if t.n == 0 {
		return
	}
	for _, s := range t.slots {
		if s.cl != nil {
			fn(s.id, s.cl)
		}
	}
	for id, cl := range t.over {
		fn(id, cl)
	}
}

// clear removes every entry, keeping the array.
func (t *pendingTable) clear() {
	clear(t.slots)
	t.over, t.n = nil, 0
}
