//go:build unix

package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/status"
)

// TestRADIUSStatusPagesInChromium runs "aaa-peer server" with a radius://
// listener and "aaa-peer client" over two radius:// servers, one that
// never answers, both with --status, and loads both pages in headless
// Chromium: the client's page has a row per RADIUS server with its 7750
// SR state (the silent one out of service) and its failovers in the
// table; the server's page lists its NAS client.
func TestRADIUSStatusPagesInChromium(t *testing.T) {
	bin := testhelp.Chromium(t)
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
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	deadURL := "radius://" + dead.LocalAddr().String()

	var cout, cerr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"client", "--peer", deadURL, "--peer", live, "--secret-file", sf, "--algorithm", "direct",
			"--timeout", "200ms", "--retries", "2", "--rate", "50", "--duration", "60s",
			"--status", "127.0.0.1:0", "--log-format", "json"}, &cout, &cerr)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Errorf("client did not stop within 15s")
		}
	}()
	cliWeb := waitURL(t, &cerr, regexp.MustCompile(`"msg":"status page","url":"(http://[^"]+/)"`))
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := getSnapshot(cliWeb)
		if err == nil && len(s.Peers) == 2 && s.Peers[0].Policy == "out-of-service" && len(s.Failovers) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client's status.json never showed the silent server out of service with failovers: %+v", s)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The RADIUS client's metrics: latency, the 7750 SR state of each
	// server, no watchdog series for UDP servers.
	cm := httpGet(t, cliWeb+"metrics")
	if v, ok := metricValue(cm, status.MetricLatency+"_count", map[string]string{"peer": live}); !ok || v == 0 {
		t.Errorf("client's metrics: %s_count %v (present %v), want the answered requests\n%s", status.MetricLatency, v, ok, grepLines(cm, "aaatp_request"))
	}
	if v, ok := metricValue(cm, status.MetricServerState, map[string]string{"peer": deadURL, "state": "out-of-service"}); !ok || v != 1 {
		t.Errorf("client's metrics: the silent server not out of service:\n%s", grepLines(cm, "aaatp_server_state"))
	}
	if strings.Contains(cm, status.MetricState+"{peer=\""+deadURL) {
		t.Errorf("client's metrics: a watchdog state for a UDP server")
	}

	dom, stderr, err := testhelp.DumpDOM(bin, t.TempDir(), cliWeb, 2*time.Second, browserBudget)
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, testhelp.Tail(stderr, 3000))
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile(`(?s)<tr[^>]*data-peer="([^"]+)"[^>]*>(.*?)</tr>`).FindAllStringSubmatch(dom, -1) {
		rows[m[1]] = m[2]
	}
	if r, ok := rows[deadURL]; !ok || !strings.Contains(r, "out-of-service") {
		t.Errorf("client page: the silent server's row %q (found %v), want out-of-service\nDOM:\n%s", r, ok, dom)
	}
	if r, ok := rows[live]; !ok || !strings.Contains(r, "in-service") {
		t.Errorf("client page: the live server's row %q (found %v), want in-service", r, ok)
	}
	if !strings.Contains(dom, "no reply to 2 attempt(s)") {
		t.Errorf("client page: no failover with its reason\nDOM:\n%s", dom)
	}

	s, err := getSnapshot(srvWeb)
	if err != nil {
		t.Fatal(err)
	}
	var nas *status.PeerStatus
	for i, p := range s.Peers {
		if p.Protocol == status.ProtocolRADIUS && p.Policy == "nas" {
			nas = &s.Peers[i]
		}
	}
	if nas == nil || nas.Peer != "127.0.0.1" || nas.Answered == 0 {
		t.Fatalf("server's status.json: no NAS row for 127.0.0.1 with answers: %+v", s.Peers)
	}
	sdom, stderr, err := testhelp.DumpDOM(bin, t.TempDir(), srvWeb, 2*time.Second, browserBudget)
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, testhelp.Tail(stderr, 3000))
	}
	if !regexp.MustCompile(`data-peer="127\.0\.0\.1"`).MatchString(sdom) {
		t.Errorf("server page: no row for the NAS 127.0.0.1\nDOM:\n%s", sdom)
	}
}
