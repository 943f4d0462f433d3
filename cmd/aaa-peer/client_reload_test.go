package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/status"
)

// clientReloader runs a client on a --config file with a SIGHUP channel
// of the test's.
type clientReloader struct {
	config string
	hup    chan os.Signal
	stderr *syncBuffer
}

// reload rewrites the file, sends SIGHUP and returns the client's log
// line saying what it did.
func (cr *clientReloader) reload(t *testing.T, content string) string {
	t.Helper()
	writeTestFile(t, cr.config, content)
	re := regexp.MustCompile(`(?m)^.*msg="configuration reload(ed| refused)[^\n]*$`)
	before := len(re.FindAllString(cr.stderr.String(), -1))
	cr.hup <- syscall.SIGHUP
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if lines := re.FindAllString(cr.stderr.String(), -1); len(lines) > before {
			return lines[len(lines)-1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no reload log line within 10s:\n%s", cr.stderr)
	return ""
}

const clientReloadBase = `origin-host = "client1.example.net"
origin-realm = "example.net"
destination-realm = "example.net"
`

func peerTable(name, url string, weight int) string {
	return "\n[[peer]]\nname = \"" + name + "\"\nurl = \"" + url + "\"\nweight = " + strconv.Itoa(weight) + "\n"
}

// TestClientReloadUnderTraffic: "aaa-peer client --config" sends at 200/s
// while SIGHUP applies files that add a server, then remove the first;
// a file that does not validate is refused and the peers kept. Every
// request is answered, none applied twice, and the added server takes its
// share.
func TestClientReloadUnderTraffic(t *testing.T) {
	t.Parallel()
	one := startReloadServer(t, reloadBase+`listen = ["tcp://127.0.0.1:0"]`+"\n")
	two := startReloadServer(t, strings.Replace(reloadBase, "server1.", "server2.", 1)+`listen = ["tcp://127.0.0.1:0"]`+"\n")
	urlOne, urlTwo := one.listener(t, "tcp://"), two.listener(t, "tcp://")

	dir := t.TempDir()
	cr := &clientReloader{config: filepath.Join(dir, "client.toml"), hup: make(chan os.Signal, 1), stderr: &syncBuffer{}}
	report := filepath.Join(dir, "report.json")
	writeTestFile(t, cr.config, clientReloadBase+peerTable("one", urlOne, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := make(chan int, 1)
	go func() {
		var stdout syncBuffer
		code <- runClientWith(ctx, []string{"--config", cr.config, "--rate", "200", "--duration", "4s", "--report", report,
			"--connect-timeout", "5s"}, &stdout, cr.stderr, cr.hup)
	}()
	waitURL(t, cr.stderr, regexp.MustCompile(`msg=watchdog .*(to=OKAY)`))
	time.Sleep(500 * time.Millisecond) // sending

	line := cr.reload(t, clientReloadBase+peerTable("one", urlOne, 1)+peerTable("two", urlTwo, 1))
	if !strings.Contains(line, `msg="configuration reloaded"`) || !strings.Contains(line, "added: two") {
		t.Errorf("adding a peer: log line %q", line)
	}
	time.Sleep(time.Second)
	line = cr.reload(t, clientReloadBase+peerTable("two", urlTwo, 1)+"tw = 30\n")
	if !strings.Contains(line, `msg="configuration reload refused`) || !strings.Contains(line, "client.toml:") {
		t.Errorf("a file that does not validate: log line %q", line)
	}
	line = cr.reload(t, strings.Replace(clientReloadBase, "client1.", "client9.", 1)+peerTable("two", urlTwo, 1))
	for _, want := range []string{`msg="configuration reloaded"`, "removed (draining): one", "needs a restart, not applied: origin-host"} {
		if !strings.Contains(line, want) {
			t.Errorf("removing a peer: log line %q: no %q", line, want)
		}
	}
	if c := <-code; c != 0 {
		t.Fatalf("client exit %d:\n%s", c, cr.stderr)
	}
	var rep clientReport
	readJSON(t, report, &rep)
	if len(rep.Peers) != 2 {
		t.Errorf("the report lists %d peers, want both: the one removed keeps its counts", len(rep.Peers))
	}
	if rep.Sent < 600 || rep.Answered != rep.Sent || rep.Failed != 0 {
		t.Errorf("client through the reloads: sent %d, answered %d, failed %d (want every one answered)", rep.Sent, rep.Answered, rep.Failed)
	}
	if c := one.stop(t); c != 0 {
		t.Fatalf("server one exit %d", c)
	}
	if c := two.stop(t); c != 0 {
		t.Fatalf("server two exit %d", c)
	}
	r1, r2 := one.readReport(t), two.readReport(t)
	if r1.Applied+r2.Applied != rep.Answered || r1.Duplicates+r2.Duplicates != 0 {
		t.Errorf("servers applied %d + %d (duplicates %d + %d); want the %d answered, each once", r1.Applied, r2.Applied, r1.Duplicates, r2.Duplicates, rep.Answered)
	}
	if r2.Applied == 0 || r1.Applied == 0 {
		t.Errorf("applied by one %d, by two %d: want both to have taken requests", r1.Applied, r2.Applied)
	}
}

// TestRADIUSClientReloadRotatesSecret: a RADIUS/TCP server and its
// client rotate their shared secret under traffic, the server first (its
// connections accepted before keep the old secret), then the client,
// whose server is replaced by one with the new secret while the old
// connection drains. Every record is answered, each applied once.
func TestRADIUSClientReloadRotatesSecret(t *testing.T) {
	t.Parallel()
	srvDir := t.TempDir()
	oldSecret, newSecret := filepath.Join(srvDir, "old.secret"), filepath.Join(srvDir, "new.secret")
	writeTestFile(t, oldSecret, "0ld-secret\n")
	writeTestFile(t, newSecret, "n3w-secret\n")
	rs := startReloadServer(t, reloadBase+`listen = ["radius+tcp://127.0.0.1:0"]`+"\nsecret-file = \""+oldSecret+"\"\n")
	u := rs.listener(t, "radius+tcp://")

	dir := t.TempDir()
	cr := &clientReloader{config: filepath.Join(dir, "client.toml"), hup: make(chan os.Signal, 1), stderr: &syncBuffer{}}
	server := func(secretFile string) string {
		return "[[peer]]\nname = \"r1\"\nurl = \"" + u + "\"\nsecret-file = \"" + secretFile + "\"\n"
	}
	writeTestFile(t, cr.config, server(oldSecret))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		code int
		rep  clientReport
	}
	done := make(chan result, 1)
	go func() {
		var stdout syncBuffer
		c := runClientWith(ctx, []string{"--config", cr.config, "--app", "acct", "--rate", "200", "--duration", "3s", "--concurrency", "64"},
			&stdout, cr.stderr, cr.hup)
		var rep clientReport
		_ = json.Unmarshal([]byte(stdout.String()), &rep)
		done <- result{c, rep}
	}()
	time.Sleep(time.Second)
	if line := rs.reload(t, reloadBase+`listen = ["radius+tcp://127.0.0.1:0"]`+"\nsecret-file = \""+newSecret+"\"\n"); !strings.Contains(line, "RADIUS shared secret changed") {
		t.Fatalf("server reload: %q", line)
	}
	line := cr.reload(t, server(newSecret))
	if !strings.Contains(line, `msg="configuration reloaded"`) || !strings.Contains(line, "replaced: r1") {
		t.Errorf("client reload: log line %q", line)
	}
	r := <-done
	if r.code != 0 || r.rep.Sent < 400 || r.rep.Answered != r.rep.Sent || r.rep.Failed != 0 {
		t.Errorf("through the rotation: exit %d, sent %d, answered %d, failed %d (want every one answered)\n%s",
			r.code, r.rep.Sent, r.rep.Answered, r.rep.Failed, cr.stderr)
	}
	if c := rs.stop(t); c != 0 {
		t.Fatalf("server exit %d", c)
	}
	if rep := rs.readReport(t); rep.Applied != r.rep.Answered || rep.Duplicates != 0 {
		t.Errorf("server applied %d, duplicates %d; want the %d answered, each once", rep.Applied, rep.Duplicates, r.rep.Answered)
	}
}

// A peer's own TLS configuration is the same *tls.Config while its files
// do not change (so a reload keeps that peer's connection), and a new one
// once a file's content changes.
func TestPeerTLSSameWhileFilesUnchanged(t *testing.T) {
	pki := testhelp.NewPKI(t)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	b, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, ca, string(b))
	tc := config.TLS{CA: ca, ServerName: "hss1.example.net"}
	first, err := peerTLS(tc)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := peerTLS(tc); again != first {
		t.Error("the same files gave another *tls.Config: every reload would replace the peer")
	}
	other, _ := os.ReadFile(pki.OtherCAFile)
	writeTestFile(t, ca, string(other))
	if changed, _ := peerTLS(tc); changed == first {
		t.Error("a CA file with another content gave the old *tls.Config")
	}
}

// TestWatchReload: at each SIGHUP both clients' reloads read --config
// again and hand it to the client's apply, except with --peer on the
// command line (nothing changes, the file is not read) or without
// --config; a file that does not load is refused before apply.
func TestWatchReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.toml")
	for _, tc := range []struct {
		name, file, content string
		fixedPeers          bool
		want                string
		applied             bool
		ok, refused         float64 // reloads counted
	}{
		{"applied", file, "tw = \"7s\"\n", false, `msg="configuration reloaded" file=` + file + ` changed="tw 7s"`, true, 1, 0},
		{"refused", file, "tw = 7\n", false, `msg="configuration reload refused: the file does not validate; running on as before"`, false, 0, 1},
		{"peers from the command line", file, "tw = 7\n", true, `changed="nothing: the peers are the command line's --peer"`, false, 1, 0},
		{"no config", "", "", false, "nothing to reload: the client was started without --config", false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeTestFile(t, file, tc.content)
			var logs bytes.Buffer
			applied := false
			hup := make(chan os.Signal)
			metrics := status.NewMetrics()
			stop := watchReload(hup, slog.New(slog.NewTextHandler(&logs, nil)), tc.file, tc.fixedPeers, metrics, func(cfg *config.Config) ([]string, error) {
				applied = true
				return []string{"tw " + cfg.Tw.String()}, nil
			})
			hup <- syscall.SIGHUP
			stop()
			if !strings.Contains(logs.String(), tc.want) || applied != tc.applied {
				t.Errorf("log %q, applied %v; want %q, applied %v", logs.String(), applied, tc.want, tc.applied)
			}
			if ok, refused := reloadCount(t, metrics, "ok"), reloadCount(t, metrics, "refused"); ok != tc.ok || refused != tc.refused {
				t.Errorf("reloads counted: ok %v refused %v, want %v and %v", ok, refused, tc.ok, tc.refused)
			}
		})
	}
}

