package status

import (
	"cmp"
	"context"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// Directions of a message, the "direction" label of aaatp_messages_total.
const (
	DirIn  = "in"  // received
	DirOut = "out" // sent
)

// Metric names, all in the aaatp namespace.
const (
	MetricMessages    = "aaatp_messages_total"
	MetricLatency     = "aaatp_request_duration_seconds"
	MetricState       = "aaatp_watchdog_state"
	MetricServerState = "aaatp_server_state"
	MetricTransitions = "aaatp_watchdog_transitions_total"
	MetricFailovers   = "aaatp_failovers_total"
	MetricMoved       = "aaatp_failover_requests_moved_total"
	MetricPending     = "aaatp_pending_requests"
	MetricUnanswered  = "aaatp_unanswered_requests"
	MetricDedupHits   = "aaatp_dedup_hits_total"
	MetricQueueDepth  = "aaatp_queue_depth"
	MetricQueueAlarm  = "aaatp_queue_alarm"
	MetricEvents      = "aaatp_events_total"
	MetricNodeInfo    = "aaatp_node_info"
	MetricBuildInfo   = "aaatp_build_info"
	MetricPeerInfo    = "aaatp_peer_info"
	MetricRecycled    = "aaatp_recycled_connections_total"
	// MetricRetransmissions counts the copies of requests a client sent
	// again to a RADIUS server over UDP; MetricStrayReplies the replies
	// of a client's RADIUS server that answered no request awaiting them,
	// by reason (StrayLate...).
	MetricRetransmissions = "aaatp_radius_retransmissions_total"
	MetricStrayReplies    = "aaatp_radius_stray_replies_total"
	MetricRequests        = "aaatp_requests_total"
	MetricAnswers         = "aaatp_answers_total"
	MetricErrors          = "aaatp_request_errors_total"
	MetricLoadLatency     = "aaatp_loadgen_request_duration_seconds"
	// MetricLogEvents counts, by kind, what the process logs
	// rate-limited: what remote peers did to its listeners and its
	// clients (refused connections, bad frames, failed authenticators,
	// unmatched answers, timeouts, overload) and failed accepts and
	// reads, the lines suppressed by the rate included.
	MetricLogEvents = "aaatp_log_events_total"
)

// Values of the "protocol" label of aaatp_peer_info; rows of one name and
// several protocols (a server's Diameter peer and NAS) list them, joined
// by commas.
const (
	ProtocolDiameter  = client.ProtocolDiameter
	ProtocolRADIUS    = client.ProtocolRADIUS // over UDP; a server's NAS clients
	ProtocolRADIUSTCP = client.ProtocolRADIUSTCP
	ProtocolRadSec    = client.ProtocolRadSec
)

// NoPeer is the "to" label of a failover with no alternate in service (the
// requests wait for one), and the "peer" label of the errors of requests
// that reached no server.
const NoPeer = "none"

// states are the watchdog states, each a value of the "state" label.
// serverStates are the policy's states, as policy.State names them.
var serverStates = [...]string{"unknown", "in-service", "out-of-service", "probing"}

var states = [...]string{
	watchdog.Initial.String(), watchdog.Okay.String(), watchdog.Suspect.String(),
	watchdog.Down.String(), watchdog.Reopen.String(),
}

// LatencyBuckets are the upper bounds (seconds) of the latency histogram:
// 100 us to 30 s in 1-2.5-5 steps (a request's deadline is 10 s by default).
var LatencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Metrics holds a node's Prometheus collectors, on a registry of its own.
// Its methods are safe for concurrent use and cheap enough to call from a
// Bus subscriber or a request handler. Every method of a nil *Metrics does
// nothing.
type Metrics struct {
	reg *prometheus.Registry

	messages    *prometheus.CounterVec // command, direction
	loadLatency prometheus.Histogram
	state       *prometheus.GaugeVec   // peer, state
	serverState *prometheus.GaugeVec   // peer, state (the policy's)
	transitions *prometheus.CounterVec // peer, from, to
	failovers   *prometheus.CounterVec // from, to
	moved       *prometheus.CounterVec // from, to
	pending     *prometheus.GaugeVec   // peer
	unanswered  *prometheus.GaugeVec   // peer
	dedupHits   atomic.Uint64
	dedupFrom   atomic.Pointer[func() uint64]
	queueDepth  *prometheus.GaugeVec   // peer
	queueAlarm  *prometheus.GaugeVec   // peer
	events      *prometheus.CounterVec // type
	info        *prometheus.GaugeVec   // role, origin_host, origin_realm, nas_identifier
	peerInfo    *prometheus.GaugeVec   // peer, url, protocol, origin_host
	recycled    recycledCounts         // peer
	radius      radiusCounts           // peer; peer, reason
	counts      peerCounts             // requests, answers, errors, latency per peer

	mu     sync.Mutex      // serializes Sync with the scrape that follows it
	seeded map[string]bool // peers whose failover series exist (at zero from the start); under mu
}

// radiusCounts exports the retransmissions and stray replies of a
// client's RADIUS servers, as of the last Sync: the counts are their
// peers' own (radpeer.UDPStats, radpeer.Stats), read, not incremented
// here. A server over UDP has the reasons late, duplicate, bad and no_ma
// and a retransmissions series; one over TCP or TLS late, unmatched,
// bad_auth and no_ma.
type radiusCounts struct {
	retrans, stray *prometheus.Desc
	mu             sync.Mutex
	last           []PeerStatus // the client's RADIUS rows of the last Sync
}

func (r *radiusCounts) Describe(ch chan<- *prometheus.Desc) { ch <- r.retrans; ch <- r.stray }

func (r *radiusCounts) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.last {
		name := label(p.Name())
		udp := p.Protocol == ProtocolRADIUS
		if udp {
			ch <- prometheus.MustNewConstMetric(r.retrans, prometheus.CounterValue, float64(p.Retransmissions), name)
		}
		for _, c := range p.Stray.counts(udp) {
			ch <- prometheus.MustNewConstMetric(r.stray, prometheus.CounterValue, float64(c.n), name, c.reason)
		}
	}
}

