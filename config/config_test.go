package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// dir makes a directory with the files the test configurations name.
func dir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for name, body := range map[string]string{
		"secret":     "s3cret\n",
		"secret2":    "other\r\n",
		"empty":      "\n",
		"cert.pem":   "cert",
		"key.pem":    "key",
		"ca.pem":     "ca",
		"redis.pw":   "pw\n",
		"client.pem": "client",
	} {
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestParseValid(t *testing.T) {
	d := dir(t)
	t.Setenv("AAATP_TEST_REDIS_PW", "envpw")
	src := `# a client and a server in one file
origin-host = "node1.example.net"
origin-realm = "example.net"
destination-realm = "example.net"
tw = "20s"
listen = ["tcp://0.0.0.0:3868", "radius+tcp://0.0.0.0:1812",
  "tls://0.0.0.0:3869"]
secret-file = "secret"
tls-cert = "cert.pem"
tls-key = "key.pem"
tls-ca = "ca.pem"
tls-client-ca = "client.pem"
max-outstanding = 64

[dedup]
url = "redis://aaa@redis1.example.net:6379/0"
password-env = "AAATP_TEST_REDIS_PW"

[[peer]]
name = "r1"
url = "radius+tcp://10.0.0.1:1812"
weight = 3
role = "primary"
tw = "1m"
max-rate = 100

[[peer]]
url = "radius+tcp://10.0.0.2:1812"
secret = "inline"
role = "secondary"
max-outstanding = 8
`
	cfg, err := Parse(filepath.Join(d, "aaa.toml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		File:       filepath.Join(d, "aaa.toml"),
		OriginHost: "node1.example.net", OriginRealm: "example.net", DestinationRealm: "example.net",
		Tw:     20 * time.Second,
		Listen: []string{"tcp://0.0.0.0:3868", "radius+tcp://0.0.0.0:1812", "tls://0.0.0.0:3869"},
		TLS:    TLS{Cert: filepath.Join(d, "cert.pem"), Key: filepath.Join(d, "key.pem"), CA: filepath.Join(d, "ca.pem"), ClientCA: filepath.Join(d, "client.pem")},
		Secret: []byte("s3cret"), SecretFile: filepath.Join(d, "secret"),
		Limits: Limits{MaxOutstanding: 64},
		Dedup:  &Dedup{URL: "redis://aaa@redis1.example.net:6379/0", Password: "envpw", PasswordEnv: "AAATP_TEST_REDIS_PW"},
		Peers: []Peer{
			{Name: "r1", URL: "radius+tcp://10.0.0.1:1812", Secret: []byte("s3cret"), SecretFile: filepath.Join(d, "secret"),
				Weight: 3, Role: RolePrimary, Tw: time.Minute,
				TLS:    TLS{Cert: filepath.Join(d, "cert.pem"), Key: filepath.Join(d, "key.pem"), CA: filepath.Join(d, "ca.pem")},
				Limits: Limits{MaxRate: 100, MaxOutstanding: 64}, Own: Own{Tw: true, MaxRate: true}, Line: 19},
			{Name: "radius+tcp://10.0.0.2:1812", URL: "radius+tcp://10.0.0.2:1812", Secret: []byte("inline"),
				Role: RoleSecondary, Tw: 20 * time.Second,
				TLS:    TLS{Cert: filepath.Join(d, "cert.pem"), Key: filepath.Join(d, "key.pem"), CA: filepath.Join(d, "ca.pem")},
				Limits: Limits{MaxOutstanding: 8}, Own: Own{MaxOutstanding: true}, Line: 27},
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg, want)
	}
	if got := cfg.Dedup.URLWithPassword(); got != "redis://aaa:envpw@redis1.example.net:6379/0" {
		t.Errorf("URLWithPassword = %q", got)
	}
	if got := cfg.Summary(); got != "origin-host node1.example.net, 3 listeners, 2 peers, dedup redis://aaa@redis1.example.net:6379/0" {
		t.Errorf("Summary = %q", got)
	}
}

// TestParseEmpty: every key is optional.
func TestParseEmpty(t *testing.T) {
	cfg, err := Parse("empty.toml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, &Config{File: "empty.toml"}) {
		t.Errorf("got %+v", cfg)
	}
}

func TestPasswordFileAndInlinePeers(t *testing.T) {
	d := dir(t)
	src := `[dedup]
url = "redis://redis1:6379/0"
password-file = "redis.pw"
[[peer]]
url = "radius://10.0.0.1:1812"
secret-file = "secret2"
`
	cfg, err := Parse(filepath.Join(d, "a.toml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Dedup.Password != "pw" || cfg.Dedup.URLWithPassword() != "redis://:pw@redis1:6379/0" {
		t.Errorf("dedup = %+v, %s", cfg.Dedup, cfg.Dedup.URLWithPassword())
	}
	if string(cfg.Peers[0].Secret) != "other" {
		t.Errorf("secret %q: want the file's, its line end trimmed", cfg.Peers[0].Secret)
	}
	// Peers as an inline array of tables, lines of their keys kept.
	_, err = Parse("b.toml", []byte("peer = [\n  {url = \"tcp://a:1\"},\n  {url = \"tcp://b:1\", weight = 0},\n]\n"))
	checkProblems(t, err, []Problem{{File: "b.toml", Line: 3, Key: "peer.weight", Msg: "0: want an integer from 1 to 1048576 (the peer's share of the load)"}})
}

func TestMemoryDedupDefault(t *testing.T) {
	cfg, err := Parse("a.toml", []byte("[dedup]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Dedup == nil || cfg.Dedup.URL != "memory" || cfg.Dedup.URLWithPassword() != "memory" {
		t.Errorf("dedup = %+v", cfg.Dedup)
	}
}

// checkProblems checks that err lists want (Msg: a prefix of the message)
// and nothing else.
func checkProblems(t *testing.T, err error, want []Problem) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *Error", err, err)
	}
	if len(e.Problems) != len(want) {
		t.Fatalf("%d problems, want %d:\n%v", len(e.Problems), len(want), err)
	}
	for i, w := range want {
		g := e.Problems[i]
		if g.File != w.File || g.Line != w.Line || g.Key != w.Key || !strings.HasPrefix(g.Msg, w.Msg) {
			t.Errorf("problem %d:\n got %s\nwant %s...", i, g, w)
		}
	}
}

// TestProblems: each problem is found, with its line and key, alone.
func TestProblems(t *testing.T) {
	d := dir(t)
	t.Setenv("AAATP_TEST_SET", "x")
	os.Unsetenv("AAATP_TEST_UNSET")
	for _, tc := range []struct {
		name, src string
		line      int
		key, msg  string
	}{
		{"syntax", "origin-host = \n", 1, "", "unexpected character"},
		{"duplicate key", "tw = \"30s\"\ntw = \"40s\"\n", 2, "tw", "key tw is already defined"},
		{"a value for a table", "peer = 3\n", 1, "peer", "cannot decode TOML integer"},
		{"unknown key", "origin-hots = \"a\"\n", 1, "origin-hots", `unknown key "origin-hots" (did you mean "origin-host"?)`},
		{"unknown key far from any", "colour = \"blue\"\n", 1, "colour", `unknown key "colour" (known here: origin-host`},
		{"unknown table", "[node]\norigin-host = \"a\"\n", 1, "node", `unknown key "node"`},
		{"unknown peer key", "[[peer]]\nurl = \"tcp://a:1\"\nwieght = 2\n", 3, "peer.wieght", `unknown key "wieght" (did you mean "weight"?)`},
		{"unknown dedup key", "[dedup]\npassword = \"x\"\n", 2, "dedup.password", `unknown key "password" (known here: url, password-file, password-env, sentinel-password-file, sentinel-password-env)`},
		{"identity", "origin-host = \"bad host\"\n", 1, "origin-host", "want a DiameterIdentity"},
		{"identity with an empty label", "origin-host = \"aaa1..example.net\"\n", 1, "origin-host", "want a DiameterIdentity such as aaa1.example.net: invalid DiameterIdentity: an empty label at offset 5"},
		{"realm", "origin-realm = \"\"\n", 1, "origin-realm", "want a DiameterIdentity"},
		{"destination realm", "destination-realm = \"a b\"\n", 1, "destination-realm", "want a DiameterIdentity"},
		{"string wanted", "origin-host = 3\n", 1, "origin-host", "3: want a string"},
		{"tw without unit", "tw = 30\n", 1, "tw", `30 has no unit: write it in quotes with one, such as "30s"`},
		{"tw float without unit", "tw = 30.5\n", 1, "tw", `30.5 has no unit`},
		{"tw string without unit", "tw = \"30\"\n", 1, "tw", `"30" has no unit: write "30s"`},
		{"tw not a duration", "tw = \"soon\"\n", 1, "tw", `"soon": want a duration such as "30s"`},
		{"tw bool", "tw = true\n", 1, "tw", `true: want a duration in quotes`},
		{"tw negative", "tw = \"-30s\"\n", 1, "tw", `"-30s": want a positive duration`},
		{"tw below the minimum", "tw = \"5s\"\n", 1, "tw", "5s is below the RFC 3539 minimum of 6s"},
		{"listen not a list", "listen = \"tcp://a:1\"\n", 1, "listen", `want a list, such as ["tcp://a:1"]`},
		{"listen a table", "listen = {a = 1}\n", 1, "listen", `a table: want a list of URLs`},
		{"listen element not a string", "listen = [\n\"tcp://a:1\",\n 5]\n", 3, "listen", "5: want a string"},
		{"listen without scheme", "listen = [\"127.0.0.1:3868\"]\n", 1, "listen", `"127.0.0.1:3868" has no scheme: write it as a URL such as tcp://127.0.0.1:3868`},
		{"listen unknown scheme", "listen = [\"http://a:1\"]\n", 1, "listen", `"http://a:1": unknown scheme http`},
		{"listen radius+udp", "listen = [\"radius+udp://a:1\"]\n", 1, "listen", `"radius+udp://a:1": unknown scheme radius+udp: RADIUS over UDP is radius://`},
		{"listen without port", "listen = [\"tcp://a\"]\n", 1, "listen", `"tcp://a": missing port`},
		{"listen bad port", "listen = [\"tcp://a:99999\"]\n", 1, "listen", `"tcp://a:99999": bad port`},
		{"listen with a path", "listen = [\"tcp://a:1/x\"]\n", 1, "listen", `"tcp://a:1/x": only scheme://host:port`},
		{"radius without port", "listen = [\"radius://a\"]\n", 1, "listen", `"radius://a": want radius://host:port`},
		{"listen twice", "listen = [\"tcp://a:1\",\n\"tcp://a:1\"]\n", 2, "listen", "tcp://a:1 is also listed at line 1"},
		{"tls listener without cert", "listen = [\"tls://a:1\"]\n", 1, "listen", "tls:// needs tls-cert and tls-key"},
		{"radsec listener without client CA", "tls-cert = \"cert.pem\"\ntls-key = \"key.pem\"\nlisten = [\"radsec://a:2083\"]\n", 3, "listen", "radsec:// needs tls-client-ca"},
		{"tls-cert alone", "tls-cert = \"cert.pem\"\n", 1, "tls-cert", "tls-cert and tls-key go together"},
		{"tls-key alone", "tls-key = \"key.pem\"\n", 1, "tls-key", "tls-cert and tls-key go together"},
		{"missing cert file", "tls-cert = \"nope.pem\"\ntls-key = \"key.pem\"\n", 1, "tls-cert", "{dir}/nope.pem: no such file"},
		{"missing CA file", "tls-ca = \"nope.pem\"\n", 1, "tls-ca", "{dir}/nope.pem: no such file"},
		{"missing client CA file", "tls-client-ca = \"nope.pem\"\n", 1, "tls-client-ca", "{dir}/nope.pem: no such file"},
		{"secret and secret-file", "secret = \"a\"\nsecret-file = \"secret\"\n", 2, "secret-file", "give secret or secret-file, not both"},
		{"empty secret", "secret = \"\"\n", 1, "secret", "empty secret"},
		{"missing secret file", "secret-file = \"nope\"\n", 1, "secret-file", "{dir}/nope: no such file"},
		{"secret file too long", "secret-file = \"/dev/zero\"\n", 1, "secret-file", "/dev/zero is longer than 64 KiB: not a secret"},
		{"secret file a directory", "secret-file = \".\"\n", 1, "secret-file", "{dir}: is a directory"},
		{"empty secret file", "secret-file = \"empty\"\n", 1, "secret-file", "{dir}/empty is empty"},
		{"negative max-rate", "max-rate = -1\n", 1, "max-rate", "-1: want 0 (no limit) to 100000000"},
		{"negative max-outstanding", "max-outstanding = -1\n", 1, "max-outstanding", "-1: want 0 (no limit) or more"},
		{"max-rate not an integer", "max-rate = 1.5\n", 1, "max-rate", "1.5: want an integer"},
		{"max-rate out of range", "max-rate = 99999999999\n", 1, "max-rate", "99999999999 is out of range"},
		{"dedup url not redis", "[dedup]\nurl = \"mysql://db\"\n", 2, "dedup.url", `"mysql://db": want memory or a redis://`},
		{"dedup url not a URL", "[dedup]\nurl = \"redis://a b:1\"\n", 2, "dedup.url", `"redis://a b:1" is not a URL`},
		{"dedup url without host", "[dedup]\nurl = \"redis:///0\"\n", 2, "dedup.url", `"redis:///0": no host`},
		{"dedup url with a password", "[dedup]\nurl = \"redis://u:pw@r:6379/0\"\n", 2, "dedup.url", `"redis://u:xxxxx@r:6379/0" holds a password`},
		{"dedup url with a password in the query", "[dedup]\nurl = \"redis://r:6379/0?password=pw\"\n", 2, "dedup.url", `"redis://r:6379/0?password=xxxxx" holds a password in its query`},
		{"dedup password file and env", "[dedup]\nurl = \"redis://r:1\"\npassword-file = \"redis.pw\"\npassword-env = \"AAATP_TEST_SET\"\n", 4, "dedup.password-env", "give password-file or password-env, not both"},
		{"dedup password for memory", "[dedup]\npassword-env = \"AAATP_TEST_SET\"\n", 2, "dedup.password-env", "the memory store has no password"},
		{"dedup password file missing", "[dedup]\nurl = \"redis://r:1\"\npassword-file = \"nope\"\n", 3, "dedup.password-file", "{dir}/nope: no such file"},
		{"dedup password file empty", "[dedup]\nurl = \"redis://r:1\"\npassword-file = \"empty\"\n", 3, "dedup.password-file", "{dir}/empty is empty"},
		{"dedup password env unset", "[dedup]\nurl = \"redis://r:1\"\npassword-env = \"AAATP_TEST_UNSET\"\n", 3, "dedup.password-env", "the environment variable AAATP_TEST_UNSET is not set"},
		{"dedup password env not a name", "[dedup]\nurl = \"redis://r:1\"\npassword-env = \"$PW\"\n", 3, "dedup.password-env", `"$PW" is not an environment variable name`},
		{"peer without url", "[[peer]]\nname = \"a\"\n", 1, "peer", "no url: every [[peer]] needs one"},
		{"peer bad url", "[[peer]]\nurl = \"a:1\"\n", 2, "peer.url", `"a:1" has no scheme`},
		{"peer bad name", "[[peer]]\nurl = \"tcp://a:1\"\nname = \"a b\"\n", 3, "peer.name", `"a b": want a name without spaces`},
		{"two peers of one name", "[[peer]]\nname = \"a\"\nurl = \"tcp://a:1\"\n[[peer]]\nname = \"a\"\nurl = \"tcp://b:1\"\n", 5, "peer.name", `two peers named "a" (the other at line 1)`},
		{"two peers of one URL", "[[peer]]\nname = \"a\"\nurl = \"tcp://a:1\"\n[[peer]]\nname = \"b\"\nurl = \"tcp://a:1\"\n", 6, "peer.url", "tcp://a:1 is also the url of the peer at line 1"},
		{"two peers of one URL and no name", "[[peer]]\nurl = \"tcp://a:1\"\n[[peer]]\nurl = \"tcp://b:1\"\n[[peer]]\nurl = \"tcp://a:1\"\n", 6, "peer.url", `two peers named "tcp://a:1" (the other at line 1)`},
		{"negative weight", "[[peer]]\nurl = \"tcp://a:1\"\nweight = -2\n", 3, "peer.weight", "-2: want an integer from 1 to 1048576"},
		{"weight above the balancer's bound", "[[peer]]\nurl = \"tcp://a:1\"\nweight = 1048577\n", 3, "peer.weight", "1048577: want an integer from 1 to 1048576"},
		{"zero weight", "[[peer]]\nurl = \"tcp://a:1\"\nweight = 0\n", 3, "peer.weight", "0: want an integer from 1 to 1048576"},
		{"weight a string", "[[peer]]\nurl = \"tcp://a:1\"\nweight = \"2\"\n", 3, "peer.weight", `"2": want an integer`},
		{"bad role", "[[peer]]\nurl = \"tcp://a:1\"\nrole = \"backup\"\n", 3, "peer.role", `"backup": want primary or secondary`},
		{"peer tw without unit", "[[peer]]\nurl = \"tcp://a:1\"\ntw = 30\n", 3, "peer.tw", "30 has no unit"},
		{"peer tw below the minimum", "[[peer]]\nurl = \"tcp://a:1\"\ntw = \"1s\"\n", 3, "peer.tw", "1s is below the RFC 3539 minimum"},
		{"peer tls-cert alone", "[[peer]]\nurl = \"tls://a:1\"\ntls-cert = \"cert.pem\"\n", 3, "peer.tls-cert", "tls-cert and tls-key go together"},
		{"peer missing tls-key file", "[[peer]]\nurl = \"tls://a:1\"\ntls-cert = \"cert.pem\"\ntls-key = \"nope\"\n", 4, "peer.tls-key", "{dir}/nope: no such file"},
		{"peer missing tls-ca file", "[[peer]]\nurl = \"tls://a:1\"\ntls-ca = \"nope\"\n", 3, "peer.tls-ca", "{dir}/nope: no such file"},
		{"peer tw over UDP", "[[peer]]\nurl = \"radius://a:1\"\nsecret = \"x\"\ntw = \"10s\"\n", 4, "peer.tw", "radius:// servers have no watchdog"},
		{"peer tls-ca without TLS", "[[peer]]\nurl = \"tcp://a:1\"\ntls-ca = \"ca.pem\"\n", 3, "peer.tls-ca", "tcp://a:1 does not use TLS: tls-ca is for tls:// and radsec:// peers"},
		{"peer tls-cert without TLS", "[[peer]]\nurl = \"radius+tcp://a:1\"\nsecret = \"x\"\ntls-cert = \"cert.pem\"\n", 4, "peer.tls-cert", "radius+tcp://a:1 does not use TLS: tls-cert is for"},
		{"peer tls-server-name without TLS", "[[peer]]\nurl = \"sctp://a:1\"\ntls-server-name = \"a\"\n", 3, "peer.tls-server-name", "sctp://a:1 does not use TLS"},
		{"peer tls-server-name with a port", "[[peer]]\nurl = \"tls://a:1\"\ntls-server-name = \"a:1\"\n", 3, "peer.tls-server-name", `"a:1": want the host name the peer's certificate names`},
		{"peer tls-server-name empty", "[[peer]]\nurl = \"radsec://a\"\ntls-server-name = \"\"\n", 3, "peer.tls-server-name", `"": want the host name`},
		{"peer tls-server-name not a string", "[[peer]]\nurl = \"tls://a:1\"\ntls-server-name = 1\n", 3, "peer.tls-server-name", `1: want a string`},
		{"peer negative max-outstanding", "[[peer]]\nurl = \"tcp://a:1\"\nmax-outstanding = -5\n", 3, "peer.max-outstanding", "-5: want 0 (no limit) or more"},
		{"peer secret and secret-file", "[[peer]]\nurl = \"radius://a:1\"\nsecret = \"x\"\nsecret-file = \"secret\"\n", 4, "peer.secret-file", "give secret or secret-file, not both"},
		{"peer missing secret file", "[[peer]]\nurl = \"radius://a:1\"\nsecret-file = \"nope\"\n", 3, "peer.secret-file", "{dir}/nope: no such file"},
		{"secret of a Diameter peer", "[[peer]]\nurl = \"tcp://a:1\"\nsecret = \"x\"\n", 3, "peer.secret", "only RADIUS servers (radius://, radius+tcp://) have a shared secret; tcp://a:1 is Diameter"},
		{"secret of a radsec server", "[[peer]]\nurl = \"radsec://a\"\nsecret = \"x\"\n", 3, "peer.secret", `radsec:// servers use the secret "radsec"`},
		{"Diameter and RADIUS peers", "[[peer]]\nurl = \"tcp://a:1\"\n[[peer]]\nurl = \"radius://b:1\"\n", 4, "peer.url", "radius://b:1: a node speaks one protocol to its peers: this peer is RADIUS over UDP, the one at line 1 Diameter"},
		{"RADIUS UDP and TCP servers", "[[peer]]\nurl = \"radius://a:1\"\n[[peer]]\nurl = \"radius+tcp://b:1\"\n", 4, "peer.url", "radius+tcp://b:1: a node speaks one protocol"},
		{"no primary", "[[peer]]\nurl = \"tcp://a:1\"\nrole = \"secondary\"\n", 3, "peer.role", "no peer is primary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(filepath.Join(d, "t.toml"), []byte(tc.src))
			msg := strings.ReplaceAll(tc.msg, "{dir}", d)
			checkProblems(t, err, []Problem{{File: filepath.Join(d, "t.toml"), Line: tc.line, Key: tc.key, Msg: msg}})
		})
	}
}

// TestPerPeerSettings: each peer's own tw, TLS files and server name and
// limits replace the node's, key by key; a peer without its own keeps
// the node's.
func TestPerPeerSettings(t *testing.T) {
	d := dir(t)
	src := `tw = "30s"
tls-cert = "cert.pem"
tls-key = "key.pem"
tls-ca = "ca.pem"
max-rate = 100
max-outstanding = 64

[[peer]]
name = "near"
url = "tls://10.0.0.1:3868"
tw = "10s"
tls-ca = "client.pem"
tls-server-name = "hss1.example.net"
max-outstanding = 8

[[peer]]
name = "far"
url = "tls://10.0.0.2:3868"
tls-cert = "client.pem"
tls-key = "key.pem"
max-rate = 5

[[peer]]
name = "plain"
url = "tls://10.0.0.3:3868"
`
	cfg, err := Parse(filepath.Join(d, "p.toml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	node := TLS{Cert: filepath.Join(d, "cert.pem"), Key: filepath.Join(d, "key.pem"), CA: filepath.Join(d, "ca.pem")}
	want := []Peer{
		{Name: "near", URL: "tls://10.0.0.1:3868", Tw: 10 * time.Second,
			TLS:    TLS{Cert: node.Cert, Key: node.Key, CA: filepath.Join(d, "client.pem"), ServerName: "hss1.example.net"},
			Limits: Limits{MaxRate: 100, MaxOutstanding: 8}, Own: Own{Tw: true, TLSCA: true, MaxOutstanding: true}, Line: 8},
		{Name: "far", URL: "tls://10.0.0.2:3868", Tw: 30 * time.Second,
			TLS:    TLS{Cert: filepath.Join(d, "client.pem"), Key: filepath.Join(d, "key.pem"), CA: node.CA},
			Limits: Limits{MaxRate: 5, MaxOutstanding: 64}, Own: Own{TLSCert: true, MaxRate: true}, Line: 16},
		{Name: "plain", URL: "tls://10.0.0.3:3868", Tw: 30 * time.Second, TLS: node, Limits: Limits{MaxRate: 100, MaxOutstanding: 64}, Line: 23},
	}
	if !reflect.DeepEqual(cfg.Peers, want) {
		t.Errorf("peers\n got %+v\nwant %+v", cfg.Peers, want)
	}
}

// TestPerPeerProblemsWithLines: problems of several peers' own settings
// in one file, each at its line.
func TestPerPeerProblemsWithLines(t *testing.T) {
	src := `[[peer]]
url = "radius://a:1812"
secret = "x"
tw = "10s"
tls-ca = "ca.pem"
max-outstanding = -1
[[peer]]
url = "radius://b:1812"
secret = "y"
tw = "2s"
max-rate = "fast"
tls-server-name = "b"
`
	_, err := Parse("t.toml", []byte(src))
	checkProblems(t, err, []Problem{
		{File: "t.toml", Line: 4, Key: "peer.tw", Msg: "radius:// servers have no watchdog"},
		{File: "t.toml", Line: 5, Key: "peer.tls-ca", Msg: "radius://a:1812 does not use TLS"},
		{File: "t.toml", Line: 6, Key: "peer.max-outstanding", Msg: "-1: want 0 (no limit) or more"},
		{File: "t.toml", Line: 10, Key: "peer.tw", Msg: "2s is below the RFC 3539 minimum"},
		{File: "t.toml", Line: 10, Key: "peer.tw", Msg: "radius:// servers have no watchdog"},
		{File: "t.toml", Line: 11, Key: "peer.max-rate", Msg: `"fast": want an integer`},
		{File: "t.toml", Line: 12, Key: "peer.tls-server-name", Msg: "radius://b:1812 does not use TLS"},
	})
}

// TestRoleOnSomePeers: a file gives every peer a role or none; each peer
// without one is named.
func TestRoleOnSomePeers(t *testing.T) {
	src := "[[peer]]\nurl = \"tcp://a:1\"\nrole = \"primary\"\n[[peer]]\nurl = \"tcp://b:1\"\n[[peer]]\nurl = \"tcp://c:1\"\n"
	_, err := Parse("t.toml", []byte(src))
	checkProblems(t, err, []Problem{
		{File: "t.toml", Line: 4, Key: "peer", Msg: "no role: give every peer a role"},
		{File: "t.toml", Line: 6, Key: "peer", Msg: "no role: give every peer a role"},
	})
}

// TestEveryProblemAtOnce: one file with many problems lists all of them,
// in line order, unknown keys among the others.
func TestEveryProblemAtOnce(t *testing.T) {
	src := `origin-host = "bad host"
tw = 30
listen = ["127.0.0.1:3868"]
colour = "blue"

[[peer]]
name = "a"
url = "tcp://a:3868"
weight = -1

[[peer]]
name = "a"
url = "tcp://b:3868"
secret = "x"
secret-file = "missing"
rol = "primary"
`
	_, err := Parse("t.toml", []byte(src))
	checkProblems(t, err, []Problem{
		{File: "t.toml", Line: 1, Key: "origin-host", Msg: "want a DiameterIdentity"},
		{File: "t.toml", Line: 2, Key: "tw", Msg: "30 has no unit"},
		{File: "t.toml", Line: 3, Key: "listen", Msg: `"127.0.0.1:3868" has no scheme`},
		{File: "t.toml", Line: 4, Key: "colour", Msg: `unknown key "colour"`},
		{File: "t.toml", Line: 9, Key: "peer.weight", Msg: "-1: want an integer from 1 to 1048576 (the peer's share of the load)"},
		{File: "t.toml", Line: 12, Key: "peer.name", Msg: `two peers named "a" (the other at line 6)`},
		{File: "t.toml", Line: 15, Key: "peer.secret-file", Msg: "give secret or secret-file, not both"},
		{File: "t.toml", Line: 16, Key: "peer.rol", Msg: `unknown key "rol" (did you mean "role"?)`},
	})
	want := "t.toml:1: origin-host: want a DiameterIdentity"
	if !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), "\n") != 7 {
		t.Errorf("Error() = %q: want one problem a line, the first starting %q", err, want)
	}
}

// TestLineIndexNestedTables: the line of a key under [peer.x] after a
// [[peer]] is found (the decoder refuses the table, with its line).
func TestLineIndexNestedTables(t *testing.T) {
	src := "[[peer]]\nurl = \"tcp://a:1\"\n[[peer]]\nurl = \"tcp://b:1\"\n[peer.tls]\ncert = \"x\"\n"
	lines := lineIndex([]byte(src))
	for path, want := range map[string]int{"peer": 1, "peer.0": 1, "peer.0.url": 2, "peer.1": 3, "peer.1.url": 4, "peer.1.tls": 5, "peer.1.tls.cert": 6} {
		if lines[path] != want {
			t.Errorf("line of %s = %d, want %d", path, lines[path], want)
		}
	}
	_, err := Parse("t.toml", []byte(src))
	checkProblems(t, err, []Problem{{File: "t.toml", Line: 5, Key: "peer.tls", Msg: `unknown key "tls"`}})
}

// TestLineIndexInlineValues: keys in inline tables and elements of nested
// arrays have their lines too.
func TestLineIndexInlineValues(t *testing.T) {
	src := "dedup = {url = \"memory\"}\npeer = [\n  {url = \"tcp://a:1\"},\n  {url = \"tcp://b:1\", weight = 0},\n]\nx = [[1, 2], [3,\n 4]]\n"
	lines := lineIndex([]byte(src))
	for path, want := range map[string]int{"dedup": 1, "dedup.url": 1, "peer": 2, "peer.0": 3, "peer.0.url": 3, "peer.1.weight": 4, "x.0.1": 6, "x.1.1": 7} {
		if lines[path] != want {
			t.Errorf("line of %s = %d, want %d", path, lines[path], want)
		}
	}
}

func TestLoad(t *testing.T) {
	d := dir(t)
	p := filepath.Join(d, "aaa.toml")
	if err := os.WriteFile(p, []byte("secret-file = \"secret\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.File != p || string(cfg.Secret) != "s3cret" || cfg.SecretFile != filepath.Join(d, "secret") {
		t.Errorf("Load = %+v: want the secret file relative to the configuration's directory", cfg)
	}
	if _, err := Load(filepath.Join(d, "nope.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v", err)
	}
}

// TestTwoLoadsCompare: a reload can tell what changed by comparing two
// Configs; a changed secret file changes the Config.
func TestTwoLoadsCompare(t *testing.T) {
	d := dir(t)
	src := []byte("[[peer]]\nurl = \"radius://a:1\"\nsecret-file = \"secret\"\n")
	a, err := Parse(filepath.Join(d, "t.toml"), src)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Parse(filepath.Join(d, "t.toml"), src)
	if !reflect.DeepEqual(a, b) {
		t.Error("two loads of one file differ")
	}
	if err := os.WriteFile(filepath.Join(d, "secret"), []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := Parse(filepath.Join(d, "t.toml"), src)
	if reflect.DeepEqual(a, c) || string(c.Peers[0].Secret) != "new" {
		t.Errorf("a changed secret file is not seen: %q", c.Peers[0].Secret)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"rol", "role", 1}, {"wieght", "weight", 2}, {"kitten", "sitting", 3}} {
		if got := editDistance(tc.a, tc.b); got != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}

// WithoutSecret names the RADIUS listeners and peers the file gives no
// shared secret, radsec:// aside, and none once the file has a default
// secret (or, for listeners, clients of their own).
func TestWithoutSecret(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"none", `listen = ["radius://127.0.0.1:1812", "tcp://127.0.0.1:3868"]
[[peer]]
url = "radius+tcp://10.0.0.1:1812"
[[peer]]
url = "radius+tcp://10.0.0.2:1812"
secret = "own"
[[peer]]
url = "radsec://10.0.0.3:2083"
`, []string{"radius://127.0.0.1:1812", "radius+tcp://10.0.0.1:1812"}},
		{"default", `secret = "s"
listen = ["radius://127.0.0.1:1812"]
[[peer]]
url = "radius://10.0.0.1:1812"
`, nil},
		{"clients", `listen = ["radius+tcp://127.0.0.1:1812"]
[[client]]
name = "nas1"
source = "192.0.2.7"
secret = "c"
`, nil},
	} {
		cfg, err := Parse(tc.name+".toml", []byte(tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := cfg.WithoutSecret(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
