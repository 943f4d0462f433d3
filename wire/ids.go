package wire

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"
	"time"
)

// EndToEndGen generates End-to-End Identifiers (RFC 6733 section 3). It is
// safe for concurrent use.
//
// RFC 6733 requires the identifier to stay locally unique for at least 4
// minutes, even across reboots, and suggests the high-order 12 bits hold
// the low-order 12 bits of the current time and the low-order 20 bits a
// random value. The generator starts at exactly that value (time of start
// in seconds, random low bits) and then counts up by one over the whole 32
// bits. Counting over 32 bits rather than wrapping in the low 20 bits is
// deliberate: a 20-bit counter repeats after 2^20 requests, i.e. inside 4
// minutes at only about 4400 requests/s, whereas carrying into the time
// bits repeats only after 2^32 requests, and a restart (new start time)
// collides with the previous run only if it averaged more than 2^20
// requests per second of uptime.
//
// Zero is never returned, because go-diameter's NewMessage treats a zero
// identifier as "pick a random one".
type EndToEndGen struct {
	next atomic.Uint32
}

// NewEndToEndGen returns a generator whose first identifier is
// (start.Unix() & 0xfff) << 20 | seed & 0xfffff. Passing the time and seed
// makes tests deterministic.
func NewEndToEndGen(start time.Time, seed uint32) *EndToEndGen {
	g := &EndToEndGen{}
	g.next.Store(uint32(start.Unix()&0xfff)<<20 | seed&0xfffff)
	return g
}

// NewEndToEndGenNow returns a generator started at time.Now with a seed
// from crypto/rand.
func NewEndToEndGenNow() *EndToEndGen {
	return NewEndToEndGen(time.Now(), randomUint32())
}

// Next returns the next identifier.
func (g *EndToEndGen) Next() uint32 {
	for {
		if id := g.next.Add(1) - 1; id != 0 {
			return id
		}
	}
}

// HopByHopGen generates Hop-by-Hop Identifiers for one connection: a
// counter starting at a random value (RFC 6733 section 3 only requires
// uniqueness among the connection's outstanding requests; a random start
// makes answers that arrive for a previous connection's requests unlikely
// to match). It is safe for concurrent use. Zero is never returned (see
// EndToEndGen).
type HopByHopGen struct {
	next atomic.Uint32
}

// NewHopByHopGen returns a generator whose first identifier is seed (or 1
// if seed is 0).
func NewHopByHopGen(seed uint32) *HopByHopGen {
	g := &HopByHopGen{}
	g.next.Store(seed)
	return g
}

// NewHopByHopGenRandom returns a generator seeded from crypto/rand.
func NewHopByHopGenRandom() *HopByHopGen { return NewHopByHopGen(randomUint32()) }

// Next returns the next identifier.
func (g *HopByHopGen) Next() uint32 {
	for {
		if id := g.next.Add(1) - 1; id != 0 {
			return id
		}
	}
}

func randomUint32() uint32 {
	var b [4]byte
	// crypto/rand.Read never returns an error on supported platforms
	// since Go 1.24 (it crashes the program instead).
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}
