package client

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/latency"
	"github.com/aaatp/aaatp/throttle"
)

// FailoverRecord is one row of the failover-event table of RFC 3539
// 3.4.2 [5]: which requests moved from which peer to which, and why.
type FailoverRecord struct {
	Time     time.Time       `json:"time"`
	From     string          `json:"from_peer"`
	To       string          `json:"to_peer"` // Moved: the alternate; empty when the throttle chooses it later
	Outcome  FailoverOutcome `json:"outcome"`
	Reason   string          `json:"reason"`
	Moved    int             `json:"moved"`      // requests moved (Moved) or waiting (Parked)
	EndToEnd []uint32        `json:"end_to_end"` // the requests' End-to-End Identifiers
}

// FailoverOutcome says what became of the requests of a FailoverRecord.
type FailoverOutcome uint8

const (
	// Moved: the requests were resent, to To, with the T flag (Diameter)
	// or re-signed with a new Identifier (RADIUS); with a throttle, they
	// went back to its queue, ahead of newer requests, To empty.
	Moved FailoverOutcome = iota + 1
	// Parked: no alternate was in service; the requests wait for one,
	// within their deadlines.
	Parked
	// Refused: the requests named the failed server in Destination-Host
	// and failed with ErrUnableToDeliver.
	Refused
	// NothingPending: the server left service with no request pending;
	// recorded all the same, as RFC 3539 3.4.2 [5]'s table has a row for
	// every failover.
	NothingPending
)

var outcomeNames = [...]string{Moved: "moved", Parked: "parked", Refused: "refused", NothingPending: "nothing_pending"}

// String returns the outcome's name ("moved", "parked"...).
func (o FailoverOutcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "unknown"
}

// MarshalText makes the outcome its name in JSON (the zero value: "").
func (o FailoverOutcome) MarshalText() ([]byte, error) {
	if o == 0 {
		return []byte{}, nil
	}
	return []byte(o.String()), nil
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
// were ever recorded. A record is added once the requests it lists have
// been handed to their alternate (only then is it known where each went),
// so a replayed request can be answered a moment before its record
// appears.
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
	Peer       string  `json:"peer"`        // Origin-Host once known
	State      string  `json:"state"`       // the watchdog's; "" over UDP
	Sent       uint64  `json:"sent"`        // requests first sent to this server (replays not counted)
	Answered   uint64  `json:"answered"`    // of those, answered (here or after a failover)
	Failed     uint64  `json:"failed"`      // of those, ended with an error
	FailedOver uint64  `json:"failed_over"` // requests moved away from this server
	Premature  uint64  `json:"premature"`   // of those, answered too busy / unable to deliver here, or (UDP) never replied to
	Probes     uint64  `json:"probes"`      // test requests sent: probes and keep-alives
	MeanUs     float64 `json:"mean_latency_us"`
	P99Us      float64 `json:"p99_latency_us"`
	// Throttle is the server's throttle counters (nil without one).
	Throttle *throttle.Stats `json:"throttle,omitempty"`
}

// ServerStats returns the statistics of every server in configured order.
func (c *Client) ServerStats() []ServerStats {
	out := make([]ServerStats, len(c.members))
	for i, m := range c.members {
		s := &m.stats
		out[i] = ServerStats{
			Server: m.spec.Name, Sent: s.sent.Load(), Answered: s.answered.Load(),
			Failed: s.failed.Load(), FailedOver: s.failedOver.Load(), Premature: s.premature.Load(),
			MeanUs: s.lat.Mean(), P99Us: float64(s.lat.Quantile(0.99)),
		}
		out[i].Probes = s.probes.Load()
		if c.sched != nil {
			c.tmu.Lock()
			ts := c.sched.Stats(i)
			c.unlockThrottle()
			out[i].Throttle = &ts
		}
		if up := m.up.Load(); up != nil {
			out[i].Peer = up.Name() // no watchdog over UDP: no State
		} else if name, st, ok := m.stateOf(); ok {
			out[i].Peer, out[i].State = name, st.String()
		} else {
			out[i].State = "not connected"
		}
	}
	return out
}

type serverStats struct {
	sent, answered, failed, failedOver, premature, probes atomic.Uint64
	lat                                                   latency.Histogram
}

func (s *serverStats) done(ok bool, d time.Duration) {
	if ok {
		s.answered.Add(1)
		s.lat.Record(d)
	} else {
		s.failed.Add(1)
	}
}

// UnmarshalText reads the outcome's name; an unknown name is an error.
func (o *FailoverOutcome) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*o = 0
		return nil
	}
	for i, n := range outcomeNames {
		if n != "" && n == string(b) {
			*o = FailoverOutcome(i)
			return nil
		}
	}
	return fmt.Errorf("client: unknown failover outcome %q", b)
}
