//go:build unix

package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/status"
)

// browserBudget bounds one Chromium run (wall clock).
const browserBudget = 25 * time.Second

func checkStateMetric(t *testing.T, u, peerName, state string) {
	t.Helper()
	text := httpGet(t, u+"metrics")
	if v, ok := metricValue(text, status.MetricState, map[string]string{"peer": peerName, "state": state}); !ok || v != 1 {
		t.Errorf("%smetrics: %s{peer=%q,state=%q} = %v (present %v), want 1\n%s", u, status.MetricState, peerName, state, v, ok, grepLines(text, "aaatp_"))
	}
}

// TestStatusPageInChromium runs "aaa-peer server" and "aaa-peer client"
// in-process, both with --status on 127.0.0.1:0, and loads the client's
// page in headless Chromium during the run. The page is served while the
// client's peer is OKAY; the test then stops the server (as SIGTERM does:
// DPR, and the client's peer goes DOWN) and the page's polling script must
// show DOWN in the peer's row without a reload. The page goes through a
// small proxy that tells when the page is out and holds the script's first
// fetch of status.json until the client sees the server DOWN: Chromium's
// virtual time stands still while a fetch is in flight, so the test needs
// no wall-clock wait and no DevTools client. /status.json and /metrics of
// both nodes are checked over plain HTTP before and after.
func TestStatusPageInChromium(t *testing.T) {
	bin := testhelp.Chromium(t)
	began := time.Now()
	defer func() { t.Logf("took %v", time.Since(began).Round(10*time.Millisecond)) }()

	srv := startServer(t, "--status", "127.0.0.1:0", "--tw", "6s")
	srvWeb := waitURL(t, srv.stderr, regexp.MustCompile(`msg="status page" url=(http://\S+/)`))

	var cout, cerr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"client", "--peer", srv.url,
			"--origin-host", "client1.example.net", "--origin-realm", "example.net", "--destination-realm", "example.net",
			"--tw", "6s", "--rate", "50", "--concurrency", "4", "--duration", "60s", "--timeout", "2s",
			"--status", "127.0.0.1:0", "--log-format", "json"}, &cout, &cerr)
	}()
	stopClient := func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(15 * time.Second):
			t.Fatalf("client did not stop within 15s:\n%s", cerr.String())
			return -1
		}
	}
	clientStopped := false
	defer func() {
		if !clientStopped {
			stopClient()
		}
	}()
	cliWeb := waitURL(t, &cerr, regexp.MustCompile(`"msg":"status page","url":"(http://[^"]+/)"`))

	// Both sides OKAY, in /status.json and /metrics.
	waitState(t, cliWeb, "server1.example.net", "OKAY", 10*time.Second)
	waitState(t, srvWeb, "client1.example.net", "OKAY", 10*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := getSnapshot(srvWeb)
		if err != nil {
			t.Fatal(err)
		}
		if s.Role != status.RoleServer || s.Identity.OriginHost != "server1.example.net" || len(s.Identity.Listen) != 1 {
			t.Fatalf("server's status.json: role %q, identity %+v", s.Role, s.Identity)
		}
		if s.Totals.Received > 0 && s.Totals.Answered > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server's status.json counts no request after 5s: %+v", s.Totals)
		}
		time.Sleep(25 * time.Millisecond)
	}
	cs, err := getSnapshot(cliWeb)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Role != status.RoleClient || len(cs.Peers) != 1 || cs.Peers[0].Server != srv.url ||
		!strings.HasPrefix(cs.Peers[0].Policy, "in-service") || cs.Peers[0].Tw == 0 {
		t.Errorf("client's status.json: role %q, peers %+v", cs.Role, cs.Peers)
	}
	checkStateMetric(t, srvWeb, "client1.example.net", "OKAY")
	checkStateMetric(t, cliWeb, srv.url, "OKAY") // a client names its server by its configured name, the URL by default
	cm := httpGet(t, cliWeb+"metrics")
	if v, _ := metricValue(cm, status.MetricMessages, map[string]string{"command": "ACR", "direction": "out"}); v == 0 {
		t.Errorf("client's metrics count no ACR sent:\n%s", grepLines(cm, "aaatp_messages"))
	}

	// The page, through a proxy to the client's status server.
	target, _ := url.Parse(cliWeb)
	rp := httputil.NewSingleHostReverseProxy(target)
	rpTransport := &http.Transport{DisableKeepAlives: true}
	rp.Transport = rpTransport
	var (
		mu       sync.Mutex
		pages    []string
		jsonHits int
	)
	pageOut := make(chan struct{})
	down := make(chan struct{}) // closed once the client sees server1 DOWN
	proxy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			rec := &recorder{ResponseWriter: w}
			rp.ServeHTTP(rec, r)
			mu.Lock()
			pages = append(pages, rec.body.String())
			first := len(pages) == 1
			mu.Unlock()
			if first {
				close(pageOut)
			}
			return
		case "/status.json":
			select { // hold the script's fetch until the change is made
			case <-down:
			case <-r.Context().Done():
				return
			case <-time.After(15 * time.Second):
			}
			mu.Lock()
			jsonHits++
			mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	})
	pctx, pcancel := context.WithCancel(context.Background())
	pweb, err := status.ListenAndServe(pctx, "127.0.0.1:0", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		pcancel()
		pweb.Wait()
		rpTransport.CloseIdleConnections()
	}()

	type result struct {
		dom, stderr string
		err         error
		took        time.Duration
	}
	res := make(chan result, 1)
	dir := t.TempDir()
	go func() {
		t0 := time.Now()
		dom, stderr, err := testhelp.DumpDOM(bin, dir, pweb.URL(), 3*time.Second, browserBudget)
		res <- result{dom, stderr, err, time.Since(t0)}
	}()

	// The state change, once the page is out: stop the server.
	select {
	case <-pageOut:
	case r := <-res:
		t.Fatalf("chromium ended before the page was served: %v\n%s", r.err, testhelp.Tail(r.stderr, 3000))
	}
	changeAt := time.Now()
	if code := srv.stop(t); code != 0 {
		t.Errorf("server exit code %d:\n%s", code, srv.stderr)
	}
	waitState(t, cliWeb, "server1.example.net", "DOWN", 10*time.Second)
	t.Logf("client saw server1 DOWN %v after the server was told to stop", time.Since(changeAt).Round(time.Millisecond))
	close(down)

	r := <-res
	t.Logf("chromium run took %v", r.took.Round(10*time.Millisecond))
	if r.err != nil {
		t.Fatalf("chromium: %v\nstderr:\n%s", r.err, testhelp.Tail(r.stderr, 3000))
	}
	mu.Lock()
	served, hits := pages, jsonHits
	mu.Unlock()
	if len(served) != 1 {
		t.Fatalf("page served %d times, want 1 (no reload)", len(served))
	}
	if !regexp.MustCompile(`data-peer="server1\.example\.net"[^>]*>.*?s-OKAY">OKAY<`).MatchString(served[0]) {
		t.Fatalf("the page as served has no OKAY row for server1.example.net:\n%s", served[0])
	}
	if hits == 0 {
		t.Fatalf("the page's script never fetched status.json\nDOM:\n%s\nstderr:\n%s", r.dom, testhelp.Tail(r.stderr, 3000))
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile(`(?s)<tr[^>]*data-peer="([^"]+)"[^>]*>(.*?)</tr>`).FindAllStringSubmatch(r.dom, -1) {
		rows[m[1]] = m[2]
	}
	row, ok := rows["server1.example.net"]
	if len(rows) != 1 || !ok {
		t.Fatalf("want one peer row, server1.example.net, in the DOM; got %d\nDOM:\n%s", len(rows), r.dom)
	}
	if !strings.Contains(row, `s-DOWN">DOWN<`) {
		t.Errorf("the row does not show the new state DOWN: %s", row)
	}
	if !strings.Contains(row, srv.url) {
		t.Errorf("the row does not name the server %s: %s", srv.url, row)
	}
	if !strings.Contains(r.dom, "live, as of ") {
		t.Errorf("the script did not mark the page live\nDOM:\n%s", r.dom)
	}
	checkStateMetric(t, cliWeb, srv.url, "DOWN")

	clientStopped = true
	if code := stopClient(); code != 0 {
		t.Errorf("client exit code %d:\n%s", code, cerr.String())
	}
}

// recorder copies what it writes.
type recorder struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController (the proxy's flushes) reach the
// connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
