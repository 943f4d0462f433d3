package client

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
)

// simSeeds returns the seeds a simulator runs: only seed when it is set,
// 1..n for a soak when n is, else 1..fixed.
func simSeeds(seed uint64, n, fixed int) []uint64 {
	if seed != 0 {
		return []uint64{seed}
	}
	if n <= 0 {
		n = fixed
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// runSeeds runs one schedule a seed, each in a synctest bubble, on as many
// parallel workers as processors, and hands each result that passed to
// add (under a lock). A failing seed is named with the flag that replays
// it.
func runSeeds[R any](t *testing.T, seeds []uint64, replay string, run func(t *testing.T, seed uint64) R, add func(R)) {
	workers := min(runtime.GOMAXPROCS(0), len(seeds))
	var mu sync.Mutex
	t.Run("schedules", func(t *testing.T) {
		for w := range workers {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				for i := w; i < len(seeds); i += workers {
					seed := seeds[i]
					var r R
					if !t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) { r = run(t, seed) })
					}) {
						t.Errorf("seed %d failed: replay with %s=%d", seed, replay, seed)
						continue
					}
					mu.Lock()
					add(r)
					mu.Unlock()
				}
			})
		}
	})
}
