package main

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// histogram records latencies in microseconds in log-linear buckets (HDR
// style): exact below 128 us, then 64 buckets per power of two, so any
// value is reported within 1/64 (1.6%) above its true value. Memory is
// fixed; Record is lock-free.
type histogram struct {
	counts [nBuckets]atomic.Uint64
	total  atomic.Uint64
	max    atomic.Uint64
}

const (
	linear   = 128 // values below are their own bucket
	perPow2  = 64  // buckets per power of two above that
	nBuckets = linear + (64-7)*perPow2
)

func bucketOf(v uint64) int {
	if v < linear {
		return int(v)
	}
	e := bits.Len64(v) - 7 // >= 1: v >> e is in [64, 128)
	return linear + (e-1)*perPow2 + int(v>>uint(e)-perPow2)
}

// lowestOf is the smallest value of bucket i.
func lowestOf(i int) uint64 {
	if i < linear {
		return uint64(i)
	}
	e := (i-linear)/perPow2 + 1
	return uint64((i-linear)%perPow2+perPow2) << uint(e)
}

// highestOf is the largest value of bucket i.
func highestOf(i int) uint64 {
	if i+1 >= nBuckets {
		return ^uint64(0)
	}
	return lowestOf(i+1) - 1
}

func (h *histogram) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d / time.Microsecond)
	}
	h.counts[bucketOf(v)].Add(1)
	h.total.Add(1)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Quantile returns the value (us) at or below which a fraction q of the
// samples lie, as the highest value of its bucket capped at the maximum.
func (h *histogram) Quantile(q float64) uint64 {
	total := h.total.Load()
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.999999) // ceil, at least 1
	if rank < 1 {
		rank = 1
	}
	if rank > total {
		rank = total
	}
	max := h.max.Load()
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return min(highestOf(i), max)
		}
	}
	return max
}

// latencySummary is the report's "latency_us".
type latencySummary struct {
	P50   uint64 `json:"p50"`
	P99   uint64 `json:"p99"`
	Max   uint64 `json:"max"`
	Count uint64 `json:"count"`
}

func (h *histogram) Summary() latencySummary {
	return latencySummary{P50: h.Quantile(0.50), P99: h.Quantile(0.99), Max: h.max.Load(), Count: h.total.Load()}
}
