package status

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aaatp/aaatp/client"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// fakeSource is a Source whose peers the test changes.
type fakeSource struct {
	mu    sync.Mutex
	snap  Snapshot
	calls int
}

func (f *fakeSource) Snapshot() Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	s := f.snap
	s.Peers = append([]PeerStatus(nil), f.snap.Peers...)
	return s
}

func (f *fakeSource) setState(peer, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.snap.Peers {
		if f.snap.Peers[i].Peer == peer {
			f.snap.Peers[i].State = state
			f.snap.Peers[i].Since = time.Now()
		}
	}
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func newFake() *fakeSource {
	return &fakeSource{snap: Snapshot{
		Role: RoleClient,
		Identity: Identity{OriginHost: "c1.example.net", OriginRealm: "example.net",
			Started: t0.Add(-time.Hour), Info: map[string]string{"mode": "balance"}},
		Peers: []PeerStatus{
			{Peer: "s1.example.net", Server: "tcp://127.0.0.1:3868", State: "OKAY", Since: t0.Add(-90 * time.Second),
				Policy: "in-service (128 buckets)", Pending: 3, Sent: 100, Answered: 97, Tw: 6 * time.Second, LastDWA: t0.Add(-2 * time.Second)},
			{Peer: "s2.example.net", Server: "tcp://127.0.0.1:3869", State: "SUSPECT", Since: t0.Add(-4 * time.Second),
				Policy: "suspended", Pending: 0, Sent: 50, Answered: 40, MovedOut: 10, Tw: 6 * time.Second},
		},
		Failovers: []client.FailoverRecord{
			{Time: t0.Add(-4 * time.Second), From: "tcp://127.0.0.1:3869", To: "tcp://127.0.0.1:3868", Reason: "OKAY -> SUSPECT", Moved: 10, EndToEnd: []uint32{1, 2}},
			{Time: t0.Add(-3 * time.Second), From: "tcp://127.0.0.1:3869", To: "", Reason: "no alternate", Moved: 1},
		},
		FailoversTotal: 7,
		Queues:         []Queue{{Server: "s1.example.net", Depth: 4}, {Server: "s2.example.net", Depth: 900, Alarm: true}},
		Totals:         Totals{Sent: 150, Answered: 137, Pending: 3, Moved: 10},
		Time:           t0,
	}}
}

func get(t *testing.T, h http.Handler, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStatusJSONShape(t *testing.T) {
	h := Handler(newFake())
	r := get(t, h, "/status.json")
	if r.StatusCode != 200 || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
	raw := body(t, r)
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"time", "role", "identity", "peers", "failovers", "failovers_total", "queues", "totals"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, raw)
		}
	}
	peers := m["peers"].([]any)
	if len(peers) != 2 {
		t.Fatalf("peers: %v", peers)
	}
	p0 := peers[0].(map[string]any)
	for _, k := range []string{"peer", "server", "state", "since", "in_state_ms", "policy", "pending", "sent", "answered", "moved_out", "tw_ns", "last_dwa"} {
		if _, ok := p0[k]; !ok {
			t.Errorf("peer row has no %q: %v", k, p0)
		}
	}
	if _, ok := peers[1].(map[string]any)["last_dwa"]; ok {
		t.Errorf("a peer with no DWA yet has last_dwa: %v", peers[1])
	}
	if p0["in_state_ms"].(float64) != 90000 {
		t.Errorf("in_state_ms = %v, want 90000 (Time - Since)", p0["in_state_ms"])
	}
	q := m["queues"].([]any)[1].(map[string]any)
	if q["server"] != "s2.example.net" || q["depth"].(float64) != 900 || q["alarm"] != true {
		t.Errorf("queue: %v", q)
	}
	fo := m["failovers"].([]any)[0].(map[string]any)
	for _, k := range []string{"time", "from_peer", "to_peer", "reason", "moved", "end_to_end"} {
		if _, ok := fo[k]; !ok {
			t.Errorf("failover row has no %q: %v", k, fo)
		}
	}
	totals := m["totals"].(map[string]any)
	for _, k := range []string{"sent", "received", "answered", "failed", "pending", "moved", "retransmitted", "duplicates"} {
		if _, ok := totals[k]; !ok {
			t.Errorf("totals has no %q: %v", k, totals)
		}
	}

	// It round-trips into the Go type.
	var s Snapshot
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatal(err)
	}
	if s.Peers[0].Tw != 6*time.Second || !s.Peers[0].LastDWA.Equal(t0.Add(-2*time.Second)) || s.FailoversTotal != 7 {
		t.Errorf("round trip: %+v", s)
	}
}