// set keeps the rows of a client's RADIUS servers (a configured name; a
// server's NAS clients have none).
func (r *radiusCounts) set(ps []PeerStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = r.last[:0]
	for _, p := range ps {
		switch p.Protocol {
		case ProtocolRADIUS, ProtocolRADIUSTCP, ProtocolRadSec:
			if p.Server != "" {
				r.last = append(r.last, p)
			}
		}
	}
}

// recycledCounts exports each RADIUS stream peer's count of recycled
// connections, as of the last Sync, as a counter: the count is the peer's
// own (radpeer.Stats.RecycledConns), so it is read, not incremented here.
type recycledCounts struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	last []PeerStatus // the RADIUS rows of the last Sync
}

func (r *recycledCounts) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r *recycledCounts) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.last {
		ch <- prometheus.MustNewConstMetric(r.desc, prometheus.CounterValue, float64(p.RecycledConns), label(p.Name()))
	}
}

func (r *recycledCounts) set(ps []PeerStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = r.last[:0]
	for _, p := range ps {
		if p.Protocol == ProtocolRADIUSTCP || p.Protocol == ProtocolRadSec {
			r.last = append(r.last, p)
		}
	}
}

// NewMetrics returns Metrics registered on a new registry, together with
// the Go runtime and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricMessages,
			Help: "Diameter messages by command (ACR, ACA, DWR, ...; other-request, other-answer for the rest) and direction (in, out).",
		}, []string{"command", "direction"}),
		loadLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricLoadLatency,
			Help:    "A load generator's time from each request's intended send time to its answer (open loop: the wait for a sender counts).",
			Buckets: LatencyBuckets,
		}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricState,
			Help: "RFC 3539 watchdog state per peer: 1 for the current state, 0 for the others.",
		}, []string{"peer", "state"}),
		serverState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricServerState,
			Help: "Server state of the Nokia 7750 SR policy per peer (unknown, in-service, out-of-service, probing): 1 for the current state, 0 for the others; only with a policy (every RADIUS/UDP server has one).",
		}, []string{"peer", "state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricTransitions,
			Help: "Watchdog state transitions per peer.",
		}, []string{"peer", "from", "to"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricFailovers,
			Help: "Failover events (RFC 3539 3.4.2 [5]) from a peer to another (to=\"none\": no alternate in service, the requests wait); every pair of configured peers from the start.",
		}, []string{"from", "to"}),
		moved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricMoved,
			Help: "Pending requests moved by failover from a peer to another.",
		}, []string{"from", "to"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricPending,
			Help: "Requests sent to a peer and not answered yet.",
		}, []string{"peer"}),
		unanswered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricUnanswered,
			Help: "Requests read from a Diameter peer on its current connection and not answered on the wire yet (a server's backlog; reading pauses at its limit).",
		}, []string{"peer"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricQueueDepth,
			Help: "Requests queued for a peer (a client's throttle).",
		}, []string{"peer"}),
		queueAlarm: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricQueueAlarm,
			Help: "1 when a peer's queue is in alarm.",
		}, []string{"peer"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricEvents,
			Help: "Events seen on the watched buses, by kind (watchdog, connection_up, connection_down, failover, error...).",
		}, []string{"type"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricNodeInfo,
			Help: "Always 1; the labels say which node this is.",
		}, []string{"role", "origin_host", "origin_realm", "nas_identifier"}),
		peerInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricPeerInfo,
			Help: "Always 1 per peer: its name (the peer label of every series), URL, protocol (diameter, radius, radius+tcp, radsec; diameter,radius for a server's Diameter peer and NAS of one name, whose counts are summed) and Origin-Host (Diameter, once its CER or CEA told it).",
		}, []string{"peer", "url", "protocol", "origin_host"}),
		seeded: map[string]bool{},
	}
	m.counts.init()
	m.recycled.desc = prometheus.NewDesc(MetricRecycled,
		"RADIUS over TCP or TLS: connections replaced because requests that never got an answer held all their Identifiers.",
		[]string{"peer"}, nil)
	m.radius.retrans = prometheus.NewDesc(MetricRetransmissions,
		"RADIUS over UDP: copies of requests sent again to the server after its timeout (each request's first send is in aaatp_requests_total).",
		[]string{"peer"}, nil)
	m.radius.stray = prometheus.NewDesc(MetricStrayReplies,
		"Replies of a client's RADIUS server that answered no request awaiting them, by reason: late (to a request given up on, or over TCP/TLS already complete), duplicate (UDP: to a request answered already), unmatched (TCP/TLS: on an Identifier with no request), bad (UDP: malformed, unmatched or failing verification), bad_auth (TCP/TLS: failing verification; the connection is closed), no_ma (without a required Message-Authenticator). Dropped, except a late UDP reply whose caller has no answer yet.",
		[]string{"peer", "reason"}, nil)
	dedup := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: MetricDedupHits,
		Help: "Duplicate requests answered from the dedup store instead of being applied again.",
	}, func() float64 {
		n := m.dedupHits.Load()
		if f := m.dedupFrom.Load(); f != nil {
			n += (*f)()
		}
		return float64(n)
	})
	for _, k := range serve.Kinds() {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        MetricLogEvents,
			Help:        "Events the process logs rate-limited (what remote peers did, failed accepts and reads), by kind, suppressed lines included.",
			ConstLabels: prometheus.Labels{"kind": k.String()},
		}, func() float64 { return float64(serve.Count(k)) }))
	}
	version, revision, goVersion := BuildLabels()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        MetricBuildInfo,
		Help:        "Always 1; the labels say which build of the binary this is: its main module's version, the VCS revision it was built from and the Go version (unknown: not stamped, as under go run).",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	build.Set(1)
	m.reg.MustRegister(m.messages, m.loadLatency, &m.counts, m.state, m.serverState, m.transitions, m.failovers,
		m.moved, m.pending, m.unanswered, dedup, m.queueDepth, m.queueAlarm, m.events, m.info, m.peerInfo, &m.recycled, &m.radius, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, k := range []peer.EventKind{peer.EventWatchdog, peer.EventConnUp, peer.EventConnDown, peer.EventDisconnecting, peer.EventFailover, peer.EventError} {
		m.events.WithLabelValues(k.String()) // export zeros from the start
	}
	return m
}

