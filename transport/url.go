package transport

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Schemes accepted in transport URLs; also the values Conn.Network returns.
const (
	SchemeTCP  = "tcp"
	SchemeTLS  = "tls"
	SchemeSCTP = "sctp"
)

// Endpoint is a parsed transport URL.
type Endpoint struct {
	Scheme string // SchemeTCP, SchemeTLS or SchemeSCTP
	Host   string // host name or IP literal, without brackets; "" means all addresses (Listen only)
	Port   int    // 0 means an ephemeral port (Listen only)
}

// Address returns "host:port" as used by the net package.
func (e Endpoint) Address() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// String returns the endpoint as a URL.
func (e Endpoint) String() string { return e.Scheme + "://" + e.Address() }

// ParseDialURL is ParseURL for a peer to dial: it also needs a host
// and a port that is not 0 (which a listener takes as any port).
func ParseDialURL(s string) (Endpoint, error) {
	ep, err := ParseURL(s)
	if err == nil && (ep.Port == 0 || ep.Host == "") {
		err = fmt.Errorf("transport: cannot dial %s: host and non-zero port needed", s)
	}
	return ep, err
}

// ParseURL parses "tcp://host:port", "tls://host:port" or "sctp://host:port"
// (IPv6 literals in brackets). The scheme is case-insensitive; a port is
// required (Diameter has two well-known ports, 3868 and 5658 for TLS, so
// guessing would be wrong half the time); paths, queries, fragments and
// user information are rejected rather than silently ignored.
func ParseURL(s string) (Endpoint, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("transport: bad URL %q: %w", s, err)
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case SchemeTCP, SchemeTLS, SchemeSCTP:
	case "":
		return Endpoint{}, fmt.Errorf("transport: URL %q has no scheme (want tcp://, tls:// or sctp://)", s)
	default:
		return Endpoint{}, fmt.Errorf("transport: URL %q: unknown scheme %q (want tcp, tls or sctp)", s, u.Scheme)
	}
	if u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return Endpoint{}, fmt.Errorf("transport: URL %q: only scheme://host:port is allowed", s)
	}
	host, portStr, err := net.SplitHostPort(u.Host)
	if err != nil || portStr == "" {
		return Endpoint{}, fmt.Errorf("transport: URL %q: missing port (e.g. %s://%s:3868)", s, scheme, strings.Trim(u.Host, ":"))
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return Endpoint{}, fmt.Errorf("transport: URL %q: bad port %q", s, portStr)
	}
	return Endpoint{Scheme: scheme, Host: host, Port: int(port)}, nil
}
