package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/internal/testhelp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer: see testhelp.SyncBuffer.
type syncBuffer = testhelp.SyncBuffer

// testServer is "aaa-peer server" running in-process.
type testServer struct {
	url     string // the first listener
	ready   string
	report  string
	events  string
	stderr  *syncBuffer
	cancel  context.CancelFunc
	done    chan int
	stopped bool
}

// startServer runs runServer on a free loopback port with a report and an
// events file, plus extra flags, and waits until it listens.
func startServer(t *testing.T, extra ...string) *testServer {
	t.Helper()
	return startServerStore(t, nil, extra...)
}

// startServerStore is startServer with a duplicate store shared with other
// in-process servers (nil: the server opens its --dedup).
func startServerStore(t *testing.T, store dedup.Store, extra ...string) *testServer {
	t.Helper()
	dir := t.TempDir()
	s := &testServer{
		report: filepath.Join(dir, "server-report.json"),
		events: filepath.Join(dir, "server-events.jsonl"),
		stderr: &syncBuffer{}, done: make(chan int, 1), ready: filepath.Join(dir, "ready"),
	}
	args := append([]string{
		"--listen", "tcp://127.0.0.1:0", "--origin-host", "server1.example.net", "--origin-realm", "example.net",
		"--report", s.report, "--events", s.events, "--ready", s.ready,
	}, extra...)
	return s.start(t, store, args)
}

// start runs serve with args (which must name s.ready as --ready) and
// waits until it listens.
func (s *testServer) start(t *testing.T, store dedup.Store, args []string) *testServer {
	t.Helper()
	return s.startHooks(t, serveHooks{store: store}, args)
}

