package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/status"
)

// series is one line of a Prometheus text scrape: its name, labels, value.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

var seriesLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var labelPair = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

func parseSeries(text string) []series {
	var out []series
	for _, line := range strings.Split(text, "\n") {
		m := seriesLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		s := series{name: m[1], labels: map[string]string{}, value: v}
		for _, kv := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[kv[1]] = kv[2]
		}
		out = append(out, s)
	}
	return out
}

// find returns the value of the series name whose labels include want,
// and whether there is one.
func find(ss []series, name string, want map[string]string) (float64, bool) {
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		return s.value, true
	}
	return 0, false
}

// checkJoins checks a node's scrape: aaatp_peer_info lists peer, and every
// series that names a peer ("peer", or a failover's "from" and "to") names
// one aaatp_peer_info lists, "none" aside; peer has a series in each of
// the families fams.
func checkJoins(t *testing.T, who, text, peer string, fams ...string) {
	t.Helper()
	ss := parseSeries(text)
	info := map[string]bool{}
	for _, s := range ss {
		if s.name == status.MetricPeerInfo {
			info[s.labels["peer"]] = true
		}
	}
	if !info[peer] {
		t.Errorf("%s: %s does not list %q: %v", who, status.MetricPeerInfo, peer, info)
	}
	for _, s := range ss {
		for k, v := range s.labels {
			failover := (s.name == status.MetricFailovers || s.name == status.MetricMoved) && (k == "from" || k == "to")
			if (k == "peer" || failover) && v != status.NoPeer && !info[v] {
				t.Errorf("%s: %s %v names a peer %s does not list", who, s.name, s.labels, status.MetricPeerInfo)
			}
		}
	}
	for _, f := range fams {
		key := "peer"
		if f == status.MetricFailovers || f == status.MetricMoved {
			key = "from"
		}
		if _, ok := find(ss, f, map[string]string{key: peer}); !ok {
			t.Errorf("%s: no %s{%s=%q}", who, f, key, peer)
		}
	}
}

// runStatusClient runs "aaa-peer client" with args and --status until the test
// ends, and returns its status URL.
func runStatusClient(t *testing.T, args ...string) string {
	t.Helper()
	var cout, cerr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append(append([]string{"client"}, args...), "--duration", "60s", "--status", "127.0.0.1:0", "--log-format", "json"), &cout, &cerr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Errorf("client did not stop within 15s:\n%s", cerr.String())
		}
	})
	return waitURL(t, &cerr, regexp.MustCompile(`"msg":"status page","url":"(http://[^"]+/)"`))
}

