package storeurl

import (
	"strings"
	"testing"
)

// TestRedacted: no password of a --dedup URL reaches the report, the
// status page or the logs, whether in the userinfo or, for Sentinel, in
// the query.
func TestRedacted(t *testing.T) {
	for in, want := range map[string]string{
		"memory":                           "memory",
		"redis://127.0.0.1:6379/0":         "redis://127.0.0.1:6379/0",
		"redis://:s3cret@127.0.0.1:6379/0": "redis://:xxxxx@127.0.0.1:6379/0",
		"redis://s1:26379/0?master_name=m&password=s3cret&addr=s2:26379":   "redis://s1:26379/0?addr=s2%3A26379&master_name=m&password=xxxxx",
		"redis://u:s3cret@s1:26379?master_name=m&sentinel_password=s3cret": "redis://u:xxxxx@s1:26379?master_name=m&sentinel_password=xxxxx",
		"redis+cluster://n1:7000?addr=n2:7000":                             "redis+cluster://n1:7000?addr=n2:7000",
		"redis://s1:26379/0?master_name=m&Password=s3cret":                 "redis://s1:26379/0?Password=xxxxx&master_name=m",
		// What url.Parse refuses, or parses with the password cut in two
		// (a '#' or '/' or '%' written unescaped): only the scheme shows.
		"redis://:pa#s3cret@127.0.0.1:6379/0":                 "redis://...",
		"redis://u:pa/s3cret@127.0.0.1:6379/0":                "redis://...",
		"redis://:s3cret%zz@127.0.0.1:6379/0":                 "redis://...",
		"redis:pa#s3cret@127.0.0.1:6379/0":                    "redis:...",
		":s3cret@127.0.0.1:6379/0":                            "...",
		"s3cret@127.0.0.1:6379/0":                             "...",
		"redis://s1:26379/0?master_name=m&password=s3cret%zz": "redis://s1:26379/0?...",
		// A password whose '/' or '?' ends the host before it: it parses,
		// the password in the path or the query.
		"redis://:2024/s3cret@10.0.0.5:6379/0":             "redis://...",
		"redis://:2024?s3cret@10.0.0.5:6379/0":             "redis://...",
		"redis://default:99/s3cret@10.0.0.5:6379/0":        "redis://...",
		"redis+sentinel://:/s3cret@s1:26379?master_name=m": "redis+sentinel://...",
	} {
		got := Redacted(in)
		if got != want {
			t.Errorf("Redacted(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(got, "s3cret") {
			t.Errorf("Redacted(%q) shows the password", in)
		}
	}
}

// What url.Parse quotes, which may be part of a password, is elided.
func TestUnquoted(t *testing.T) {
	for in, want := range map[string]string{
		`invalid port ":Zq" after host`: `invalid port "..." after host`,
		`a "x\"y" b "z"`:                `a "..." b "..."`,
		`no quotes`:                     `no quotes`,
		`unterminated "Zq9secret`:       `unterminated "..."`,
		`escaped end "Zq\\" and "more"`: `escaped end "..." and "..."`,
	} {
		if got := Unquoted(in); got != want {
			t.Errorf("Unquoted(%q) = %q, want %q", in, got, want)
		}
	}
}
