package main

import (
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/status"
)

// demoRun is the one run of the demo that TestDemo checks and
// TestREADMEDemoTranscript compares with the README's.
type demoRun struct {
	stdout, stderr string
	code           int
	took           time.Duration
	seen           demoSeen
}

// runDemoOnce runs the demo with its defaults and --status (its page
// polled meanwhile) the first time it is called, and returns that run.
var runDemoOnce = sync.OnceValue(func() demoRun {
	var stdout, stderr syncBuffer
	began := time.Now()
	// With --status: the page's data follows the run (watchStatus).
	stopWatch := make(chan struct{})
	watched := make(chan demoSeen, 1)
	go func() { watched <- watchStatus(&stdout, stopWatch) }()
	code := runDemo(context.Background(), []string{"--status", "127.0.0.1:0"}, &stdout, &stderr)
	took := time.Since(began)
	close(stopWatch)
	return demoRun{stdout: stdout.String(), stderr: stderr.String(), code: code, took: took, seen: <-watched}
})

// TestDemo runs the whole demo once, with its defaults (Tw is already the
// RFC minimum, so this takes about 45 s), and checks the timeline and the
// summary of that one run.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes about 45 s")
	}
	run := runDemoOnce()
	stdout, stderr, code, took, seen := run.stdout, run.stderr, run.code, run.took, run.seen
	t.Logf("status page: %+v", seen)
	if seen.polls == 0 || seen.role != status.RoleDemo || seen.peers != 3 {
		t.Errorf("status.json: %d polls, role %q, %d peers; want some, %q, 3", seen.polls, seen.role, seen.peers, status.RoleDemo)
	}
	if !seen.server2Suspect || seen.duplicates == 0 || seen.failovers == 0 {
		t.Errorf("status.json never showed server2 SUSPECT, duplicates and failovers: %+v", seen)
	}
	if seen.dedupHits == 0 || seen.moved == 0 {
		t.Errorf("/metrics never showed %s and %s above 0: %+v", status.MetricDedupHits, status.MetricMoved, seen)
	}
	out := stdout
	t.Logf("demo took %v; output:\n%s", took.Round(100*time.Millisecond), out)
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	if took > 60*time.Second {
		t.Errorf("the demo took %v, want under 60 s", took)
	}

	// The timeline, in order for each server.
	inOrder := func(who string, wants ...string) {
		t.Helper()
		rest := out
		for _, w := range wants {
			re := regexp.MustCompile(`(?m)^ *\d+\.\ds  ` + regexp.QuoteMeta(who) + ` +` + w)
			loc := re.FindStringIndex(rest)
			if loc == nil {
				t.Errorf("timeline: no line %q for %s after the previous ones", w, who)
				return
			}
			rest = rest[loc[1]:]
		}
	}
	inOrder("server2.example.net",
		`frozen `,
		`OKAY -> SUSPECT \(no DWA within Tw\)`,
		`failover: [1-9]\d* requests server2 -> `,
		`SUSPECT -> DOWN`,
		`thawed`,
		`reconnected over tcp`,
		`DOWN -> REOPEN`,
		`REOPEN 1/3 DWAs`,
		`REOPEN 2/3 DWAs`,
		`REOPEN 3/3 DWAs`,
		`REOPEN -> OKAY`,
	)
	inOrder("server3.example.net",
		`crashing: `,
		`reset: 1 connection\(s\) closed abruptly \(RST\)`,
		`OKAY -> DOWN`,
		`reconnected over tcp`,
		`DOWN -> REOPEN`,
		`REOPEN -> OKAY`,
	)
	if !regexp.MustCompile(`balancer table rebuilt \(generation \d+\)`).MatchString(out) {
		t.Error("timeline: no balancer rebuild")
	}
	// Aligned: the peer column starts at the same offset on every line.
	for _, l := range strings.Split(out, "\n") {
		if m := regexp.MustCompile(`^( *\d+\.\ds)  \S`).FindStringSubmatch(l); m != nil && len(m[1]) != 7 {
			t.Errorf("misaligned timeline line %q", l)
		}
	}

	// The summary.
	num := func(label string) uint64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(label) + ` +(\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("summary: no %q line", label)
		}
		n, _ := strconv.ParseUint(m[1], 10, 64)
		return n
	}
	sent, answered, failed := num("requests sent"), num("answered"), num("failed")
	moved, applied, twice := num("moved by failover"), num("applied"), num("applied twice")
	if dups := num("duplicates caught"); dups == 0 {
		t.Error("duplicates caught 0: the crash's lost answers were not replayed to another server")
	}
	if sent == 0 || sent != answered || failed != 0 {
		t.Errorf("sent %d, answered %d, failed %d: want sent == answered and failed 0", sent, answered, failed)
	}
	if applied != answered || twice != 0 {
		t.Errorf("applied %d (want %d), applied twice %d (want 0)", applied, answered, twice)
	}
	if moved == 0 {
		t.Error("moved by failover 0: the freeze moved nothing")
	}
	var perServer uint64
	for _, s := range []string{"server1", "server2", "server3"} {
		m := regexp.MustCompile(`(?m)^  ` + s + `\.example\.net +OKAY +(\d+) +(\d+) +0 `).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("summary: no OKAY row without failures for %s", s)
			continue
		}
		a, _ := strconv.ParseUint(m[1], 10, 64)
		b, _ := strconv.ParseUint(m[2], 10, 64)
		if a != b {
			t.Errorf("%s: sent %d, answered %d", s, a, b)
		}
		perServer += a
	}
	if perServer != sent {
		t.Errorf("per-server sent add up to %d, want %d", perServer, sent)
	}
	if !strings.Contains(out, "OK: every request answered, and applied exactly once") {
		t.Error("no OK line")
	}
}

func TestDemoFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tw", "5s"}, "--tw 5s is below the RFC 3539 minimum of 6s"},
		{[]string{"--rate", "0"}, "--rate must be"},
		{[]string{"--concurrency", "0"}, "--concurrency 0: want 1 to 100000"},
		{[]string{"--duration", "0s"}, "--duration must be"},
		{[]string{"--freeze-at", "1m"}, "--freeze-at must be"},
		{[]string{"--bogus"}, "flag provided but not defined"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		var stdout, stderr syncBuffer
		if code := runDemo(context.Background(), tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("demo %q = %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestDemoInterrupted: a signal ends the demo at once, with every
// goroutine (TestMain's goleak checks) and exit code 1.
func TestDemoInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- runDemo(ctx, nil, &stdout, &stderr) }()
	time.Sleep(1500 * time.Millisecond)
	cancel()
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(stdout.String(), "interrupted") {
			t.Errorf("exit code %d, want 1 and \"interrupted\" in:\n%s", code, stdout.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the demo did not end within 10 s of the signal")
	}
}

// demoSeen is what watchStatus saw of the demo's --status server.
type demoSeen struct {
	polls          int
	role           string
	peers          int
	server2Suspect bool
	duplicates     uint64
	failovers      uint64
	dedupHits      float64
	moved          float64
}

// pollStatus finds the status page's URL in a demo's header, then gives
// each /status.json and /metrics it reads to seen until stop.
func pollStatus(stdout *syncBuffer, stop <-chan struct{}, seen func(s status.Snapshot, metrics string)) {
	re := regexp.MustCompile(`(?m)^  status page +(http://\S+/)$`)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	u := ""
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if u == "" {
			if m := re.FindStringSubmatch(stdout.String()); m != nil {
				u = m[1]
			}
			continue
		}
		s, err := getSnapshot(u)
		if err != nil {
			continue // the run is over
		}
		resp, err := httpc.Get(u + "metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen(s, string(b))
	}
}

// watchStatus polls the Diameter demo's --status server until stop.
func watchStatus(stdout *syncBuffer, stop <-chan struct{}) demoSeen {
	var seen demoSeen
	pollStatus(stdout, stop, func(s status.Snapshot, metrics string) {
		seen.polls++
		seen.role, seen.peers = s.Role, len(s.Peers)
		for _, p := range s.Peers {
			if p.Peer == "server2.example.net" && p.State == "SUSPECT" {
				seen.server2Suspect = true
			}
		}
		seen.duplicates = max(seen.duplicates, s.Totals.Duplicates)
		seen.failovers = max(seen.failovers, s.FailoversTotal)
		if v, ok := metricValue(metrics, status.MetricDedupHits, nil); ok {
			seen.dedupHits = max(seen.dedupHits, v)
		}
		var moved float64
		for _, to := range []string{"server1.example.net", "server3.example.net"} {
			v, _ := metricValue(metrics, status.MetricMoved, map[string]string{"from": "server2.example.net", "to": to})
			moved += v
		}
		seen.moved = max(seen.moved, moved)
	})
	return seen
}
