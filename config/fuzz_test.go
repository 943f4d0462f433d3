package config

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics, and returns either a Config or an *Error
// whose every problem has a message and a line within the file (0 only
// for problems of no one line).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"origin-host = \"a.example.net\"\ntw = \"30s\"\nlisten = [\"tcp://0.0.0.0:3868\"]\n",
		"[[peer]]\nname = \"a\"\nurl = \"tcp://a:1\"\nweight = 2\nrole = \"primary\"\n[[peer]]\nurl = \"tcp://b:1\"\nrole = \"secondary\"\n",
		"peer = [{url = \"radius://a:1\", secret = \"x\"}, {url = \"radius://b:1\", weight = -1}]\n",
		"[dedup]\nurl = \"redis://r:6379/0\"\npassword-env = \"X\"\n",
		"tw = 30\nlisten = \"x\"\ncolour = 1\n[peer.tls]\n",
		"[[peer]]\n[peer.x]\n[[peer.y]]\na.b.c = [[1], {d = 2}]\n",
		"[[client]]\nname = \"bng1\"\nsource = \"192.0.2.0/24\"\nsecret = \"s\"\nprotocol = \"udp\"\n[[client]]\nname = \"x\"\nsource = \"2001:db8::/32\"\n",
		"secret-file = \"no-such.secret\"\n[[peer]]\nurl = \"radius+tcp://a:1812\"\nsecret-file = \"/dev/null\"\n",
		"dedup = {url = \"redis://r:6379/0\", password-env = \"AAATP_FUZZ_UNSET\"}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.toml", data)
		if err == nil {
			if cfg == nil {
				t.Fatal("nil Config and nil error")
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) || len(e.Problems) == 0 {
			t.Fatalf("error %v (%T): want an *Error with problems", err, err)
		}
		lines := strings.Count(string(data), "\n") + 1
		for _, p := range e.Problems {
			if p.Msg == "" || p.Line < 0 || p.Line > lines {
				t.Fatalf("problem %+v: no message, or a line outside the %d of the file", p, lines)
			}
		}
	})
}
