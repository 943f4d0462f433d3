package status

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

func acr(n int) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, fmt.Sprintf("cli.example.net;1;%d", n)).
		String(message.OriginHost, 0, true, "cli.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, uint32(n)).
		Bytes()
}

func answer(_ context.Context, _ *peer.Peer, req []byte) []byte {
	return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, message.Success).
		String(message.OriginHost, 0, true, "srv.example.net").
		String(message.OriginRealm, 0, true, "example.net").Bytes()
}

// families scrapes /metrics of a Handler on src and m, and parses it.
func families(t *testing.T, src Source, m *Metrics) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	r := get(t, Handler(src, WithMetrics(m)), "/metrics")
	if r.StatusCode != 200 {
		t.Fatalf("/metrics: %d", r.StatusCode)
	}
	text := body(t, r)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, text)
	}
	return fams, text
}

// value returns the value of the series of family name whose labels
// include want (label=value pairs); ok is false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if got[want[i]] != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func expect(t *testing.T, fams map[string]*dto.MetricFamily, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := value(fams, name, labels...)
	if !ok {
		t.Errorf("%s%v: no such series", name, labels)
		return
	}
	if got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func TestMetricsFromBusAndHandlers(t *testing.T) {
	m := NewMetrics()
	bus := peer.NewBus()
	cancel := m.Watch(bus)
	now := time.Now()
	cbus := client.NewBus()
	cancelClient := m.WatchClient(cbus)
	pub := func(e peer.Event) { e.Time = now; bus.Publish(context.Background(), e) }
	pubClient := func(e client.Event) { e.Time = now; cbus.Publish(context.Background(), e) }
	pub(peer.Event{Peer: "s1.example.net", Kind: peer.EventConnUp, Reason: "connected"})
	pub(peer.Event{Peer: "s1.example.net", Kind: peer.EventWatchdog, From: watchdog.Initial, To: watchdog.Okay})
	pub(peer.Event{Peer: "s2.example.net", Kind: peer.EventWatchdog, From: watchdog.Initial, To: watchdog.Okay})
	// A client's peer event counts as the peer's.
	pubClient(client.Event{Server: "s2", Kind: client.EventPeer,
		Peer: &peer.Event{Peer: "s2.example.net", Kind: peer.EventWatchdog, From: watchdog.Okay, To: watchdog.Suspect}})
	// A client's failover records, twice, and one with no alternate.
	for range 2 {
		pubClient(client.Event{Server: "s2", Kind: client.EventFailover,
			Failover: &client.FailoverRecord{From: "s2", To: "s1", Outcome: client.Moved, Moved: 10, EndToEnd: []uint32{1}}})
	}
	pubClient(client.Event{Server: "s2", Kind: client.EventFailover,
		Failover: &client.FailoverRecord{From: "s2", Outcome: client.Parked, Moved: 3}})
	// Events that move nothing.
	pub(peer.Event{Peer: "s2.example.net", Kind: peer.EventFailback, Reason: "failback: back in service"})
	pubClient(client.Event{Server: "s2", Kind: client.EventBalancerRebuilt, Generation: 3})
	cancel()
	cancelClient()
	pub(peer.Event{Peer: "s1.example.net", Kind: peer.EventWatchdog, From: watchdog.Okay, To: watchdog.Down}) // not watched any more
	pubClient(client.Event{Server: "s1", Kind: client.EventFailover, Failover: &client.FailoverRecord{From: "s1", To: "s2", Moved: 1}})

	h := m.WrapHandler(answer)
	for i := range 3 {
		if ans := h(context.Background(), nil, acr(i)); ans == nil {
			t.Fatal("no answer")
		}
	}
	m.ObserveMessage("DWR", DirOut)
	m.ObserveWire([]byte{1, 2}, DirIn) // too short: "invalid"
	for range 3 {
		m.ObserveLatency(time.Millisecond)
	}
	m.IncDedupHit()
	m.AddDedupHits(2)
	var dd atomic.Uint64 // the node's own count, as dedup.Counters.Duplicates
	dd.Store(5)
	m.CountDedupHitsFrom(dd.Load)

	src := newFake()
	src.snap.Peers = []PeerStatus{{Peer: "s1.example.net", State: "OKAY", Pending: 4},
		{Peer: "s2.example.net", State: "SUSPECT"}}
	fams, text := families(t, src, m)

	expect(t, fams, 1, MetricState, "peer", "s1.example.net", "state", "OKAY")
	expect(t, fams, 0, MetricState, "peer", "s1.example.net", "state", "DOWN")
	expect(t, fams, 1, MetricState, "peer", "s2.example.net", "state", "SUSPECT")
	expect(t, fams, 0, MetricState, "peer", "s2.example.net", "state", "OKAY")
	// A client's peer event names the peer by its configured name.
	expect(t, fams, 1, MetricTransitions, "peer", "s2", "from", "OKAY", "to", "SUSPECT")
	expect(t, fams, 1, MetricTransitions, "peer", "s1.example.net", "from", "INITIAL", "to", "OKAY")
	if _, ok := value(fams, MetricTransitions, "peer", "s1.example.net", "to", "DOWN"); ok {
		t.Error("an event after cancel was counted")
	}
	expect(t, fams, 2, MetricFailovers, "from", "s2", "to", "s1")
	expect(t, fams, 20, MetricMoved, "from", "s2", "to", "s1")
	expect(t, fams, 1, MetricFailovers, "from", "s2", "to", "none")
	expect(t, fams, 3, MetricMoved, "from", "s2", "to", "none")
	expect(t, fams, 3, MetricEvents, "type", "failover")
	expect(t, fams, 1, MetricEvents, "type", "failback")
	expect(t, fams, 1, MetricEvents, "type", "balancer_rebuilt")
	expect(t, fams, 3, MetricEvents, "type", "watchdog")
	expect(t, fams, 1, MetricEvents, "type", "connection_up")
	expect(t, fams, 0, MetricEvents, "type", "connection_down")
	expect(t, fams, 0, MetricEvents, "type", "error")
	expect(t, fams, 3, MetricMessages, "command", "ACR", "direction", "in")
	expect(t, fams, 3, MetricMessages, "command", "ACA", "direction", "out")
	expect(t, fams, 1, MetricMessages, "command", "DWR", "direction", "out")
	expect(t, fams, 1, MetricMessages, "command", "invalid", "direction", "in")
	expect(t, fams, 3, MetricLoadLatency)
	expect(t, fams, 8, MetricDedupHits)
	// From the Source, at scrape time.
	expect(t, fams, 4, MetricPending, "peer", "s1.example.net")
	expect(t, fams, 4, MetricQueueDepth, "peer", "s1.example.net")
	expect(t, fams, 1, MetricQueueAlarm, "peer", "s2.example.net")
	expect(t, fams, 1, MetricNodeInfo, "role", "client", "origin_host", "c1.example.net", "origin_realm", "example.net")
	if fams["go_goroutines"] == nil || fams["process_start_time_seconds"] == nil {
		t.Error("no Go runtime or process metrics")
	}
	if f := fams[MetricLoadLatency]; f.GetType() != dto.MetricType_HISTOGRAM || len(f.Metric[0].Histogram.Bucket) != len(LatencyBuckets)+1 /* +Inf */ {
		t.Errorf("latency is not the histogram expected: %v", f)
	}
	for _, name := range []string{MetricMessages, MetricLoadLatency, MetricState, MetricTransitions, MetricFailovers,
		MetricMoved, MetricPending, MetricDedupHits, MetricQueueDepth, MetricQueueAlarm} {
		if !strings.Contains(text, "# HELP "+name+" ") || !strings.Contains(text, "# TYPE "+name+" ") {
			t.Errorf("no HELP/TYPE for %s", name)
		}
	}

	// A peer and a queue gone from the Source lose their gauges at the
	// next scrape, whoever set them; their counters stay.
	src.snap.Peers = src.snap.Peers[1:]
	m.SetWatchdogState("127.0.0.1:3868", "OKAY") // the name before the CEA
	src.snap.Queues = src.snap.Queues[:1]
	fams, _ = families(t, src, m)
	if _, ok := value(fams, MetricPending, "peer", "s1.example.net"); ok {
		t.Error("pending of a peer gone is still exported")
	}
	if _, ok := value(fams, MetricState, "peer", "s1.example.net"); ok {
		t.Error("state of a peer gone is still exported")
	}
	if _, ok := value(fams, MetricState, "peer", "127.0.0.1:3868"); ok {
		t.Error("state of a peer absent from the Source is exported")
	}
	expect(t, fams, 1, MetricState, "peer", "s2.example.net", "state", "SUSPECT")
	if _, ok := value(fams, MetricQueueDepth, "peer", "s2.example.net"); ok {
		t.Error("a queue gone is still exported")
	}
	expect(t, fams, 1, MetricTransitions, "peer", "s1.example.net", "from", "INITIAL", "to", "OKAY")
}

