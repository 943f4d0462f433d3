package client

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// FailoverRecord is one row of the failover-event table of RFC 3539
// 3.4.2 [5]: which requests moved from which peer to which, and why.
type FailoverRecord struct {
	Time     time.Time `json:"time"`
	From     string    `json:"from_peer"`
	To       string    `json:"to_peer"` // empty: no alternate, the requests wait
	Reason   string    `json:"reason"`
	Moved    int       `json:"moved"`
	EndToEnd []uint32  `json:"end_to_end"`
}

// failoverLog is a bounded ring of records.
type failoverLog struct {
	mu    sync.Mutex
	buf   []FailoverRecord
	next  int
	full  bool
	total uint64
}

func (l *failoverLog) init(n int) {
	if n <= 0 {
		n = 256
	}
	l.buf = make([]FailoverRecord, n)
}

func (l *failoverLog) add(r FailoverRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf[l.next] = r
	l.next = (l.next + 1) % len(l.buf)
	l.full = l.full || l.next == 0
	l.total++
}

// FailoverLog returns the failover records kept (oldest first) and how many
// were ever recorded.
func (c *Client) FailoverLog() (records []FailoverRecord, total uint64) {
	l := &c.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.full {
		records = append(records, l.buf[l.next:]...)
	}
	records = append(records, l.buf[:l.next]...)
	return records, l.total
}

// ServerStats are the per-server statistics of RFC 3539 3.4.3 [4].
type ServerStats struct {
	Server     string  `json:"server"`
	Peer       string  `json:"peer"` // Origin-Host once known
	State      string  `json:"state"`
	Sent       uint64  `json:"sent"`        // requests first sent to this server (replays not counted)
	Answered   uint64  `json:"answered"`    // of those, answered (here or after a failover)
	Failed     uint64  `json:"failed"`      // of those, ended with an error
	FailedOver uint64  `json:"failed_over"` // requests moved away from this server
	MeanUs     float64 `json:"mean_latency_us"`
	P99Us      float64 `json:"p99_latency_us"`
}

// ServerStats returns the statistics of every server in configured order.
func (c *Client) ServerStats() []ServerStats {
	out := make([]ServerStats, len(c.members))
	for i, m := range c.members {
		s := &m.stats
		out[i] = ServerStats{
			Server: m.spec.Name, Sent: s.sent.Load(), Answered: s.answered.Load(),
			Failed: s.failed.Load(), FailedOver: s.failedOver.Load(),
			MeanUs: s.lat.mean(), P99Us: s.lat.quantile(0.99),
		}
		if p := m.p(); p != nil {
			out[i].Peer, out[i].State = p.Name(), p.State().String()
		} else {
			out[i].State = "not connected"
		}
	}
	return out
}

type serverStats struct {
	sent, answered, failed, failedOver atomic.Uint64
	lat                                histogram
}

func (s *serverStats) init() {}

func (s *serverStats) done(ok bool, d time.Duration) {
	if ok {
		s.answered.Add(1)
		s.lat.record(d)
	} else {
		s.failed.Add(1)
	}
}

// histogram is a log-linear latency histogram over microseconds: 8
// sub-buckets per power of two (about 12% resolution), lock-free.
type histogram struct {
	counts [64 * 8]atomic.Uint64
	n, sum atomic.Uint64 // sum in microseconds
}

func bucketOf(us uint64) int {
	if us < 8 {
		return int(us)
	}
	e := bits.Len64(us) - 1 // us in [2^e, 2^(e+1))
	sub := (us >> (e - 3)) & 7
	return (e-2)*8 + int(sub)
}

// lowOf is the smallest value in bucket b.
func lowOf(b int) float64 {
	if b < 8 {
		return float64(b)
	}
	e := b/8 + 2
	sub := b % 8
	return float64(uint64(1)<<e + uint64(sub)<<(e-3))
}

func (h *histogram) record(d time.Duration) {
	us := uint64(max(d, 0) / time.Microsecond)
	h.counts[min(bucketOf(us), len(h.counts)-1)].Add(1)
	h.n.Add(1)
	h.sum.Add(us)
}

func (h *histogram) mean() float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return float64(h.sum.Load()) / float64(n)
}

// quantile returns the lower bound of the bucket holding quantile q.
func (h *histogram) quantile(q float64) float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for b := range h.counts {
		seen += h.counts[b].Load()
		if seen >= rank {
			return lowOf(b)
		}
	}
	return lowOf(len(h.counts) - 1)
}
