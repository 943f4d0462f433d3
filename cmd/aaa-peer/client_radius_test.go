package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/internal/testhelp"
)

// aaa-peer client over radius:// with a dead first server (direct
// access): its requests are retried, then go to aaa-peer server, the dead
// one goes out of service, and every request is answered and applied once.
func TestRadiusClientFailover(t *testing.T) {
	t.Parallel()
	sf := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, live := startRADIUSUDPServer(t, sf)
	dead, err := net.ListenPacket("udp", "127.0.0.1:0") // reads nothing, answers nothing
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	deadURL := "radius://" + dead.LocalAddr().String()
	var stdout, stderr bytes.Buffer
	events := filepath.Join(t.TempDir(), "events.jsonl")
	code := run(context.Background(), []string{"client", "--peer", deadURL, "--peer", live, "--secret-file", sf,
		"--app", "acct", "--timeout", "200ms", "--retries", "2", "--requests", "30", "--rate", "50", "--log-level", "error",
		"--events", events}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	var rep clientReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if rep.Sent != 30 || rep.Answered != 30 || rep.Failed != 0 || rep.FailoversTotal == 0 {
		t.Fatalf("report %+v: want 30 answered, some failovers", rep)
	}
	if len(rep.UDP) != 2 || rep.Policy[0] != "out-of-service" || rep.UDP[0].Retransmissions != rep.UDP[0].Sent || rep.Retransmitted < rep.UDP[0].Sent {
		t.Errorf("dead server: %+v, policy %v, retransmitted %d; want out-of-service, each request sent twice", rep.UDP, rep.Policy, rep.Retransmitted)
	}
	// --events: the dead server's policy states and the failovers, as
	// for Diameter.
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	var outOfService, failovers int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e client.EventLine
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("event line %q: %v", line, err)
		}
		switch {
		case e.Type == "policy" && e.Peer == deadURL && e.To == "out-of-service":
			outOfService++
		case e.Type == "failover" && e.FromPeer == deadURL && e.ToPeer == live:
			failovers++
		}
	}
	if outOfService == 0 || failovers == 0 {
		t.Errorf("--events: %d out-of-service and %d failover lines for the dead server, want some of each:\n%s", outOfService, failovers, b)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
	r := srv.readReport(t)
	if r.Applied != 30 || r.Duplicates != 0 {
		t.Errorf("server applied %d (duplicates %d), want 30 once each", r.Applied, r.Duplicates)
	}
	// The server names its client (NAS) with its counters.
	if len(r.RADIUS) != 1 || r.RADIUS[0].UDP == nil || len(r.RADIUS[0].UDP.NAS) != 1 ||
		r.RADIUS[0].UDP.NAS[0].Addr != "127.0.0.1" || r.RADIUS[0].UDP.NAS[0].Received < 30 || r.RADIUS[0].UDP.NAS[0].Answered < 30 {
		t.Errorf("server's RADIUS listeners %+v: want the client 127.0.0.1 with its 30 requests and answers", r.RADIUS)
	}
}

