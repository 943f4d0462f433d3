package dedup

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on linux/amd64 and
// arm64 (with 4 KiB base pages).
const hugePage = 2 << 20

// mapHuge returns n bytes of zeroed memory outside the Go heap, aligned on
// a huge page and advised to be backed by huge pages, and the mapping that
// holds it (to be given to freeChunk); nil, nil if it cannot be mapped.
// Huge pages spare a lookup spread over a large table the miss in the
// address translation cache that a 4 KiB page costs on top of the miss in
// the data cache (the Go heap is not backed by huge pages unless the
// system backs all memory so).
func mapHuge(n int) (mem, mapping []byte) {
	mapping, err := syscall.Mmap(-1, 0, n+hugePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil
	}
	mappedBytes.Add(int64(len(mapping)))
	off := (hugePage - int(uintptr(unsafe.Pointer(&mapping[0]))%hugePage)) % hugePage
	mem = mapping[off : off+n]
	_ = syscall.Madvise(mem, syscall.MADV_HUGEPAGE) // advice only
	return mem, mapping
}
