package config

import (
	"testing"
)

// A max-outstanding above the Identifiers of a RADIUS server is the
// file's problem, with its line: config check used to pass
// max-outstanding = 2000 in a file of radius:// servers, and the client
// then refused it under a flag's name ("--max-outstanding 2000"), no
// line. Over TCP and TLS the bound is that of the most connections
// --max-conns may open.
func TestMaxOutstandingAboveIdentifiers(t *testing.T) {
	_, err := Parse("r.toml", []byte("secret = \"s\"\nmax-outstanding = 2000\n[[peer]]\nurl = \"radius://a:1812\"\n[[peer]]\nurl = \"radius://b:1812\"\nmax-outstanding = 1025\n"))
	checkProblems(t, err, []Problem{
		{File: "r.toml", Line: 2, Key: "max-outstanding", Msg: "2000: a radius:// server takes at most 1024 requests in flight"},
		{File: "r.toml", Line: 7, Key: "peer.max-outstanding", Msg: "1025: a radius:// server takes at most 1024 requests in flight"},
	})
	_, err = Parse("r.toml", []byte("secret = \"s\"\n[[peer]]\nurl = \"radius+tcp://a:1812\"\nmax-outstanding = 20000\n"))
	checkProblems(t, err, []Problem{
		{File: "r.toml", Line: 4, Key: "peer.max-outstanding", Msg: "20000: a radius+tcp:// or radsec:// server takes at most 16320 requests in flight"},
	})
	for _, ok := range []string{
		"secret = \"s\"\nmax-outstanding = 1024\n[[peer]]\nurl = \"radius://a:1812\"\n",
		"secret = \"s\"\nmax-outstanding = 16320\n[[peer]]\nurl = \"radius+tcp://a:1812\"\n",
		"max-outstanding = 2000\n[[peer]]\nurl = \"tcp://a:3868\"\n", // Diameter: no Identifier
	} {
		if _, err := Parse("r.toml", []byte(ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
