package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
)

func TestServerAndClient(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := context.Background()

	acct := runTestClient(t, ctx, srv.url, "--requests", "200", "--concurrency", "8", "--no-delay")
	if acct.code != 0 {
		t.Fatalf("acct client exit %d:\n%s", acct.code, acct.stderr)
	}
	test := runTestClient(t, ctx, srv.url, "--app", "test", "--requests", "50", "--concurrency", "4", "--rate", "500")
	if test.code != 0 {
		t.Fatalf("test client exit %d:\n%s", test.code, test.stderr)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d:\n%s", code, srv.stderr)
	}

	for name, r := range map[string]clientRun{"acct": acct, "test": test} {
		rep := r.report
		// The result is on stderr whatever --report says: the Diameter
		// client used to print nothing by default.
		if want := fmt.Sprintf(`msg="run finished" sent=%d answered=%d failed=0`, rep.Sent, rep.Answered); !strings.Contains(r.stderr, want) {
			t.Errorf("%s: no %q on stderr:\n%s", name, want, r.stderr)
		}
		if rep.Failed != 0 || rep.Sent != rep.Answered || len(rep.FailedBy) != 0 {
			t.Errorf("%s: sent %d answered %d failed %d %v", name, rep.Sent, rep.Answered, rep.Failed, rep.FailedBy)
		}
		if rep.LatencyUS.Max == 0 || rep.LatencyUS.P50 > rep.LatencyUS.P99 || rep.LatencyUS.P99 > rep.LatencyUS.Max {
			t.Errorf("%s: latency %+v", name, rep.LatencyUS)
		}
		// The report is written after the disconnect: final states.
		if len(rep.Peers) != 1 || rep.Peers[0].Peer != "server1.example.net" || rep.Peers[0].State != "DOWN" ||
			rep.Peers[0].Sent != rep.Sent || rep.Peers[0].Answered != rep.Sent {
			t.Errorf("%s: peers %+v", name, rep.Peers)
		}
		evs := readEvents(t, r.events)
		if !hasTransition(evs, "INITIAL", "OKAY") {
			t.Errorf("%s: no INITIAL->OKAY in the client's events: %+v", name, evs)
		}
	}
	if got := acct.report.Answered + test.report.Answered; got != 250 {
		t.Errorf("clients answered %d, want 250", got)
	}
	rep := srv.readReport(t)
	if rep.Received != 250 || rep.Answered != 250 || rep.Duplicates != 0 {
		t.Errorf("server report: received %d answered %d duplicates %d, want 250 250 0", rep.Received, rep.Answered, rep.Duplicates)
	}
	if len(rep.Peers) != 2 {
		t.Fatalf("server saw %d peers, want 2: %+v", len(rep.Peers), rep.Peers)
	}
	var answersSent uint64
	for _, p := range rep.Peers {
		// Transitions may stay 1: a peer whose DPR exchange races with
		// the shutdown's Close ends without stepping to DOWN.
		if p.Peer != "client1.example.net" || p.Transitions < 1 {
			t.Errorf("server peer %+v", p)
		}
		answersSent += p.AnswersSent
	}
	if answersSent != 250 {
		t.Errorf("server peers sent %d answers, want 250", answersSent)
	}
	evs := readEvents(t, srv.events)
	if !hasTransition(evs, "INITIAL", "OKAY") {
		t.Errorf("server events lack INITIAL->OKAY: %+v", evs)
	}
}

var progressLine = regexp.MustCompile(`^t=\d+s sent=\d+ answered=\d+ failed=\d+ pending=\d+ servers=[^:,]+:[A-Z]+(,[^:,]+:[A-Z]+)*$`)

