package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/test/benchcmp"
)

const pickNAI = "subscriber-0123456@example.net" // 30 bytes, as loadbalance's benchmarks

type pickResult struct{ naiOnlyNs, knownNs, allocs, firstSeenNs float64 }

func nsPerOp(r testing.BenchmarkResult) float64 {
	if r.N == 0 {
		return 0
	}
	return round(float64(r.T.Nanoseconds())/float64(r.N), 1)
}

// measurePick runs loadbalance's Pick (Pearson, 8 servers of weight 1)
// under testing.Benchmark: with the NAI only (hash + table); with the NAI
// and a remembered Session-Id (one server down, the NAI in a bucket its
// return would take: what an interim or stop ACR of such a conversation
// costs, a lookup in the conversation memory; the JSON figure); and with
// every server in service, the NAI and a first-seen Session-Id each time
// (nothing is remembered then).
func measurePick() (*pickResult, error) {
	srv := make([]loadbalance.Server, 8)
	for i := range srv {
		srv[i] = loadbalance.Server{Name: fmt.Sprintf("s%d", i), Weight: 1, Index: i}
	}
	all, err := loadbalance.New(loadbalance.Pearson, srv, loadbalance.Options{})
	if err != nil {
		return nil, err
	}
	lb, err := loadbalance.New(loadbalance.Pearson, srv, loadbalance.Options{})
	if err != nil {
		return nil, err
	}
	lb.SetState("s7", loadbalance.Down)
	var known loadbalance.Request
	for i := 0; ; i++ {
		if i == 10_000 {
			return nil, fmt.Errorf("pick: no NAI in a remembered bucket")
		}
		known = loadbalance.Request{NAI: fmt.Sprintf("subscriber-%07d@example.net", i), SessionID: fmt.Sprintf("nas1.example.net;1234567890;%d", i)}
		before := lb.Snapshot().Sessions
		if _, err := lb.Pick(known); err != nil {
			return nil, err
		}
		if lb.Snapshot().Sessions > before {
			break
		}
	}
	naiOnly := loadbalance.Request{NAI: pickNAI}
	var res pickResult
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			all.Pick(naiOnly)
		}
	})
	res.naiOnlyNs = nsPerOp(r)
	r = testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			lb.Pick(known)
		}
	})
	res.knownNs = nsPerOp(r)
	res.allocs = float64(r.AllocsPerOp())
	ids := make([]string, 1<<16)
	for i := range ids {
		ids[i] = fmt.Sprintf("nas1.example.net;1234567890;%d", i)
	}
	r = testing.Benchmark(func(b *testing.B) {
		i := 0
		for b.Loop() {
			all.Pick(loadbalance.Request{NAI: pickNAI, SessionID: ids[i&(len(ids)-1)]})
			i++
		}
	})
	res.firstSeenNs = nsPerOp(r)
	return &res, nil
}

type dedupResult struct {
	entries          int
	answerLen        int
	beginIntoNs      float64 // the same through BeginInto with a recycled Outcome (Wrap's path; the JSON figure)
	beginNs          float64 // Begin of a new key: lookup (miss) + insert + eviction
	beginCompleteNs  float64 // the same plus Complete with the answer
	bytesPerEntry    float64 // memory held per completed entry, answer included
	beginAllocsPerOp float64
}

// dedupKey derives distinct keys from a counter cheaply (splitmix64, as
// dedup's own benchmarks), so the figure is the store's, not SHA-256's.
func dedupKey(i uint64) dedup.Key {
	var k dedup.Key
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

// measureDedup fills a dedup.Memory bounded at o.DedupEntries with that
// many completed entries holding the harness's ACA (the answer a real
// accounting server stores), measures the memory held per entry (the
// heap's growth, or the store's Footprint if larger: its answers are kept
// outside the heap where the system allows), then times
// Begin on new keys in the full store (testing.Benchmark), which is lookup
// plus insert plus eviction of the oldest, as BenchmarkMemoryBeginFirst1M,
// and the same through BeginInto with one recycled Outcome, as
// BenchmarkMemoryBeginIntoFirst1M: the path of dedup.Wrap, which a server
// uses, and the JSON figure.
func measureDedup(o Options) (*dedupResult, error) {
	ctx := context.Background()
	answer := benchcmp.ACA()
	res := &dedupResult{entries: o.DedupEntries, answerLen: len(answer)}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// The timed Begins leave their marks in flight, never completed. A
	// running request's mark is never evicted, so the store would fill
	// with them. On a clock that moves a microsecond at each reading, a
	// mark that lives a microsecond has expired when eviction reaches it,
	// and goes as an answered entry does: the figure stays lookup, insert
	// and eviction of the oldest. (The coarse clock of a real store would
	// not move within such a loop.)
	var tick atomic.Int64
	clock := func() time.Time { return time.Unix(0, tick.Add(int64(time.Microsecond))) }
	s := dedup.NewMemory(dedup.WithMaxEntries(o.DedupEntries), dedup.WithClock(clock),
		dedup.WithMarkTTL(time.Microsecond), dedup.WithMaxAge(1000*time.Hour))
	defer s.Close()
	var next uint64
	for range o.DedupEntries {
		next++
		out, err := s.Begin(ctx, dedupKey(next))
		if err != nil {
			return nil, err
		}
		if err := out.Complete(answer); err != nil {
			return nil, err
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if s.Len() == 0 {
		return nil, fmt.Errorf("empty store")
	}
	held := max(int64(after.HeapAlloc)-int64(before.HeapAlloc), s.Footprint())
	res.bytesPerEntry = round(float64(held)/float64(s.Len()), 1)

	var berr error
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			next++
			out, err := s.Begin(ctx, dedupKey(next))
			if err != nil || !out.First() {
				berr = fmt.Errorf("Begin of a new key: %v, first=%v", err, err == nil && out.First())
				b.FailNow()
			}
		}
	})
	if berr != nil {
		return nil, berr
	}
	res.beginNs = nsPerOp(r)
	res.beginAllocsPerOp = float64(r.AllocsPerOp())
	var reused dedup.Outcome
	r = testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			next++
			if err := s.BeginInto(ctx, &reused, dedupKey(next)); err != nil || !reused.First() {
				berr = fmt.Errorf("BeginInto of a new key: %v, first=%v", err, err == nil && reused.First())
				b.FailNow()
			}
		}
	})
	if berr != nil {
		return nil, berr
	}
	res.beginIntoNs = nsPerOp(r)
	r = testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			next++
			out, err := s.Begin(ctx, dedupKey(next))
			if err == nil {
				err = out.Complete(answer)
			}
			if err != nil {
				berr = err
				b.FailNow()
			}
		}
	})
	if berr != nil {
		return nil, berr
	}
	res.beginCompleteNs = nsPerOp(r)
	runtime.KeepAlive(s)
	return res, nil
}