// reloadCount is the value of aaatp_config_reloads_total{result} in m.
func reloadCount(t *testing.T, m *status.Metrics, result string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			if l := mt.GetLabel(); mf.GetName() == "aaatp_config_reloads_total" && len(l) == 1 && l[0].GetValue() == result {
				return mt.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no aaatp_config_reloads_total{result=%q}", result)
	return 0
}

// A reload that would change the RADIUS client's --mode (roles added to
// the file) applies the servers and names the mode as needing a restart,
// as the Diameter client's reload does; a file with fewer servers than
// --wait-peers is not refused: the wait is the start's.
func TestRadiusClientReloadModeNeedsRestart(t *testing.T) {
	sf := secretFile(t)
	servers := func(roles ...string) string {
		s := "secret-file = \"" + sf + "\"\n"
		for i, r := range roles {
			s += "[[peer]]\nurl = \"radius://127.0.0.1:" + strconv.Itoa(18120+i) + "\"\n"
			if r != "" {
				s += "role = \"" + r + "\"\n"
			}
		}
		return s
	}
	file := writeConfig(t, servers("", ""))
	var o radiusClientOptions
	fs := radiusClientFlags(&o, io.Discard)
	if err := fs.Parse([]string{"--config", file, "--wait-peers", "2"}); err != nil {
		t.Fatal(err)
	}
	base, set := o, setFlags(fs)
	o.base, o.set = &base, set
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if o.secrets, err = o.applyConfig(cfg, set); err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	ccfg, err := o.clientConfig([]byte(testRadiusSecret), client.NewBus(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())

	for _, tc := range []struct {
		file, want string
	}{
		{servers("secondary", "primary"), "needs a restart, not applied: mode"},
		{servers(""), "removed (draining)"},
	} {
		writeTestFile(t, file, tc.file)
		cfg, err := config.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := o.reloadPeers(cfg, c, status.NewMetrics())
		if err != nil || !strings.Contains(strings.Join(lines, "; "), tc.want) {
			t.Errorf("reload of\n%s: %q, %v; want %q", tc.file, lines, err, tc.want)
		}
	}
}
