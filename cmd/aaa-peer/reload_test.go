package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reloadServer is an in-process "aaa-peer server --config" whose SIGHUP
// is a channel of the test's.
type reloadServer struct {
	*testServer
	dir, config string
	hup         chan os.Signal
	web         string
}

// startReloadServer writes config (relative file names are in the test's
// directory) and runs the server on it with extra flags.
func startReloadServer(t *testing.T, config string, extra ...string) *reloadServer {
	t.Helper()
	dir := t.TempDir()
	rs := &reloadServer{dir: dir, config: filepath.Join(dir, "server.toml"), hup: make(chan os.Signal, 1)}
	writeTestFile(t, rs.config, config)
	rs.testServer = &testServer{
		report: filepath.Join(dir, "report.json"), stderr: &syncBuffer{}, done: make(chan int, 1), ready: filepath.Join(dir, "ready"),
	}
	args := append([]string{"--config", rs.config, "--report", rs.report, "--ready", rs.ready, "--status", "127.0.0.1:0"}, extra...)
	rs.startHooks(t, serveHooks{reload: rs.hup}, args)
	rs.web = waitURL(t, rs.stderr, regexp.MustCompile(`msg="status page" url=(http://\S+/)`))
	return rs
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// reload rewrites the configuration file, sends SIGHUP and waits for the
// server's log line saying what it did, which it returns.
func (rs *reloadServer) reload(t *testing.T, config string) string {
	t.Helper()
	writeTestFile(t, rs.config, config)
	re := regexp.MustCompile(`(?m)^.*msg="configuration reload(ed| refused)[^\n]*$`)
	before := len(re.FindAllString(rs.stderr.String(), -1)) // not the warning lines of what needs a restart
	rs.hup <- syscall.SIGHUP
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		lines := re.FindAllString(rs.stderr.String(), -1)
		if len(lines) > before {
			return lines[len(lines)-1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no reload log line within 10s:\n%s", rs.stderr)
	return ""
}

// listeners returns the --ready file's URLs.
func (rs *reloadServer) listeners(t *testing.T) []string { return readLines(t, rs.testServer) }

func (rs *reloadServer) listener(t *testing.T, prefix string) string {
	t.Helper()
	for _, u := range rs.listeners(t) {
		if strings.HasPrefix(u, prefix) {
			return u
		}
	}
	t.Fatalf("no %s listener in %v", prefix, rs.listeners(t))
	return ""
}

func (rs *reloadServer) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := metricValue(httpGet(t, rs.web+"metrics"), name, labels)
	if !ok {
		t.Fatalf("no %s%v in %smetrics", name, labels, rs.web)
	}
	return v
}

// radiusRun runs the RADIUS client with args; it never calls t.Fatal, so
// that it may run on a goroutine of the test.
func radiusRun(ctx context.Context, args ...string) (code int, rep clientReport, stderr string) {
	var out, errb bytes.Buffer
	code = run(ctx, append([]string{"client", "--log-level", "error"}, args...), &out, &errb)
	_ = json.Unmarshal(out.Bytes(), &rep)
	return code, rep, errb.String()
}

const reloadBase = `origin-host = "server1.example.net"
origin-realm = "example.net"
`

// TestReloadUnderTraffic: a RADIUS client sends accounting records
// without pause over radius+tcp:// while SIGHUP applies a file that
// changes the RADIUS shared secret and adds a Diameter listener. Nothing
// is lost (every record answered: the connection accepted before keeps
// the secret it was verified with) and nothing applied twice; after it,
// new connections and datagrams need the new secret, and the new
// listener serves. Then a file that does not validate, and one that
// changes the node's identity, are refused with their reasons and the
// configuration running is kept; the reloads are counted in /metrics.
func TestReloadUnderTraffic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	oldSecret, newSecret := filepath.Join(dir, "old.secret"), filepath.Join(dir, "new.secret")
	writeTestFile(t, oldSecret, "0ld-secret\n")
	writeTestFile(t, newSecret, "n3w-secret\n")
	first := reloadBase + `listen = ["radius+tcp://127.0.0.1:0", "radius://127.0.0.1:0"]
secret-file = "` + oldSecret + `"
`
	rs := startReloadServer(t, first)
	tcpURL, udpURL := rs.listener(t, "radius+tcp://"), rs.listener(t, "radius://")
	started := rs.metric(t, metricLastReload, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		code   int
		rep    clientReport
		stderr string
	}
	traffic := make(chan result, 1)
	go func() {
		code, rep, stderr := radiusRun(ctx, "--peer", tcpURL, "--secret-file", oldSecret, "--app", "acct",
			"--rate", "200", "--duration", "3s", "--concurrency", "64")
		traffic <- result{code, rep, stderr}
	}()
	time.Sleep(time.Second) // the client is connected and sending

	second := reloadBase + `listen = ["radius+tcp://127.0.0.1:0", "radius://127.0.0.1:0", "tcp://127.0.0.1:0"]
secret-file = "` + newSecret + `"
`
	line := rs.reload(t, second)
	for _, want := range []string{`msg="configuration reloaded"`, "listener added tcp://127.0.0.1:0", "RADIUS shared secret changed on 2 listener(s)"} {
		if !strings.Contains(line, want) {
			t.Errorf("reload log line %q: no %q", line, want)
		}
	}
	tr := <-traffic
	if tr.code != 0 || tr.rep.Sent < 400 || tr.rep.Answered != tr.rep.Sent || tr.rep.Failed != 0 {
		t.Errorf("traffic through the reload: exit %d, sent %d, answered %d, failed %d (want every one answered)\n%s",
			tr.code, tr.rep.Sent, tr.rep.Answered, tr.rep.Failed, tr.stderr)
	}
	answered := tr.rep.Answered

	// New requests: the new secret over both transports, not the old one.
	probe := func(u, secret string) clientReport {
		ctx, cancel := context.WithTimeout(ctx, 8*time.Second) // a stream client refused keeps trying
		defer cancel()
		args := []string{"--peer", u, "--secret-file", secret, "--app", "auth", "--requests", "3",
			"--timeout", "300ms", "--retries", "1", "--request-timeout", "2s"}
		if strings.HasPrefix(u, "radius+tcp://") {
			args = append(args, "--tw", "6s") // UDP has no watchdog, and refuses it
		}
		_, rep, _ := radiusRun(ctx, args...)
		return rep
	}
	for _, u := range []string{tcpURL, udpURL} {
		if rep := probe(u, newSecret); rep.Answered != 3 {
			t.Errorf("%s with the new secret after the reload: %d of 3 answered (failed %v)", u, rep.Answered, rep.FailedBy)
		} else {
			answered += rep.Answered
		}
		if rep := probe(u, oldSecret); rep.Answered != 0 {
			t.Errorf("%s with the old secret after the reload: %d answered, want 0", u, rep.Answered)
		}
	}
	diam := rs.listener(t, "tcp://")
	if r := runTestClient(t, ctx, diam, "--requests", "5"); r.code != 0 || r.report.Answered != 5 {
		t.Errorf("the Diameter listener added by the reload: exit %d, answered %d of 5\n%s", r.code, r.report.Answered, r.stderr)
	} else {
		answered += 5
	}
	if v := rs.metric(t, metricReloads, map[string]string{"result": "ok"}); v != 1 {
		t.Errorf("%s{result=ok} = %v, want 1", metricReloads, v)
	}
	if v := rs.metric(t, metricLastReload, nil); v <= started {
		t.Errorf("%s = %v, not after the start's %v", metricLastReload, v, started)
	}

	// A file that does not validate: refused, each problem with its line.
	line = rs.reload(t, second+"tw = 30\nlisten-extra = 1\n")
	for _, want := range []string{`msg="configuration reload refused`, "server.toml:5: tw", "server.toml:6: listen-extra: unknown key"} {
		if !strings.Contains(line, want) {
			t.Errorf("refused reload's log line %q: no %q", line, want)
		}
	}
	// A new identity: refused whole, the listener it would remove kept.
	line = rs.reload(t, strings.Replace(first, "server1.", "server9.", 1))
	if !strings.Contains(line, "origin-host and origin-realm cannot change while the server runs") {
		t.Errorf("identity change: log line %q", line)
	}
	if v := rs.metric(t, metricReloads, map[string]string{"result": "refused"}); v != 2 {
		t.Errorf("%s{result=refused} = %v, want 2", metricReloads, v)
	}
	if got := rs.listeners(t); len(got) != 3 {
		t.Errorf("listeners after the refused reloads: %v, want the 3 of the last file applied", got)
	}
	if rep := probe(tcpURL, newSecret); rep.Answered != 3 {
		t.Errorf("after the refused reloads, the secret applied before: %d of 3 answered", rep.Answered)
	} else {
		answered += rep.Answered
	}
	// What needs a restart is said, and the rest applied.
	line = rs.reload(t, second+"tw = \"12s\"\n")
	if !strings.Contains(line, `msg="configuration reloaded"`) || !strings.Contains(line, "needs a restart, not applied: tw") {
		t.Errorf("tw changed: log line %q", line)
	}
	if v := rs.metric(t, metricReloads, map[string]string{"result": "ok"}); v != 2 {
		t.Errorf("%s{result=ok} = %v, want 2", metricReloads, v)
	}

	if code := rs.stop(t); code != 0 {
		t.Fatalf("server exit %d:\n%s", code, rs.stderr)
	}
	rep := rs.readReport(t)
	if rep.Duplicates != 0 || rep.Applied != answered {
		t.Errorf("server: applied %d, duplicates %d; want the %d answered, each applied once", rep.Applied, rep.Duplicates, answered)
	}
}

// TestReloadRemovesListener: a listener the file no longer has stops
// accepting; its Diameter peer gets a DPR.
func TestReloadRemovesListener(t *testing.T) {
	t.Parallel()
	rs := startReloadServer(t, reloadBase+`listen = ["tcp://127.0.0.1:0", "radius+tcp://127.0.0.1:0"]
secret = "s3cret"
`)
	diam := rs.listener(t, "tcp://")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := make(chan clientRun, 1)
	go func() {
		client <- runTestClient(t, ctx, diam, "--rate", "50", "--duration", "30s", "--tw", "6s", "--connect-timeout", "5s")
	}()
	time.Sleep(time.Second)
	line := rs.reload(t, reloadBase+`listen = ["radius+tcp://127.0.0.1:0"]
secret = "s3cret"
`)
	if !strings.Contains(line, "listener removed tcp://127.0.0.1:0") {
		t.Errorf("reload log line %q", line)
	}
	if got := rs.listeners(t); len(got) != 1 || !strings.HasPrefix(got[0], "radius+tcp://") {
		t.Errorf("listeners after the reload: %v", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(rs.stderr.String(), "listener removed: drained") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(diam, "tcp://"), time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts after its removal", diam)
	}
	cancel()
	r := <-client
	var dpr bool
	for _, e := range readEvents(t, r.events) {
		dpr = dpr || e.Reason != nil && strings.Contains(*e.Reason, "DPR received")
	}
	if !dpr {
		t.Errorf("the client's peer got no DPR when its listener was removed:\n%s", rs.stderr)
	}
}

// TestReloadWithoutConfig: SIGHUP to a server started without --config
// is logged and changes nothing.
func TestReloadWithoutConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := &testServer{stderr: &syncBuffer{}, done: make(chan int, 1), ready: filepath.Join(dir, "ready")}
	hup := make(chan os.Signal, 1)
	s.startHooks(t, serveHooks{reload: hup}, []string{"--listen", "tcp://127.0.0.1:0", "--origin-host", "server1.example.net",
		"--origin-realm", "example.net", "--ready", s.ready})
	hup <- syscall.SIGHUP
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(s.stderr.String(), "SIGHUP: nothing to reload: the server was started without --config") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line for SIGHUP:\n%s", s.stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := runTestClient(t, context.Background(), s.url, "--requests", "3"); r.code != 0 || r.report.Answered != 3 {
		t.Errorf("after SIGHUP: exit %d, answered %d of 3", r.code, r.report.Answered)
	}
}