func TestNilMetricsIsNoOp(t *testing.T) {
	var m *Metrics
	m.ObserveMessage("ACR", DirIn)
	m.ObserveWire(acr(1), DirOut)
	m.ObserveLatency(time.Millisecond)
	m.SetWatchdogState("p", "OKAY")
	m.IncTransition("p", "OKAY", "DOWN")
	m.IncFailover("a", "b", 1)
	m.SetPending("p", 1)
	m.IncDedupHit()
	m.CountDedupHitsFrom(func() uint64 { return 1 })
	m.SetQueueDepth("s", 1)
	m.SetQueueAlarm("s", true)
	m.ForgetPeer("p")
	m.ObserveEvent(peer.Event{Kind: peer.EventWatchdog})
	m.ObserveClientEvent(client.Event{Kind: client.EventFailover})
	m.WatchClient(client.NewBus())()
	m.Sync(Snapshot{})
	m.Watch(peer.NewBus())()
	if m.Registry() != nil {
		t.Error("nil Metrics has a registry")
	}
	h := m.WrapHandler(answer)
	if h(context.Background(), nil, acr(1)) == nil {
		t.Error("nil Metrics broke the handler")
	}
}

func TestCommandName(t *testing.T) {
	req := acr(1)
	ans := answer(context.Background(), nil, req)
	other := message.NewRequest(999, 3, 0).Bytes()
	for msg, want := range map[string]string{string(req): "ACR", string(ans): "ACA", string(other): "other-request",
		string(message.NewRequest(wire.CmdDeviceWatchdog, 0, 0).Bytes()):        "DWR",
		string(message.NewRequest(message.CmdTest, message.AppTest, 0).Bytes()): "TR"} {
		if got := CommandName([]byte(msg)); got != want {
			t.Errorf("CommandName = %q, want %q", got, want)
		}
	}
}

