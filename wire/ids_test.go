package wire

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEndToEndGen(t *testing.T) {
	start := time.Unix(0x12345, 0) // low 12 bits of the time: 0x345
	g := NewEndToEndGen(start, 0xfffabcde)
	first := g.Next()
	assert.Equal(t, uint32(0x345)<<20|0xabcde, first, "high 12 bits from the start time, low 20 from the seed")
	assert.Equal(t, first+1, g.Next())
	assert.Equal(t, first+2, g.Next())

	// Counting carries into the high bits instead of wrapping in the low
	// 20 (see the type's comment): 2^20 ids stay distinct.
	g = NewEndToEndGen(start, 0xfffff)
	assert.Equal(t, uint32(0x345fffff), g.Next())
	assert.Equal(t, uint32(0x34600000), g.Next())

	// Zero is skipped.
	g = NewEndToEndGen(time.Unix(0xfff, 0), 0xfffff)
	assert.Equal(t, uint32(0xffffffff), g.Next())
	assert.Equal(t, uint32(1), g.Next())
}

func TestEndToEndGenNow(t *testing.T) {
	before := uint32(time.Now().Unix() & 0xfff)
	id := NewEndToEndGenNow().Next()
	after := uint32(time.Now().Unix() & 0xfff)
	hi := id >> 20
	assert.True(t, hi == before || hi == after || hi == (before+1)&0xfff, "high bits %x from the clock (%x..%x)", hi, before, after)
}

func TestHopByHopGen(t *testing.T) {
	g := NewHopByHopGen(0xfffffffe)
	assert.Equal(t, uint32(0xfffffffe), g.Next())
	assert.Equal(t, uint32(0xffffffff), g.Next())
	assert.Equal(t, uint32(1), g.Next(), "zero is skipped")
	assert.Equal(t, uint32(1), NewHopByHopGen(0).Next())

	a, b := NewHopByHopGenRandom().Next(), NewHopByHopGenRandom().Next()
	assert.NotEqual(t, a, b, "two random seeds collided (1 in 2^32)")
}

func TestGeneratorsConcurrentUnique(t *testing.T) {
	const workers, per = 8, 5000
	e2e := NewEndToEndGen(time.Unix(7, 0), 123)
	hbh := NewHopByHopGen(456)
	var mu sync.Mutex
	seenE, seenH := make(map[uint32]bool), make(map[uint32]bool)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			es, hs := make([]uint32, per), make([]uint32, per)
			for i := range es {
				es[i], hs[i] = e2e.Next(), hbh.Next()
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range es {
				seenE[es[i]], seenH[hs[i]] = true, true
			}
		}()
	}
	wg.Wait()
	require.Len(t, seenE, workers*per)
	require.Len(t, seenH, workers*per)
}