// TestBinarySIGHUP builds aaa-peer: SIGHUP reloads a server's --config
// (a listener added), and a client without --config logs that it has nothing to reload and runs on; both
// end as they would without it.
func TestBinarySIGHUP(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "aaa-peer")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	conf, ready := filepath.Join(dir, "server.toml"), filepath.Join(dir, "ready")
	writeTestFile(t, conf, reloadBase+`listen = ["tcp://127.0.0.1:0"]`+"\n")
	server := exec.CommandContext(ctx, bin, "server", "--config", conf, "--ready", ready)
	var serr syncBuffer
	server.Stderr = &serr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- server.Wait() }()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			select {
			case err := <-waited:
				t.Fatalf("server exited (%v) waiting for %s:\n%s", err, what, serr.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	waitFor("its ready file", func() bool { _, err := os.Stat(ready); return err == nil })
	url, _ := os.ReadFile(ready)

	var cerr syncBuffer
	client := exec.CommandContext(ctx, bin, "client", "--peer", strings.TrimSpace(string(url)), "--origin-host", "client1.example.net",
		"--origin-realm", "example.net", "--destination-realm", "example.net", "--rate", "20", "--duration", "3s")
	client.Stderr = &cerr
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := client.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := client.Wait(); err != nil {
		t.Errorf("client after SIGHUP: %v (want exit 0)\n%s", err, cerr.String())
	}
	if !strings.Contains(cerr.String(), "SIGHUP: nothing to reload: the client was started without --config") {
		t.Errorf("client logged nothing of the SIGHUP:\n%s", cerr.String())
	}

	writeTestFile(t, conf, reloadBase+`listen = ["tcp://127.0.0.1:0", "radius+tcp://127.0.0.1:0"]`+"\nsecret = \"s3cret\"\n")
	if err := server.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the reload", func() bool { return strings.Contains(serr.String(), `msg="configuration reloaded"`) })
	if b, _ := os.ReadFile(ready); !strings.Contains(string(b), "radius+tcp://127.0.0.1:") {
		t.Errorf("ready file after the reload: %q, want the RADIUS listener added", b)
	}
	if err := server.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Errorf("server after SIGHUP then SIGTERM: %v (want exit 0)\n%s", err, serr.String())
	}
}

