package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

const testRadiusSecret = "r4dius-test"

// startRADIUSServer starts aaa-peer server with a radius+tcp:// listener (and
// extra flags) and returns it with the RADIUS URL.
func startRADIUSServer(t *testing.T, extra ...string) (*testServer, string) {
	t.Helper()
	sf := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, append([]string{"--listen", "radius+tcp://127.0.0.1:0", "--secret-file", sf}, extra...)...)
	for _, u := range readLines(t, srv) {
		if strings.HasPrefix(u, "radius+tcp://") {
			return srv, u
		}
	}
	t.Fatalf("no radius+tcp:// URL in the ready file: %q", readLines(t, srv))
	return nil, ""
}

// startRADIUSUDPServer starts aaa-peer server with a radius:// listener
// and the shared secret of file sf, and returns it with the RADIUS URL.
func startRADIUSUDPServer(t *testing.T, sf string) (*testServer, string) {
	t.Helper()
	srv := startServer(t, "--listen", "radius://127.0.0.1:0", "--secret-file", sf)
	for _, u := range readLines(t, srv) {
		if strings.HasPrefix(u, "radius://") {
			return srv, u
		}
	}
	t.Fatalf("no radius:// URL in the ready file: %q", readLines(t, srv))
	return nil, ""
}

func acctRecord(status uint32, delay uint32) *radius.Request {
	ts, _ := lradius.NewDate(time.Unix(1_800_000_000, 0))
	return &radius.Request{Code: lradius.CodeAccountingRequest, Attributes: lradius.Attributes{
		{Type: radius.AttrNASIdentifier, Attribute: []byte("nas1")},
		{Type: radius.AttrAcctSessionID, Attribute: []byte("sess-1")},
		{Type: radius.AttrAcctStatusType, Attribute: lradius.NewInteger(status)},
		{Type: radius.AttrEventTimestamp, Attribute: ts},
		{Type: radius.AttrAcctDelayTime, Attribute: lradius.NewInteger(delay)},
	}}
}

// aaa-peer server answers RADIUS/TCP: Access-Request accepted, accounting
// answered and applied once per record (a re-sent record with another
// Acct-Delay-Time is a duplicate, a Stop is not), the watchdog's
// Status-Servers answered.
func TestRADIUSServer(t *testing.T) {
	t.Parallel()
	srv, u := startRADIUSServer(t)
	p, err := radpeer.Dial(u, radpeer.Config{Secret: []byte(testRadiusSecret), Watchdog: watchdog.Config{Twinit: 6 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	r, err := p.Exchange(ctx, &radius.Request{Code: lradius.CodeAccessRequest, Attributes: lradius.Attributes{
		{Type: radius.AttrUserName, Attribute: []byte("alice")}, {Type: radius.AttrUserPassword, Attribute: []byte("pw")},
	}})
	if err != nil || r.Packet.Code != lradius.CodeAccessAccept {
		t.Fatalf("Access-Request: %v", err)
	}
	for _, rec := range []*radius.Request{acctRecord(1, 0), acctRecord(1, 4), acctRecord(2, 0)} {
		if r, err := p.Exchange(ctx, rec); err != nil || r.Packet.Code != lradius.CodeAccountingResponse {
			t.Fatalf("Accounting-Request: %v", err)
		}
	}
	time.Sleep(9 * time.Second) // one Status-Server at Tw in [4 s, 8 s]
	st := p.Stats()
	if st.StatusSent < 1 || st.StatusAnswered != st.StatusSent || !st.InService {
		t.Fatalf("watchdog: %+v", st)
	}
	mustCloseCtx(t, p)
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d: %s", code, srv.stderr)
	}
	rep := srv.readReport(t)
	if rep.Received != 4 || rep.Applied != 3 || rep.Duplicates != 1 {
		t.Fatalf("server report: received %d applied %d duplicates %d, want 4 3 1", rep.Received, rep.Applied, rep.Duplicates)
	}
}

func mustCloseCtx(t *testing.T, p *radpeer.Peer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Error(err)
	}
}

// needBinary skips without the binary, or fails under CI=true.
func needBinary(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed (CI=true: interop tests must run)", name)
		}
		t.Skipf("%s not installed", name)
	}
	return path
}

// radclientRun sends the packets in input with radclient over TCP.
func radclientRun(t *testing.T, addr, command, input string, extra ...string) string {
	t.Helper()
	bin := needBinary(t, "radclient")
	sf := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := append([]string{"-P", "tcp", "-t", "3", "-r", "1", "-x", "-S", sf}, extra...)
	args = append(args, addr, command)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(input)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("radclient %s: %v\n%s", command, err, out.String())
	}
	return out.String()
}