// startHooks is start with serveWith's hooks.
func (s *testServer) startHooks(t *testing.T, hooks serveHooks, args []string) *testServer {
	t.Helper()
	ready := s.ready
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- serveWith(ctx, args, &syncBuffer{}, s.stderr, hooks) }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(ready)
		if err == nil {
			s.url, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
			return s
		}
		select {
		case code := <-s.done:
			s.stopped = true
			t.Fatalf("server exited with %d before listening: %s", code, s.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not listening after 5s: %s", s.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readLines(t *testing.T, s *testServer) []string {
	t.Helper()
	b, err := os.ReadFile(s.ready)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// stop cancels the server (as SIGTERM would) and returns its exit code.
func (s *testServer) stop(t *testing.T) int {
	t.Helper()
	if s.stopped {
		return 0
	}
	s.stopped = true
	s.cancel()
	select {
	case code := <-s.done:
		return code
	case <-time.After(15 * time.Second):
		t.Fatalf("server did not stop within 15s: %s", s.stderr)
		return -1
	}
}

func (s *testServer) readReport(t *testing.T) serverReport {
	t.Helper()
	var r serverReport
	readJSON(t, s.report, &r)
	return r
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
}

// clientRun is the outcome of one runClient.
type clientRun struct {
	code   int
	stdout string
	stderr string
	report clientReport
	events string
}

// runTestClient runs runClient against url with a report and an events
// file, plus extra flags.
func runTestClient(t *testing.T, ctx context.Context, url string, extra ...string) clientRun {
	t.Helper()
	dir := t.TempDir()
	report := filepath.Join(dir, "client-report.json")
	events := filepath.Join(dir, "client-events.jsonl")
	args := append([]string{
		"--peer", url, "--origin-host", "client1.example.net", "--origin-realm", "example.net",
		"--destination-realm", "example.net", "--report", report, "--events", events,
		"--connect-timeout", "5s",
	}, extra...)
	var stdout, stderr syncBuffer
	code := runClient(ctx, args, &stdout, &stderr)
	r := clientRun{code: code, stdout: stdout.String(), stderr: stderr.String(), events: events}
	if _, err := os.Stat(report); err == nil {
		readJSON(t, report, &r.report)
	}
	return r
}

// scriptLine is one --events line as a script sees it.
type scriptLine struct {
	Time   string  `json:"time"`
	Peer   *string `json:"peer"`
	Type   string  `json:"type"`
	Kind   string  `json:"kind"`
	From   string  `json:"from"`
	To     string  `json:"to"`
	Reason *string `json:"reason"`
}

// readEvents parses an events file strictly: every line one JSON object
// with time (RFC 3339), peer, type and reason.
func readEvents(t *testing.T, path string) []scriptLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []scriptLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e scriptLine
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("%s: bad line %q: %v", path, sc.Text(), err)
		}
		if _, err := time.Parse(time.RFC3339Nano, e.Time); err != nil {
			t.Errorf("%s: time %q is not RFC 3339: %v", path, e.Time, err)
		}
		if e.Peer == nil || *e.Peer == "" || e.Reason == nil || e.Kind == "" || e.Kind == "unknown" {
			t.Errorf("%s: line without peer, kind or reason: %q", path, sc.Text())
		}
		switch e.Type {
		case "watchdog":
			if e.From == "" || e.To == "" {
				t.Errorf("%s: watchdog event without from/to: %q", path, sc.Text())
			}
		case "connection", "failover", "error", "balancer", "policy", "queue":
		default:
			t.Errorf("%s: unknown type in %q", path, sc.Text())
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func hasTransition(evs []scriptLine, from, to string) bool {
	for _, e := range evs {
		if e.Type == "watchdog" && e.From == from && e.To == to {
			return true
		}
	}
	return false
}

func TestDispatch(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: aaa-peer <command>"},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"demo", "--tw", "5s"}, 2, "--tw 5s is below the RFC 3539 minimum"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("run(%q) = %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
		if tc.args == nil {
			for _, cmd := range []string{"server", "client", "route", "demo", "version"} {
				if !strings.Contains(stderr.String(), "\n  "+cmd+" ") {
					t.Errorf("usage does not list %s:\n%s", cmd, stderr.String())
				}
			}
		}
	}
}

// The default --timeout covers failover detection at the chosen --tw
// (F11): 2 x (tw + 2s) + 10s.
func TestClientDefaultTimeoutCoversFailover(t *testing.T) {
	for tw, want := range map[string]time.Duration{"30s": 74 * time.Second, "6s": 26 * time.Second} {
		var o clientOptions
		fs := clientFlags(&o, io.Discard)
		if err := fs.Parse([]string{"--peer", "tcp://127.0.0.1:3868", "--origin-host", "c.example.net", "--origin-realm", "example.net",
			"--destination-realm", "example.net", "--tw", tw}); err != nil {
			t.Fatal(err)
		}
		if err := o.validate(); err != nil {
			t.Fatal(err)
		}
		if o.timeout != want {
			t.Errorf("--tw %s: default --timeout %v, want %v", tw, o.timeout, want)
		}
	}
}

func TestFlagValidation(t *testing.T) {
	srv := []string{"--listen", "tcp://127.0.0.1:0", "--origin-host", "s.example.net", "--origin-realm", "example.net"}
	cli := []string{"--peer", "tcp://127.0.0.1:3868", "--origin-host", "c.example.net", "--origin-realm", "example.net", "--destination-realm", "example.net"}
	without := func(args []string, flag string) []string {
		var out []string
		for i := 0; i < len(args); i++ {
			if args[i] == flag {
				i++
				continue
			}
			out = append(out, args[i])
		}
		return out
	}
	with := func(args []string, more ...string) []string { return append(append([]string{}, args...), more...) }
	for _, tc := range []struct {
		name string
		run  func(context.Context, []string, io.Writer, io.Writer) int
		args []string
		want string
	}{
		{"server no origin-host", runServer, without(srv, "--origin-host"), "--origin-host is required"},
		{"server no origin-realm", runServer, without(srv, "--origin-realm"), "--origin-realm is required"},
		{"server no listen", runServer, without(srv, "--listen"), "--listen is required"},
		{"server tw 5s", runServer, with(srv, "--tw", "5s"), "--tw 5s is below the RFC 3539 minimum of 6s"},
		{"server bad url", runServer, with(srv, "--listen", "http://x:1"), "--listen http://x:1"},
		{"server tls without cert", runServer, with(srv, "--listen", "tls://127.0.0.1:0"), "--tls-cert and --tls-key"},
		{"server bad glob", runServer, with(srv, "--allow", "[x"), `--allow "[x"`},
		{"server unknown flag", runServer, with(srv, "--bogus"), "flag provided but not defined: -bogus"},
		{"server extra arg", runServer, with(srv, "extra"), `unexpected argument "extra"`},
		{"client no origin-host", runClient, without(cli, "--origin-host"), "--origin-host is required"},
		{"client no destination-realm", runClient, without(cli, "--destination-realm"), "--destination-realm is required"},
		{"client no peer", runClient, without(cli, "--peer"), "--peer is required"},
		{"client tw 5s", runClient, with(cli, "--tw", "5s"), "--tw 5s is below the RFC 3539 minimum of 6s"},
		{"client bad app", runClient, with(cli, "--app", "auth"), `--app "auth"`},
		{"client bad nai", runClient, with(cli, "--nai", "%d%d"), `--nai "%d%d"`},
		{"client concurrency 0", runClient, with(cli, "--concurrency", "0"), "--concurrency 0: want 1 to 100000"},
		{"client bad mode", runClient, with(cli, "--mode", "random"), `--mode "random"`},
		{"client bad algorithm", runClient, with(cli, "--algorithm", "fastest"), `--algorithm "fastest"`},
		{"client weight not a peer", runClient, with(cli, "--weight", "tcp://127.0.0.1:9=2"), "is neither a --peer nor the name of a --config peer"},
		{"client weight zero", runClient, with(cli, "--weight", "tcp://127.0.0.1:3868=0"), "want an integer from 1 to"},
		{"client weight above the balancer's bound", runClient, with(cli, "--weight", "tcp://127.0.0.1:3868=1048577"), "want an integer from 1 to 1048576"},
		{"client weight no number", runClient, with(cli, "--weight", "tcp://127.0.0.1:3868"), "want NAME=N"},
		{"client wait-peers too many", runClient, with(cli, "--wait-peers", "2"), "--wait-peers 2"},
		{"client peer twice", runClient, with(cli, "--peer", "tcp://127.0.0.1:3868"), "given twice"},
		{"client max-failed over 100%", runClient, with(cli, "--max-failed", "150%"), `--max-failed "150%"`},
		{"client max-failed not a share", runClient, with(cli, "--max-failed", "-0.1"), `--max-failed "-0.1"`},
		{"server bad dedup", runServer, with(srv, "--dedup", "mysql://x"), `--dedup "mysql://x"`},
		{"server bad dedup budget", runServer, with(srv, "--dedup-max-bytes", "0"), "--dedup-max-bytes must be positive"},
		{"server bad dedup answer limit", runServer, with(srv, "--dedup-max-answer", "-1"), "--dedup-max-answer must be positive"},
		{"server max-connections zero", runServer, with(srv, "--max-connections", "0"), "--max-connections 0: must be positive, or -1"},
		{"server max-connections below -1", runServer, with(srv, "--max-connections", "-2"), "--max-connections -2: must be positive, or -1"},
		{"server max-connections-per-addr zero", runServer, with(srv, "--max-connections-per-addr", "0"), "--max-connections-per-addr 0: must be positive, or -1"},
		{"server max-opening below -1", runServer, with(srv, "--max-opening", "-5"), "--max-opening and --max-opening-per-addr must be positive, or -1"},
		{"client slot too short", runClient, with(cli, "--max-rate", "10", "--slot", "10ms"), "--slot 10ms"},
		{"client bad queue alarm", runClient, with(cli, "--queue-alarm", "5,9"), `--queue-alarm "5,9"`},
		{"client keepalive without test user", runClient, with(cli, "--keepalive", "10s"), "--keepalive needs --test-user"},
		{"server bad status", runServer, with(srv, "--status", "8080"), `--status "8080"`},
		{"client bad status", runClient, with(cli, "--status", "localhost"), `--status "localhost"`},
		{"server bad log format", runServer, with(srv, "--log-format", "xml"), `--log-format "xml"`},
		{"client bad log format", runClient, with(cli, "--log-format", "logfmt"), `--log-format "logfmt"`},
		{"demo bad log format", runDemo, []string{"--log-format", "xml"}, `--log-format "xml"`},
		{"demo bad status", runDemo, []string{"--status", "x"}, `--status "x"`},
		{"server status port out of range", runServer, with(srv, "--status", "127.0.0.1:99999"), `--status "127.0.0.1:99999": port 99999: want 0 to 65535`},
		{"client status port out of range", runClient, with(cli, "--status", "127.0.0.1:99999"), `--status "127.0.0.1:99999": port 99999: want 0 to 65535`},
		{"client peer port 0", runClient, with(without(cli, "--peer"), "--peer", "tcp://127.0.0.1:0"), "--peer tcp://127.0.0.1:0: port 0: a client needs the server's port (e.g. tcp://127.0.0.1:3868)"},
		{"client peer without host", runClient, with(without(cli, "--peer"), "--peer", "tcp://:13868"), "--peer tcp://:13868: the server's host is missing (e.g. tcp://127.0.0.1:13868)"},
		{"client radius peer port 0", runClient, []string{"--peer", "radius://127.0.0.1:0"}, "--peer radius://127.0.0.1:0: port 0: a client needs the server's port (e.g. radius://127.0.0.1:1812)"},
		{"client radius+tcp peer port 0", runClient, []string{"--peer", "radius+tcp://127.0.0.1:0"}, "--peer radius+tcp://127.0.0.1:0: port 0"},
		{"client radius acct-peer port 0", runClient, []string{"--peer", "radius://127.0.0.1:1812", "--acct-peer", "radius://127.0.0.1:0"}, "--acct-peer radius://127.0.0.1:0: port 0"},
		{"client Diameter and RADIUS peers", runClient, with(cli, "--peer", "radius://127.0.0.1:11812"), "--peer tcp://127.0.0.1:3868 and --peer radius://127.0.0.1:11812: one run speaks one protocol"},
		{"client RADIUS and Diameter peers", runClient, []string{"--peer", "radius://127.0.0.1:11812", "--peer", "tcp://127.0.0.1:3868"}, "--peer radius://127.0.0.1:11812 and --peer tcp://127.0.0.1:3868: one run speaks one protocol"},
		{"client radius peer without port", runClient, []string{"--peer", "radius://127.0.0.1"}, "--peer radius://127.0.0.1: the server's port is missing (e.g. radius://127.0.0.1:1812)"},
		{"client radius then radius+tcp", runClient, []string{"--peer", "radius://127.0.0.1:1812", "--peer", "radius+tcp://127.0.0.1:1812"}, "--peer radius+tcp://127.0.0.1:1812: every --peer and --acct-peer must have the scheme of the first --peer, radius://"},
		{"client radius+tcp then radius", runClient, []string{"--peer", "radius+tcp://127.0.0.1:1812", "--peer", "radius://127.0.0.1:1812"}, "--peer radius://127.0.0.1:1812: every --peer and --acct-peer must have the scheme of the first --peer, radius+tcp://"},
		{"server radius listener without port", runServer, with(without(srv, "--listen"), "--listen", "radius://127.0.0.1"), "--listen radius://127.0.0.1: the port is missing (e.g. radius://127.0.0.1:1812; port 0 picks a free one)"},
		{"client radius request-timeout negative", runClient, []string{"--peer", "radius://127.0.0.1:1812", "--request-timeout", "-1s"}, "--request-timeout must not be negative"},
		{"client radius+tcp request-timeout negative", runClient, []string{"--peer", "radius+tcp://127.0.0.1:1812", "--request-timeout", "-1s"}, "--request-timeout must not be negative"},
		{"server radius listener secret unreadable", runServer, with(without(srv, "--listen"), "--listen", "radius://127.0.0.1:0", "--secret-file", "no-such-secret-file"), "reading the shared secret: open no-such-secret-file"},
		// Messages that say what to do instead.
		{"server scheme-less listen", runServer, with(srv, "--listen", "127.0.0.1:3868"), "--listen 127.0.0.1:3868: want a URL such as tcp://127.0.0.1:3868 (schemes: tcp, tls, sctp for Diameter; radius, radius+tcp, radsec for RADIUS)"},
		{"server http listen", runServer, with(srv, "--listen", "http://127.0.0.1:80"), "unknown scheme http (schemes: tcp, tls, sctp for Diameter; radius, radius+tcp, radsec for RADIUS)"},
		{"server radius+udp listen", runServer, with(srv, "--listen", "radius+udp://127.0.0.1:1812"), "unknown scheme radius+udp: RADIUS over UDP is radius://"},
		{"server tw without unit", runServer, with(srv, "--tw", "30"), `invalid value "30" for flag -tw: want a duration with its unit, such as 30s`},
		{"server bad duration", runServer, with(srv, "--cer-timeout", "ten"), "want a duration with its unit, such as 30s, 500ms or 2m"},
		{"server origin-host with a space", runServer, with(srv, "--origin-host", "bad host"), `--origin-host "bad host": want a DiameterIdentity`},
		{"client scheme-less peer", runClient, with(cli, "--peer", "localhost:3868"), "--peer localhost:3868: want a URL such as tcp://localhost:3868"},
		{"client http peer", runClient, with(cli, "--peer", "http://x:1"), "unknown scheme http (schemes: tcp, tls, sctp for Diameter; radius, radius+tcp, radsec for RADIUS)"},
		{"client radius+udp peer with RADIUS flags", runClient, with(cli, "--peer", "radius+udp://127.0.0.1:1812", "--secret-file", "x"), "unknown scheme radius+udp: RADIUS over UDP is radius://"},
		{"client tw without unit", runClient, with(cli, "--tw", "30"), "want a duration with its unit, such as 30s"},
		{"client origin-host not an identity", runClient, with(without(cli, "--origin-host"), "--origin-host", "c1.example.net/x"), `--origin-host "c1.example.net/x": want a DiameterIdentity`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			// A case the command wrongly accepts runs until this ends,
			// and fails rather than hangs.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if code := tc.run(ctx, tc.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit code %d, want 2; stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr does not say %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}

// TestServerRedisLogsStayJSON: go-redis prints its dial failures through
// its own process-wide logger; with --log-format json they must come out as
// JSON lines of the server's logger, not as plain text mixed into them.
func TestServerRedisLogsStayJSON(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String() // nothing listens here once closed
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr syncBuffer
	code := runServer(ctx, []string{"--listen", "tcp://127.0.0.1:0", "--origin-host", "s.test", "--origin-realm", "test",
		"--dedup", "redis://" + dead + "/0", "--log-format", "json"}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit %d with Redis unreachable, want 1; stderr:\n%s", code, stderr.String())
	}
	fromRedis := 0
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("stderr line is not JSON: %q", line)
		}
		if rec["component"] == "go-redis" {
			fromRedis++
		}
	}
	if fromRedis == 0 {
		t.Fatalf("no go-redis line in stderr (want its dial failures logged):\n%s", stderr.String())
	}
}

// An unwritable --report is refused at the start, as --events is (exit
// 1), naming the user's path, not the temporary file it is written
// through; before, it was found after the whole run. The server has
// not listened (no ready line on stdout).
func TestReportPathCheckedAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sf := filepath.Join(dir, "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing", "r.json"), dir} {
		for _, args := range [][]string{
			{"server", "--listen", "tcp://127.0.0.1:0", "--origin-host", "s.example.net", "--origin-realm", "example.net"},
			{"client", "--peer", "tcp://127.0.0.1:3868", "--origin-host", "c.example.net", "--origin-realm", "example.net", "--destination-realm", "example.net"},
			{"client", "--peer", "radius+tcp://127.0.0.1:1812", "--secret-file", sf},
		} {
			args = append(args, "--report", path)
			// A command that does not check runs until this ends.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			var stdout, stderr bytes.Buffer
			code := run(ctx, args, &stdout, &stderr)
			cancel()
			if want := "aaa-peer " + args[0] + ": --report: open " + path + ": "; code != 1 || !strings.Contains(stderr.String(), want) {
				t.Errorf("%v: exit %d, stderr %q; want 1 and %q", args, code, stderr.String(), want)
			}
			if stdout.Len() > 0 {
				t.Errorf("%v: stdout %q, want nothing", args, stdout.String())
			}
		}
	}
}

