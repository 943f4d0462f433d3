package main

import (
	"context"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/status"
	"github.com/redis/go-redis/v9"
)

// TestStoreLostReported: a loss of the --dedup store's state is counted
// (the aaatp_dedup_store_lost_total metric and the report read it) and
// published as an error event.
func TestStoreLostReported(t *testing.T) {
	s := &server{}
	metrics := status.NewMetrics()
	s.exportStoreLost(metrics)
	s.exportStoreLost(nil) // no --status: nothing to export to
	bus := peer.NewBus()
	var got []peer.Event
	defer bus.Subscribe(func(_ context.Context, e peer.Event) { got = append(got, e) })()
	s.storeLost(bus)
	if s.dedupLost.Load() != 1 || s.report(0).DedupLost != 1 {
		t.Fatalf("loss not counted: %d", s.dedupLost.Load())
	}
	rec := httptest.NewRecorder()
	metrics.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), metricDedupLost+" 1") {
		t.Fatalf("metric not exported:\n%s", rec.Body.String())
	}
	if len(got) != 1 || got[0].Kind != peer.EventError || !strings.Contains(got[0].Reason, "lost its entries") {
		t.Fatalf("events %+v", got)
	}
}

// TestDedupRedisLost: a Redis that lost its entries (FLUSHALL, as a
// restart without persistence does) is noticed by the server at its next
// request: counted in the report, logged at warn and published as an
// error event.
func TestDedupRedisLost(t *testing.T) {
	t.Parallel()
	url := startRedis(t)
	a := startServer(t, "--dedup", url, "--origin-host", "a.example.net")
	pa := dialOkay(t, a.url)
	sendDup(t, pa, pa, peer.NextEndToEnd())
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	if err := rc.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	sendDup(t, pa, pa, peer.NextEndToEnd())
	pa.Close(context.Background())
	a.stop(t)
	if rep := a.readReport(t); rep.DedupLost != 1 || rep.Applied != 2 {
		t.Errorf("report %+v, want dedup_lost 1", rep)
	}
	events, err := os.ReadFile(a.events)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(events), `"type":"error"`) || !strings.Contains(string(events), "lost its entries") {
		t.Errorf("no error event for the loss:\n%s", events)
	}
}

// TestDedupURLErrorShowsNoPassword: a --dedup URL that does not parse
// (its password written with an unescaped '#', '/' or '%') is refused
// without any part of the password on stderr, which the journal keeps;
// so is a URL of an unknown scheme.
func TestDedupURLErrorShowsNoPassword(t *testing.T) {
	for _, store := range []string{
		"redis://:Zq#9secret@127.0.0.1:6379/0", // url.Parse: invalid port ":Zq" after host
		"redis://u:Zq/9secret@127.0.0.1:6379/0",
		"redis://:Zq%zz9secret@127.0.0.1:6379/0", // invalid URL escape "%zz"
		"rdis://:Zq9secret@127.0.0.1:6379/0",     // not a redis:// URL
	} {
		var stderr syncBuffer
		code := runServer(context.Background(), []string{"--listen", "tcp://127.0.0.1:0", "--origin-host", "s.example.net",
			"--origin-realm", "example.net", "--dedup", store}, &syncBuffer{}, &stderr)
		out := stderr.String()
		if code != 2 || !strings.Contains(out, "--dedup") {
			t.Errorf("--dedup %s: exit %d, want 2 and the flag named; stderr:\n%s", store, code, out)
		}
		for _, part := range []string{"Zq", "9secret", "%zz"} {
			if strings.Contains(out, part) {
				t.Errorf("--dedup %s: stderr shows %q of the password:\n%s", store, part, out)
			}
		}
	}
}