// TestRealPeers runs a server and a client over loopback TCP and checks
// what the helpers and the metrics make of them: the rows ClientPeers and
// PeerRows build, ClientSnapshot, and the state and message metrics fed by Watch and
// WrapHandler.
func TestRealPeers(t *testing.T) {
	ms := NewMetrics()
	sbus := peer.NewBus()
	defer ms.Watch(sbus)()
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: "srv.example.net", OriginRealm: "example.net",
		Handler: ms.WrapHandler(answer), Events: sbus, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())

	mc := NewMetrics()
	cbus := client.NewBus()
	defer mc.WatchClient(cbus)()
	c, err := client.New(client.Config{
		Peers:  []client.PeerSpec{{URL: "tcp://" + srv.Addr().String(), Name: "s1"}},
		Events: cbus,
		Peer: peer.Config{OriginHost: "cli.example.net", OriginRealm: "example.net", Logger: quiet,
			Watchdog: watchdog.Config{Twinit: 30 * time.Second}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Peers()[0].WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		t0 := time.Now()
		mc.ObserveWire(acr(i), DirOut)
		ans, err := c.Send(ctx, acr(i))
		if err != nil {
			t.Fatal(err)
		}
		mc.ObserveLatency(time.Since(t0))
		mc.ObserveWire(ans, DirIn)
	}

	var rows []PeerStatus
	deadline := time.Now().Add(5 * time.Second)
	for { // the balancer follows the watchdog event a moment later
		rows = ClientPeers(c)
		if strings.HasPrefix(rows[0].Policy, "in-service") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := rows[0]
	if r.Peer != "srv.example.net" || r.Server != "s1" || r.State != "OKAY" || r.Sent != 2 || r.Answered != 2 ||
		r.Tw <= 0 || r.Since.IsZero() || !strings.HasPrefix(r.Policy, "in-service") {
		t.Errorf("client row: %+v", r)
	}
	if s := ClientSnapshot(c); len(s.Peers) != 1 || s.Peers[0].Server != "s1" || s.Peers[0].Protocol != ProtocolDiameter || s.Peers[0].URL != "tcp://"+srv.Addr().String() || s.Peers[0].OriginHost != "srv.example.net" ||
		s.Totals != (Totals{Answered: 2}) || s.FailoversTotal != 0 || len(s.Queues) != 0 {
		t.Errorf("client snapshot: %+v", s)
	}
	clientSrc := SourceFunc(func() Snapshot {
		s := ClientSnapshot(c)
		s.Role, s.Identity = RoleClient, Identity{OriginHost: "cli.example.net"}
		return s
	})
	fams, _ := families(t, clientSrc, mc)
	// A client names its server s1, as configured, in every series.
	expect(t, fams, 1, MetricState, "peer", "s1", "state", "OKAY")
	expect(t, fams, 2, MetricMessages, "command", "ACA", "direction", "in")
	expect(t, fams, 2, MetricLatency, "peer", "s1")
	expect(t, fams, 2, MetricLoadLatency)
	expect(t, fams, 2, MetricRequests, "peer", "s1")
	expect(t, fams, 2, MetricAnswers, "peer", "s1", "class", "2xxx")
	expect(t, fams, 1, MetricPeerInfo, "peer", "s1", "url", "tcp://"+srv.Addr().String(), "protocol", "diameter", "origin_host", "srv.example.net")
	checkJoin(t, fams, "s1", MetricState, MetricLatency, MetricErrors, MetricFailovers, MetricMoved)
	if v, ok := value(fams, MetricTransitions, "peer", "s1", "to", "OKAY"); !ok || v < 1 {
		t.Errorf("no transition to OKAY counted: %v %v", v, ok)
	}

	var srows []PeerStatus
	for _, p := range srv.Peers() {
		srows = append(srows, PeerRow(p.Stats()))
	}
	if len(srows) != 1 || srows[0].Peer != "cli.example.net" || srows[0].State != "OKAY" {
		t.Errorf("server rows: %+v", srows)
	}
	// The ended peers follow the live ones, one row a name not live.
	rows = ServerPeers(srv.Peers(), []peer.Stats{{Peer: "cli.example.net"}, {Peer: "old.example.net", State: "DOWN"}, {Peer: "old.example.net"}})
	if len(rows) != 2 || rows[0].Peer != "cli.example.net" || rows[0].State != "OKAY" || rows[1].Peer != "old.example.net" || rows[1].State != "DOWN" {
		t.Errorf("server rows with ended peers: %+v", rows)
	}
	serverSrc := SourceFunc(func() Snapshot {
		return Snapshot{Role: RoleServer, Identity: Identity{OriginHost: "srv.example.net"}, Peers: ServerPeers(srv.Peers(), nil)}
	})
	fams, _ = families(t, serverSrc, ms)
	expect(t, fams, 2, MetricMessages, "command", "ACR", "direction", "in")
	expect(t, fams, 2, MetricMessages, "command", "ACA", "direction", "out")
	expect(t, fams, 1, MetricState, "peer", "cli.example.net", "state", "OKAY")
	// A server names its client by its Origin-Host.
	expect(t, fams, 2, MetricRequests, "peer", "cli.example.net")
	expect(t, fams, 2, MetricAnswers, "peer", "cli.example.net", "class", "2xxx")
	expect(t, fams, 2, MetricLatency, "peer", "cli.example.net")
	expect(t, fams, 1, MetricPeerInfo, "peer", "cli.example.net", "url", "", "protocol", "diameter", "origin_host", "cli.example.net")
	checkJoin(t, fams, "cli.example.net", MetricState, MetricLatency)
	page := body(t, get(t, Handler(serverSrc), "/"))
	if !strings.Contains(page, `data-peer="cli.example.net"`) {
		t.Error("server page has no row for the client")
	}
}

// A RADIUS stream peer's recycled connections reach the page, the JSON
// and the metrics; a Diameter peer, which has none, shows an empty cell,
// no JSON key and no series.
func TestRecycledConnections(t *testing.T) {
	f := newFake()
	f.snap.Peers = append(f.snap.Peers, PeerStatus{Peer: "radius+tcp://127.0.0.1:2083", Protocol: ProtocolRADIUSTCP, State: "OKAY",
		Sent: 9, Answered: 7, RecycledConns: 2, Tw: 6 * time.Second})
	page := body(t, get(t, Handler(f), "/"))
	for _, want := range []string{
		`<th class="n">moved out</th><th class="n">recycled</th><th>stray replies</th><th class="n">Tw</th>`,
		`<td class="n">0</td><td class="n">2</td><td class="stray"></td><td class="n">6.0s</td>`, // the RADIUS peer
		`<td class="n">10</td><td class="n"></td><td class="stray"></td><td class="n">6.0s</td>`, // s2, Diameter
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	var js struct {
		Peers []map[string]any `json:"peers"`
	}
	if err := json.Unmarshal([]byte(body(t, get(t, Handler(f), "/status.json"))), &js); err != nil {
		t.Fatal(err)
	}
	if v := js.Peers[2]["recycled_conns"]; v != 2.0 {
		t.Errorf("RADIUS peer recycled_conns = %v, want 2", v)
	}
	if v, ok := js.Peers[0]["recycled_conns"]; ok {
		t.Errorf("Diameter peer has recycled_conns %v", v)
	}
	fams, _ := families(t, f, NewMetrics())
	expect(t, fams, 2, MetricRecycled, "peer", "radius+tcp://127.0.0.1:2083")
	if _, ok := value(fams, MetricRecycled, "peer", "s1.example.net"); ok {
		t.Errorf("%s has a series for a Diameter peer", MetricRecycled)
	}
}

// What the listeners log rate-limited is counted in the metrics by kind,
// every kind from zero on, suppressed lines included.
func TestLogEvents(t *testing.T) {
	f := newFake()
	m := NewMetrics()
	fams, _ := families(t, f, m)
	before, ok := value(fams, MetricLogEvents, "kind", "bad_auth")
	if !ok {
		t.Fatalf("%s{kind=bad_auth} is absent before any event", MetricLogEvents)
	}
	for range 100 {
		serve.Log(nil, slog.LevelWarn, serve.KindBadAuth, "forged")
	}
	fams, _ = families(t, f, m)
	expect(t, fams, before+100, MetricLogEvents, "kind", "bad_auth")
}