// radclient (FreeRADIUS's client) over TCP against aaa-peer server: auth,
// accounting and Status-Server (with the Message-Authenticator radclient
// adds only when asked), each answered and verified by radclient.
func TestRadclientAgainstServer(t *testing.T) {
	t.Parallel()
	needBinary(t, "radclient")
	srv, u := startRADIUSServer(t)
	addr := strings.TrimPrefix(u, "radius+tcp://")
	out := radclientRun(t, addr, "auth", "User-Name = alice\nUser-Password = secret-pw\nMessage-Authenticator = 0x00\n")
	if !strings.Contains(out, "Received Access-Accept") {
		t.Fatalf("auth:\n%s", out)
	}
	acct := "Acct-Session-Id = s-1\nAcct-Status-Type = Start\nNAS-Identifier = nas1\nEvent-Timestamp = 1800000000\n"
	out = radclientRun(t, addr, "acct", acct+"\n"+acct+"Acct-Delay-Time = 3\n")
	if strings.Count(out, "Received Accounting-Response") != 2 {
		t.Fatalf("acct:\n%s", out)
	}
	out = radclientRun(t, addr, "status", "Message-Authenticator = 0x00\n")
	if !strings.Contains(out, "Received Access-Accept") {
		t.Fatalf("status:\n%s", out)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
	rep := srv.readReport(t)
	// Status-Server is not a login: the handler saw auth + 2 accounting.
	if rep.Received != 3 || rep.Applied != 2 || rep.Duplicates != 1 {
		t.Fatalf("server report: received %d applied %d duplicates %d, want 3 2 1", rep.Received, rep.Applied, rep.Duplicates)
	}
}

// radclient over UDP against aaa-peer server's radius:// listener: auth
// and a record sent twice (a new Identifier and Acct-Delay-Time the
// second time), applied once.
func TestRadclientUDP(t *testing.T) {
	t.Parallel()
	bin := needBinary(t, "radclient")
	sf := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, "--listen", "radius://127.0.0.1:0", "--secret-file", sf)
	var addr string
	for _, u := range readLines(t, srv) {
		if strings.HasPrefix(u, "radius://") {
			addr = strings.TrimPrefix(u, "radius://")
		}
	}
	run := func(command, input string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "-P", "udp", "-t", "2", "-r", "2", "-x", "-S", sf, addr, command)
		cmd.Stdin = strings.NewReader(input)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("radclient %s: %v\n%s", command, err, out.String())
		}
		return out.String()
	}
	if out := run("auth", "User-Name = alice\nUser-Password = pw\nMessage-Authenticator = 0x00\n"); !strings.Contains(out, "Received Access-Accept") {
		t.Fatalf("auth:\n%s", out)
	}
	acct := "Acct-Session-Id = u-1\nAcct-Status-Type = Start\nNAS-Identifier = nas1\nEvent-Timestamp = 1800000000\n"
	if out := run("acct", acct+"\n"+acct+"Acct-Delay-Time = 3\n"); strings.Count(out, "Received Accounting-Response") != 2 {
		t.Fatalf("acct:\n%s", out)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
	if rep := srv.readReport(t); rep.Received != 3 || rep.Applied != 2 || rep.Duplicates != 1 {
		t.Fatalf("server report: received %d applied %d duplicates %d, want 3 2 1", rep.Received, rep.Applied, rep.Duplicates)
	}
}

// A server with RADIUS listeners alone needs no Diameter identity, and
// --answer-delay slows its answers as it slows Diameter's (the Status-
// Servers of the watchdog are answered at once); --drop-dwa and
// --stall-after, which act on Diameter listeners, are refused there
// rather than shown as active on the status page while doing nothing.
func TestRADIUSOnlyServerFaults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sf := filepath.Join(dir, "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := runServer(context.Background(), []string{"--listen", "radius://127.0.0.1:0", "--secret-file", sf, "--drop-dwa"}, &bytes.Buffer{}, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "--drop-dwa and --stall-after act on Diameter listeners") {
		t.Fatalf("--drop-dwa with RADIUS listeners alone: exit %d, %q", code, stderr.String())
	}

	const delay = 400 * time.Millisecond
	srv := (&testServer{stderr: &syncBuffer{}, done: make(chan int, 1), ready: filepath.Join(dir, "ready")}).start(t, nil,
		[]string{"--listen", "radius+tcp://127.0.0.1:0", "--secret-file", sf, "--answer-delay", delay.String(), "--ready", filepath.Join(dir, "ready")})
	u := readLines(t, srv)[0]
	p, err := radpeer.Dial(u, radpeer.Config{Secret: []byte(testRadiusSecret), Watchdog: watchdog.Config{Twinit: 6 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := p.Exchange(ctx, &radius.Request{Code: lradius.CodeAccessRequest, Attributes: lradius.Attributes{
		{Type: radius.AttrUserName, Attribute: []byte("alice")}, {Type: radius.AttrUserPassword, Attribute: []byte("pw")}}})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); r.Packet.Code != lradius.CodeAccessAccept || took < delay {
		t.Fatalf("%v after %v: want Access-Accept after --answer-delay %v", r.Packet.Code, took, delay)
	}
}
