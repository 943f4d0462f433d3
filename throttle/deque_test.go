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