// BuildLabels returns the labels of aaatp_build_info, read from the running
// binary's build information (runtime/debug.ReadBuildInfo): the main
// module's version (a tag or pseudo-version, "+dirty" when the work tree had
// changes; "(devel)" when not stamped), the VCS revision it was built from
// ("unknown" when not stamped: "go run", "go test", -buildvcs=false) and the
// Go version.
func BuildLabels() (version, revision, goVersion string) {
	bi, ok := debug.ReadBuildInfo()
	return buildLabels(bi, ok)
}

func buildLabels(bi *debug.BuildInfo, ok bool) (version, revision, goVersion string) {
	version, revision, goVersion = "(devel)", "unknown", runtime.Version()
	if !ok || bi == nil {
		return version, revision, goVersion
	}
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		goVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			revision = s.Value
		}
	}
	return label(version), label(revision), label(goVersion)
}

// Registry returns the registry, to add the node's own collectors.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// HTTPHandler serves the registry in the Prometheus exposition formats.
// Handler mounts it at /metrics (after a Sync from its Source); use this
// one to serve the metrics elsewhere.
func (m *Metrics) HTTPHandler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// syncingHandler is HTTPHandler with the gauges synced from snapshot
// before each gathering. The sync and the gathering hold m.mu together
// (another scrape must not sync between them); the encoding and the write
// to the client do not, so a client that does not read its answer holds
// up only its own scrape.
func (m *Metrics) syncingHandler(snapshot func() Snapshot) http.Handler {
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.sync(snapshot())
		return m.reg.Gather()
	})
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ObserveMessage counts one message of command cmd ("ACR", "DWA"...) in
// direction dir (DirIn or DirOut).
func (m *Metrics) ObserveMessage(cmd, dir string) {
	if m == nil {
		return
	}
	m.messages.WithLabelValues(label(cmd), label(dir)).Inc()
}

