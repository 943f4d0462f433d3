package config

import (
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseClients(t *testing.T) {
	d := dir(t)
	src := `secret = "top"
[[client]]
name = "nas1"
source = "192.0.2.7"
secret = "one"
[[client]]
name = "pop-a"
source = "198.51.100.0/24"
secret-file = "secret"
protocol = "udp"
[[client]]
name = "v6"
source = "2001:db8::/32"
secret = "six"
[[client]]
name = "tls-nas"
source = "192.0.2.8"
protocol = "tls"
`
	cfg, err := Parse(filepath.Join(d, "t.toml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []Client{
		{Name: "nas1", Source: netip.MustParsePrefix("192.0.2.7/32"), Secret: []byte("one"), Line: 2},
		{Name: "pop-a", Source: netip.MustParsePrefix("198.51.100.0/24"), Secret: []byte("s3cret"), SecretFile: filepath.Join(d, "secret"), Protocol: "udp", Line: 6},
		{Name: "v6", Source: netip.MustParsePrefix("2001:db8::/32"), Secret: []byte("six"), Line: 11},
		{Name: "tls-nas", Source: netip.MustParsePrefix("192.0.2.8/32"), Protocol: "tls", Line: 15},
	}
	if !reflect.DeepEqual(cfg.Clients, want) {
		t.Fatalf("clients\n got %+v\nwant %+v", cfg.Clients, want)
	}
	if s := cfg.Summary(); !strings.Contains(s, "4 clients") {
		t.Errorf("summary %q: want the clients counted", s)
	}
}

// TestClientProblems: every problem of a [[client]] is reported with its
// line and key, as for the other tables.
func TestClientProblems(t *testing.T) {
	d := dir(t)
	const ok = "[[client]]\nname = \"a\"\nsource = \"192.0.2.1\"\nsecret = \"x\"\n"
	for _, tc := range []struct {
		name, src string
		line      int
		key, msg  string
	}{
		{"unknown key", "[[client]]\nname = \"a\"\nsource = \"192.0.2.1\"\nsecret = \"x\"\nipaddr = \"192.0.2.1\"\n", 5, "client.ipaddr", `unknown key "ipaddr" (known here: name, source, secret, secret-file, protocol)`},
		{"misspelt key", "[[client]]\nname = \"a\"\nsource = \"192.0.2.1\"\nscret = \"x\"\nsecret-file = \"secret\"\n", 4, "client.scret", `unknown key "scret" (did you mean "secret"?)`},
		{"duplicate name", ok + "[[client]]\nname = \"a\"\nsource = \"192.0.2.2\"\nsecret = \"y\"\n", 6, "client.name", `two clients named "a" (the other at line 1): names must differ`},
		{"no name", "[[client]]\nsource = \"192.0.2.1\"\nsecret = \"x\"\n", 1, "client", "no name: every [[client]] needs one"},
		{"bad name", "[[client]]\nname = \"a b\"\nsource = \"192.0.2.1\"\nsecret = \"x\"\n", 2, "client.name", `"a b": want a name without spaces`},
		{"missing source", "[[client]]\nname = \"a\"\nsecret = \"x\"\n", 1, "client", "no source: every [[client]] needs one"},
		{"bad CIDR", "[[client]]\nname = \"a\"\nsource = \"192.0.2.0/33\"\nsecret = \"x\"\n", 3, "client.source", `"192.0.2.0/33": the prefix length must be 0 to 32`},
		{"host bits", "[[client]]\nname = \"a\"\nsource = \"192.0.2.7/24\"\nsecret = \"x\"\n", 3, "client.source", `"192.0.2.7/24" has bits set past its length: did you mean 192.0.2.0/24, or 192.0.2.7 alone?`},
		{"host name", "[[client]]\nname = \"a\"\nsource = \"nas1.example.net\"\nsecret = \"x\"\n", 3, "client.source", `"nas1.example.net" is not an IP address or prefix (host names are not looked up`},
		{"source not a string", "[[client]]\nname = \"a\"\nsource = 10\nsecret = \"x\"\n", 3, "client.source", "10: want a string"},
		{"secret and secret-file", "[[client]]\nname = \"a\"\nsource = \"192.0.2.1\"\nsecret = \"x\"\nsecret-file = \"secret\"\n", 5, "client.secret-file", "give secret or secret-file, not both"},
		{"no secret", "[[client]]\nname = \"a\"\nsource = \"192.0.2.1\"\n", 1, "client", "no secret: give the client's shared secret"},
		{"missing secret file", "[[client]]\nname = \"a\"\nsource = \"192.0.2.1\"\nsecret-file = \"nope\"\n", 4, "client.secret-file", "{dir}/nope: no such file"},
		{"empty secret", "[[client]]\nname = \"a\"\nsource = \"192.0.2.1\"\nsecret = \"\"\n", 4, "client.secret", "empty secret"},
		{"secret over TLS", "[[client]]\nname = \"a\"\nsource = \"192.0.2.1\"\nprotocol = \"tls\"\nsecret = \"x\"\n", 5, "client.secret", `radsec:// uses the secret "radsec"`},
		{"bad protocol", "[[client]]\nname = \"a\"\nsource = \"192.0.2.1\"\nsecret = \"x\"\nprotocol = \"dtls\"\n", 5, "client.protocol", `"dtls": want udp (radius://), tcp (radius+tcp://) or tls (radsec://)`},
		{"same source", ok + "[[client]]\nname = \"b\"\nsource = \"192.0.2.1/32\"\nsecret = \"y\"\n", 7, "client.source", `192.0.2.1/32 is also the source of client "a" at line 1`},
		{"same source, one protocol", ok + "[[client]]\nname = \"b\"\nsource = \"192.0.2.1\"\nsecret = \"y\"\nprotocol = \"tcp\"\n", 7, "client.source", `192.0.2.1/32 is also the source of client "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(filepath.Join(d, "t.toml"), []byte(tc.src))
			msg := strings.ReplaceAll(tc.msg, "{dir}", d)
			checkProblems(t, err, []Problem{{File: filepath.Join(d, "t.toml"), Line: tc.line, Key: tc.key, Msg: msg}})
		})
	}
}

// TestClientsOfOneSourceByProtocol: one source may be two clients over
// two transports; a third over every transport would be ambiguous.
func TestClientsOfOneSourceByProtocol(t *testing.T) {
	src := "[[client]]\nname = \"a\"\nsource = \"192.0.2.1\"\nsecret = \"x\"\nprotocol = \"udp\"\n" +
		"[[client]]\nname = \"b\"\nsource = \"192.0.2.1\"\nsecret = \"y\"\nprotocol = \"tcp\"\n"
	if _, err := Parse("t.toml", []byte(src)); err != nil {
		t.Fatalf("two protocols of one source: %v", err)
	}
	_, err := Parse("t.toml", []byte(src+"[[client]]\nname = \"c\"\nsource = \"192.0.2.1\"\nsecret = \"z\"\n"))
	checkProblems(t, err, []Problem{{File: "t.toml", Line: 13, Key: "client.source", Msg: `192.0.2.1/32 is also the source of client "a" at line 1`}})
}

func TestParseSource(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "192.0.2.7", want: "192.0.2.7/32"},
		{in: "192.0.2.0/24", want: "192.0.2.0/24"},
		{in: "0.0.0.0/0", want: "0.0.0.0/0"},
		{in: "2001:db8::1", want: "2001:db8::1/128"},
		{in: "2001:db8::/32", want: "2001:db8::/32"},
		{in: "::/0", want: "::/0"},
		{in: "", err: "empty"},
		{in: "192.0.2.7/24", err: "bits set past its length"},
		{in: "2001:db8::1/32", err: "did you mean 2001:db8::/32"},
		{in: "192.0.2.0/33", err: "0 to 32"},
		{in: "2001:db8::/129", err: "0 to 128"},
		{in: "192.0.2.0/-1", err: "0 to 32"},
		{in: "192.0.2.0/024", err: "0 to 32"},
		{in: "192.0.2.0/", err: "0 to 32"},
		{in: "192.0.2", err: "is not an IP address"},
		{in: "fe80::1%eth0", err: "has no zone: write fe80::1"},
		{in: "::ffff:192.0.2.7", err: "write the IPv4 address as such: 192.0.2.7"},
		{in: "nas.example.net", err: "host names are not looked up"},
	} {
		p, err := ParseSource(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSource(%q) = %v, %v: want an error with %q", tc.in, p, err, tc.err)
			}
			continue
		}
		if err != nil || p.String() != tc.want {
			t.Errorf("ParseSource(%q) = %v, %v: want %s", tc.in, p, err, tc.want)
		}
	}
}

// FuzzParseSource: a source parsed is a valid, masked prefix of an
// unzoned, unmapped address that reads back as itself; anything else is
// an error with a message.
func FuzzParseSource(f *testing.F) {
	for _, s := range []string{"192.0.2.7", "10.0.0.0/8", "2001:db8::/32", "::ffff:1.2.3.4", "fe80::1%x/64", "1.2.3.4/33", "a.b", "/", "::/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseSource(s)
		if err != nil {
			if err.Error() == "" || p.IsValid() {
				t.Fatalf("ParseSource(%q): error %q with prefix %v", s, err, p)
			}
			return
		}
		if !p.IsValid() || p.Masked() != p || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			t.Fatalf("ParseSource(%q) = %v: not a valid masked unzoned prefix", s, p)
		}
		back, err := ParseSource(p.String())
		if err != nil || back != p {
			t.Fatalf("ParseSource(%q) = %v, which reads back as %v, %v", s, p, back, err)
		}
	})
}