// TestDropDWA: a server that swallows its DWAs makes the client's
// watchdog go SUSPECT after two Tw (6 s +- 2 s each) of silence.
func TestDropDWA(t *testing.T) {
	t.Parallel()
	// The server's Tw is long so that it sends no DWR of its own (a DWR
	// received would reset the client's timer).
	srv := startServer(t, "--drop-dwa", "--tw", "30s")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	events := filepath.Join(dir, "events")
	done := make(chan clientRun, 1)
	go func() {
		// One request, then silence until cancelled.
		done <- runTestClient(t, ctx, srv.url, "--tw", "6s", "--rate", "0.01", "--duration", "30s", "--events", events)
	}()
	deadline := time.After(25 * time.Second)
	for suspect := false; !suspect; {
		select {
		case <-deadline:
			cancel()
			r := <-done
			t.Fatalf("no OKAY->SUSPECT within 25s; client stderr:\n%s", r.stderr)
		case <-time.After(100 * time.Millisecond):
		}
		if b, err := os.ReadFile(events); err == nil {
			suspect = strings.Contains(string(b), `"from":"OKAY","to":"SUSPECT"`)
		}
	}
	cancel() // as SIGTERM would
	r := <-done
	if r.code != 0 {
		t.Errorf("client exit %d:\n%s", r.code, r.stderr)
	}
	if len(r.report.Peers) != 1 {
		t.Fatalf("peers %+v", r.report.Peers)
	}
	p := r.report.Peers[0]
	if p.State != "DOWN" || p.DWRSent == 0 || p.DWAReceived != 0 {
		t.Errorf("client peer %+v, want DOWN (after the disconnect) with DWRs sent and no DWA", p)
	}
	if r.report.Sent != 1 || r.report.Answered != 1 {
		t.Errorf("sent %d answered %d, want 1 1", r.report.Sent, r.report.Answered)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) < 3 {
		t.Errorf("want a progress line a second, got %q", r.stdout)
	}
	for _, l := range lines {
		if !progressLine.MatchString(l) {
			t.Errorf("progress line %q does not match %v", l, progressLine)
		}
	}
	evs := readEvents(t, events)
	if !hasTransition(evs, "INITIAL", "OKAY") || !hasTransition(evs, "OKAY", "SUSPECT") {
		t.Errorf("events %+v", evs)
	}
	if code := srv.stop(t); code != 0 {
		t.Errorf("server exit %d", code)
	}
	if rep := srv.readReport(t); rep.Received != 1 || len(rep.Peers) != 1 || rep.Peers[0].DWRReceived == 0 {
		t.Errorf("server report %+v", rep)
	}
}

// TestResultCodes: answers other than 2001 count as failed, by code.
func TestResultCodes(t *testing.T) {
	t.Parallel()
	bus := peer.NewBus()
	s, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost: "odd.example.net", OriginRealm: "example.net", Events: bus,
		Logger: slog.New(slog.DiscardHandler),
		Handler: func(_ context.Context, _ *peer.Peer, req []byte) []byte {
			n, _ := message.Uint32Of(req, message.AccountingRecordNumber, 0)
			rc := uint32(message.Success)
			if n%2 == 1 {
				rc = 4999 // no such code
			}
			return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, rc).
				String(message.OriginHost, 0, true, "odd.example.net").
				String(message.OriginRealm, 0, true, "example.net").Bytes()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	defer func() {
		s.Close(context.Background())
		<-served
	}()
	r := runTestClient(t, context.Background(), "tcp://"+s.Addr().String(), "--requests", "20", "--concurrency", "3")
	if r.code != 3 { // half the requests failed: over the default --max-failed
		t.Fatalf("client exit %d, want 3:\n%s", r.code, r.stderr)
	}
	rep := r.report
	if rep.Sent != 20 || rep.Answered != 10 || rep.Failed != 10 || rep.FailedBy["result 4999"] != 10 || len(rep.FailedBy) != 1 {
		t.Errorf("sent %d answered %d failed %d failed_by %v; want 20 10 10 {result 4999: 10}", rep.Sent, rep.Answered, rep.Failed, rep.FailedBy)
	}
}

// TestAnswerDelayAndStall: --answer-delay past the client's timeout fails
// requests as timeouts (and the client exits 3: by default any failure is
// too many); --stall-after stops answering after N requests (half of them
// failing is within --max-failed 50%, so exit 0).
func TestAnswerDelayAndStall(t *testing.T) {
	t.Parallel()
	t.Run("answer-delay", func(t *testing.T) {
		t.Parallel()
		srv := startServer(t, "--answer-delay", "500ms")
		r := runTestClient(t, context.Background(), srv.url, "--requests", "3", "--concurrency", "3", "--timeout", "200ms")
		if r.code != 3 || r.report.Failed != 3 || r.report.FailedBy["timeout"] != 3 {
			t.Errorf("exit %d, report %+v\n%s", r.code, r.report, r.stderr)
		}
		// 200ms is far below the 64s it takes to detect a hung peer at the
		// default --tw: the client says so at start, naming both.
		if !strings.Contains(r.stderr, "shorter than failover detection") || !strings.Contains(r.stderr, "200ms") || !strings.Contains(r.stderr, "1m4s") {
			t.Errorf("no deadline warning naming 200ms and 1m4s in:\n%s", r.stderr)
		}
		if code := srv.stop(t); code != 0 {
			t.Errorf("server exit %d", code)
		}
		if rep := srv.readReport(t); rep.Received != 3 {
			t.Errorf("server received %d, want 3", rep.Received)
		}
	})
	t.Run("stall-after", func(t *testing.T) {
		t.Parallel()
		srv := startServer(t, "--stall-after", "5")
		r := runTestClient(t, context.Background(), srv.url, "--requests", "10", "--concurrency", "10", "--timeout", "1s", "--max-failed", "50%")
		if r.code != 0 || r.report.Answered != 5 || r.report.FailedBy["timeout"] != 5 {
			t.Errorf("exit %d, report %+v\n%s", r.code, r.report, r.stderr)
		}
		if code := srv.stop(t); code != 0 {
			t.Errorf("server exit %d", code)
		}
		if rep := srv.readReport(t); rep.Received != 5 || rep.Answered != 5 {
			t.Errorf("server received %d answered %d, want 5 5", rep.Received, rep.Answered)
		}
	})
}