// ObserveWire counts the encoded message msg, named by CommandName.
func (m *Metrics) ObserveWire(msg []byte, dir string) {
	if m == nil {
		return
	}
	m.messages.WithLabelValues(CommandName(msg), dir).Inc()
}

// ObserveLatency records one request's time to its answer as a load
// generator measures it (aaatp_loadgen_request_duration_seconds), from its
// intended send time. The per-peer aaatp_request_duration_seconds come from
// the client's own counts (Snapshot) or WrapHandler.
func (m *Metrics) ObserveLatency(d time.Duration) {
	if m == nil {
		return
	}
	m.loadLatency.Observe(d.Seconds())
}

// SetWatchdogState sets peer's state gauge: 1 for state, 0 for the others.
func (m *Metrics) SetWatchdogState(peerName, state string) {
	if m == nil {
		return
	}
	for _, s := range states {
		v := 0.0
		if s == state {
			v = 1
		}
		m.state.WithLabelValues(label(peerName), s).Set(v)
	}
}

// IncTransition counts one watchdog transition of peer.
func (m *Metrics) IncTransition(peerName, from, to string) {
	if m == nil {
		return
	}
	m.transitions.WithLabelValues(label(peerName), label(from), label(to)).Inc()
}

// IncFailover counts one failover event from peer from to peer to (empty:
// no alternate in service) that moved requests.
func (m *Metrics) IncFailover(from, to string, moved int) {
	if m == nil {
		return
	}
	if to == "" {
		to = NoPeer
	}
	m.failovers.WithLabelValues(label(from), label(to)).Inc()
	c := m.moved.WithLabelValues(label(from), label(to))
	if moved > 0 {
		c.Add(float64(moved))
	}
}

// SetPending sets how many requests are pending on peer.
func (m *Metrics) SetPending(peerName string, n int) {
	if m == nil {
		return
	}
	m.pending.WithLabelValues(label(peerName)).Set(float64(n))
}

// IncDedupHit counts one duplicate answered from the dedup store.
func (m *Metrics) IncDedupHit() { m.AddDedupHits(1) }

// AddDedupHits counts n duplicates answered from the dedup store.
func (m *Metrics) AddDedupHits(n uint64) {
	if m == nil || n == 0 {
		return
	}
	m.dedupHits.Add(n)
}

// CountDedupHitsFrom makes the dedup-hit counter also read f at each
// scrape, for a node that already counts duplicates itself (aaa-peer
// server: its dedup.Counters' Duplicates.Load). f must be monotonic, quick
// and safe for concurrent use. A later call replaces f.
func (m *Metrics) CountDedupHitsFrom(f func() uint64) {
	if m == nil {
		return
	}
	m.dedupFrom.Store(&f)
}

// SetQueueDepth sets the depth of server's queue.
func (m *Metrics) SetQueueDepth(server string, n int) {
	if m == nil {
		return
	}
	m.queueDepth.WithLabelValues(label(server)).Set(float64(n))
}

