package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aaatp/aaatp/transport"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" { // a cross-process pair's process
		if err := runRole(role, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench role:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(idleServerEnv) != "" { // the idle peers' server child
		if err := idleServer(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "idle server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	log.SetOutput(io.Discard)
	goleak.VerifyTestMain(m)
}

// testOptions is smaller than --quick so that the package test stays short
// under -race; CI runs the real --quick with `go run ./test/bench --quick`.
func testOptions() Options {
	o := quickOptions()
	o.Name = "test"
	o.RoundTrip, o.Warmup = 0.3, 0.05
	o.FailoverPending = 2_000
	o.IdlePeers, o.IdleWindow = 200, 0.5
	o.DedupEntries = 20_000
	// Cross-process: the pairs every ratio needs but freeDiameter's, one
	// short run each.
	o.XRuns, o.XDuration, o.XDuration1 = 1, 2.2, 2.2
	o.XPairs = []Pair{pairRaw, pairAaa, pairPingPong, pairAaa1}
	return o
}

// TestQuick runs the harness in-process in a small mode and checks that the
// JSON has every field, with sane values. It asserts no speed.
func TestQuick(t *testing.T) {
	t0 := time.Now()
	path := filepath.Join(t.TempDir(), "bench.json")
	if _, err := run(testOptions(), t.Output(), path); err != nil {
		t.Fatal(err)
	}
	t.Logf("harness ran in %v", time.Since(t0).Round(time.Millisecond))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	scalars := []string{"failover_10k_ms", "idle_peer_kib", "idle_cpu_pct", "pick_ns", "dedup_ns", "dedup_bytes_per_entry"}
	if len(doc) != len(scalars)+3 {
		t.Errorf("JSON has %d top-level fields, want %d", len(doc), len(scalars)+3)
	}
	// RADIUS/TCP: three in-process cells, two per server process (with
	// FreeRADIUS, else one cell saying why not), every cell measured.
	rad, _ := doc["radius"].(map[string]any)
	inproc, _ := rad["in_process"].([]any)
	servers, _ := rad["servers"].([]any)
	if len(inproc) != 3 || len(servers) < 3 {
		t.Errorf("radius: %d in-process and %d server cells, want 3 and at least 3", len(inproc), len(servers))
	}
	for _, c := range append(inproc, servers...) {
		m, _ := c.(map[string]any)
		if note, _ := m["note"].(string); note != "" && m["server"] == "freeradius" && os.Getenv("CI") != "true" {
			continue // not installed here
		}
		if v, _ := m["answers_per_s"].(float64); v <= 0 || m["failed"].(float64) != 0 {
			t.Errorf("radius cell %v", m)
		}
	}
	xcells, _ := doc["cross_process"].([]any)
	if len(xcells) != 4 {
		t.Errorf("%d cross-process cells, want 4", len(xcells))
	}
	for _, c := range xcells {
		m, _ := c.(map[string]any)
		for _, k := range []string{"answers_per_s", "answers_per_s_min", "answers_per_s_max", "p50_us", "p99_us",
			"client_cpu_us_per_req", "server_cpu_us_per_req", "client_rss_kib", "server_rss_kib"} {
			if v, ok := m[k].(float64); !ok || v <= 0 {
				t.Errorf("cross-process %v/%v: %s = %v", m["pair"], m["callers"], k, m[k])
			}
		}
		if r, _ := m["runs"].(float64); r != 1 {
			t.Errorf("cross-process %v: %v runs, want 1", m["pair"], m["runs"])
		}
	}
	for _, k := range scalars {
		v, ok := doc[k].(float64)
		switch {
		case !ok:
			t.Errorf("%s missing or not a number: %v", k, doc[k])
		case k == "idle_cpu_pct" && v < 0, k != "idle_cpu_pct" && v <= 0:
			t.Errorf("%s = %v", k, v)
		}
	}
	results, _ := doc["results"].([]any)
	seen := map[string]bool{}
	for _, r := range results {
		m, _ := r.(map[string]any)
		impl, _ := m["impl"].(string)
		callers, _ := m["callers"].(float64)
		seen[fmt.Sprintf("%s/%v", impl, callers)] = true
		if len(m) != 7 {
			t.Errorf("%s/%v: %d fields, want 7", impl, callers, len(m))
		}
		for _, k := range []string{"answers_per_s", "p50_us", "p99_us", "cpu_us_per_req", "allocs_per_req"} {
			v, ok := m[k].(float64)
			if !ok || v < 0 || (k != "allocs_per_req" && v == 0) {
				t.Errorf("%s/%v: %s = %v", impl, callers, k, m[k])
			}
		}
		if p50, p99 := m["p50_us"].(float64), m["p99_us"].(float64); p50 > p99 {
			t.Errorf("%s/%v: p50 %v > p99 %v", impl, callers, p50, p99)
		}
	}
	for _, impl := range []string{"raw", "go-diameter", "aaatp"} {
		for _, n := range []int{1, 16, 256} {
			if !seen[fmt.Sprintf("%s/%d", impl, n)] {
				t.Errorf("no result for %s with %d callers", impl, n)
			}
		}
	}
	if len(results) != 9 {
		t.Errorf("%d results, want 9", len(results))
	}
}

// TestProcCPU reads this process's CPU from /proc/PID/stat and checks it
// against getrusage: both count every thread.
func TestProcCPU(t *testing.T) {
	busy := time.Now()
	for time.Since(busy) < 200*time.Millisecond {
	}
	p, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	r := cpuTime()
	if p < 150*time.Millisecond || p > r+20*time.Millisecond {
		t.Fatalf("/proc says %v, getrusage %v", p, r)
	}
	if rss := procRSS(os.Getpid()); rss <= 0 {
		t.Fatalf("VmRSS %v", rss)
	}
}

func TestMedianAndSpread(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Fatalf("median %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Fatalf("median %v", m)
	}
	if s := spread([]float64{3, 1, 2}, "%.0f"); s != "2 (1-3)" {
		t.Fatalf("spread %q", s)
	}
}

// A judged figure never reads as the other side of its target: 2.9954
// against ">= 3" would round to 3.00 next to MISSED.
func TestShownAgreesWithVerdict(t *testing.T) {
	atLeast3 := func(v float64) bool { return v >= 3 }
	atMost25 := func(v float64) bool { return v <= 2.5 }
	for _, c := range []struct {
		format string
		v      float64
		ok     func(float64) bool
		want   string
	}{
		{"%.2fx", 2.9954, atLeast3, "2.995x"},
		{"%.2fx", 2.99999, atLeast3, "2.99999x"},
		{"%.2fx", 3.004, atLeast3, "3.00x"},
		{"%.2fx", 3.41, atLeast3, "3.41x"},
		{"%.2f", 2.5004, atMost25, "2.5004"},
		{"%.2f", 2.496, atMost25, "2.50"}, // met either way
		{"%.2f", 4.53, atMost25, "4.53"},
		{"%.2fx", 2.9999999, atLeast3, "2.9999999x"}, // past four more decimals: the shortest exact text
		{"%.3f", 1.99996, func(v float64) bool { return v < 2 }, "1.99996"},
		{"%.1f", 19.96, func(v float64) bool { return v <= 20 }, "20.0"}, // met either way
		{"%.1f", 20.04, func(v float64) bool { return v <= 20 }, "20.04"},
		{"%.0f ms", 20.4, func(v float64) bool { return v <= 20 }, "20.4 ms"},
	} {
		if got := shown(c.format, c.v, c.ok); got != c.want {
			t.Errorf("shown(%q, %v) = %q, want %q", c.format, c.v, got, c.want)
		}
	}
	var b strings.Builder
	targetRatio(&b, "x", 280351, 93592, ">= 3x", atLeast3)
	if want := "| x | 2.995x | >= 3x | MISSED |\n"; b.String() != want {
		t.Errorf("targetRatio printed %q, want %q", b.String(), want)
	}
	if s := judgedSpread([]float64{2.9954, 2.9, 3.2}, "%.2fx", atLeast3); s != "2.995x (2.90x-3.20x)" {
		t.Errorf("judgedSpread %q", s)
	}
}

// TestDialFrom: the large idle run's dialer connects from the loopback
// address it is given.
func TestDialFrom(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dial := dialFrom(net.IPv4(127, 0, 0, 3), transport.Options{})
	c, err := dial(context.Background(), "tcp://"+ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ip := c.LocalAddr().(*net.TCPAddr).IP; !ip.Equal(net.IPv4(127, 0, 0, 3)) {
		t.Fatalf("dialed from %v, want 127.0.0.3", ip)
	}
}

// TestCPUBesideRaw: the context lines put the aaa-peer server's CPU over
// the raw server's under the raw client, and the aaa-peer client's over
// the raw client's against the raw server, round by round; they are left
// out when a pair is missing and judge nothing.
func TestCPUBesideRaw(t *testing.T) {
	x := &xprocResult{runs: map[string][]PairResult{
		pairKey(pairRaw):      {{ServerCPUus: 5, ClientCPUus: 6}, {ServerCPUus: 4, ClientCPUus: 4}, {ServerCPUus: 6, ClientCPUus: 5}},
		pairKey(pairRawToAaa): {{ServerCPUus: 4}, {ServerCPUus: 4}, {ServerCPUus: 3}},
		pairKey(pairAaaToRaw): {{ClientCPUus: 3}, {ClientCPUus: 5}, {ClientCPUus: 5}},
	}}
	var b strings.Builder
	xTargets(&b, x)
	want := []string{
		// 4/5, 4/4, 3/6
		"| xproc aaa-peer server CPU / raw server CPU, both under the raw client (context) | 0.80x (0.50x-1.00x) | (raw server: 5.00 (4.00-6.00) us) | |\n",
		// 3/6, 5/4, 5/5
		"| xproc aaa-peer client CPU / raw client CPU, both against the raw server (context) | 1.00x (0.50x-1.25x) | (raw client: 5.00 (4.00-6.00) us) | |\n",
	}
	for _, line := range want {
		if !strings.Contains(b.String(), line) {
			t.Errorf("no line\n%s in\n%s", line, b.String())
		}
	}
	delete(x.runs, pairKey(pairRaw))
	b.Reset()
	xTargets(&b, x)
	if strings.Contains(b.String(), "(context)") {
		t.Errorf("context lines without the raw pair:\n%s", b.String())
	}
}