// TestNoPeer: nothing listening: exit 1 after --connect-timeout, naming
// the server, why it is not in service, and when it is tried again (a
// server started after the client is reached only at the next Tw).
func TestNoPeer(t *testing.T) {
	t.Parallel()
	r := runTestClient(t, context.Background(), "tcp://127.0.0.1:1", "--connect-timeout", "300ms")
	if r.code != 1 || !strings.Contains(r.stderr, "no peer in service") {
		t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"none of 1 servers in service within 300ms (--connect-timeout): tcp://127.0.0.1:1 ",
		"(open failed: ", "connection refused", "redialled every Tw (RFC 3539; --tw 30s)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
		}
	}
}

// TestRefusedByEveryPeer: when every peer refuses our CER for good
// (DIAMETER_UNKNOWN_PEER), the client exits 1 at once, saying why, rather
// than waiting --connect-timeout.
func TestRefusedByEveryPeer(t *testing.T) {
	t.Parallel()
	a := startServer(t, "--allow", "other.example.net")
	b := startServer(t, "--allow", "other.example.net")
	t0 := time.Now()
	r := runTestClient(t, context.Background(), a.url, "--peer", b.url, "--connect-timeout", "60s")
	took := time.Since(t0)
	if r.code != 1 || !strings.Contains(r.stderr, "every peer refused us") || !strings.Contains(r.stderr, "3010") {
		t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if took > 20*time.Second {
		t.Errorf("the client took %v to give up; every peer had refused it at the first attempt", took)
	}
}

// TestBinarySIGTERM builds aaa-peer and stops a server with SIGTERM.
func TestBinarySIGTERM(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "aaa-peer")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ready, report := filepath.Join(dir, "ready"), filepath.Join(dir, "report.json")
	cmd := exec.CommandContext(ctx, bin, "server", "--listen", "tcp://127.0.0.1:0",
		"--origin-host", "server1.example.net", "--origin-realm", "example.net",
		"--ready", ready, "--report", report)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		select {
		case err := <-waited:
			t.Fatalf("server exited early: %v\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	url, _ := os.ReadFile(ready)
	r := runTestClient(t, context.Background(), strings.TrimSpace(string(url)), "--requests", "5")
	if r.code != 0 || r.report.Answered != 5 {
		t.Errorf("client exit %d report %+v", r.code, r.report)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("server: %v (want exit 0)\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-waited
		t.Fatal("server still running 10s after SIGTERM")
	}
	var rep serverReport
	readJSON(t, report, &rep)
	if rep.Received != 5 || rep.Answered != 5 || len(rep.Peers) != 1 {
		t.Errorf("report %+v", rep)
	}
}

// TestTwoPeers: requests go round-robin over the peers in service.
func TestTwoPeers(t *testing.T) {
	t.Parallel()
	a, b := startServer(t), startServer(t)
	r := runTestClient(t, context.Background(), a.url, "--peer", b.url, "--requests", "100", "--concurrency", "4",
		"--algorithm", "round-robin", "--wait-peers", "0")
	if r.code != 0 || r.report.Answered != 100 || len(r.report.Peers) != 2 {
		t.Fatalf("client exit %d report %+v\n%s", r.code, r.report, r.stderr)
	}
	a.stop(t)
	b.stop(t)
	ra, rb := a.readReport(t), b.readReport(t)
	if ra.Answered+rb.Answered != 100 || ra.Answered < 40 || rb.Answered < 40 {
		t.Errorf("servers answered %d and %d, want about 50 each", ra.Answered, rb.Answered)
	}
}
