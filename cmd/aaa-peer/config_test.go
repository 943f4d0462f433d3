package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/internal/storeurl"
	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeConfig writes a configuration file (and a secret file beside it)
// and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "radius.secret"), []byte("filesecret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "aaa-peer.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigCheck(t *testing.T) {
	good := writeConfig(t, `origin-host = "s1.example.net"
origin-realm = "example.net"
listen = ["tcp://127.0.0.1:3868"]
[[peer]]
url = "tcp://10.0.0.1:3868"
[[peer]]
url = "tcp://10.0.0.2:3868"
`)
	bad := writeConfig(t, `origin-host = "bad host"
tw = 30
[[peer]]
url = "10.0.0.1:3868"
wieght = 2
`)
	perPeer := writeConfig(t, `[[peer]]
url = "tcp://10.0.0.1:3868"
tls-ca = "ca.pem"
[[peer]]
url = "tls://10.0.0.2:3868"
tw = "3s"
tls-server-name = "a b"
`)
	noSecret := writeConfig(t, `[[peer]]
url = "radius+tcp://10.0.0.1:1812"
`)
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		out, err   []string
		noOut      bool
		errorLines int // lines on stderr, when not 0
	}{
		{"valid", []string{"config", "check", good}, 0,
			[]string{good + ": valid: origin-host s1.example.net, 1 listener, 2 peers\n"}, nil, false, 0},
		{"every problem with its line", []string{"config", "check", bad}, 2, nil, []string{
			bad + ":1: origin-host: want a DiameterIdentity",
			bad + ":2: tw: 30 has no unit",
			bad + ":4: peer.url: \"10.0.0.1:3868\" has no scheme: write it as a URL such as tcp://10.0.0.1:3868",
			bad + ":5: peer.wieght: unknown key \"wieght\" (did you mean \"weight\"?)",
			bad + ": 4 problems\n",
		}, true, 5},
		{"a peer's own settings, each problem with its line", []string{"config", "check", perPeer}, 2, nil, []string{
			perPeer + ":3: peer.tls-ca: tcp://10.0.0.1:3868 does not use TLS: tls-ca is for tls:// and radsec:// peers",
			perPeer + ":6: peer.tw: 3s is below the RFC 3539 minimum of 6s",
			perPeer + ":7: peer.tls-server-name: \"a b\": want the host name the peer's certificate names",
			perPeer + ": 3 problems\n",
		}, true, 4},
		{"valid, but no secret", []string{"config", "check", noSecret}, 0, []string{
			noSecret + ": valid: 0 listeners, 1 peer\n",
			noSecret + ": note: no RADIUS shared secret for radius+tcp://10.0.0.1:1812: give --secret-file FILE or set $AAATP_RADIUS_SECRET when starting\n",
		}, nil, false, 0},
		{"missing file", []string{"config", "check", filepath.Join(t.TempDir(), "nope.toml")}, 2, nil, []string{"aaa-peer config check: open ", "no such file"}, true, 0},
		{"no file", []string{"config", "check"}, 2, nil, []string{"usage: aaa-peer config check FILE"}, true, 0},
		{"no verb", []string{"config"}, 2, nil, []string{"usage: aaa-peer config check FILE"}, true, 0},
		{"unknown verb", []string{"config", "lint", good}, 2, nil, []string{"usage: aaa-peer config check FILE"}, true, 0},
		{"help", []string{"config", "-h"}, 0, []string{"usage: aaa-peer config check FILE"}, nil, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stdout %q stderr %q", code, tc.code, stdout.String(), stderr.String())
			}
			for _, w := range tc.out {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout %q lacks %q", stdout.String(), w)
				}
			}
			for _, w := range tc.err {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q lacks %q", stderr.String(), w)
				}
			}
			if tc.noOut && stdout.Len() > 0 {
				t.Errorf("stdout %q: want nothing", stdout.String())
			}
			if n := strings.Count(stderr.String(), "\n"); tc.errorLines > 0 && n != tc.errorLines {
				t.Errorf("%d lines on stderr, want %d:\n%s", n, tc.errorLines, stderr.String())
			}
		})
	}
}

// parseServer parses server flags as serve does, applying the --config
// file.
func parseServer(t *testing.T, args ...string) (serverOptions, []string) {
	t.Helper()
	var o serverOptions
	fs := serverFlags(&o, io.Discard)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(o.config)
	if err != nil {
		t.Fatal(err)
	}
	unused := o.applyConfig(cfg, setFlags(fs))
	return o, unused
}

