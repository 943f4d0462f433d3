package radudp

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Scheme is the URL scheme of RADIUS over UDP.
const Scheme = "radius"

// Default ports of RFC 2865 and RFC 2866, used when a URL has none.
const (
	DefaultAuthPort = 1812
	DefaultAcctPort = 1813
)

// IsURL reports whether s is a radius:// URL (RADIUS over UDP), so that a
// caller accepting Diameter, RADIUS stream and RADIUS UDP URLs knows which
// package parses it.
func IsURL(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	return ok && strings.EqualFold(scheme, Scheme)
}

// ParseURL parses radius://host[:port] and returns host:port, with
// DefaultAuthPort when the URL has no port. The scheme is case-insensitive;
// paths, queries and user information are refused.
func ParseURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("radudp: bad URL %q: %w", s, err)
	}
	if !strings.EqualFold(u.Scheme, Scheme) {
		return "", fmt.Errorf("radudp: URL %q: want radius://host[:port]", s)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("radudp: URL %q: only radius://host[:port] is allowed", s)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return "", fmt.Errorf("radudp: URL %q has no host", s)
	}
	if port == "" {
		port = strconv.Itoa(DefaultAuthPort)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("radudp: URL %q: bad port %q", s, port)
	}
	return net.JoinHostPort(host, port), nil
}