// SetQueueAlarm sets whether server's queue is in alarm.
func (m *Metrics) SetQueueAlarm(server string, alarm bool) {
	if m == nil {
		return
	}
	v := 0.0
	if alarm {
		v = 1
	}
	m.queueAlarm.WithLabelValues(label(server)).Set(v)
}

// ForgetPeer removes every series of peer (state, pending, transitions):
// for a server's peer that has gone, so that a server seeing many peers
// come and go keeps a bounded set of series.
func (m *Metrics) ForgetPeer(peerName string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"peer": label(peerName)}
	m.state.DeletePartialMatch(l)
	m.serverState.DeletePartialMatch(l)
	m.pending.DeleteLabelValues(label(peerName))
	m.unanswered.DeleteLabelValues(label(peerName))
	m.transitions.DeletePartialMatch(l)
	m.counts.forget(label(peerName))
}

// ObserveEvent updates the metrics from one peer event: every event is
// counted by kind; a watchdog event also sets the peer's state and counts
// the transition.
func (m *Metrics) ObserveEvent(e peer.Event) {
	if m == nil {
		return
	}
	m.observeEvent(e, e.Peer)
}

// observeEvent is ObserveEvent with the peer named name.
func (m *Metrics) observeEvent(e peer.Event, name string) {
	m.events.WithLabelValues(e.Kind.String()).Inc()
	if e.Kind == peer.EventWatchdog {
		m.IncTransition(name, e.From.String(), e.To.String())
		m.SetWatchdogState(name, e.To.String())
	}
}

// ObserveClientEvent updates the metrics from one event of a
// client.Client: its peers' events as ObserveEvent does, the peer named
// by its configured name (Event.Server) as in every series; a failover
// record counts the failover and the requests it moved; the other kinds
// are counted by kind.
func (m *Metrics) ObserveClientEvent(e client.Event) {
	if m == nil {
		return
	}
	switch {
	case e.Kind == client.EventPeer && e.Peer != nil:
		m.observeEvent(*e.Peer, cmp.Or(e.Server, e.Peer.Peer))
		return
	case e.Kind == client.EventFailover && e.Failover != nil:
		m.IncFailover(e.Failover.From, e.Failover.To, e.Failover.Moved)
	}
	m.events.WithLabelValues(e.Kind.String()).Inc()
}

// Watch subscribes ObserveEvent to bus (a server's, or one shared by
// several peers) and returns the function that unsubscribes it.
func (m *Metrics) Watch(bus *peer.Bus) (cancel func()) {
	if m == nil || bus == nil {
		return func() {}
	}
	return bus.Subscribe(func(_ context.Context, e peer.Event) { m.ObserveEvent(e) })
}

// WatchClient subscribes ObserveClientEvent to a client's bus and returns
// the function that unsubscribes it.
func (m *Metrics) WatchClient(bus *client.Bus) (cancel func()) {
	if m == nil || bus == nil {
		return func() {}
	}
	return bus.Subscribe(func(_ context.Context, e client.Event) { m.ObserveClientEvent(e) })
}

// WrapHandler returns h counting each request it receives and each answer
// it returns (ObserveWire), and, per peer (its Origin-Host), the requests,
// the answers by Result-Code class and h's time (aaatp_requests_total,
// aaatp_answers_total, aaatp_request_duration_seconds). A peer's series
// go with it (ForgetPeer, or Sync without it).
func (m *Metrics) WrapHandler(h peer.Handler) peer.Handler {
	if m == nil {
		return h
	}
	return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		m.ObserveWire(req, DirIn)
		var sc *servedCounts
		if p != nil {
			sc = m.counts.served(label(p.Name()))
			sc.requests.Add(1)
		}
		t0 := time.Now()
		ans := h(ctx, p, req)
		took := time.Since(t0)
		if ans != nil {
			m.ObserveWire(ans, DirOut)
			if sc != nil {
				sc.answered(client.DiameterClassOf(ans), took)
			}
		}
		return ans
	}
}

// Sync sets the gauges that a Snapshot carries, which it makes
// authoritative: each peer's watchdog state and pending count, each
// queue's depth and alarm, and the node's info. Series of peers and queues
// absent from s (a server's peer that has gone, a name a Watch event used
// before the CEA told the Origin-Host) are dropped. Handler calls it before
// each scrape of /metrics.
func (m *Metrics) Sync(s Snapshot) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync(s)
}

