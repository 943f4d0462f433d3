package status

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aaatp/aaatp/client"
)

// peerCounts exports the per-peer counters and latency histogram:
// aaatp_requests_total, aaatp_answers_total, aaatp_request_errors_total
// and aaatp_request_duration_seconds. A client's come from its own
// counts, carried by the last Snapshot (PeerStatus.Counters, and
// Snapshot.UnsentErrors under peer "none"): every configured server has
// them, zeros included, from its first Sync. A RADIUS server's NAS rows
// carry theirs the same way (no latency, no errors). A server's are counted here
// by WrapHandler, per peer, and dropped with the peer (ForgetPeer, or a
// Sync whose Snapshot no longer lists it), so that a server seeing peers
// come and go keeps a bounded set.
type peerCounts struct {
	requests, answers, errors, latency *prometheus.Desc

	mu     sync.RWMutex // a handler's look-up of its peer takes it shared
	rows   []PeerStatus // the client rows of the last Sync (Counters set)
	unsent map[string]uint64
	byPeer map[string]*servedCounts // a server's peers, by label value
}

// servedCounts are what a server's handler did for one peer.
type servedCounts struct {
	requests atomic.Uint64
	answers  [6]atomic.Uint64 // by index in client.DiameterClasses
	buckets  []atomic.Uint64  // per LatencyBuckets bound, the answers above the bound before it (summed at Collect)
	count    atomic.Uint64
	sumNs    atomic.Int64
}

func (c *peerCounts) init() {
	c.requests = prometheus.NewDesc(MetricRequests,
		"Requests per peer: a client's first sent to the server (replays after a failover not counted), a server's received from the peer.",
		[]string{"peer"}, nil)
	c.answers = prometheus.NewDesc(MetricAnswers,
		"Answers per peer by class: Diameter Result-Code (or Experimental-Result-Code) by thousand, 1xxx to 5xxx; RADIUS accept, reject, challenge, accounting-response; other. A client counts the answers each server returned, a server the answers it returned to each peer.",
		[]string{"peer", "class"}, nil)
	c.errors = prometheus.NewDesc(MetricErrors,
		"A client's requests that ended with an error, by the server they were first sent to (peer=\"none\": sent to none) and reason (timeout, no_peer, canceled, closed, connection_lost, no_reply, unable_to_deliver, queue_full, busy, other).",
		[]string{"peer", "reason"}, nil)
	c.latency = prometheus.NewDesc(MetricLatency,
		"Time from request to answer per peer: a client's from Send or Exchange to the answer of the server that answered, a server's handler time for the peer.",
		[]string{"peer"}, nil)
	c.byPeer = map[string]*servedCounts{}
}

func (c *peerCounts) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.answers
	ch <- c.errors
	ch <- c.latency
}

func (c *peerCounts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, r := range c.byName() {
		name, k := r.name, r.counts
		counter(c.requests, k.Requests, name)
		for class, v := range k.Answers {
			counter(c.answers, v, name, label(class))
		}
		for reason, v := range k.Errors {
			counter(c.errors, v, name, label(reason))
		}
		if k.Latency == nil {
			continue
		}
		buckets := make(map[float64]uint64, len(LatencyBuckets))
		for i, b := range LatencyBuckets {
			if i < len(k.Latency.AtMost) {
				buckets[b] = k.Latency.AtMost[i]
			}
		}
		ch <- prometheus.MustNewConstHistogram(c.latency, k.Latency.Count, k.Latency.Sum.Seconds(), buckets, name)
	}
	for reason, v := range c.unsent {
		counter(c.errors, v, NoPeer, label(reason))
	}
}

// namedCounts are the counts of one "peer" label value.
type namedCounts struct {
	name   string
	counts *PeerCounters
}

// byName returns the counts of the rows and of a server's peers, one
// entry a label value: a server's Diameter peer whose Origin-Host is also
// the name of one of its NAS rows (a [[client]] name, an address, "other")
// is one peer to the metrics, its counts the sum of both (two series of
// one name and labels would fail the whole gathering, and the scrape
// would lose one of them). Under c.mu.
func (c *peerCounts) byName() []namedCounts {
	out := make([]namedCounts, 0, len(c.rows)+len(c.byPeer))
	at := make(map[string]int, len(c.rows))
	for _, p := range c.rows { // one row a label value (set)
		name := label(p.Name())
		at[name] = len(out)
		out = append(out, namedCounts{name, p.Counters})
	}
	for name, sc := range c.byPeer {
		k := sc.counters()
		if i, ok := at[name]; ok {
			out[i].counts = merged(out[i].counts, k)
			continue
		}
		out = append(out, namedCounts{name, k})
	}
	return out
}