func TestRadiusClientUsage(t *testing.T) {
	for _, args := range [][]string{
		{"client", "--peer", "radius://127.0.0.1:1812", "--peer", "tcp://127.0.0.1:3868"},
		{"client", "--peer", "radius://127.0.0.1:1812", "--app", "coa"},
		{"client", "--peer", "radius://127.0.0.1:1812", "--keepalive", "5s"},
		{"client", "--peer", "radius://127.0.0.1:1812", "--acct-peer", "radius://127.0.0.1:1813", "--acct-peer", "radius://127.0.0.1:1814"},
		{"client", "--peer", "radius+tcp://127.0.0.1:1812", "--peer", "radius://127.0.0.1:1812"},
		{"client", "--peer", "radius+tcp://127.0.0.1:1812", "--tw", "5s"},
		{"client", "--peer", "radius+tcp://127.0.0.1:1812", "--peer", "radsec://127.0.0.1"},
		{"client", "--peer", "radius+tcp://127.0.0.1:1812", "--max-conns", "65"},
		{"client", "--peer", "radius+tcp://127.0.0.1:1812", "--acct-peer", "radius+tcp://127.0.0.1:1813"},
		{"client", "--peer", "radius+tcp://127.0.0.1:1812", "--weight", "radius+tcp://127.0.0.1:9=2"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}

// TestClientSharedFlagChecks: a flag both clients take is checked alike,
// with one message, whatever the protocol of the peers.
func TestClientSharedFlagChecks(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"--algorithm", "fastest", `--algorithm "fastest": want pearson, hash, direct or round-robin`},
		{"--queue-alarm", "5,9", `--queue-alarm "5,9": want HIGH,LOW with HIGH > LOW >= 0`},
		{"--queue-alarm", "9,5x", `--queue-alarm "9,5x": want HIGH,LOW`},
		{"--max-failed", "150%", `--max-failed "150%": want a fraction from 0 to 1 or a percentage from 0% to 100%`},
		{"--status", "localhost", `--status "localhost"`},
		{"--rate", "-1", "--rate must be a finite number >= 0"},
		{"--concurrency", "0", "--concurrency 0: want 1 to 100000"},
		{"--concurrency", "100001", "--concurrency 100001: want 1 to 100000"},
		{"--requests", "-1", "--requests must not be negative"},
		{"--duration", "-1s", "--duration must not be negative"},
		{"--slot", "20ms", "--slot 20ms: want a length that divides one second: 50ms, 62.5ms, 100ms, 125ms, 200ms, 250ms, 500ms, 1s"},
		{"--slot", "300ms", "--slot 300ms: want a length that divides one second: 50ms,"},
		{"--max-outstanding", "-1", "--max-outstanding -1: must not be negative"},
		{"--max-rate", "-1", "--max-rate -1: want 0 (no limit) to 100000000"},
		{"--mode", "spread", `--mode "spread": want balance or failover`},
		{"--wait-peers", "2", "--wait-peers 2: want 0 (all) to 1 (the number of --peer)"},
		{"--connect-timeout", "0s", "--connect-timeout must be positive"},
	} {
		for _, args := range [][]string{
			{"client", "--peer", "tcp://127.0.0.1:3868", "--origin-host", "c1.example.net", "--origin-realm", "example.net", "--destination-realm", "example.net"},
			{"client", "--peer", "radius://127.0.0.1:1812"},
			{"client", "--peer", "radius+tcp://127.0.0.1:1812"},
		} {
			var stdout, stderr bytes.Buffer
			args = append(args, tc.flag, tc.value)
			if code := run(context.Background(), args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("%v: exit %d, %q; want 2 and %q", args, code, stderr.String(), tc.want)
			}
		}
	}
}

// Flags of connections and of the watchdog given for radius:// (UDP),
// which has neither, are refused rather than taken and ignored; each bad
// value is named alone.
func TestRadiusUDPClientRefusesStreamFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tw", "1s"}, "--tw is for radius+tcp:// and radsec:// servers"},
		{[]string{"--max-conns", "2"}, "--max-conns is for radius+tcp://"},
		{[]string{"--no-delay"}, "--no-delay is for radius+tcp://"},
		{[]string{"--tls-ca", "/nonexistent"}, "--tls-ca is for radius+tcp://"},
		{[]string{"--retries", "0"}, "--retries 0: must be at least 1"},
		{[]string{"--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"--max-outstanding", "2000"}, "--max-outstanding 2000: a server takes at most 1024 requests in flight here"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"client", "--peer", "radius://127.0.0.1:1812"}, tc.args...)
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", args, code, stderr.String(), tc.want)
		}
	}
	// Over TCP, 255 a connection: more needs more connections.
	var stdout, stderr bytes.Buffer
	args := []string{"client", "--peer", "radius+tcp://127.0.0.1:1812", "--max-outstanding", "300"}
	if code := run(context.Background(), args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "at most 255 requests in flight here") {
		t.Errorf("%v: exit %d, %q", args, code, stderr.String())
	}
}

