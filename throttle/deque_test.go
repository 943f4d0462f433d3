package throttle

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// insert keeps the order across the ring's wrap-around and through a
// grow.
func TestDequeInsert(t *testing.T) {
	var d deque[int]
	for i := range 12 {
		d.pushBack(i * 10)
	}
	for range 8 { // the head moves on: later entries wrap around
		d.popFront()
	}
	for i := 12; i < 20; i++ {
		d.pushBack(i * 10)
	}
	d.insert(0, 1)
	d.insert(3, 2)
	d.insert(d.len(), 3)
	for i := range 20 { // grows past 16
		d.insert(d.len()/2, 1000+i)
	}
	var got []int
	for d.len() > 0 {
		got = append(got, d.popFront())
	}
	assert.Len(t, got, 12+3+20)
	assert.Equal(t, []int{1, 80, 90, 2, 100}, got[:5])
	assert.Equal(t, 3, got[len(got)-1])
}

// remove keeps the others in order, from either half, across the ring's
// wrap-around, and taking out the front repeatedly costs no shifting of
// the rest.
func TestDequeRemove(t *testing.T) {
	var d deque[int]
	var want []int
	for i := range 12 {
		d.pushBack(i)
	}
	for range 8 {
		d.popFront()
	}
	for i := 12; i < 20; i++ {
		d.pushBack(i) // wraps around
	}
	for i := 8; i < 20; i++ {
		want = append(want, i)
	}
	for _, at := range []int{1, 9, 0, d.len() - 4, 4} {
		d.remove(at)
		want = append(want[:at], want[at+1:]...)
		var got []int
		for i := range d.len() {
			got = append(got, *d.at(i))
		}
		assert.Equal(t, want, got, "after removing at %d", at)
	}
	// Oldest first, as callers give up: each removal is at the front.
	var big deque[int]
	for i := range 1 << 12 {
		big.pushBack(i)
	}
	moved := 0
	for big.len() > 0 {
		head := big.head
		big.remove(0)
		if big.len() > 0 && big.head != (head+1)&(len(big.buf)-1) {
			moved++
		}
	}
	assert.Zero(t, moved, "removing the front moves the head, not the rest")
}