// counters returns sc as PeerCounters: the requests, the answers of every
// Diameter class and the latency at or below each of LatencyBuckets.
func (sc *servedCounts) counters() *PeerCounters {
	k := &PeerCounters{Requests: sc.requests.Load(), Answers: make(map[string]uint64, len(client.DiameterClasses))}
	for i, class := range client.DiameterClasses {
		k.Answers[class] = sc.answers[i].Load()
	}
	l := client.ServerLatency{AtMost: make([]uint64, len(LatencyBuckets)), Sum: time.Duration(sc.sumNs.Load())}
	var cum uint64
	for i := range LatencyBuckets {
		cum += sc.buckets[i].Load()
		l.AtMost[i] = cum
	}
	l.Count = max(sc.count.Load(), cum)
	k.Latency = &l
	return k
}

// set keeps s's client rows and unsent errors, and drops the served
// counts of the peers s does not list.
func (c *peerCounts) set(s Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.rows
	c.rows = nil // old keeps the last rows until they are compared below
	names := make(map[string]bool, len(s.Peers))
	at := make(map[string]int, len(s.Peers)) // index in c.rows by label value
	for _, p := range s.Peers {
		name := label(p.Name())
		names[name] = true
		if p.Counters == nil {
			continue
		}
		if i, ok := at[name]; ok { // one NAS on several listeners: one peer
			c.rows[i].Counters = merged(c.rows[i].Counters, p.Counters)
			continue
		}
		at[name] = len(c.rows)
		c.rows = append(c.rows, p)
	}
	c.unsent = s.UnsentErrors
	for name := range c.byPeer {
		if !names[name] {
			delete(c.byPeer, name)
		}
	}
	// A row gone whose name a server's peer keeps (a NAS row summed with
	// a Diameter peer of that name, see byName): what the two share, the
	// requests and the answers of class other, stays in the sum, so that
	// its counters do not go back (a counter reset to Prometheus).
	for _, p := range old {
		name := label(p.Name())
		sc := c.byPeer[name]
		if _, kept := at[name]; sc == nil || kept {
			continue
		}
		sc.requests.Add(p.Counters.Requests)
		sc.answers[slices.Index(client.DiameterClasses, client.ClassOther)].Add(p.Counters.Answers[client.ClassOther])
	}
}

// served returns the counts of a server's peer named name (a label value),
// made on its first request.
func (c *peerCounts) served(name string) *servedCounts {
	c.mu.RLock()
	sc := c.byPeer[name]
	c.mu.RUnlock()
	if sc != nil {
		return sc
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc = c.byPeer[name]; sc == nil {
		sc = &servedCounts{buckets: make([]atomic.Uint64, len(LatencyBuckets))}
		c.byPeer[name] = sc
	}
	return sc
}

// forget drops the counts of a server's peer that ended, unless a row
// of the same name keeps the name's series (a NAS row it is summed with,
// see byName): they stay, and go on if the peer comes back, so that the
// sum does not go back; set drops them with the name.
func (c *peerCounts) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.ContainsFunc(c.rows, func(r PeerStatus) bool { return label(r.Name()) == name }) {
		return
	}
	delete(c.byPeer, name)
}

// answered counts one answer of class (a client.DiameterClasses name)
// that took took.
func (sc *servedCounts) answered(class string, took time.Duration) {
	if i := slices.Index(client.DiameterClasses, class); i >= 0 {
		sc.answers[i].Add(1)
	}
	sec := took.Seconds()
	for i, b := range LatencyBuckets {
		if sec <= b {
			sc.buckets[i].Add(1)
			break
		}
	}
	sc.count.Add(1)
	sc.sumNs.Add(int64(took))
}

// merged returns the sum of a and b, a new PeerCounters.
func merged(a, b *PeerCounters) *PeerCounters {
	m := &PeerCounters{Requests: a.Requests + b.Requests, Answers: map[string]uint64{}}
	for _, from := range []map[string]uint64{a.Answers, b.Answers} {
		for k, v := range from {
			m.Answers[k] += v
		}
	}
	if a.Errors != nil || b.Errors != nil {
		m.Errors = map[string]uint64{}
		for _, from := range []map[string]uint64{a.Errors, b.Errors} {
			for k, v := range from {
				m.Errors[k] += v
			}
		}
	}
	switch {
	case a.Latency == nil:
		m.Latency = b.Latency
	case b.Latency == nil:
		m.Latency = a.Latency
	default:
		l := client.ServerLatency{Server: a.Latency.Server, Count: a.Latency.Count + b.Latency.Count, Sum: a.Latency.Sum + b.Latency.Sum,
			AtMost: make([]uint64, max(len(a.Latency.AtMost), len(b.Latency.AtMost)))}
		for i := range l.AtMost {
			if i < len(a.Latency.AtMost) {
				l.AtMost[i] += a.Latency.AtMost[i]
			}
			if i < len(b.Latency.AtMost) {
				l.AtMost[i] += b.Latency.AtMost[i]
			}
		}
		m.Latency = &l
	}
	return m
}