// TestRemovedListenersBounded: the report keeps the counters of the last
// maxRemovedReports listeners removed.
func TestRemovedListenersBounded(t *testing.T) {
	var s server
	for i := range maxRemovedReports + 3 {
		s.keepRemoved(radiusListenerReport{URL: fmt.Sprint(i)})
	}
	if len(s.removedRADIUS) != maxRemovedReports || s.removedRADIUS[0].URL != "3" {
		t.Errorf("kept %d, the first %q; want %d from 3", len(s.removedRADIUS), s.removedRADIUS[0].URL, maxRemovedReports)
	}
}

// TestServerHelpSaysSIGHUP: "aaa-peer server -h" says what SIGHUP does.
func TestServerHelpSaysSIGHUP(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"server", "-h"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d", code)
	}
	help := spaces.ReplaceAllString(stdout.String()+stderr.String(), " ")
	for _, want := range []string{"SIGHUP re-reads --config", "is refused whole", "listeners added", "RADIUS shared secret", "need a restart", metricReloads} {
		if !strings.Contains(help, want) {
			t.Errorf("server -h: no %q", want)
		}
	}
}

// TestReloadRefusedWhenAListenerCannotOpen: a file whose new listener
// cannot be opened (its port taken) is refused whole, the listener opened
// for it closed and the secret kept; the same change without that
// listener is applied next.
func TestReloadRefusedWhenAListenerCannotOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	oldSecret, newSecret := filepath.Join(dir, "old.secret"), filepath.Join(dir, "new.secret")
	writeTestFile(t, oldSecret, "0ld-secret\n")
	writeTestFile(t, newSecret, "n3w-secret\n")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	rs := startReloadServer(t, reloadBase+`listen = ["radius+tcp://127.0.0.1:0"]
secret-file = "`+oldSecret+`"
`)
	tcpURL := rs.listener(t, "radius+tcp://")
	line := rs.reload(t, reloadBase+`listen = ["radius+tcp://127.0.0.1:0", "radius://127.0.0.1:0", "radius+tcp://`+taken.Addr().String()+`"]
secret-file = "`+newSecret+`"
`)
	if !strings.Contains(line, "configuration reload refused") || !strings.Contains(line, "--listen radius+tcp://"+taken.Addr().String()) {
		t.Errorf("reload with a port taken: log line %q", line)
	}
	if got := rs.listeners(t); len(got) != 1 {
		t.Errorf("listeners after the refused reload: %v, want the one running", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, rep, stderr := radiusRun(ctx, "--peer", tcpURL, "--secret-file", oldSecret, "--app", "auth", "--requests", "3"); rep.Answered != 3 {
		t.Errorf("the old secret after the refused reload: %d of 3 answered\n%s", rep.Answered, stderr)
	}
	line = rs.reload(t, reloadBase+`listen = ["radius+tcp://127.0.0.1:0"]
secret-file = "`+newSecret+`"
`)
	if !strings.Contains(line, "RADIUS shared secret changed on 1 listener(s)") {
		t.Errorf("the secret change alone: log line %q", line)
	}
	if _, rep, stderr := radiusRun(ctx, "--peer", tcpURL, "--secret-file", newSecret, "--app", "auth", "--requests", "3"); rep.Answered != 3 {
		t.Errorf("the new secret after it: %d of 3 answered\n%s", rep.Answered, stderr)
	}
}

// A server started with RADIUS listeners alone has no Diameter identity:
// a reload that adds one (with a Diameter listener) is refused with that
// reason, not as a change of an identity its peers know.
func TestReloadRADIUSOnlyServerRefusesAnIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := filepath.Join(dir, "r.secret")
	writeTestFile(t, secret, "s3cret\n")
	first := `listen = ["radius://127.0.0.1:0"]
secret-file = "` + secret + `"
`
	rs := startReloadServer(t, first)
	line := rs.reload(t, reloadBase+`listen = ["radius://127.0.0.1:0", "tcp://127.0.0.1:0"]
secret-file = "`+secret+`"
`)
	if !strings.Contains(line, "started without a Diameter identity (RADIUS listeners alone)") {
		t.Errorf("reload adding an identity: log line %q", line)
	}
}
