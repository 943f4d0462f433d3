package main

import "github.com/aaatp/aaatp/peer"

// history keeps the final Stats of the last max peers that ended, in a
// ring: a server that sees a connection a second for a year keeps the same
// memory as one that saw a thousand. Not safe for concurrent use.
type history struct {
	max   int
	ring  []peer.Stats
	next  int    // where the next one goes once the ring is full
	total uint64 // every peer added
}

func (h *history) add(st peer.Stats) {
	h.total++
	if h.max <= 0 {
		return
	}
	if len(h.ring) < h.max {
		h.ring = append(h.ring, st)
		return
	}
	h.ring[h.next] = st
	h.next = (h.next + 1) % h.max
}

func (h *history) len() int { return len(h.ring) }

// at returns the i-th oldest kept.
func (h *history) at(i int) peer.Stats {
	if len(h.ring) < h.max {
		return h.ring[i]
	}
	return h.ring[(h.next+i)%h.max]
}

// list returns the kept Stats, oldest first.
func (h *history) list() []peer.Stats {
	out := make([]peer.Stats, h.len())
	for i := range out {
		out[i] = h.at(i)
	}
	return out
}
