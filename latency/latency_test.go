package latency

import (
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	for v := uint64(0); v < 1<<20; v = v*5/4 + 1 {
		i := bucketOf(v)
		if lo, hi := lowestOf(i), highestOf(i); v < lo || v > hi || float64(hi-lo) > float64(v)/64+1 {
			t.Fatalf("value %d in bucket %d [%d, %d]", v, i, lo, hi)
		}
	}
	if i := bucketOf(^uint64(0)); i != nBuckets-1 {
		t.Fatalf("max value in bucket %d of %d", i, nBuckets)
	}
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	s := h.Summary()
	near := func(got, want uint64) bool { return got >= want && float64(got) <= float64(want)*1.02 }
	if !near(s.P50, 500_000) || !near(s.P99, 990_000) || s.Max != 1_000_000 || s.Count != 1000 {
		t.Errorf("summary %+v", s)
	}
}

func TestMean(t *testing.T) {
	var h Histogram
	if h.Mean() != 0 {
		t.Fatal("mean of nothing")
	}
	h.Record(100 * time.Microsecond)
	h.Record(300 * time.Microsecond)
	if h.Mean() != 200 || h.Count() != 2 || h.Max() != 300 {
		t.Fatalf("mean %v count %d max %d", h.Mean(), h.Count(), h.Max())
	}
}

// RecordAll records what as many Records would.
func TestRecordAll(t *testing.T) {
	var one, all Histogram
	var batch []time.Duration
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i*i) * time.Microsecond
		one.Record(d)
		batch = append(batch, d)
		if len(batch) == 64 || i == 1000 {
			all.RecordAll(batch)
			batch = batch[:0]
		}
	}
	all.RecordAll(nil)
	if all.Summary() != one.Summary() || all.Mean() != one.Mean() {
		t.Fatalf("RecordAll %+v mean %v, Record %+v mean %v", all.Summary(), all.Mean(), one.Summary(), one.Mean())
	}
	for _, q := range []float64{0.1, 0.5, 0.9, 0.999} {
		if all.Quantile(q) != one.Quantile(q) {
			t.Fatalf("quantile %v: %d, want %d", q, all.Quantile(q), one.Quantile(q))
		}
	}
}

// Cumulative counts the latencies at or below each bound, as a Prometheus
// histogram's buckets do, and their count and sum.
func TestCumulative(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{50 * time.Microsecond, 100 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond, 20 * time.Second} {
		h.Record(d)
	}
	bounds := []time.Duration{100 * time.Microsecond, 250 * time.Microsecond, time.Millisecond, 10 * time.Millisecond}
	at, n, sum := h.Cumulative(bounds)
	want := []uint64{2, 2, 3, 4}
	for i := range want {
		if at[i] != want[i] {
			t.Errorf("at or below %v: %d, want %d (all: %v)", bounds[i], at[i], want[i], at)
		}
	}
	if n != 5 || sum != 20*time.Second+2450*time.Microsecond {
		t.Errorf("count %d sum %v, want 5 and 20.00245s", n, sum)
	}
}
