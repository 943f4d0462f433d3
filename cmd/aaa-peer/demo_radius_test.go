package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/status"
)

// TestRadiusDemo runs the RADIUS demo with shortened timers and checks the
// story's order, the summary and the exit code.
func TestRadiusDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the RADIUS demo takes about 10 s with these flags")
	}
	var stdout, stderr syncBuffer
	began := time.Now()
	stopWatch := make(chan struct{})
	watched := make(chan radiusSeen, 1)
	go func() { watched <- watchRadiusStatus(&stdout, stopWatch) }()
	code := runDemo(context.Background(), []string{"--protocol", "radius", "--timeout", "300ms", "--hold-down", "2s",
		"--burst", "1000", "--burst-rate", "1000", "--status", "127.0.0.1:0"}, &stdout, &stderr)
	close(stopWatch)
	seen := <-watched
	t.Logf("status page: %+v", seen)
	if seen.polls == 0 || seen.peers != 3 || !seen.server1Out || seen.policyEvents == 0 || seen.moved == 0 {
		t.Errorf("the status page never showed 3 servers, server1 out-of-service, moved requests and policy events in /metrics: %+v", seen)
	}
	out := stdout.String()
	t.Logf("took %v; output:\n%s", time.Since(began).Round(100*time.Millisecond), out)
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
	}
	// server2 comes into service with the first request moved to it,
	// which the down-timeout (timeout x retries) and the failover after
	// the retries reach at the same instant: either line may come first.
	if !regexp.MustCompile(`(?s)server1 +hangs.*server2 +unknown -> in-service`).MatchString(out) {
		t.Errorf("no %q after server1 hangs", "server2 unknown -> in-service")
	}
	rest := out
	for _, want := range []string{
		`server1 +unknown -> in-service`,
		`server1 +hangs`,
		`server1 +in-service -> out-of-service \(no reply within the down-timeout\)`,
		`server1 +out-of-service -> probing`,
		`server1 +probing -> out-of-service \(probe not answered`,
		`server1 +recovers`,
		`server1 +out-of-service -> probing`,
		`server1 +probing -> in-service \(probe answered\)`,
		`client +1000 Accounting-Stop records released at once`,
		// Arrivals are timed at the servers, so a loaded machine moves some
		// across slot boundaries: the exact 50 per slot is proven in
		// virtual time by client's TestUDPAccountingBurstThrottled; here the burst must span at
		// least the 19 slot lengths the rate allows (checked below).
		`accounting burst: 1000 of 1000 answered, 0 failed, arriving over \d+ slots of 50 ms: median \d+ per slot \(quota 50\)`,
		`applied twice: 0`,
		`OK: every request answered or failed with a reason`,
	} {
		loc := regexp.MustCompile(want).FindStringIndex(rest)
		if loc == nil {
			t.Fatalf("no %q after the previous lines", want)
		}
		rest = rest[loc[1]:]
	}
	// Released at once, 1000 records at 50 per 50 ms slot leave over 20
	// slots: the last leaves 19 slots after the first slot began, so at
	// least 900 ms after the release whatever the slot offset. Load only
	// delays answers, so this cannot fail on a slow machine.
	if m := regexp.MustCompile(`burst done in ([\d.]+)(ms|s)`).FindStringSubmatch(out); m == nil {
		t.Error("no burst-done line")
	} else if d := atof(m[1]) * map[string]float64{"ms": 1, "s": 1000}[m[2]]; d < 900 {
		t.Errorf("the 1000-record burst was done in %v ms: faster than 50 per 50 ms slot allows", d)
	}
	// Down-timeout = 3 x 300 ms after the hang (and the last reply).
	m := regexp.MustCompile(`(?m)^ *([\d.]+)s  server1 +hangs[\s\S]*?^ *([\d.]+)s  server1 +in-service -> out-of-service`).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no hang and out-of-service lines")
	}
	if d := atof(m[2]) - atof(m[1]); d < 0.8 || d > 1.3 {
		t.Errorf("out of service %.1fs after the hang, want about the 0.9 s down-timeout", d)
	}
	if !strings.Contains(out, "moved to the next server after 3 attempts") {
		t.Error("summary lacks the failovers")
	}
	// Each server's line: its policy state and its socket's counts
	// (server1, which hung, retransmitted).
	if !regexp.MustCompile(`(?m)^  server1 +in-service +sent [1-9]\d*, retransmitted [1-9]\d*, answered [1-9]`).MatchString(out) {
		t.Error("summary lacks server1's state and counts")
	}
	if !regexp.MustCompile(`(?m)^  server2 +in-service +sent [1-9]\d*, retransmitted \d+, answered [1-9]`).MatchString(out) {
		t.Error("summary lacks server2's state and counts")
	}
}

func atof(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func TestRadiusDemoUsage(t *testing.T) {
	var stdout, stderr syncBuffer
	if code := runDemo(context.Background(), []string{"--protocol", "snmp"}, &stdout, &stderr); code != 2 {
		t.Errorf("--protocol snmp: exit %d, want 2", code)
	}
	if code := runDemo(context.Background(), []string{"--protocol", "radius", "--hold-down", "1m"}, &stdout, &stderr); code != 2 {
		t.Errorf("--hold-down 1m: exit %d, want 2", code)
	}
	if code := runDemo(context.Background(), []string{"--protocol=radius", "-h"}, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "7750 SR") {
		t.Errorf("-h: exit %d, usage %q", code, stderr.String())
	}
}

type radiusSeen struct {
	polls, peers int
	server1Out   bool
	moved        uint64
	policyEvents float64
}

// watchRadiusStatus polls the RADIUS demo's status page until stop.
func watchRadiusStatus(stdout *syncBuffer, stop <-chan struct{}) radiusSeen {
	var seen radiusSeen
	pollStatus(stdout, stop, func(s status.Snapshot, metrics string) {
		seen.polls++
		seen.peers = len(s.Peers)
		for _, p := range s.Peers {
			if p.Server == "server1" && p.Policy == "out-of-service" {
				seen.server1Out = true
			}
		}
		seen.moved = max(seen.moved, s.Totals.Moved)
		if v, ok := metricValue(metrics, status.MetricEvents, map[string]string{"type": "policy"}); ok {
			seen.policyEvents = max(seen.policyEvents, v)
		}
	})
	return seen
}
