package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The failures by kind are bounded: a server that answers with ever new
// result codes (or error texts) fills maxFailKinds-1 kinds, and the rest
// count together, none lost.
func TestFailKindsBounded(t *testing.T) {
	c := newCounter(4)
	const n = 10 * maxFailKinds
	for i := range n {
		c.fail(c.tally(int64(i)), fmt.Sprintf("result %d", 5000+i))
	}
	c.fail(c.tally(0), "result 5000") // a kind already counted keeps its own
	kinds := c.failedKinds()
	assert.Len(t, kinds, maxFailKinds)
	assert.Equal(t, uint64(2), kinds["result 5000"])
	assert.Equal(t, uint64(n-(maxFailKinds-1)), kinds[otherFailKinds])
	var total uint64
	for _, v := range kinds {
		total += v
	}
	assert.Equal(t, uint64(n+1), total)
	_, _, failed := c.counts()
	assert.Equal(t, uint64(n+1), failed)
}
