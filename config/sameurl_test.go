package config

import "testing"

// One server listed twice under two spellings of its URL is refused as
// the same spelling twice is, each time naming both lines: a scheme or
// host in capitals, a default port left out, a trailing slash. Config
// check used to pass them; the client then ran two peers to one server,
// one refused for good (5012, "already has an open connection"), and
// the server failed to bind its second listener.
func TestSameServerTwoSpellings(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"tcp://h.example.net:3868", "TCP://H.example.net:3868"},
		{"radsec://h.example.net", "radsec://h.example.net:2083"},
		{"tcp://h.example.net:3868", "tcp://h.example.net:3868/"},
		{"radius://[2001:DB8::1]:1812", "radius://[2001:db8::1]:1812"},
	} {
		src := "[[peer]]\nname = \"a\"\nurl = \"" + tc.a + "\"\n[[peer]]\nname = \"b\"\nurl = \"" + tc.b + "\"\n"
		_, err := Parse("c.toml", []byte(src))
		checkProblems(t, err, []Problem{{File: "c.toml", Line: 6, Key: "peer.url", Msg: tc.b + " is also the url of the peer at line 1"}})

		src = "listen = [\"" + tc.a + "\",\n  \"" + tc.b + "\"]\ntls-cert = \"/dev/null\"\ntls-key = \"/dev/null\"\ntls-client-ca = \"/dev/null\"\n"
		_, err = Parse("s.toml", []byte(src))
		checkProblems(t, err, []Problem{{File: "s.toml", Line: 2, Key: "listen", Msg: tc.b + " is also listed at line 1"}})
	}
	if _, err := Parse("c.toml", []byte("[[peer]]\nurl = \"tcp://h:3868\"\n[[peer]]\nurl = \"tcp://h:3869\"\n")); err != nil {
		t.Errorf("two ports: %v", err)
	}
}