// A report that cannot be written at the end (its directory removed
// during the run) names the user's path, not the temporary file's.
func TestWriteJSONFileNamesPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone", "r.json")
	err := writeJSONFile(path, struct{}{}, io.Discard)
	if want := "open " + path + ": "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want %q...", err, want)
	}
}

// Each client's synopsis names every flag it takes (the Diameter
// client's --request-timeout is --timeout's other name); it left out
// --wait-peers and --connect-timeout once they were added.
func TestClientSynopsisNamesEveryFlag(t *testing.T) {
	for _, c := range []struct {
		synopsis string
		fs       *flag.FlagSet
		alias    string
	}{
		{clientSynopsis, clientFlags(&clientOptions{}, io.Discard), "request-timeout"},
		{radiusClientSynopsis, radiusClientFlags(&radiusClientOptions{}, io.Discard), ""},
	} {
		c.fs.VisitAll(func(f *flag.Flag) {
			if f.Name == c.alias {
				return
			}
			if !regexp.MustCompile(`--` + regexp.QuoteMeta(f.Name) + `[] \n]`).MatchString(c.synopsis) {
				t.Errorf("the synopsis of %s does not name --%s:\n%s", c.fs.Name(), f.Name, c.synopsis)
			}
		})
	}
}

// Without a secret file or $AAATP_RADIUS_SECRET, the RADIUS client and
// server say which flag to give (radpeer's words were "give a secret
// file").
func TestNoSecretNamesFlag(t *testing.T) {
	t.Setenv(secretEnv, "")
	for _, args := range [][]string{
		{"client", "--peer", "radius://127.0.0.1:1812"},
		{"server", "--listen", "radius://127.0.0.1:0", "--origin-host", "s.example.net", "--origin-realm", "example.net"},
	} {
		var stdout, stderr bytes.Buffer
		want := "aaa-peer " + args[0] + ": no RADIUS shared secret: give --secret-file FILE or set $AAATP_RADIUS_SECRET\n"
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 || stderr.String() != want {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", args, code, stderr.String(), want)
		}
	}
}