func (m *Metrics) sync(s Snapshot) {
	m.info.Reset()
	m.info.WithLabelValues(label(s.Role), label(s.Identity.OriginHost), label(s.Identity.OriginRealm), label(s.Identity.NASIdentifier)).Set(1)
	m.state.Reset()
	m.serverState.Reset()
	m.pending.Reset()
	m.unanswered.Reset()
	m.peerInfo.Reset()
	// Rows of one name are one peer to the metrics (a server's Diameter
	// peer whose Origin-Host is also a NAS row's name): their counts are
	// summed (gauges added here, counters in peerCounts) and
	// aaatp_peer_info has one series, so that no two series share a name
	// and labels and a join on peer finds one.
	type info struct{ url, proto, originHost string }
	infos := make(map[string]*info, len(s.Peers))
	var order []string
	for _, p := range s.Peers {
		name := p.Name()
		if p.State != "" { // a RADIUS/UDP server has no watchdog
			m.SetWatchdogState(name, p.State)
		}
		if p.ServerPolicy != "" {
			for _, st := range serverStates {
				v := 0.0
				if st == p.ServerPolicy {
					v = 1
				}
				m.serverState.WithLabelValues(label(name), st).Set(v)
			}
		}
		m.pending.WithLabelValues(label(name)).Add(float64(p.Pending)) // reset above
		proto := p.Protocol
		if proto == "" {
			proto = ProtocolDiameter
			m.unanswered.WithLabelValues(label(name)).Add(float64(p.Unanswered))
		}
		in := infos[label(name)]
		if in == nil {
			in = &info{url: p.URL, proto: proto, originHost: p.OriginHost}
			infos[label(name)] = in
			order = append(order, label(name))
			continue
		}
		in.url, in.originHost = cmp.Or(in.url, p.URL), cmp.Or(in.originHost, p.OriginHost)
		if !slices.Contains(strings.Split(in.proto, ","), proto) {
			in.proto += "," + proto
		}
	}
	for _, name := range order {
		in := infos[name]
		m.peerInfo.WithLabelValues(name, label(in.url), label(in.proto), label(in.originHost)).Set(1)
	}
	m.seedFailovers(s.Peers)
	m.counts.set(s)
	m.recycled.set(s.Peers)
	m.radius.set(s.Peers)
	m.queueDepth.Reset()
	m.queueAlarm.Reset()
	for _, q := range s.Queues {
		m.SetQueueDepth(q.Server, q.Depth)
		m.SetQueueAlarm(q.Server, q.Alarm)
	}
}

// seedFailovers makes the failover series of a client's servers (rows
// with a configured name) exist at zero: from each to each other and to
// "none", N*N series per metric for N servers, all from configuration.
// A server's series once made stay, as its counters must not go back.
func (m *Metrics) seedFailovers(ps []PeerStatus) {
	fresh := false
	for _, p := range ps {
		if p.Server != "" && !m.seeded[p.Server] {
			fresh = true
			m.seeded[p.Server] = true
		}
	}
	if !fresh {
		return
	}
	for from := range m.seeded {
		for to := range m.seeded {
			if to == from {
				to = NoPeer
			}
			m.failovers.WithLabelValues(label(from), label(to))
			m.moved.WithLabelValues(label(from), label(to))
		}
	}
}

// maxLabelLen bounds a label value: peer names are DiameterIdentities of at
// most 255 bytes once checked, and nothing longer belongs on a series.
const maxLabelLen = 255

// label makes any string a valid label value: the Prometheus client panics
// on a value that is not valid UTF-8, and a peer's name must never be able
// to end the process. Invalid bytes become U+FFFD and the value is cut to
// maxLabelLen bytes on a rune boundary. Valid short values, the usual case,
// come back as they are without allocating.
func label(s string) string {
	if len(s) <= maxLabelLen && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxLabelLen {
		cut := maxLabelLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// CommandName names a Diameter message for the "command" label: the RFC
// abbreviation of the commands aaatp knows (CER, CEA, DWR, DWA, DPR, DPA,
// ACR, ACA, TR, TA for freeDiameter's test_app), else "other-request" or
// "other-answer", so that a peer cannot grow the label set.
func CommandName(msg []byte) string {
	switch {
	case len(msg) < 20:
		return "invalid"
	case message.KnownCommand(wire.CommandCode(msg)):
		return message.CommandName(msg)
	case wire.IsRequest(msg):
		return "other-request"
	}
	return "other-answer"
}
