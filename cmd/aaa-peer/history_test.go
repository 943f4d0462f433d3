package main

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/aaatp/aaatp/peer"
)

func TestHistoryKeepsTheLastN(t *testing.T) {
	h := history{max: 3}
	for i := range 10 {
		h.add(peer.Stats{Peer: strconv.Itoa(i)})
		assert.LessOrEqual(t, h.len(), 3, "bounded")
	}
	var names []string
	for _, st := range h.list() {
		names = append(names, st.Peer)
	}
	assert.Equal(t, []string{"7", "8", "9"}, names, "oldest first")
	assert.Equal(t, uint64(10), h.total)
	assert.Equal(t, "9", h.at(h.len()-1).Peer)

	off := history{max: 0}
	off.add(peer.Stats{})
	assert.Zero(t, off.len())
	assert.Equal(t, uint64(1), off.total)
}