func TestStatusJSONEmptyListsAreArrays(t *testing.T) {
	h := Handler(SourceFunc(func() Snapshot { return Snapshot{Role: RoleServer} }))
	raw := body(t, get(t, h, "/status.json"))
	for _, k := range []string{`"peers": []`, `"failovers": []`, `"queues": []`} {
		if !strings.Contains(raw, k) {
			t.Errorf("want %s in %s", k, raw)
		}
	}
	var s Snapshot
	json.Unmarshal([]byte(raw), &s)
	if s.Time.IsZero() {
		t.Error("the handler did not set Time")
	}
}

func TestPageHasPeerRows(t *testing.T) {
	f := newFake()
	f.snap.Peers = append(f.snap.Peers, PeerStatus{Peer: `<script>alert(1)</script>`, State: "DOWN"})
	r := get(t, Handler(f), "/")
	if r.StatusCode != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, content type %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
	page := body(t, r)
	for _, want := range []string{
		`<tr class="peer" data-peer="s1.example.net">`,
		`<td class="state s-OKAY">OKAY</td>`,
		`<td class="state s-SUSPECT">SUSPECT</td>`,
		`<td>1m30s</td>`,           // time in state
		`in-service (128 buckets)`, // policy
		`<td class="n">6.0s</td>`,  // Tw
		`<td>2.0s ago</td>`,        // last DWA
		`<td>never</td>`,           // no DWA yet
		`(none: waiting)`,          // failover without alternate
		`(2 kept of 7)`,            // failover count
		`<td class="alarm-true">ALARM</td>`,
		`data-poll-ms="1000"`,
		`<noscript><meta http-equiv="refresh" content="5"></noscript>`,
		`&lt;script&gt;alert(1)&lt;/script&gt;`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(page, `<script>alert(1)`) {
		t.Error("a peer name went into the page unescaped")
	}
	// Failovers newest first.
	if i, j := strings.Index(page, "no alternate"), strings.Index(page, "OKAY -&gt; SUSPECT"); i < 0 || j < 0 || i > j {
		t.Errorf("failover rows not newest first (%d, %d)", i, j)
	}
	csp := r.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, cspHash(pageScript)) || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
	// The hashes hold only if the script and style go in verbatim.
	if !strings.Contains(page, "<script>"+pageScript+"</script>") || !strings.Contains(page, "<style>"+pageStyle+"</style>") {
		t.Error("script or style altered by the template")
	}
}

func TestPageEmpty(t *testing.T) {
	page := body(t, get(t, Handler(SourceFunc(func() Snapshot { return Snapshot{} })), "/"))
	for _, want := range []string{"no peers", "no failover", "no queues"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

func TestRoutes(t *testing.T) {
	h := Handler(newFake())
	for path, code := range map[string]int{"/favicon.ico": 404, "/metrics": 404, "/status.json/x": 404} {
		if r := get(t, h, path); r.StatusCode != code {
			t.Errorf("%s: %d, want %d", path, r.StatusCode, code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/status.json", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
	if r := get(t, Handler(newFake(), WithMetrics(NewMetrics())), "/metrics"); r.StatusCode != 200 {
		t.Errorf("/metrics with WithMetrics: %d", r.StatusCode)
	}
}

func TestFmtDur(t *testing.T) {
	for ms, want := range map[int64]string{-5: "0ms", 0: "0ms", 999: "999ms", 1000: "1.0s", 6449: "6.4s", 59999: "59.9s",
		60000: "1m00s", 187000: "3m07s", 3599999: "59m59s", 3600000: "1h00m", 7500000: "2h05m"} {
		if got := fmtDur(ms); got != want {
			t.Errorf("fmtDur(%d) = %q, want %q", ms, got, want)
		}
	}
}
