// Package storeurl shows the URL of a duplicate store (memory, or a Redis
// URL as dedup.Open takes it) without its passwords, for messages, logs
// and reports: one place that knows where a password may hide in one.
// Its functions are safe for concurrent use.
package storeurl

import (
	"net/url"
	"strings"
)

// Redacted returns s fit to print: xxxxx for the password of its user
// info and the value of every query key naming a password (password,
// sentinel_password). A URL that does not parse, or parses with an
// opaque part, a fragment or an '@' after its host, shows its scheme
// alone: a password written unescaped ('#', '/', '?', '%' or '@' in it)
// cuts the URL where it should not, and where the password ends cannot be
// told. A query that does not parse is not shown.
func Redacted(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" || u.Fragment != "" || StrayAt(u) {
		return schemeOnly(s)
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = ""
			return u.Redacted() + "?..."
		}
		redacted := false
		for k := range q {
			if strings.Contains(strings.ToLower(k), "password") {
				q[k] = []string{"xxxxx"}
				redacted = true
			}
		}
		if redacted {
			u.RawQuery = q.Encode()
		}
	}
	if u.User == nil && u.RawQuery == "" {
		return s
	}
	return u.Redacted()
}

// StrayAt reports whether u holds an '@' after its host: what is left of
// a password written unescaped whose '/' or '?' made the parser end the
// host before it ("redis://:2024/pw@host:6379" parses with the host
// ":2024" and the rest of the password in the path).
func StrayAt(u *url.URL) bool {
	return strings.Contains(u.Path, "@") || strings.Contains(u.RawPath, "@") ||
		strings.Contains(u.RawQuery, "@") || strings.Contains(u.Fragment, "@")
}

// schemeOnly is the scheme of s and "...", or "..." when s has none.
func schemeOnly(s string) string {
	scheme, _, ok := strings.Cut(s, ":")
	if !ok || scheme == "" || strings.ContainsAny(scheme, "@/?#%") {
		return "..."
	}
	if strings.HasPrefix(s[len(scheme):], "://") {
		return scheme + "://..."
	}
	return scheme + ":..."
}

// Unquoted is s with every part in double quotes (as %q writes it) made
// "...": url.Parse quotes what it refuses, which may be part of a
// password.
func Unquoted(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteString(`"..."`)
		s = s[i+1:]
		end := -1
		for j := 0; j < len(s) && end < 0; j++ {
			switch s[j] {
			case '\\':
				j++ // an escaped character
			case '"':
				end = j
			}
		}
		if end < 0 { // unterminated: drop the rest
			return b.String()
		}
		s = s[end+1:]
	}
}
