package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// failoverEvent is a --events line of type "failover".
type failoverEvent struct {
	Type     string   `json:"type"`
	FromPeer string   `json:"from_peer"`
	ToPeer   string   `json:"to_peer"`
	Moved    int      `json:"moved"`
	EndToEnd []uint32 `json:"end_to_end"`
}

func readFailoverEvents(t *testing.T, path string) []failoverEvent {
	t.Helper()
	readEvents(t, path) // every line well formed
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []failoverEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e failoverEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == "failover" && e.FromPeer != "" {
			out = append(out, e)
		}
	}
	return out
}

// TestFailoverNoDoubleApply: a primary that stops reading after 20
// requests goes SUSPECT on the client (two Tw of 6 s +- 2 s without a
// DWA); its pending requests are replayed with T to the secondary. The two
// servers share one duplicate store. Every request is answered and applied
// exactly once.
func TestFailoverNoDoubleApply(t *testing.T) {
	t.Parallel()
	shared := dedup.NewMemory()
	defer shared.Close()
	primary := startServerStore(t, shared, "--stall-after", "20", "--origin-host", "primary.example.net")
	secondary := startServerStore(t, shared, "--origin-host", "secondary.example.net")
	began := time.Now()
	r := runTestClient(t, context.Background(), primary.url, "--peer", secondary.url,
		"--mode", "failover", "--requests", "100", "--concurrency", "4", "--timeout", "60s", "--tw", "6s")
	t.Logf("client ran %v", time.Since(began).Round(time.Millisecond))
	rep := r.report
	if r.code != 0 || rep.Answered != 100 || rep.Failed != 0 || rep.Sent != 100 {
		t.Fatalf("client exit %d: sent %d answered %d failed %d %v\n%s", r.code, rep.Sent, rep.Answered, rep.Failed, rep.FailedBy, r.stderr)
	}
	if rep.Mode != "failover" {
		t.Errorf("mode %q", rep.Mode)
	}
	if rep.Retransmitted == 0 {
		t.Errorf("retransmitted 0; peers %+v", rep.Peers)
	}
	var moved int
	for _, f := range rep.Failovers {
		if f.From == primary.url && f.To == secondary.url {
			moved += f.Moved
			if len(f.EndToEnd) != f.Moved || f.Reason == "" || f.Time.IsZero() {
				t.Errorf("failover record %+v", f)
			}
		}
	}
	if moved == 0 || uint64(moved) != rep.Retransmitted || rep.FailoversTotal == 0 {
		t.Errorf("failovers %+v (total %d), retransmitted %d; want primary -> secondary moving them all", rep.Failovers, rep.FailoversTotal, rep.Retransmitted)
	}
	if len(rep.Servers) != 2 {
		t.Fatalf("servers %+v", rep.Servers)
	}
	sp, ss := rep.Servers[0], rep.Servers[1]
	// Sent counts the replays too on the server they moved to (package
	// client counts every dispatch), Answered only on the first server.
	if sp.Server != primary.url || ss.Server != secondary.url || sp.FailedOver != uint64(moved) ||
		sp.Sent < 20 || sp.Sent+ss.Sent < 100 || sp.Answered+ss.Answered != 100 || sp.Failed+ss.Failed != 0 ||
		sp.P99Us < sp.MeanUs/2 || sp.Peer != "primary.example.net" || ss.State != "DOWN" { // the report follows the disconnect
		t.Errorf("server stats %+v", rep.Servers)
	}
	evs := readFailoverEvents(t, r.events)
	var evMoved int
	for _, e := range evs {
		if e.FromPeer == primary.url && e.ToPeer == secondary.url {
			evMoved += e.Moved
		}
	}
	if evMoved != moved {
		t.Errorf("failover events moved %d, report %d: %+v", evMoved, moved, evs)
	}

	for _, s := range []*testServer{primary, secondary} {
		if code := s.stop(t); code != 0 {
			t.Errorf("server exit %d:\n%s", code, s.stderr)
		}
	}
	rp, rs := primary.readReport(t), secondary.readReport(t)
	t.Logf("primary %+v", rp)
	t.Logf("secondary %+v", rs)
	if rp.Applied+rs.Applied != 100 {
		t.Errorf("applied %d + %d, want 100 in all (none twice)", rp.Applied, rs.Applied)
	}
	if rp.Applied != 20 || rp.Received != 20 {
		t.Errorf("primary received %d applied %d, want 20 20 (--stall-after 20)", rp.Received, rp.Applied)
	}
	if rs.Received != 80 || rs.Retransmitted != uint64(moved) || rs.Received != rs.Applied+rs.Duplicates {
		t.Errorf("secondary received %d (%d with T), applied %d, duplicates %d; want 80 with the %d replays", rs.Received, rs.Retransmitted, rs.Applied, rs.Duplicates, moved)
	}
	if rp.Dedup != "memory" || rp.StoreErrors+rs.StoreErrors != 0 {
		t.Errorf("dedup %q, store errors %d %d", rp.Dedup, rp.StoreErrors, rs.StoreErrors)
	}
}