func TestServerOptionsFromConfig(t *testing.T) {
	t.Setenv("AAATP_TEST_REDIS_PASSWORD", "pw from env")
	file := writeConfig(t, `origin-host = "s1.example.net"
origin-realm = "example.net"
tw = "12s"
listen = ["tcp://127.0.0.1:3868", "radius+tcp://127.0.0.1:1812"]
secret-file = "radius.secret"
destination-realm = "example.net"
[dedup]
url = "redis://aaa@127.0.0.1:6379/0"
password-env = "AAATP_TEST_REDIS_PASSWORD"
[[peer]]
url = "tcp://10.0.0.1:3868"
`)
	o, unused := parseServer(t, "--config", file)
	if o.originHost != "s1.example.net" || o.originRealm != "example.net" || o.tw != 12*time.Second ||
		!reflect.DeepEqual([]string(o.listen), []string{"tcp://127.0.0.1:3868", "radius+tcp://127.0.0.1:1812"}) {
		t.Errorf("options from the file: %+v", o)
	}
	if o.dedup != "redis://aaa:pw%20from%20env@127.0.0.1:6379/0" || storeurl.Redacted(o.dedup) != "redis://aaa:xxxxx@127.0.0.1:6379/0" {
		t.Errorf("--dedup %q (shown as %q): want the file's URL with the password from the environment", o.dedup, storeurl.Redacted(o.dedup))
	}
	if s, err := o.radiusSecret(); err != nil || string(s) != "filesecret" {
		t.Errorf("RADIUS secret %q, %v: want the file's", s, err)
	}
	if !reflect.DeepEqual(unused, []string{"destination-realm", "[[peer]]"}) {
		t.Errorf("unused parts %q", unused)
	}

	// Flags given on the command line win, lists whole.
	other := filepath.Join(t.TempDir(), "other.secret")
	if err := os.WriteFile(other, []byte("flagsecret"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, _ = parseServer(t, "--config", file, "--origin-host", "flag.example.net", "--tw", "7s",
		"--listen", "tcp://127.0.0.1:0", "--dedup", "memory", "--secret-file", other)
	if o.originHost != "flag.example.net" || o.originRealm != "example.net" || o.tw != 7*time.Second ||
		!reflect.DeepEqual([]string(o.listen), []string{"tcp://127.0.0.1:0"}) || o.dedup != "memory" {
		t.Errorf("flags did not override the file: %+v", o)
	}
	if s, err := o.radiusSecret(); err != nil || string(s) != "flagsecret" {
		t.Errorf("RADIUS secret %q, %v: want --secret-file's", s, err)
	}
}

// With [[client]] tables every client has its own secret and other
// sources are refused: the shared secret, from the file or the command
// line, is named as unused rather than dropped silently.
func TestServerClientsLeaveTheSharedSecretUnused(t *testing.T) {
	file := writeConfig(t, `origin-host = "s1.example.net"
origin-realm = "example.net"
listen = ["radius+tcp://127.0.0.1:1812"]
secret-file = "radius.secret"
[[client]]
name = "nas1"
source = "127.0.0.2"
secret = "nas1secret"
`)
	_, unused := parseServer(t, "--config", file)
	if !reflect.DeepEqual(unused, []string{"secret (each [[client]] has its own)"}) {
		t.Errorf("unused parts %q", unused)
	}
	other := filepath.Join(t.TempDir(), "other.secret")
	if err := os.WriteFile(other, []byte("flagsecret"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, unused = parseServer(t, "--config", file, "--secret-file", other)
	if !reflect.DeepEqual(unused, []string{"[[client]] tables: --secret-file is not used (each client has its own secret)"}) {
		t.Errorf("unused parts with --secret-file %q", unused)
	}
}

// parseClient parses client flags as runClient does, applying the
// --config file.
func parseClient(t *testing.T, args ...string) (clientOptions, error) {
	t.Helper()
	var o clientOptions
	fs := clientFlags(&o, io.Discard)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(o.config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.applyConfig(cfg, setFlags(fs)); err != nil {
		return o, err
	}
	return o, o.validate()
}

const clientFile = `origin-host = "c1.example.net"
origin-realm = "example.net"
destination-realm = "example.net"
tw = "20s"
max-outstanding = 32
[[peer]]
name = "second"
url = "tcp://10.0.0.2:3868"
role = "secondary"
weight = 2
[[peer]]
name = "first"
url = "tcp://10.0.0.1:3868"
role = "primary"
weight = 5
[[peer]]
name = "third"
url = "tcp://10.0.0.3:3868"
role = "secondary"
`

func TestClientOptionsFromConfig(t *testing.T) {
	file := writeConfig(t, clientFile)
	o, err := parseClient(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if o.originHost != "c1.example.net" || o.originRealm != "example.net" || o.destRealm != "example.net" ||
		o.tw != 20*time.Second || o.maxOutstanding != 32 {
		t.Errorf("options from the file: %+v", o)
	}
	if o.clientMode != client.PrimarySecondary {
		t.Errorf("mode %v: roles in the file make it failover", o.clientMode)
	}
	want := []client.PeerSpec{
		{URL: "tcp://10.0.0.1:3868", Name: "first", Weight: 5},
		{URL: "tcp://10.0.0.2:3868", Name: "second", Weight: 2},
		{URL: "tcp://10.0.0.3:3868", Name: "third"},
	}
	if got := mustSpecs(t, o); !reflect.DeepEqual(got, want) {
		t.Errorf("peers (primary first, names and weights from the file):\n got %+v\nwant %+v", got, want)
	}

	// Flags win: --mode, --weight (every weight), --tw.
	o, err = parseClient(t, "--config", file, "--mode", "balance", "--weight", "tcp://10.0.0.3:3868=7", "--tw", "9s")
	if err != nil {
		t.Fatal(err)
	}
	want = []client.PeerSpec{
		{URL: "tcp://10.0.0.1:3868", Name: "first"},
		{URL: "tcp://10.0.0.2:3868", Name: "second"},
		{URL: "tcp://10.0.0.3:3868", Name: "third", Weight: 7},
	}
	if got := mustSpecs(t, o); !reflect.DeepEqual(got, want) || o.clientMode != client.Balance || o.tw != 9*time.Second {
		t.Errorf("flags did not override: mode %v tw %v peers %+v", o.clientMode, o.tw, got)
	}

	// --peer replaces the file's peers whole.
	o, err = parseClient(t, "--config", file, "--peer", "tcp://10.0.0.9:3868")
	if err != nil {
		t.Fatal(err)
	}
	if got := mustSpecs(t, o); !reflect.DeepEqual(got, []client.PeerSpec{{URL: "tcp://10.0.0.9:3868", Name: "tcp://10.0.0.9:3868"}}) || o.clientMode != client.Balance {
		t.Errorf("--peer: mode %v peers %+v", o.clientMode, got)
	}
}

func mustSpecs(t *testing.T, o clientOptions) []client.PeerSpec {
	t.Helper()
	specs, err := o.peerSpecs(nil)
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

func TestClientConfigRefused(t *testing.T) {
	file := writeConfig(t, "[[peer]]\nurl = \"radius://a:1812\"\nsecret = \"x\"\n")
	_, err := parseClient(t, "--config", file)
	if want := file + ":1: radius://a:1812 is a RADIUS server, not a Diameter peer"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
}

// perPeerFile has peers of their own tw, limits and TLS files beside one
// that takes the file's.
const perPeerFile = `origin-host = "c1.example.net"
origin-realm = "example.net"
destination-realm = "example.net"
tw = "20s"
max-outstanding = 32
[[peer]]
name = "own"
url = "tls://10.0.0.1:3868"
tw = "10s"
max-rate = 50
max-outstanding = 4
tls-ca = "ca.pem"
tls-server-name = "hss1.example.net"
[[peer]]
name = "shared"
url = "tls://10.0.0.2:3868"
`

// TestClientPerPeerSettings: a peer's own tw, limits and TLS in the file
// reach its client.PeerSpec; the other peer takes the file's top level
// (the Client's templates); a flag sets its setting for every peer.
func TestClientPerPeerSettings(t *testing.T) {
	file := writeConfig(t, perPeerFile)
	pki := testhelp.NewPKI(t)
	if err := os.Rename(pki.CAFile, filepath.Join(filepath.Dir(file), "ca.pem")); err != nil {
		t.Fatal(err)
	}
	o, err := parseClient(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	specs := mustSpecs(t, o)
	own, shared := specs[0], specs[1]
	if own.Name != "own" || own.Tw != 10*time.Second || own.TLS == nil || own.TLS.ServerName != "hss1.example.net" || own.TLS.RootCAs == nil ||
		!reflect.DeepEqual(own.Throttle, &client.ThrottleLimits{Auth: throttle.Limits{MaxRate: 50, MaxOutstanding: 4}, Accounting: throttle.Limits{MaxRate: 50, MaxOutstanding: 4}}) {
		t.Errorf("peer own: Tw %v TLS %v Throttle %+v: want the file's 10s, its CA and server name, 50/s and 4", own.Tw, own.TLS != nil, own.Throttle)
	}
	if shared.Name != "shared" || shared.Tw != 0 || shared.TLS != nil || shared.Throttle != nil {
		t.Errorf("peer shared: Tw %v TLS %v Throttle %+v: want the templates'", shared.Tw, shared.TLS != nil, shared.Throttle)
	}
	ccfg := o.clientConfig(slog.New(slog.DiscardHandler), transport.Options{}, client.NewBus())
	if ccfg.Peer.Watchdog.Twinit != 20*time.Second || ccfg.Throttle == nil || ccfg.Throttle.Accounting.MaxOutstanding != 32 {
		t.Errorf("templates: Twinit %v Throttle %+v: want the file's 20s and 32", ccfg.Peer.Watchdog.Twinit, ccfg.Throttle)
	}

	// Flags set their setting for every peer.
	o, err = parseClient(t, "--config", file, "--tw", "9s", "--max-outstanding", "7", "--tls-ca", pki.OtherCAFile)
	if err != nil {
		t.Fatal(err)
	}
	own = mustSpecs(t, o)[0]
	if own.Tw != 0 || own.Throttle == nil || own.Throttle.Auth != (throttle.Limits{MaxRate: 50, MaxOutstanding: 7}) || own.TLS == nil || own.TLS.ServerName != "hss1.example.net" {
		t.Errorf("with flags: Tw %v Throttle %+v TLS %v: want --tw's, its own rate and --max-outstanding's 7, its server name", own.Tw, own.Throttle, own.TLS != nil)
	}

	// A peer whose own limits are the only ones still gets a throttle; a
	// peer's longer tw makes the default deadline longer.
	file = writeConfig(t, "[[peer]]\nurl = \"tcp://a:1\"\nmax-outstanding = 3\ntw = \"60s\"\n[[peer]]\nurl = \"tcp://b:1\"\n")
	o, err = parseClient(t, "--config", file, "--origin-host", "c.example.net", "--origin-realm", "example.net", "--destination-realm", "example.net")
	if err != nil {
		t.Fatal(err)
	}
	if !o.throttled() {
		t.Error("a peer's own max-outstanding: no throttle")
	}
	if want := client.FailoverDetection(60*time.Second) + 10*time.Second; o.timeout != want {
		t.Errorf("--timeout %v, want %v: the failover detection of the longest tw", o.timeout, want)
	}
}

// TestClientPerPeerTLSFileUnreadable: a peer's TLS file that loads but
// is no certificate is refused at startup, naming the peer.
func TestClientPerPeerTLSFileUnreadable(t *testing.T) {
	file := writeConfig(t, perPeerFile)
	if err := os.WriteFile(filepath.Join(filepath.Dir(file), "ca.pem"), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseClient(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.peerSpecs(nil); err == nil || !strings.Contains(err.Error(), "peer own: ") {
		t.Errorf("error %v: want one naming the peer", err)
	}
}

func TestRadiusClientOptionsFromConfig(t *testing.T) {
	file := writeConfig(t, `secret-file = "radius.secret"
tw = "15s"
max-rate = 50
[[peer]]
url = "radius+tcp://10.0.0.2:1812"
role = "secondary"
secret = "own"
[[peer]]
url = "radius+tcp://10.0.0.1:1812"
role = "primary"
weight = 3
`)
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var o radiusClientOptions
	fs := radiusClientFlags(&o, io.Discard)
	if err := fs.Parse([]string{"--max-rate", "9"}); err != nil {
		t.Fatal(err)
	}
	secrets, err := o.applyConfig(cfg, setFlags(fs))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual([]string(o.peers), []string{"radius+tcp://10.0.0.1:1812", "radius+tcp://10.0.0.2:1812"}) ||
		!reflect.DeepEqual([]string(o.weights), []string{"radius+tcp://10.0.0.1:1812=3"}) ||
		o.mode != "failover" || o.tw != 15*time.Second || o.maxRate != 9 {
		t.Errorf("options: peers %v weights %v mode %s tw %v max-rate %d", o.peers, o.weights, o.mode, o.tw, o.maxRate)
	}
	if string(secrets["radius+tcp://10.0.0.1:1812"]) != "filesecret" || string(secrets["radius+tcp://10.0.0.2:1812"]) != "own" {
		t.Errorf("secrets %q", secrets)
	}
	if o.secretFile != "" {
		t.Errorf("--secret-file %q: the servers do not share one", o.secretFile)
	}
	if err := o.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}

	// Roles make the client primary/secondary (--mode failover), as the
	// Diameter client's, unless --mode is given; --algorithm stays.
	for _, tc := range []struct {
		set  map[string]bool
		want string
	}{{nil, "failover"}, {map[string]bool{"mode": true}, "balance"}} {
		o := radiusClientOptions{loadOptions: loadOptions{mode: "balance", algorithm: "round-robin"}}
		if _, err := o.applyConfig(cfg, tc.set); err != nil || o.mode != tc.want || o.algorithm != "round-robin" {
			t.Errorf("flags given %v: mode %s, algorithm %s, %v; want %s and round-robin", tc.set, o.mode, o.algorithm, err, tc.want)
		}
	}

	// A Diameter file is refused.
	cfg, err = config.Parse("d.toml", []byte("[[peer]]\nurl = \"tcp://a:1\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&radiusClientOptions{}).applyConfig(cfg, nil); err == nil || !strings.Contains(err.Error(), "d.toml:1: tcp://a:1 is a Diameter peer") {
		t.Errorf("Diameter peers: %v", err)
	}
}

// TestServerAndClientFromConfig runs a server whose identity and listener
// come from a file, and a client whose peers (names, roles) come from a
// file: the names reach the client's report, the primary gets every
// request, the server's Origin-Host is the file's.
func TestServerAndClientFromConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := &testServer{
		report: filepath.Join(dir, "server-report.json"), events: filepath.Join(dir, "events.jsonl"),
		stderr: &syncBuffer{}, done: make(chan int, 1), ready: filepath.Join(dir, "ready"),
	}
	serverFile := writeConfig(t, "origin-host = \"fromfile.example.net\"\norigin-realm = \"example.net\"\nlisten = [\"tcp://127.0.0.1:0\"]\ndestination-realm = \"example.net\"\n")
	s.start(t, nil, []string{"--config", serverFile, "--report", s.report, "--events", s.events, "--ready", s.ready})
	backup := startServer(t)

	clientConfig := writeConfig(t, `origin-host = "client1.example.net"
origin-realm = "example.net"
destination-realm = "example.net"
[[peer]]
name = "backup"
url = "`+backup.url+`"
role = "secondary"
[[peer]]
name = "main"
url = "`+s.url+`"
role = "primary"
`)
	report := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr syncBuffer
	code := runClient(context.Background(), []string{"--config", clientConfig, "--requests", "20", "--report", report, "--connect-timeout", "5s"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("client exit %d: %s", code, stderr.String())
	}
	var rep clientReport
	readJSON(t, report, &rep)
	if rep.Mode != "failover" || len(rep.Servers) != 2 {
		t.Fatalf("mode %s, servers %+v: want failover over 2", rep.Mode, rep.Servers)
	}
	if rep.Servers[0].Server != "main" || rep.Servers[0].Peer != "fromfile.example.net" || rep.Servers[0].Sent != 20 ||
		rep.Servers[1].Server != "backup" || rep.Servers[1].Sent != 0 {
		t.Errorf("servers %+v: want main (fromfile.example.net) first with all 20, backup none", rep.Servers)
	}
	if !strings.Contains(s.stderr.String(), "the server does not use this part of the file") || !strings.Contains(s.stderr.String(), "ignored=destination-realm") {
		t.Errorf("the server did not log the part of its file it does not use: %s", s.stderr.String())
	}
}

// TestConfigProblemsExitTwo: server and client refuse a file with
// problems, printing every one with its line.
func TestConfigProblemsExitTwo(t *testing.T) {
	file := writeConfig(t, "origin-host = \"s1.example.net\"\ntw = 30\ncolour = \"blue\"\n")
	for _, cmd := range []string{"server", "client"} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{cmd, "--config", file}, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), file+":2: tw: 30 has no unit") || !strings.Contains(stderr.String(), file+":3: colour: unknown key") {
			t.Errorf("%s: exit %d, stderr %q", cmd, code, stderr.String())
		}
	}
}

// TestUnusedConfigLogged: a part of the file a command does not use is
// logged, not silently dropped.
func TestUnusedConfigLogged(t *testing.T) {
	file := writeConfig(t, "listen = [\"tcp://127.0.0.1:0\"]\n[dedup]\n")
	var stdout, stderr bytes.Buffer
	// No peer: the client stops at validation, after logging.
	code := run(context.Background(), []string{"client", "--config", file, "--peer", "tcp://127.0.0.1:1", "--origin-host", "c.example.net",
		"--origin-realm", "example.net", "--destination-realm", "example.net", "--connect-timeout", "100ms", "--requests", "1"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "the client does not use this part of the file") ||
		!strings.Contains(stderr.String(), "ignored=listen") || !strings.Contains(stderr.String(), "ignored=[dedup]") {
		t.Errorf("exit %d, stderr %s", code, stderr.String())
	}
}

// TestRefusedByEveryNamedPeer: with peers named by the file, the client
// still sees that every peer refused it for good, and says which, by name.
func TestRefusedByEveryNamedPeer(t *testing.T) {
	t.Parallel()
	a := startServer(t, "--allow", "other.example.net")
	b := startServer(t, "--allow", "other.example.net")
	file := writeConfig(t, `origin-host = "client1.example.net"
origin-realm = "example.net"
destination-realm = "example.net"
[[peer]]
name = "alpha"
url = "`+a.url+`"
[[peer]]
name = "beta"
url = "`+b.url+`"
`)
	t0 := time.Now()
	var stdout, stderr syncBuffer
	code := runClient(context.Background(), []string{"--config", file, "--connect-timeout", "60s"}, &stdout, &stderr)
	if took := time.Since(t0); code != 1 || took > 20*time.Second || !strings.Contains(stderr.String(), "every peer refused us") ||
		!strings.Contains(stderr.String(), "alpha: ") || !strings.Contains(stderr.String(), "beta: ") || strings.Count(stderr.String(), "3010") < 2 {
		t.Errorf("exit %d after %v, stderr:\n%s", code, took, stderr.String())
	}
}

// TestClientRunsPerPeerTw runs a client whose file gives one peer a tw of
// its own: that peer's watchdog runs at it, the other's at the file's
// top-level tw (the report's peers, each Tw within the jitter).
func TestClientRunsPerPeerTw(t *testing.T) {
	t.Parallel()
	a, b := startServer(t), startServer(t)
	file := writeConfig(t, `origin-host = "client1.example.net"
origin-realm = "example.net"
destination-realm = "example.net"
tw = "40s"
[[peer]]
name = "quick"
url = "`+a.url+`"
tw = "8s"
max-outstanding = 2
[[peer]]
name = "calm"
url = "`+b.url+`"
`)
	report := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr syncBuffer
	if code := runClient(context.Background(), []string{"--config", file, "--requests", "4", "--report", report, "--connect-timeout", "5s"}, &stdout, &stderr); code != 0 {
		t.Fatalf("client exit %d: %s", code, stderr.String())
	}
	var rep clientReport
	readJSON(t, report, &rep)
	if len(rep.Peers) != 2 || len(rep.Servers) != 2 {
		t.Fatalf("peers %+v servers %+v", rep.Peers, rep.Servers)
	}
	for i, want := range []time.Duration{8 * time.Second, 40 * time.Second} {
		if got := rep.Peers[i].Tw; got < want-watchdog.MaxJitter || got > want+watchdog.MaxJitter {
			t.Errorf("server %s: Tw %v, want %v +-%v", rep.Servers[i].Server, got, want, watchdog.MaxJitter)
		}
	}
	if len(rep.Queues) != 2 {
		t.Errorf("queues %+v: a peer's own max-outstanding turns the throttle on", rep.Queues)
	}
}

// TestRadiusClientPerServerSettings: a RADIUS server's own tw, limits
// and TLS reach its client.PeerSpec (accounting at --max-rate-acct); the
// file's top level applies with --peer servers too, its secret theirs.
func TestRadiusClientPerServerSettings(t *testing.T) {
	file := writeConfig(t, `tw = "20s"
max-outstanding = 30
tls-server-name = "x"
`)
	if _, err := config.Load(file); err == nil || !strings.Contains(err.Error(), ":3: tls-server-name: unknown key") {
		t.Fatalf("a top-level tls-server-name: %v (it is a peer's)", err)
	}
	file = writeConfig(t, `tw = "20s"
max-outstanding = 30
secret = "top"
[[peer]]
url = "radsec://10.0.0.1"
tw = "7s"
max-rate = 40
tls-server-name = "radius1.example.net"
[[peer]]
url = "radsec://10.0.0.2"
`)
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var o radiusClientOptions
	fs := radiusClientFlags(&o, io.Discard)
	if err := fs.Parse([]string{"--max-rate-acct", "11"}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.applyConfig(cfg, setFlags(fs)); err != nil {
		t.Fatal(err)
	}
	if o.tw != 20*time.Second || o.maxOutstanding != 30 {
		t.Errorf("every server's: tw %v max-outstanding %d", o.tw, o.maxOutstanding)
	}
	var specs []client.PeerSpec
	for _, u := range o.peers {
		s := client.PeerSpec{URL: u, Name: u}
		if err := o.own[u].apply(&s, o.maxRateAcct); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, s)
	}
	wantLim := &client.ThrottleLimits{Auth: throttle.Limits{MaxRate: 40, MaxOutstanding: 30}, Accounting: throttle.Limits{MaxRate: 11, MaxOutstanding: 30}}
	if s := specs[0]; s.Tw != 7*time.Second || s.TLS == nil || s.TLS.ServerName != "radius1.example.net" || !reflect.DeepEqual(s.Throttle, wantLim) {
		t.Errorf("first server: Tw %v TLS %v Throttle %+v", s.Tw, s.TLS != nil, s.Throttle)
	}
	if s := specs[1]; s.Tw != 0 || s.TLS != nil || s.Throttle != nil {
		t.Errorf("second server: Tw %v TLS %v Throttle %+v: want the templates'", s.Tw, s.TLS != nil, s.Throttle)
	}

	// --peer given: the file's top level still applies, its secret the
	// servers'.
	cfg, err = config.Parse("r.toml", []byte("tw = \"25s\"\nsecret = \"top\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	o = radiusClientOptions{}
	fs = radiusClientFlags(&o, io.Discard)
	if err := fs.Parse([]string{"--peer", "radius+tcp://10.0.0.3:1812"}); err != nil {
		t.Fatal(err)
	}
	secrets, err := o.applyConfig(cfg, setFlags(fs))
	if err != nil || o.tw != 25*time.Second || string(secrets["radius+tcp://10.0.0.3:1812"]) != "top" {
		t.Errorf("--peer with a file: tw %v secrets %q, %v: want the file's 25s and secret", o.tw, secrets, err)
	}
}

// --weight names a --config file's peer by its URL or by its name.
func TestWeightByConfigName(t *testing.T) {
	file := writeConfig(t, clientFile)
	for _, w := range []string{"first=7", "tcp://10.0.0.1:3868=7"} {
		o, err := parseClient(t, "--config", file, "--weight", w)
		if err != nil {
			t.Fatalf("--weight %s: %v", w, err)
		}
		specs, err := o.peerSpecs(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range specs {
			if want := map[string]int{"first": 7}[s.Name]; s.Weight != want {
				t.Errorf("--weight %s: %s has weight %d, want %d", w, s.Name, s.Weight, want)
			}
		}
	}
}

// --max-rate means the same over every protocol: every class's rate to
// each server, accounting's too unless --max-rate-acct gives it its own.
// The RADIUS client's --max-rate used to limit Access-Requests alone, so
// a RADIUS accounting run with --max-rate went unthrottled.
func TestMaxRateIsEveryClassesOverEveryProtocol(t *testing.T) {
	for _, c := range []struct {
		args       []string
		auth, acct int
	}{
		{[]string{"--max-rate", "5"}, 5, 5},
		{[]string{"--max-rate", "5", "--max-rate-acct", "7"}, 5, 7},
		{[]string{"--max-rate", "5", "--max-rate-acct", "0"}, 5, 0},
		{[]string{"--max-rate-acct", "7"}, 0, 7},
	} {
		var r radiusClientOptions
		fs := radiusClientFlags(&r, io.Discard)
		require.NoError(t, fs.Parse(append([]string{"--peer", "radius+tcp://127.0.0.1:1812"}, c.args...)))
		require.NoError(t, r.validate())
		rcfg, err := r.clientConfig([]byte("s"), client.NewBus(), slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		assert.Equal(t, c.auth, rcfg.Throttle.Auth.MaxRate, "RADIUS %v: Access-Requests", c.args)
		assert.Equal(t, c.acct, rcfg.Throttle.Accounting.MaxRate, "RADIUS %v: Accounting-Requests", c.args)

		var d clientOptions
		fs = clientFlags(&d, io.Discard)
		require.NoError(t, fs.Parse(append([]string{"--peer", "tcp://127.0.0.1:3868", "--origin-host", "c.example.net",
			"--origin-realm", "example.net", "--destination-realm", "example.net"}, c.args...)))
		require.NoError(t, d.validate())
		dcfg := d.clientConfig(slog.New(slog.DiscardHandler), transport.Options{}, client.NewBus())
		require.NotNil(t, dcfg.Throttle, "Diameter %v: throttled", c.args)
		assert.Equal(t, c.auth, dcfg.Throttle.Auth.MaxRate, "Diameter %v: the others", c.args)
		assert.Equal(t, c.acct, dcfg.Throttle.Accounting.MaxRate, "Diameter %v: accounting", c.args)
	}
	var r radiusClientOptions
	fs := radiusClientFlags(&r, io.Discard)
	fs.SetOutput(io.Discard)
	assert.Error(t, fs.Parse([]string{"--max-rate-acct", "-1"}), "a negative rate is refused")
}

// --nai is the same format over every protocol: the RADIUS client used
// to put n in place of a literal %d alone, sending "u%06d" unchanged, so
// every request had one User-Name, and hash and pearson sent them all to
// one server.
func TestNAIFormatOverRADIUS(t *testing.T) {
	var o radiusClientOptions
	fs := radiusClientFlags(&o, io.Discard)
	require.NoError(t, fs.Parse([]string{"--peer", "radius://127.0.0.1:1812", "--nai", "u%06d@example.net"}))
	require.NoError(t, o.validate())
	user, ok := o.request(42).Attributes.Lookup(radius.AttrUserName)
	require.True(t, ok)
	assert.Equal(t, "u000042@example.net", string(user))

	o = radiusClientOptions{}
	fs = radiusClientFlags(&o, io.Discard)
	require.NoError(t, fs.Parse([]string{"--peer", "radius://127.0.0.1:1812", "--nai", "u%s"}))
	assert.ErrorContains(t, o.validate(), "want a format with at most one %d")
}

// Each client names the parts of a --config file it does not use, so
// that a key meant for it but read by nothing is not taken in silence:
// the RADIUS client used to name none, the Diameter client not secret.
func TestClientsNameWhatTheyIgnore(t *testing.T) {
	cfg, err := config.Parse("c.toml", []byte(`origin-host = "c.example.net"
origin-realm = "example.net"
destination-realm = "example.net"
secret = "s"
listen = ["tcp://127.0.0.1:3868"]
[dedup]
url = "memory"
`))
	require.NoError(t, err)
	assert.Equal(t, []string{"origin-host", "origin-realm", "destination-realm", "listen", "[dedup]"}, radiusUnused(cfg))
	var o clientOptions
	fs := clientFlags(&o, io.Discard)
	require.NoError(t, fs.Parse(nil))
	unused, err := o.applyConfig(cfg, setFlags(fs))
	require.NoError(t, err)
	assert.Equal(t, []string{"secret", "listen", "[dedup]"}, unused)
}

// A --config server's own max-outstanding above its Identifiers is
// refused as the flag is, naming the server: the library would cut it
// without a word.
func TestRadiusPeerOwnMaxOutstandingBounded(t *testing.T) {
	file := writeConfig(t, `secret = "s"
[[peer]]
url = "radius+tcp://10.0.0.1:1812"
name = "r1"
max-outstanding = 300
`)
	cfg, err := config.Load(file)
	require.NoError(t, err)
	var o radiusClientOptions
	fs := radiusClientFlags(&o, io.Discard)
	require.NoError(t, fs.Parse(nil))
	_, err = o.applyConfig(cfg, setFlags(fs))
	require.NoError(t, err)
	assert.ErrorContains(t, o.validate(), "--config: server r1: max-outstanding 300: a server takes at most 255 requests in flight here")
}
