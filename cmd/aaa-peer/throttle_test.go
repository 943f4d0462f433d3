package main

import (
	"context"
	"testing"
	"time"
)

// The client's throttle and policy flags reach package client: 60 requests
// at --max-rate 100 take about 0.6 s from many callers, all answered, and
// the report shows each server's queue and policy state.
func TestClientThrottleAndPolicyFlags(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	run := runTestClient(t, ctx, srv.url, "--requests", "60", "--concurrency", "20",
		"--max-rate", "100", "--queue-alarm", "10,2", "--hold-down", "10s")
	elapsed := time.Since(start)
	if run.code != 0 {
		t.Fatalf("exit %d: %s", run.code, run.stderr)
	}
	r := run.report
	if r.Answered != 60 || r.Failed != 0 {
		t.Fatalf("answered %d failed %d, want 60 and 0", r.Answered, r.Failed)
	}
	if elapsed < 500*time.Millisecond {
		t.Errorf("60 requests at 100/s took %v: the rate limit was not applied", elapsed)
	}
	if len(r.Queues) != 1 || r.Queues[0].MaxDepth < 10 || r.Queues[0].Alarms < 1 {
		t.Errorf("queues %+v: want a deepest queue >= 10 and an alarm raised", r.Queues)
	}
	if len(r.Policy) != 1 || r.Policy[0] != "in-service" {
		t.Errorf("policy %v, want [in-service]", r.Policy)
	}
}