// TestBalancePearson: balance mode over three servers spreads distinct
// NAIs over all of them, and keeps one NAI on one server.
func TestBalancePearson(t *testing.T) {
	t.Parallel()
	a, b, c := startServer(t), startServer(t), startServer(t)
	r := runTestClient(t, context.Background(), a.url, "--peer", b.url, "--peer", c.url,
		"--algorithm", "pearson", "--requests", "300", "--concurrency", "6", "--wait-peers", "0")
	if r.code != 0 || r.report.Answered != 300 || len(r.report.Servers) != 3 {
		t.Fatalf("client exit %d report %+v\n%s", r.code, r.report, r.stderr)
	}
	if r.report.Mode != "balance" || r.report.Algorithm != "pearson" || r.report.Retransmitted != 0 || len(r.report.Failovers) != 0 {
		t.Errorf("mode %q algorithm %q retransmitted %d failovers %+v", r.report.Mode, r.report.Algorithm, r.report.Retransmitted, r.report.Failovers)
	}
	for _, s := range r.report.Servers {
		if s.Answered == 0 || s.Sent != s.Answered {
			t.Errorf("server %+v answered none", s)
		}
	}
	// One NAI, one server (L1).
	one := runTestClient(t, context.Background(), a.url, "--peer", b.url, "--peer", c.url,
		"--nai", "same@example.net", "--requests", "30", "--concurrency", "3", "--wait-peers", "3")
	if one.code != 0 || one.report.Answered != 30 {
		t.Fatalf("client exit %d report %+v\n%s", one.code, one.report, one.stderr)
	}
	got := 0
	for _, s := range one.report.Servers {
		if s.Sent != 0 {
			got++
			if s.Sent != 30 {
				t.Errorf("one NAI split: %+v", one.report.Servers)
			}
		}
	}
	if got != 1 {
		t.Errorf("one NAI went to %d servers: %+v", got, one.report.Servers)
	}
	var applied uint64
	for _, s := range []*testServer{a, b, c} {
		s.stop(t)
		rep := s.readReport(t)
		if rep.Applied == 0 {
			t.Errorf("a server applied nothing: %+v", rep)
		}
		applied += rep.Applied
	}
	if applied != 330 {
		t.Errorf("servers applied %d, want 330", applied)
	}
}

// TestWeights: --weight gives a server its share of the buckets.
func TestWeights(t *testing.T) {
	t.Parallel()
	a, b := startServer(t), startServer(t)
	r := runTestClient(t, context.Background(), a.url, "--peer", b.url, "--weight", a.url+"=7",
		"--requests", "400", "--concurrency", "8", "--wait-peers", "0")
	if r.code != 0 || r.report.Answered != 400 {
		t.Fatalf("client exit %d report %+v\n%s", r.code, r.report, r.stderr)
	}
	sa, sb := r.report.Servers[0].Sent, r.report.Servers[1].Sent
	if sa < 2*sb {
		t.Errorf("weight 7:1 sent %d:%d", sa, sb)
	}
}

