package dedup

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

const benchEntries = 1 << 20 // ~1M

// benchKey derives distinct keys from a counter cheaply (splitmix64), so the
// benchmarks measure the store, not SHA-256 (see BenchmarkRequestKey).
func benchKey(i uint64) Key {
	var k Key
	binary.LittleEndian.PutUint64(k[:8], mix(i))
	binary.LittleEndian.PutUint64(k[8:], mix(i^0x9e3779b97f4a7c15))
	return k
}

func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// cpuPerOp reports, beside the wall time per operation, the process's CPU
// time per operation since start (a processCPU reading taken after
// b.ResetTimer), garbage collection included: on a machine shared with
// other work it varies less than the wall time.
func cpuPerOp(b *testing.B, start time.Duration) {
	if d := processCPU() - start; d > 0 && b.N > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// benchAnswer is a header-only Diameter answer (20 bytes).
var benchAnswer = msg(1, 1, "")

// fill stores n completed entries with keys from..from+n-1.
func fill(tb testing.TB, s Store, from, n uint64, answer []byte) {
	ctx := context.Background()
	for i := from; i < from+n; i++ {
		o, err := s.Begin(ctx, benchKey(i))
		if err != nil {
			tb.Fatal(err)
		}
		if err := o.Complete(answer); err != nil {
			tb.Fatal(err)
		}
	}
}

// A full 1M-entry store shared by the benchmarks (filling it takes a while).
var (
	fullOnce  sync.Once
	fullStore *Memory
	fullNext  atomic.Uint64 // the last key stored: fullNext.Add(1) is a fresh one
)

func full(b *testing.B) *Memory {
	fullOnce.Do(func() {
		fullStore = NewMemory(WithMaxEntries(benchEntries))
		fill(b, fullStore, 0, benchEntries, benchAnswer)
		fullNext.Store(benchEntries - 1) // no gap: every key up to fullNext is stored
	})
	return fullStore
}

// BenchmarkMemoryFirstComplete: the cost of a new request in a full 1M-entry
// store: lookup (miss), insert of the in-flight mark with eviction of the
// oldest entry, then Complete.
func BenchmarkMemoryFirstComplete(b *testing.B) {
	s := full(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b, processCPU())
	for b.Loop() {
		o, err := s.Begin(ctx, benchKey(fullNext.Add(1)))
		if err != nil || !o.First() {
			b.Fatal(err, kindOf(o))
		}
		if err := o.Complete(benchAnswer); err != nil {
			b.Fatal(err)
		}
	}
}

// kindOf is o.Kind(), or 0 for the nil Outcome of a failed Begin, for
// failure messages.
func kindOf(o *Outcome) Kind {
	if o == nil {
		return 0
	}
	return o.Kind()
}

// BenchmarkMemoryBeginFirst1M: lookup (miss) plus insertion of the
// in-flight mark, with eviction of the oldest entry, in a full 1M-entry
// store; the marks are left to the ring (no Complete). Their mark TTL is
// 1 ms, so that they have expired when the ring comes round to them (1M
// insertions later, 100 ms at the least) and are evicted as the oldest
// entries are: the store keeps the marks of running requests, and once
// they fill it refuses new requests (ErrFull).
func BenchmarkMemoryBeginFirst1M(b *testing.B) {
	s := NewMemory(WithMaxEntries(benchEntries), WithMarkTTL(time.Millisecond))
	fill(b, s, 0, benchEntries, benchAnswer)
	next := uint64(benchEntries)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b, processCPU())
	for b.Loop() {
		next++
		o, err := s.Begin(ctx, benchKey(next))
		if err != nil || !o.First() {
			b.Fatal(err, kindOf(o))
		}
	}
}

// BenchmarkMemoryBeginIntoFirst1M is BenchmarkMemoryBeginFirst1M through
// BeginInto with one recycled Outcome, as Wrap does with its pool: the
// store's own cost, without an Outcome allocated per request.
func BenchmarkMemoryBeginIntoFirst1M(b *testing.B) {
	s := NewMemory(WithMaxEntries(benchEntries), WithMarkTTL(time.Millisecond))
	fill(b, s, 0, benchEntries, benchAnswer)
	next := uint64(benchEntries)
	ctx := context.Background()
	var o Outcome
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b, processCPU())
	for b.Loop() {
		next++
		if err := s.BeginInto(ctx, &o, benchKey(next)); err != nil || !o.First() {
			b.Fatal(err, o.Kind())
		}
	}
}

