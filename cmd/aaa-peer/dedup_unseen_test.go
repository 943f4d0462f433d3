package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/dedup"
	servecore "github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/status"
	"github.com/aaatp/aaatp/wire"
)

// Lines the server writes about a --dedup store of its own.
const (
	warnMemoryStore = "--dedup memory: duplicates are recognised within this process only"
	warnUnseen      = "request with the T flag never seen by the --dedup memory store"
)

// sendT sends req with the T flag set on p, as a client replaying it after
// a failover does, and returns the answer's Result-Code.
func sendT(t *testing.T, p *peer.Peer, req []byte) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wire.SetFlags(req, wire.Flags(req)|wire.FlagRetransmit)
	cl, err := peer.NewCall(req, true) // keeps the T flag, as a replay
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Submit(cl); err != nil {
		t.Fatal(err)
	}
	ans, err := cl.Wait(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := message.ResultCodeOf(ans)
	return rc
}

// TestDedupMemoryUnseenReplays: two servers with the default --dedup
// memory, a request applied by the first and replayed with the T flag to
// the second (a client's failover): the second cannot know it, applies it
// again, and says so. Each server warns once at start that this can
// happen without a shared store; the second counts the replay it had
// never seen (report unseen_replays, log_events unseen_replay) and logs
// it; the replay's own duplicate, a request without the T flag and one it
// had seen are not counted.
func TestDedupMemoryUnseenReplays(t *testing.T) {
	t.Parallel()
	a := startServer(t, "--origin-host", "a.example.net")
	b := startServer(t, "--origin-host", "b.example.net")
	pa, pb := dialOkay(t, a.url), dialOkay(t, b.url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	logged := servecore.Count(servecore.KindUnseenReplay) // process-wide, as the rate

	e2e := peer.NextEndToEnd()
	if _, err := pa.Request(ctx, acr(e2e, 1)); err != nil { // applied by a
		t.Fatal(err)
	}
	if rc := sendT(t, pb, acr(e2e, 1)); rc != message.Success { // b has never seen it
		t.Fatalf("replay answered %d", rc)
	}
	if rc := sendT(t, pb, acr(e2e, 1)); rc != message.Success { // now b has
		t.Fatalf("second replay answered %d", rc)
	}
	if rc := sendT(t, pa, acr(e2e, 1)); rc != message.Success { // a had
		t.Fatalf("replay to a answered %d", rc)
	}
	if _, err := pb.Request(ctx, acr(peer.NextEndToEnd(), 2)); err != nil { // no T flag
		t.Fatal(err)
	}
	pa.Close(context.Background())
	pb.Close(context.Background())
	a.stop(t)
	b.stop(t)

	ra, rb := a.readReport(t), b.readReport(t)
	if ra.UnseenReplays != 0 || ra.Retransmitted != 1 || ra.Duplicates != 1 {
		t.Errorf("a: unseen_replays %d, retransmitted %d, duplicates %d; want 0, 1, 1", ra.UnseenReplays, ra.Retransmitted, ra.Duplicates)
	}
	if rb.UnseenReplays != 1 || rb.Retransmitted != 2 || rb.Applied != 2 || rb.Duplicates != 1 {
		t.Errorf("b: unseen_replays %d, retransmitted %d, applied %d, duplicates %d; want 1, 2, 2, 1",
			rb.UnseenReplays, rb.Retransmitted, rb.Applied, rb.Duplicates)
	}
	if rb.LogEvents["unseen_replay"] < 1 {
		t.Errorf("b: log_events %v, want unseen_replay counted", rb.LogEvents)
	}
	for name, s := range map[string]*testServer{"a": a, "b": b} {
		if n := strings.Count(s.stderr.String(), warnMemoryStore); n != 1 {
			t.Errorf("%s: %d startup warnings about --dedup memory, want 1:\n%s", name, n, s.stderr)
		}
		if !strings.Contains(s.stderr.String(), "redis://") {
			t.Errorf("%s: the warning does not name the shared store:\n%s", name, s.stderr)
		}
	}
	n := strings.Count(b.stderr.String(), warnUnseen)
	if n == 0 && servecore.Count(servecore.KindUnseenReplay)-logged > 20 {
		t.Logf("b's line about the unseen replay suppressed: tests running alongside used up the rate")
	} else if n != 1 {
		t.Errorf("b: %d lines about the unseen replay, want 1:\n%s", n, b.stderr)
	}
	if strings.Contains(a.stderr.String(), warnUnseen) {
		t.Errorf("a logged a replay it had seen:\n%s", a.stderr)
	}
}

// TestDedupSharedStoreNoWarning: servers sharing a store neither warn at
// start nor log a replay they had not seen (it was not applied by a
// server of the store), though it is still counted.
func TestDedupSharedStoreNoWarning(t *testing.T) {
	t.Parallel()
	store := dedup.NewMemory()
	defer store.Close()
	s := startServerStore(t, store, "--origin-host", "a.example.net")
	p := dialOkay(t, s.url)
	if rc := sendT(t, p, acr(peer.NextEndToEnd(), 1)); rc != message.Success {
		t.Fatalf("replay answered %d", rc)
	}
	p.Close(context.Background())
	s.stop(t)
	if r := s.readReport(t); r.UnseenReplays != 1 {
		t.Errorf("unseen_replays %d, want 1", r.UnseenReplays)
	}
	if out := s.stderr.String(); strings.Contains(out, warnMemoryStore) || strings.Contains(out, warnUnseen) {
		t.Errorf("a server on a shared store warned:\n%s", out)
	}
}

// TestUnseenReplaysMetric: the count is exported as
// aaatp_dedup_unseen_retransmissions_total, at zero from the start.
func TestUnseenReplaysMetric(t *testing.T) {
	s := &server{}
	metrics := status.NewMetrics()
	s.exportUnseen(metrics)
	s.exportUnseen(nil) // no --status: nothing to export to
	scrape := func() string {
		rec := httptest.NewRecorder()
		metrics.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	if out := scrape(); !strings.Contains(out, metricUnseen+" 0") {
		t.Fatalf("metric absent at zero:\n%s", out)
	}
	s.dd.UnseenRetransmits.Add(3)
	if out := scrape(); !strings.Contains(out, metricUnseen+" 3") {
		t.Fatalf("metric not exported:\n%s", out)
	}
}