func runRouteCmd(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(context.Background(), append([]string{"route"}, args...), &o, &e)
	return code, o.String(), e.String()
}

func TestRoute(t *testing.T) {
	const nai = "user@example.net"
	want := loadbalance.PearsonHashString(nai)
	code, out, errs := runRouteCmd("--nai", nai, "--server", "a", "--server", "b")
	var hash int
	var server string
	if n, err := fmt.Sscanf(out, "hash=%d server=%s\n", &hash, &server); code != 0 || err != nil || n != 2 ||
		strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("route: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if hash != int(want) || (server != "a" && server != "b") {
		t.Errorf("route printed %q; want hash=%d and a or b", out, want)
	}
	for range 3 {
		if _, again, _ := runRouteCmd("--nai", nai, "--server", "a", "--server", "b"); again != out {
			t.Errorf("route not stable: %q then %q", out, again)
		}
	}
	other := map[string]string{"a": "b", "b": "a"}[server]
	if _, down, _ := runRouteCmd("--nai", nai, "--server", "a", "--server", "b", "--down", server); down != fmt.Sprintf("hash=%d server=%s\n", want, other) {
		t.Errorf("with --down %s: %q, want server=%s", server, down, other)
	}
	if _, down, _ := runRouteCmd("--nai", nai, "--server", "a", "--server", "b", "--down", other); down != out {
		t.Errorf("--down %s (not the pick) changed %q to %q", other, out, down)
	}
	if code, d, _ := runRouteCmd("--nai", nai, "--server", "a", "--server", "b", "--algorithm", "direct", "--down", "a"); code != 0 || d != fmt.Sprintf("hash=%d server=b\n", want) {
		t.Errorf("direct with a down: exit %d %q", code, d)
	}
	if code, _, e := runRouteCmd("--nai", nai, "--server", "a", "--down", "a"); code != 1 || !strings.Contains(e, "no server in service") {
		t.Errorf("all down: exit %d stderr %q", code, e)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nai", nai}, "--server is required"},
		{[]string{"--server", "a"}, "--nai is required"},
		{[]string{"--nai", nai, "--server", "a", "--down", "c"}, "--down c is not a --server"},
		{[]string{"--nai", nai, "--server", "a=0"}, "want an integer from 1 to"},
		{[]string{"--nai", nai, "--server", "a=x"}, `weight "x"`},
		{[]string{"--nai", nai, "--server", "a", "--server", "a=2"}, "given twice"},
		{[]string{"--nai", nai, "--server", "a", "--algorithm", "nope"}, `--algorithm "nope"`},
		{[]string{"--nai", nai, "--server", "a", "--algorithm", "round-robin"}, "no fixed route"},
		{[]string{"--nai", nai, "--server", "a", "extra"}, `unexpected argument "extra"`},
	} {
		if code, o, e := runRouteCmd(tc.args...); code != 2 || o != "" || !strings.Contains(e, tc.want) {
			t.Errorf("route %q: exit %d stdout %q stderr %q; want 2 and %q", tc.args, code, o, e, tc.want)
		}
	}
}

// acr returns an Accounting-Request with the End-to-End id e2e.
func acr(e2e uint32, n uint32) []byte {
	msg := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, fmt.Sprintf("dup.example.net;1;%d", n)).
		String(message.OriginHost, 0, true, "dup.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, n).
		Uint32(message.AcctApplicationID, 0, true, message.AppAccounting).Bytes()
	wire.SetEndToEnd(msg, e2e)
	return msg
}

