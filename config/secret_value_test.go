package config

import (
	"strings"
	"testing"
)

// A secret written without quotes is refused without its value: the
// problem is printed by config check and in the reload log, which must
// not show a secret, at the top, on a [[peer]] and on a [[client]].
func TestUnquotedSecretNotPrinted(t *testing.T) {
	for _, src := range []string{
		"secret = 80211493\n",
		"secret = 80211.493\n",
		"secret = true\n",
		"secret = [80211493]\n",
		"[[peer]]\nurl = \"radius://a:1812\"\nsecret = 80211493\n",
		"[[client]]\nname = \"n\"\nsource = \"192.0.2.1\"\nsecret = 80211493\n",
	} {
		_, err := Parse("s.toml", []byte(src))
		if err == nil {
			t.Errorf("%q: no problem", src)
			continue
		}
		msg := err.Error()
		for _, v := range []string{"80211", "493", "true"} {
			if strings.Contains(msg, v) {
				t.Errorf("%q: the problem shows the secret: %s", src, msg)
			}
		}
		if !strings.Contains(msg, "secret: ") || !strings.Contains(msg, "want a string in quotes") {
			t.Errorf("%q: %s: want the key and what it wants", src, msg)
		}
	}
}
