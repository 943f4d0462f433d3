package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	srv := startServer(t, "--listen", "radius://127.0.0.1:0", "--secret-file", sf)
	var live string
	for _, u := range readLines(t, srv) {
		if strings.HasPrefix(u, "radius://") {
			live = u
		}
	}
	dead, err := net.ListenPacket("udp", "127.0.0.1:0") // reads nothing, answers nothing
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	deadURL := "radius://" + dead.LocalAddr().String()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"client", "--peer", deadURL, "--peer", live, "--secret-file", sf,
		"--app", "acct", "--timeout", "200ms", "--retries", "2", "--requests", "30", "--rate", "50", "--log-level", "error"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	var rep radiusClientReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if rep.Sent != 30 || rep.Answered != 30 || rep.Failed != 0 || rep.Failovers == 0 {
		t.Fatalf("report %+v: want 30 answered, some failovers", rep)
	}
	if s := rep.Servers[0]; s.State.String() != "out-of-service" || s.Auth.Retransmissions != s.Auth.Sent {
		t.Errorf("dead server: %v, sent %d, retransmitted %d; want out-of-service, each request sent twice", s.State, s.Auth.Sent, s.Auth.Retransmissions)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
	if r := srv.readReport(t); r.Applied != 30 || r.Duplicates != 0 {
		t.Errorf("server applied %d (duplicates %d), want 30 once each", r.Applied, r.Duplicates)
	}
}

func TestRadiusClientUsage(t *testing.T) {
	for _, args := range [][]string{
		{"client", "--peer", "radius://127.0.0.1:1812", "--peer", "tcp://127.0.0.1:3868"},
		{"client", "--peer", "radius://127.0.0.1:1812", "--app", "coa"},
		{"client", "--peer", "radius://127.0.0.1:1812", "--keepalive", "5s"},
		{"client", "--peer", "radius://127.0.0.1:1812", "--acct-peer", "radius://127.0.0.1:1813", "--acct-peer", "radius://127.0.0.1:1814"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}
