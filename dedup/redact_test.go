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
	// A password whose '/' or '?' ends the host before it: the URL
	// parses, the rest of the password in its path or query, which
	// go-redis' errors quote.
	for _, bad := range []string{
		"redis://:2024/Zq9secret@127.0.0.1:6379/0",
		"redis://:2024?Zq9secret@127.0.0.1:6379/0",
		"redis+sentinel://:/Zq9secret@127.0.0.1:26379?master_name=m",
	} {
		s, err := Open(bad)
		if err == nil {
			_ = s.Close()
			t.Errorf("Open(%s) accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "Zq9secret") {
			t.Errorf("Open(%s): the error shows the password: %v", bad, err)
		}
	}
}