// dialOkay connects a plain peer to url and waits until it is OKAY.
func dialOkay(t *testing.T, url string) *peer.Peer {
	t.Helper()
	p, err := peer.Dial(url, peer.Config{
		OriginHost: "dup.example.net", OriginRealm: "example.net",
		AcctApps: []uint32{message.AppAccounting},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	return p
}

// sendDup sends the same request (same End-to-End id) twice on p and
// checks both answers say the same.
func sendDup(t *testing.T, first, second *peer.Peer, e2e uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a1, err := first.Request(ctx, acr(e2e, 7))
	if err != nil {
		t.Fatal(err)
	}
	dup := acr(e2e, 7)
	wire.SetFlags(dup, wire.Flags(dup)|wire.FlagRetransmit)
	// A retransmission as an agent forwards it (keeping T); a first send
	// clears T.
	cl, err := peer.NewCall(dup, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Submit(cl); err != nil {
		t.Fatal(err)
	}
	a2, err := cl.Wait(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if wire.EndToEnd(a1) != e2e || wire.EndToEnd(a2) != e2e {
		t.Errorf("answers' End-to-End %d %d, want %d", wire.EndToEnd(a1), wire.EndToEnd(a2), e2e)
	}
	if !bytes.Equal(a1[wire.HeaderLen:], a2[wire.HeaderLen:]) {
		t.Errorf("the duplicate's answer differs from the first")
	}
	if rc, _ := message.ResultCodeOf(a2); rc != message.Success {
		t.Errorf("duplicate answered %d", rc)
	}
}

// TestDedupMemory: the same End-to-End id twice on one server: applied
// once, answered twice.
func TestDedupMemory(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--dedup", "memory")
	p := dialOkay(t, srv.url)
	sendDup(t, p, p, peer.NextEndToEnd())
	p.Close(context.Background())
	srv.stop(t)
	rep := srv.readReport(t)
	if rep.Received != 2 || rep.Applied != 1 || rep.Duplicates != 1 || rep.Answered != 2 || rep.Retransmitted != 1 || rep.StoreErrors != 0 {
		t.Errorf("report %+v, want received 2 (1 with T) applied 1 duplicates 1 answered 2", rep)
	}
}

// TestDedupRedis: two servers share --dedup redis://: a request applied by
// one is a duplicate on the other.
func TestDedupRedis(t *testing.T) {
	t.Parallel()
	url := startRedis(t)
	a := startServer(t, "--dedup", url, "--origin-host", "a.example.net")
	b := startServer(t, "--dedup", url, "--origin-host", "b.example.net")
	pa, pb := dialOkay(t, a.url), dialOkay(t, b.url)
	sendDup(t, pa, pb, peer.NextEndToEnd())
	pa.Close(context.Background())
	pb.Close(context.Background())
	a.stop(t)
	b.stop(t)
	ra, rb := a.readReport(t), b.readReport(t)
	if ra.Applied != 1 || ra.Duplicates != 0 || rb.Applied != 0 || rb.Duplicates != 1 || rb.Received != 1 || ra.Dedup != url {
		t.Errorf("a %+v\nb %+v\nwant a applied 1, b a duplicate", ra, rb)
	}
}

// TestDedupRedisDown: an unreachable Redis is an exit 1 at start.
func TestDedupRedisDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var stderr syncBuffer
	code := runServer(context.Background(), []string{"--listen", "tcp://127.0.0.1:0", "--origin-host", "s.example.net",
		"--origin-realm", "example.net", "--dedup", fmt.Sprintf("redis://:secret@127.0.0.1:%d/0", port)}, &syncBuffer{}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "--dedup store unusable") || strings.Contains(stderr.String(), "secret") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
}

// startRedis runs a redis-server on a free loopback port for this test.
// Without redis-server the test skips, unless CI=true.
func startRedis(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not installed (CI=true: Redis tests must run): %v", err)
		}
		t.Skip("redis-server not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var out syncBuffer
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return fmt.Sprintf("redis://127.0.0.1:%d/0", port)
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server not listening after 5s: %v\n%s", err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
