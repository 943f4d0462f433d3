//go:build !amd64 && !arm64

package dedup

// prefetch does nothing where the package has no prefetch instruction
// (see memory_prefetch_asm.go).
func prefetch(uintptr) {}
