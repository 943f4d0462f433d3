//go:build !unix

package dedup

// newChunk returns n bytes of zeroed memory for an arena chunk.
func newChunk(n int) []byte { return make([]byte, n) }

// freeChunk leaves b to the collector.
func freeChunk([]byte) {}
