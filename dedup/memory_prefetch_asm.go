//go:build amd64 || arm64

package dedup

// prefetch asks the processor to bring the cache line at p into its
// caches, without waiting for it: unlike a load, it holds up no later
// instruction, not even a lock's atomic instruction, and it never faults.
func prefetch(p uintptr)