// BenchmarkMemoryFirstCompleteSmall: as BenchmarkMemoryFirstComplete with
// 16K entries, which fit in the CPU caches: the cost without memory latency.
func BenchmarkMemoryFirstCompleteSmall(b *testing.B) {
	const n = 1 << 14
	s := NewMemory(WithMaxEntries(n))
	fill(b, s, 0, n, benchAnswer)
	next := uint64(n)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b, processCPU())
	for b.Loop() {
		next++
		o, err := s.Begin(ctx, benchKey(next))
		if err != nil || !o.First() {
			b.Fatal(err, kindOf(o))
		}
		if err := o.Complete(benchAnswer); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemoryDuplicate: lookup (hit) of a stored answer in a full
// 1M-entry store, with the copy of the answer handed to the caller.
func BenchmarkMemoryDuplicate(b *testing.B) {
	s := full(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b, processCPU())
	var i uint64
	for b.Loop() {
		i++
		// The newest entries are surely still held.
		o, err := s.Begin(ctx, benchKey(fullNext.Load()-i%(benchEntries/2)))
		if err != nil || !o.Duplicate() {
			b.Fatal(err, kindOf(o))
		}
	}
}

// BenchmarkMemoryFirstCompleteParallel: as BenchmarkMemoryFirstComplete from
// GOMAXPROCS goroutines, to show shard contention.
func BenchmarkMemoryFirstCompleteParallel(b *testing.B) {
	s := full(b)
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b, processCPU())
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			o, err := s.Begin(ctx, benchKey(fullNext.Add(1)))
			if err != nil || !o.First() {
				b.Fatal(err)
			}
			_ = o.Complete(benchAnswer)
		}
	})
}

// BenchmarkMemoryBytesPerEntry measures the heap held per completed entry
// at 1M entries (runtime.ReadMemStats before and after filling), for a
// header-only 20-byte answer and a typical 200-byte one. The answer bytes
// are part of the figure: the arenas' chunks mapped outside the Go heap
// (mappedBytes) are added to the heap's growth.
func BenchmarkMemoryBytesPerEntry(b *testing.B) {
	for _, size := range []int{20, 200} {
		b.Run(fmt.Sprintf("answer=%dB", size), func(b *testing.B) {
			answer := msg(1, 1, string(make([]byte, size-wire.HeaderLen)))
			// Measured once, whatever b.N (with -benchtime Nx a
			// fill per iteration would take N times as long).
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			mapped := mappedBytes.Load()
			s := NewMemory(WithMaxEntries(benchEntries))
			fill(b, s, 0, benchEntries, answer)
			runtime.GC()
			runtime.ReadMemStats(&after)
			held := int64(after.HeapAlloc-before.HeapAlloc) + mappedBytes.Load() - mapped
			perEntry := float64(held) / float64(s.Len())
			runtime.KeepAlive(s)
			for b.Loop() {
			}
			b.ReportMetric(perEntry, "B/entry")
		})
	}
}

func BenchmarkRequestKey(b *testing.B) {
	b.ReportAllocs()
	var e uint32
	for b.Loop() {
		e++
		_ = RequestKey("client.example.net", e)
	}
}

func BenchmarkAccountingKey(b *testing.B) {
	b.ReportAllocs()
	ts := []byte{0xe9, 0, 0, 1}
	for b.Loop() {
		_ = AccountingKey("nas1.example.net;1234567;42", ts, "nas1.example.net", "nas1")
	}
}

// BenchmarkRedisFirstComplete: one new request against the loopback Redis
// (two round trips: claim and complete).
func BenchmarkRedisFirstComplete(b *testing.B) {
	url := needRedis(b)
	s, err := Open(url, WithKeyPrefix("bench:"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var i uint64
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		i++
		o, err := s.Begin(ctx, benchKey(i^0xbeef<<40))
		if err != nil {
			b.Fatal(err)
		}
		if o.First() {
			_ = o.Complete(benchAnswer)
		}
	}
}

// benchACR is aaa-peer client's accounting request: Session-Id,
// Origin-Host, Origin-Realm, Destination-Realm, Accounting-Record-Type and
// -Number, User-Name.
var benchACR = message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
	String(message.SessionID, 0, true, "client.example.net;1764590000123456789;42").
	String(message.OriginHost, 0, true, "client.example.net").
	String(message.OriginRealm, 0, true, "example.net").
	String(message.DestinationRealm, 0, true, "example.net").
	Uint32(message.AccountingRecordType, 0, true, 1).
	Uint32(message.AccountingRecordNumber, 0, true, 42).
	String(message.UserName, 0, true, "user42@example.net").Bytes()

// BenchmarkKeysOf: the keys of one ACR, one walk (KeysOf) against one
// FindAVP per AVP (keysOfReference, the earlier KeysOf), side by side.
func BenchmarkKeysOf(b *testing.B) {
	for _, impl := range []struct {
		name string
		fn   func([]byte) []Key
	}{{"walk", KeysOf}, {"findavp", keysOfReference}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = impl.fn(benchACR)
			}
		})
	}
}

// BenchmarkWrapFirst: a wrapped handler given new accounting requests (two
// keys each) in a full store of the default size, as a server's requests
// go through Wrap: keys, BeginInto, the handler (which returns a fixed
// answer) and Complete.
func BenchmarkWrapFirst(b *testing.B) {
	s := NewMemory()
	defer s.Close()
	ans := msg(1, 1, string(make([]byte, 130)))
	h := Wrap(s, func(context.Context, *peer.Peer, []byte) []byte { return ans }, nil)
	req := append([]byte(nil), benchACR...)
	ctx := context.Background()
	var n uint32
	run := func() {
		n++
		wire.SetEndToEnd(req, n)
		binary.BigEndian.PutUint32(req[len(req)-4-(8+len("user42@example.net")+2):], n) // Accounting-Record-Number
		if h(ctx, nil, req) == nil {
			b.Fatal("no answer")
		}
	}
	for range DefaultMaxEntries / 2 {
		run()
	}
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b, processCPU())
	for b.Loop() {
		run()
	}
}