// aaa-peer client over radius+tcp:// against two aaa-peer servers, for
// each --app: every request answered through the one RADIUS dispatch
// path, Pearson-balanced over both by User-Name with the --weight given,
// each server's watchdog OKAY in the report; the second server's share
// follows its weight.
func TestRadiusClientTCP(t *testing.T) {
	t.Parallel()
	sf := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var urls []string
	var srvs []*testServer
	for range 2 {
		srv := startServer(t, "--listen", "radius+tcp://127.0.0.1:0", "--secret-file", sf)
		srvs = append(srvs, srv)
		for _, u := range readLines(t, srv) {
			if strings.HasPrefix(u, "radius+tcp://") {
				urls = append(urls, u)
			}
		}
	}
	if len(urls) != 2 {
		t.Fatalf("listeners %v", urls)
	}
	for _, app := range []string{"auth", "acct", "status"} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"client", "--peer", urls[0], "--peer", urls[1], "--weight", urls[1] + "=3",
			"--secret-file", sf, "--algorithm", "pearson", "--app", app, "--requests", "200", "--rate", "2000",
			"--concurrency", "16", "--log-level", "error"}, &stdout, &stderr)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", app, code, stderr.String())
		}
		var rep clientReport
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("report: %v\n%s", err, stdout.String())
		}
		if rep.Protocol != "radius/tcp" || rep.Sent != 200 || rep.Answered != 200 || rep.Failed != 0 || len(rep.Servers) != 2 {
			t.Fatalf("%s: report %+v", app, rep)
		}
		if len(rep.Stream) != 2 {
			t.Fatalf("%s: stream stats %+v, want both servers'", app, rep.Stream)
		}
		var per [2]uint64
		for i, s := range rep.Stream {
			if s.Answered == 0 && app != "status" { // Status-Server has no User-Name: one server takes all
				t.Errorf("%s: server %d answered nothing: %+v", app, i, s)
			}
			per[i] = s.Answered
		}
		if app != "status" && (per[1] < 2*per[0] || per[0] == 0) {
			// Status-Server has no User-Name: no Pearson key.
			t.Errorf("%s: answered %d by the first server, %d by the weight-3 one; want about 1:3", app, per[0], per[1])
		}
	}
	applied := 0
	for _, srv := range srvs {
		if code := srv.stop(t); code != 0 {
			t.Fatalf("server exit %d", code)
		}
		r := srv.readReport(t)
		applied += int(r.Applied)
		if r.Duplicates != 0 {
			t.Errorf("duplicates %d", r.Duplicates)
		}
	}
	if applied != 400 { // 200 Access-Requests and 200 records; Status-Server is never applied
		t.Errorf("requests applied %d, want 400", applied)
	}
}

