package dedup

import (
	"strings"
	"testing"
)

// TestOpenErrorQuotesNoPassword: url.Parse's errors quote the part of
// the URL they refuse, which for a password written with an unescaped
// '#', '/' or '%' is the password's beginning (`invalid port ":Zq" after
// host`): Open's error shows neither the URL nor what the parser quoted.
func TestOpenErrorQuotesNoPassword(t *testing.T) {
	for _, bad := range []string{
		"redis://:Zq#9secret@127.0.0.1:6379/0",
		"redis://u:Zq/9secret@127.0.0.1:6379/0",
		"redis://:Zq%zz9secret@127.0.0.1:6379/0",
		"redis+sentinel://:Zq#9secret@127.0.0.1:26379?master_name=m",
		"redis+cluster://:Zq%zz9secret@127.0.0.1:7000",
	} {
		s, err := Open(bad)
		if err == nil {
			_ = s.Close()
			t.Errorf("Open(%s) accepted", bad)
			continue
		}
		for _, part := range []string{"Zq", "9secret", "%zz"} {
			if strings.Contains(err.Error(), part) {
				t.Errorf("Open(%s): the error shows %q of the password: %v", bad, part, err)
			}
		}
		if !strings.Contains(err.Error(), `"..."`) {
			t.Errorf("Open(%s): %v: want what the parser quoted elided", bad, err)
		}
	}
	for in, want := range map[string]string{
		`invalid port ":Zq" after host`: `invalid port "..." after host`,
		`a "x\"y" b "z"`:                `a "..." b "..."`,
		`no quotes`:                     `no quotes`,
		`unterminated "Zq9secret`:       `unterminated "..."`,
		`escaped end "Zq\\" and "more"`: `escaped end "..." and "..."`,
	} {
		if got := unquoted(in); got != want {
			t.Errorf("unquoted(%q) = %q, want %q", in, got, want)
		}
	}
}
