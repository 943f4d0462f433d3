//go:build unix

package dedup

import "syscall"

// newChunk returns n bytes of zeroed memory for an arena chunk, mapped
// from the operating system outside the Go heap: the collector neither
// scans it nor counts it towards its heap goal, so a full store does not
// make the garbage collector let the heap grow by the store's size before
// collecting (the heap goal is a multiple of the live heap). If the mapping
// fails, the chunk comes from the Go heap.
func newChunk(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n)
	}
	mappedBytes.Add(int64(n))
	return b
}

// freeChunk returns a chunk of newChunk to the operating system (a chunk
// from the Go heap is left to the collector: syscall.Munmap refuses memory
// it did not map).
func freeChunk(b []byte) {
	if syscall.Munmap(b) == nil {
		mappedBytes.Add(-int64(len(b)))
	}
}