// aaa-peer client over radsec:// with a client certificate, without a
// --secret-file (RFC 6614: the secret is "radsec"), against aaa-peer
// server's radsec:// listener.
func TestRadiusClientRadSec(t *testing.T) {
	t.Parallel()
	pki := testhelp.NewPKI(t)
	srv, u := radsecServer(t, pki)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"client", "--peer", u, "--tls-ca", pki.CAFile, "--tls-cert", pki.ClientCert,
		"--tls-key", pki.ClientKey, "--app", "auth", "--requests", "50", "--rate", "1000", "--log-level", "error"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	var rep clientReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if rep.Protocol != "radius/tls" || rep.Answered != 50 || rep.Failed != 0 {
		t.Fatalf("report %+v", rep)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
}

// aaa-peer client --config with RADIUS/UDP servers, each with its own
// secret: the file alone chooses the RADIUS client, and each server is
// signed for with its own secret (a wrong one would be dropped there).
func TestRadiusClientConfigFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var urls []string
	for i, secret := range []string{"secret-one", "secret-two"} {
		sf := filepath.Join(dir, fmt.Sprint("s", i))
		if err := os.WriteFile(sf, []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		srv := startServer(t, "--listen", "radius://127.0.0.1:0", "--secret-file", sf)
		for _, u := range readLines(t, srv) {
			if strings.HasPrefix(u, "radius://") {
				urls = append(urls, u)
			}
		}
	}
	if len(urls) != 2 {
		t.Fatalf("servers at %v", urls)
	}
	file := filepath.Join(dir, "client.toml")
	body := fmt.Sprintf("[[peer]]\nname = \"one\"\nurl = %q\nsecret = \"secret-one\"\n[[peer]]\nname = \"two\"\nurl = %q\nsecret = \"secret-two\"\n", urls[0], urls[1])
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"client", "--config", file, "--algorithm", "round-robin",
		"--app", "auth", "--timeout", "200ms", "--retries", "2", "--requests", "20", "--rate", "100", "--log-level", "error"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	var rep clientReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if rep.Answered != 20 || len(rep.Servers) != 2 {
		t.Fatalf("report %+v: want 20 answered by two servers", rep)
	}
	for _, s := range rep.Servers {
		if s.Answered == 0 {
			t.Errorf("server %s answered nothing: its secret from the file was not used? %+v", s.Server, s)
		}
	}
}

// The RADIUS client runs the Diameter client's load: with --rate 0 a
// closed loop of --concurrency callers, and its report is the Diameter
// client's document (protocol, loop, servers, policy, each server's
// peer counters under "udp").
func TestRadiusClientClosedLoop(t *testing.T) {
	t.Parallel()
	sf := secretFile(t)
	srv, live := startRADIUSUDPServer(t, sf)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"client", "--peer", live, "--secret-file", sf, "--app", "acct",
		"--rate", "0", "--concurrency", "4", "--requests", "40", "--log-level", "error"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	var rep clientReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if rep.Loop != "closed" || rep.Protocol != "radius/udp" || rep.Sent != 40 || rep.Answered != 40 || rep.DroppedInFlight != 0 {
		t.Errorf("report %+v: want a closed loop over radius/udp, 40 sent and answered", rep)
	}
	if len(rep.Servers) != 1 || rep.Servers[0].Answered != 40 || len(rep.UDP) != 1 || rep.UDP[0].Sent != 40 ||
		len(rep.Policy) != 1 || rep.Policy[0] != "in-service" || len(rep.Peers) != 0 || len(rep.Stream) != 0 {
		t.Errorf("servers %+v, udp %+v, policy %v: want one server's counts under udp", rep.Servers, rep.UDP, rep.Policy)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
}

// With --events - and the report on stdout (the RADIUS client's default),
// stdout holds the event lines, then the report, whole and last (the
// events end before the report is written), each on one line: stdout is
// JSON Lines.
func TestEventsThenReportOnStdout(t *testing.T) {
	t.Parallel()
	srv, url := startRADIUSServer(t)
	var stdout, stderr bytes.Buffer // not safe for concurrent use: -race sees two writers
	code := run(context.Background(), []string{"client", "--peer", url, "--secret-file", secretFile(t), "--app", "acct",
		"--rate", "400", "--requests", "40", "--events", "-", "--log-level", "error"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	out := stdout.String()
	dec := json.NewDecoder(strings.NewReader(out))
	var docs []map[string]any
	for {
		var v map[string]any
		if err := dec.Decode(&v); err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("stdout after %d documents: %v", len(docs), err)
			}
			break
		}
		docs = append(docs, v)
	}
	if len(docs) < 2 {
		t.Fatalf("%d documents on stdout, want events and the report", len(docs))
	}
	for i, d := range docs {
		_, report := d["protocol"]
		if report != (i == len(docs)-1) {
			t.Errorf("document %d of %d: %v; want the events first, the report last", i+1, len(docs), d)
		}
	}
	if rep := docs[len(docs)-1]; rep["answered"] != float64(40) {
		t.Errorf("report %v: want 40 answered", rep)
	}
	if lines := strings.Count(out, "\n"); lines != len(docs) {
		t.Errorf("%d lines for %d documents: want JSON Lines, the report on one line too", lines, len(docs))
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
}

// --requests and --duration mean for the RADIUS client what they mean for
// the Diameter client: given both, the run stops at whichever comes first.
func TestRadiusClientRequestsOrDuration(t *testing.T) {
	t.Parallel()
	sf := secretFile(t)
	srv, live := startRADIUSUDPServer(t, sf)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // without the duration: 500 s
	defer cancel()
	var stdout, stderr bytes.Buffer
	began := time.Now()
	code := run(ctx, []string{"client", "--peer", live, "--secret-file", sf, "--app", "acct",
		"--rate", "200", "--requests", "100000", "--duration", "1s", "--log-level", "error"}, &stdout, &stderr)
	took := time.Since(began)
	var rep clientReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d, report: %v\n%s", code, err, stderr.String())
	}
	if code != 0 || rep.Sent < 150 || rep.Sent > 260 || rep.Answered != rep.Sent || took > 10*time.Second {
		t.Errorf("exit %d after %v: sent %d, answered %d; want about 200 sent in the second of --duration", code, took, rep.Sent, rep.Answered)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
}

// The RADIUS client waits for its servers as the Diameter client waits
// for its peers: with none in service within --connect-timeout it exits 1
// before sending anything; with fewer in service than --wait-peers wants,
// it says so and goes on with those in service.
func TestRadiusClientWaitsForServers(t *testing.T) {
	t.Parallel()
	srv, live := startRADIUSServer(t)
	sf := secretFile(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "radius+tcp://" + l.Addr().String() // nothing listens here once closed
	l.Close()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"client", "--peer", dead, "--secret-file", sf, "--app", "acct",
		"--connect-timeout", "300ms", "--request-timeout", "1s", "--requests", "5"}, &stdout, &stderr)
	// The server not in service is named, with why and when it is tried
	// again.
	if code != 1 || !strings.Contains(stderr.String(), "none of 1 servers in service within 300ms (--connect-timeout): "+dead+" ") ||
		!strings.Contains(stderr.String(), "(open failed: ") || !strings.Contains(stderr.String(), "redialled every Tw") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and none in service within --connect-timeout, naming %s, why and when it is redialled", code, stderr.String(), dead)
	}
	var rep clientReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if rep.Sent != 0 {
		t.Errorf("%d requests sent before a server was in service", rep.Sent)
	}

	stdout.Reset()
	stderr.Reset()
	code = run(context.Background(), []string{"client", "--peer", live, "--peer", dead, "--secret-file", sf, "--app", "acct",
		"--wait-peers", "0", "--connect-timeout", "500ms", "--rate", "0", "--requests", "20"}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stderr.String(), "not every server wanted is in service; going on") ||
		!strings.Contains(stderr.String(), `not_in_service="`+dead+" ") || !strings.Contains(stderr.String(), "redialled every Tw") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 0 and a warning that %s is not in service, why and when it is redialled", code, stderr.String(), dead)
	}
	rep = clientReport{}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if rep.Answered != 20 {
		t.Errorf("%d of 20 answered by the server in service", rep.Answered)
	}

	// --mode failover waits for every server (to start on the primary)
	// unless --wait-peers is given.
	for _, tc := range []struct {
		extra []string
		warns bool
	}{{nil, true}, {[]string{"--wait-peers", "1"}, false}} {
		stdout.Reset()
		stderr.Reset()
		args := append([]string{"client", "--peer", live, "--peer", dead, "--secret-file", sf, "--app", "acct",
			"--mode", "failover", "--connect-timeout", "500ms", "--rate", "0", "--requests", "5"}, tc.extra...)
		code = run(context.Background(), args, &stdout, &stderr)
		if warned := strings.Contains(stderr.String(), "not every server wanted is in service"); code != 0 || warned != tc.warns {
			t.Errorf("--mode failover %v: exit %d, stderr:\n%s\nwant exit 0, a warning that not every server is in service: %v", tc.extra, code, stderr.String(), tc.warns)
		}
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
}

// --mode failover sends every new request to the first server in service,
// in --peer order, whatever --algorithm says; --mode balance spreads them
// with it.
func TestRadiusClientFailoverMode(t *testing.T) {
	t.Parallel()
	sf := secretFile(t)
	srvA, a := startRADIUSUDPServer(t, sf)
	srvB, b := startRADIUSUDPServer(t, sf)
	for _, mode := range []string{"failover", "balance"} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"client", "--peer", a, "--peer", b, "--secret-file", sf, "--app", "acct",
			"--mode", mode, "--algorithm", "pearson", "--rate", "0", "--concurrency", "4", "--requests", "40", "--log-level", "error"}, &stdout, &stderr)
		if code != 0 {
			t.Fatalf("--mode %s: exit %d\n%s", mode, code, stderr.String())
		}
		var rep clientReport
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("report: %v\n%s", err, stdout.String())
		}
		if len(rep.Servers) != 2 || rep.Answered != 40 {
			t.Fatalf("--mode %s: %d answered, servers %+v: want 40 over two servers", mode, rep.Answered, rep.Servers)
		}
		first, second := rep.Servers[0].Answered, rep.Servers[1].Answered
		switch {
		case mode == "failover" && (rep.Mode != "failover" || first != 40):
			t.Errorf("--mode failover: mode %q, %d and %d answered: want all 40 by the first server", rep.Mode, first, second)
		case mode == "balance" && (rep.Mode != "balance" || first == 0 || second == 0):
			t.Errorf("--mode balance --algorithm pearson: mode %q, %d and %d answered: want both servers used", rep.Mode, first, second)
		}
	}
	for _, s := range []*testServer{srvA, srvB} {
		if code := s.stop(t); code != 0 {
			t.Fatalf("server exit %d", code)
		}
	}
}

// The status page names the mode of both clients, and the access
// algorithm only where it chooses (balance mode).
func TestClientStatusNamesMode(t *testing.T) {
	for _, mode := range []client.Mode{client.Balance, client.PrimarySecondary} {
		ro := &radiusClientOptions{loadOptions: loadOptions{clientMode: mode}}
		do := &clientOptions{loadOptions: loadOptions{clientMode: mode}}
		for _, info := range []map[string]string{
			(&radiusRequests{o: ro, protocol: "RADIUS/UDP"}).identity().Info,
			(&diameterRequests{o: do}).identity().Info,
		} {
			alg := info["access"] + info["algorithm"]
			if info["mode"] != mode.String() || (alg != "") != (mode == client.Balance) {
				t.Errorf("mode %v: status page info %v; want the mode, and the algorithm only in balance mode", mode, info)
			}
		}
	}
}
