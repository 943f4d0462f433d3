// Package latency is a lock-free latency histogram: log-linear buckets in
// microseconds (HDR style), fixed memory, Record safe from any number of
// goroutines. The client's per-server statistics and aaa-peer's reports
// both use it.
package latency

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram records latencies in microseconds: exact below 128 us, then
// 64 buckets per power of two, so any value is reported within 1/64 (1.6%)
// above its true value. The zero value is ready; it is about 30 KB. Its
// methods are safe for concurrent use.
type Histogram struct {
	counts [nBuckets]atomic.Uint64
	total  atomic.Uint64
	sum    atomic.Uint64 // microseconds, for the mean
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

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d / time.Microsecond)
	}
	h.counts[bucketOf(v)].Add(1)
	h.total.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Quantile returns the value (us) at or below which a fraction q of the
// samples lie, as the highest value of its bucket capped at the maximum.
func (h *Histogram) Quantile(q float64) uint64 {
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

// RecordAll adds the latencies ds, as many Records would, at the cost of
// one update of the totals: callers that keep a few samples of their own
// and record them together share the histogram's lines less often.
func (h *Histogram) RecordAll(ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	var sum, top uint64
	for _, d := range ds {
		v := uint64(0)
		if d > 0 {
			v = uint64(d / time.Microsecond)
		}
		h.counts[bucketOf(v)].Add(1)
		sum += v
		top = max(top, v)
	}
	h.total.Add(uint64(len(ds)))
	h.sum.Add(sum)
	for {
		m := h.max.Load()
		if top <= m || h.max.CompareAndSwap(m, top) {
			return
		}
	}
}

// Mean returns the mean latency in microseconds (0 without samples).
func (h *Histogram) Mean() float64 {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	return float64(h.sum.Load()) / float64(n)
}

// Max returns the largest latency recorded, in microseconds.
func (h *Histogram) Max() uint64 { return h.max.Load() }

// Count returns how many latencies were recorded.
func (h *Histogram) Count() uint64 { return h.total.Load() }

// Summary is p50, p99, max (microseconds) and count, as reports print them.
type Summary struct {
	P50   uint64 `json:"p50"`
	P99   uint64 `json:"p99"`
	Max   uint64 `json:"max"`
	Count uint64 `json:"count"`
}

// Summary returns the histogram's Summary.
func (h *Histogram) Summary() Summary {
	return Summary{P50: h.Quantile(0.50), P99: h.Quantile(0.99), Max: h.max.Load(), Count: h.total.Load()}
}

// Cumulative returns, for each bound in increasing order, how many
// latencies were recorded at or below it, as the buckets of a Prometheus
// histogram count them; count is the number of latencies and sum their
// sum. A bucket counts at or below a bound when its highest value is: a
// latency within 1/64 under a bound above 128 us can be counted above it.
// Taken while latencies are recorded, count is the sum of the buckets
// read, so the counts stay consistent with each other.
func (h *Histogram) Cumulative(bounds []time.Duration) (atMost []uint64, count uint64, sum time.Duration) {
	atMost = make([]uint64, len(bounds))
	sum = time.Duration(h.sum.Load()) * time.Microsecond
	b := 0
	for i := range h.counts {
		hi := highestOf(i)
		for b < len(bounds) && hi > durationUs(bounds[b]) {
			atMost[b] = count
			b++
		}
		count += h.counts[i].Load()
	}
	for ; b < len(bounds); b++ {
		atMost[b] = count
	}
	return atMost, count, sum
}

// durationUs is d in whole microseconds, 0 for a negative d.
func durationUs(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64(d / time.Microsecond)
}
