package status

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
)

// No string a peer can send makes the metrics panic: invalid UTF-8, NUL,
// 64 KB, through every method that takes a name, and /metrics still
// scrapes with bounded label values.
func TestMetricsNeverPanicOnLabels(t *testing.T) {
	names := []string{"attacker.e\x87ample.net", "a\x00b", strings.Repeat("\xff", 10), strings.Repeat("a", 64<<10), strings.Repeat("é", 200)}
	m := NewMetrics()
	bus := peer.NewBus()
	defer m.Watch(bus)()
	for _, n := range names {
		m.ObserveMessage(n, n)
		m.SetWatchdogState(n, "OKAY")
		m.IncTransition(n, n, n)
		m.IncFailover(n, n, 3)
		m.SetPending(n, 2)
		m.SetQueueDepth(n, 1)
		m.SetQueueAlarm(n, true)
		bus.Publish(context.Background(), peer.Event{Time: time.Now(), Peer: n, Kind: peer.EventWatchdog, From: watchdog.Okay, To: watchdog.State(200), Reason: n})
		bus.Publish(context.Background(), peer.Event{Time: time.Now(), Peer: n, Kind: peer.EventKind(200)})
		m.ForgetPeer(n)
	}
	m.Sync(Snapshot{Role: "server\xff", Identity: Identity{OriginHost: names[0], OriginRealm: names[3]},
		Peers: []PeerStatus{{Peer: names[0], State: "OKAY"}, {Peer: names[3], State: "OKAY", Protocol: names[2]}}})
	rec := httptest.NewRecorder()
	m.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics = %d: %s", rec.Code, rec.Body.String())
	}
	body := rec.Body.String()
	if !utf8.ValidString(body) {
		t.Error("/metrics is not valid UTF-8")
	}
	for _, line := range strings.Split(body, "\n") {
		if len(line) > 2*maxLabelLen+512 {
			t.Fatalf("a %d-byte line: label values are not bounded", len(line))
		}
	}
}

func TestLabel(t *testing.T) {
	if got := label("server.example.net"); got != "server.example.net" {
		t.Errorf("label changed a valid name: %q", got)
	}
	for _, s := range []string{"a\x87b", strings.Repeat("é", 300), strings.Repeat("a", 1000)} {
		got := label(s)
		if !utf8.ValidString(got) || len(got) > maxLabelLen {
			t.Errorf("label(%d bytes) = %d bytes, valid %v", len(s), len(got), utf8.ValidString(got))
		}
	}
	if n := testing.AllocsPerRun(100, func() { label("server.example.net") }); n != 0 {
		t.Errorf("label allocates %v times for a valid name", n)
	}
}

// A server that sees many peers come and go keeps a bounded set of
// series: ForgetPeer drops a peer's transitions and its handler's counts
// with its gauges.
func TestForgetPeerDropsEverySeriesOfThePeer(t *testing.T) {
	m := NewMetrics()
	bus := peer.NewBus()
	defer m.Watch(bus)()
	count := func() int {
		rec := httptest.NewRecorder()
		m.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return strings.Count(rec.Body.String(), `peer="`)
	}
	base := count()
	for i := range 500 {
		n := fmt.Sprintf("p%d.example.net", i)
		bus.Publish(context.Background(), peer.Event{Time: time.Now(), Peer: n, Kind: peer.EventWatchdog, From: watchdog.Initial, To: watchdog.Okay})
		bus.Publish(context.Background(), peer.Event{Time: time.Now(), Peer: n, Kind: peer.EventWatchdog, From: watchdog.Okay, To: watchdog.Down})
		m.SetPending(n, 0)
		m.counts.served(n).answered(client.DiameterClasses[1], time.Millisecond) // what WrapHandler counts for the peer
		if c := count(); c <= base {
			t.Fatalf("peer %d has no series before it is forgotten", i)
		}
		m.ForgetPeer(n)
		if c := count(); c != base {
			t.Fatalf("after ForgetPeer(%q): %d series naming a peer, want %d", n, c, base)
		}
	}
}

