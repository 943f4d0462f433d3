package serve

import (
	"fmt"
	"math/rand"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Weak jobs (anyone could have sent them) hold at most half of the
// queue, never refuse or push out a strong job, are the first pushed
// out by one, and run after the strong jobs waiting.
func TestLaneWeakJobsGiveWay(t *testing.T) {
	gate := make(chan struct{})
	var wg sync.WaitGroup
	l, ran, refused := runOrder(4, gate, &wg)
	l.Submit("x", "x0") // runs, waits for gate
	for i := range 4 {  // from four sources: two wait, two refused
		l.SubmitWeak(fmt.Sprint("w", i), fmt.Sprint("w", i))
	}
	assert.Equal(t, []string{"w2", "w3"}, *refused, "weak jobs hold at most half of the queue")
	l.Submit("nas", "n1")
	l.Submit("nas", "n2")
	assert.Len(t, *refused, 2, "room for strong jobs beside the weak half")
	l.Submit("nas", "n3") // full: pushes out a weak job
	l.Submit("nas", "n4") // and the other
	assert.ElementsMatch(t, []string{"w2", "w3", "w0", "w1"}, *refused, "a strong job pushes out weak ones first, whatever their sources")
	l.SubmitWeak("w9", "w9")
	assert.Equal(t, "w9", (*refused)[4], "a weak job never pushes out a strong one")
	l.Submit("nas", "n5")
	assert.Equal(t, "n5", (*refused)[5], "strong jobs among themselves: the usual rule")
	st := l.Stats()
	assert.Equal(t, 4, st.Waiting)
	assert.Equal(t, uint64(6), st.Refused)
	close(gate)
	wg.Wait()
	assert.Equal(t, []string{"x0", "n1", "n2", "n3", "n4"}, *ran)
}

// Strong jobs waiting run before weak ones waiting, whatever came first.
func TestLaneStrongJobsRunFirst(t *testing.T) {
	gate := make(chan struct{})
	var wg sync.WaitGroup
	l, ran, refused := runOrder(10, gate, &wg)
	l.Submit("x", "x0")
	l.SubmitWeak("w", "w1")
	l.SubmitWeak("v", "v1")
	l.Submit("a", "a1")
	l.SubmitWeak("w", "w2")
	l.Submit("b", "b1")
	l.Submit("a", "a2")
	close(gate)
	wg.Wait()
	assert.Empty(t, *refused)
	assert.Equal(t, []string{"x0", "a1", "b1", "a2", "w1", "v1", "w2"}, *ran)
	l.mu.Lock()
	defer l.mu.Unlock()
	assert.Empty(t, l.weak.sources, "no weak source left once nothing waits")
}

// Random strong and weak submissions: the index of each kind stays right,
// the weak never hold more than half, the whole never more than the
// queue, and no strong job is pushed out while a weak one waits.
func TestLaneWeakRandom(t *testing.T) {
	for seed := range int64(200) {
		r := rand.New(rand.NewSource(seed))
		gate := make(chan struct{})
		var wg sync.WaitGroup
		var l *Lane[int, [3]int] // source, index, weak
		weakWaiting := 0
		var cur [3]int
		l = NewLane[int](func([3]int) { <-gate }, func(j [3]int) {
			if j != cur && j[2] == 0 && weakWaiting > 0 {
				t.Fatalf("seed %d: strong job %v pushed out while %d weak wait", seed, j, weakWaiting)
			}
			if j != cur && j[2] == 0 && cur[2] == 1 {
				t.Fatalf("seed %d: weak job %v pushed out strong %v", seed, cur, j)
			}
		}, 1, 1+r.Intn(12), &wg)
		l.Submit(-1, [3]int{-1, 0, 0})
		for i := range 300 {
			cur = [3]int{r.Intn(5), i, r.Intn(2)}
			l.mu.Lock()
			weakWaiting = l.weak.waiting
			l.mu.Unlock()
			if cur[2] == 1 {
				l.SubmitWeak(cur[0], cur)
			} else {
				l.Submit(cur[0], cur)
			}
			checkLane(t, l)
			l.mu.Lock()
			require.LessOrEqual(t, l.weak.waiting, l.weakMax)
			require.LessOrEqual(t, l.waiting+l.weak.waiting, l.queue)
			n := 0
			for _, s := range l.weak.sources {
				n += s.len()
			}
			require.Equal(t, l.weak.waiting, n)
			l.mu.Unlock()
		}
		close(gate)
		wg.Wait()
		l.mu.Lock()
		require.Empty(t, l.weak.sources)
		require.Zero(t, l.weak.waiting)
		l.mu.Unlock()
	}
}