// waitSeries scrapes u's metrics until series name{want} is at least min.
func waitSeries(t *testing.T, u, name string, want map[string]string, min float64) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		text := httpGet(t, u+"metrics")
		if v, ok := find(parseSeries(text), name, want); ok && v >= min {
			return text
		}
		if time.Now().After(deadline) {
			t.Fatalf("%smetrics: %s%v never reached %v:\n%s", u, name, want, min, grepLines(text, "aaatp_"))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// aaa-peer client and server name each other the same way in every
// series, joined by aaatp_peer_info: the client its server by its
// configured name (the URL by default), with the URL, protocol and the
// Origin-Host of its CEA; the server its client by its Origin-Host. Both
// count requests and answers by class per peer; the client's failover
// series exist at zero before any failover.
func TestMetricsJoinOnPeer(t *testing.T) {
	srv := startServer(t, "--status", "127.0.0.1:0")
	srvWeb := waitURL(t, srv.stderr, regexp.MustCompile(`msg="status page" url=(http://\S+/)`))
	cliWeb := runStatusClient(t, "--peer", srv.url, "--origin-host", "client1.example.net", "--origin-realm", "example.net",
		"--destination-realm", "example.net", "--rate", "100", "--concurrency", "2", "--timeout", "2s")

	cm := waitSeries(t, cliWeb, status.MetricAnswers, map[string]string{"peer": srv.url, "class": "2xxx"}, 5)
	checkJoins(t, "client", cm, srv.url, status.MetricState, status.MetricPending, status.MetricRequests, status.MetricAnswers,
		status.MetricErrors, status.MetricLatency+"_count", status.MetricFailovers, status.MetricMoved)
	cs := parseSeries(cm)
	if v, ok := find(cs, status.MetricPeerInfo, map[string]string{"peer": srv.url, "url": srv.url, "protocol": "diameter", "origin_host": "server1.example.net"}); !ok || v != 1 {
		t.Errorf("client: no %s joining %s with its URL and Origin-Host:\n%s", status.MetricPeerInfo, srv.url, grepLines(cm, status.MetricPeerInfo))
	}
	if _, ok := find(cs, status.MetricFailovers, map[string]string{"from": srv.url, "to": "none"}); !ok {
		t.Errorf("client: no failover series before a failover:\n%s", grepLines(cm, status.MetricFailovers))
	}
	if v, _ := find(cs, status.MetricRequests, map[string]string{"peer": srv.url}); v < 5 {
		t.Errorf("client: %s{peer=%q} = %v", status.MetricRequests, srv.url, v)
	}

	sm := waitSeries(t, srvWeb, status.MetricAnswers, map[string]string{"peer": "client1.example.net", "class": "2xxx"}, 5)
	checkJoins(t, "server", sm, "client1.example.net", status.MetricState, status.MetricPending, status.MetricRequests,
		status.MetricAnswers, status.MetricLatency+"_count")
	if v, ok := find(parseSeries(sm), status.MetricPeerInfo, map[string]string{"peer": "client1.example.net", "protocol": "diameter", "origin_host": "client1.example.net"}); !ok || v != 1 {
		t.Errorf("server: no %s for its client:\n%s", status.MetricPeerInfo, grepLines(sm, status.MetricPeerInfo))
	}
}

// The RADIUS client's node_info carries its NAS-Identifier and no
// Origin-Host; its server's row says radius and has no Origin-Host; its
// answers are counted as accounting-response, by the client for the
// server and by the server for its NAS client (its address).
func TestRADIUSClientMetricsLabels(t *testing.T) {
	sf := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, "--listen", "radius://127.0.0.1:0", "--secret-file", sf, "--status", "127.0.0.1:0")
	srvWeb := waitURL(t, srv.stderr, regexp.MustCompile(`msg="status page" url=(http://\S+/)`))
	var live string
	for _, u := range readLines(t, srv) {
		if strings.HasPrefix(u, "radius://") {
			live = u
		}
	}
	cliWeb := runStatusClient(t, "--peer", live, "--secret-file", sf, "--app", "acct", "--rate", "100", "--timeout", "500ms")
	cm := waitSeries(t, cliWeb, status.MetricAnswers, map[string]string{"peer": live, "class": "accounting-response"}, 3)
	checkJoins(t, "RADIUS client", cm, live, status.MetricRequests, status.MetricAnswers, status.MetricErrors, status.MetricLatency+"_count")
	cs := parseSeries(cm)
	if v, ok := find(cs, status.MetricNodeInfo, map[string]string{"role": "client", "origin_host": "", "origin_realm": "", "nas_identifier": "aaa-peer"}); !ok || v != 1 {
		t.Errorf("RADIUS client's node info:\n%s", grepLines(cm, status.MetricNodeInfo))
	}
	if _, ok := find(cs, status.MetricPeerInfo, map[string]string{"peer": live, "url": live, "protocol": "radius", "origin_host": ""}); !ok {
		t.Errorf("RADIUS client's peer info:\n%s", grepLines(cm, status.MetricPeerInfo))
	}
	sm := waitSeries(t, srvWeb, status.MetricAnswers, map[string]string{"peer": "127.0.0.1", "class": "accounting-response"}, 3)
	checkJoins(t, "RADIUS server", sm, "127.0.0.1", status.MetricRequests, status.MetricAnswers)
}