// aaatp_peer_info joins each peer's name (a client's configured name, else
// the peer's own) with its URL, protocol (diameter by default) and
// Origin-Host; a peer gone from the snapshot loses its series.
func TestPeerInfoProtocol(t *testing.T) {
	m := NewMetrics()
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	m.Sync(Snapshot{Peers: []PeerStatus{{Peer: "hss1.example.net", Server: "hss1", URL: "tcp://10.0.0.2:3868", OriginHost: "hss1.example.net", State: "OKAY"},
		{Peer: "radius+tcp://10.0.0.1:1812", Server: "aaa1", URL: "radius+tcp://10.0.0.1:1812", State: "OKAY", Protocol: ProtocolRADIUSTCP}}})
	body := scrape()
	for _, want := range []string{
		MetricPeerInfo + `{origin_host="hss1.example.net",peer="hss1",protocol="diameter",url="tcp://10.0.0.2:3868"} 1`,
		MetricPeerInfo + `{origin_host="",peer="aaa1",protocol="radius+tcp",url="radius+tcp://10.0.0.1:1812"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	m.Sync(Snapshot{Peers: []PeerStatus{{Peer: "hss1.example.net", Server: "hss1", State: "OKAY"}}})
	if body := scrape(); strings.Contains(body, `protocol="radius+tcp"`) {
		t.Error("a RADIUS server gone from the snapshot keeps its series")
	}
}

// A RADIUS/UDP server (no watchdog) has no aaatp_watchdog_state series;
// every server with a policy state has aaatp_server_state, 1 for its
// state.
func TestServerStateGauge(t *testing.T) {
	m := NewMetrics()
	m.Sync(Snapshot{Peers: []PeerStatus{
		{Peer: "hss1", State: "OKAY"},
		{Peer: "radius://10.0.0.1:1812", Policy: "out-of-service", ServerPolicy: "out-of-service", Protocol: ProtocolRADIUS},
	}})
	rec := httptest.NewRecorder()
	m.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if strings.Contains(body, MetricState+`{peer="radius://10.0.0.1:1812"`) {
		t.Error("a UDP server has watchdog state series")
	}
	for _, want := range []string{
		MetricServerState + `{peer="radius://10.0.0.1:1812",state="out-of-service"} 1`,
		MetricServerState + `{peer="radius://10.0.0.1:1812",state="in-service"} 0`,
		MetricState + `{peer="hss1",state="OKAY"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, MetricServerState+`{peer="hss1"`) {
		t.Error("a peer without a policy has server state series")
	}
}

// checkJoin checks that peer name has a series in aaatp_peer_info and
// in the per-peer families given (pending requests, requests and answers
// always), all under the same "peer" (or failover "from") label value,
// and that no series names a peer that aaatp_peer_info does not list
// ("none" aside: nowhere).
func checkJoin(t *testing.T, fams map[string]*dto.MetricFamily, name string, also ...string) {
	t.Helper()
	info := map[string]bool{}
	for _, m := range fams[MetricPeerInfo].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "peer" {
				info[l.GetValue()] = true
			}
		}
	}
	if !info[name] {
		t.Errorf("%s has no series for %q: %v", MetricPeerInfo, name, info)
	}
	for _, fam := range append([]string{MetricPending, MetricRequests, MetricAnswers}, also...) {
		key := "peer"
		if fam == MetricFailovers || fam == MetricMoved {
			key = "from"
		}
		if _, ok := value(fams, fam, key, name); !ok {
			t.Errorf("%s has no series with %s=%q", fam, key, name)
		}
	}
	for fname, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				names := l.GetName() == "peer" || (fname == MetricFailovers || fname == MetricMoved) && (l.GetName() == "from" || l.GetName() == "to")
				if names {
					if v := l.GetValue(); v != NoPeer && !info[v] {
						t.Errorf("%s{%s=%q} names a peer %s does not list", fname, l.GetName(), v, MetricPeerInfo)
					}
				}
			}
		}
	}
}
