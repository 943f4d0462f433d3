package radpeer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
)

// URL schemes of RADIUS stream transports.
const (
	SchemeTCP    = "radius+tcp" // RFC 6613; a port is required
	SchemeRadSec = "radsec"     // RFC 6614, TLS; default port 2083
)

// DefaultRadSecPort is the RADIUS/TLS port of RFC 6614 section 2.1.
const DefaultRadSecPort = 2083

// RadSecSecret is the shared secret RFC 6614 section 2.3 fixes for
// RADIUS/TLS: the packets are protected by TLS, the secret only keeps the
// RADIUS computations defined.
var RadSecSecret = []byte("radsec")

// Endpoint is a parsed RADIUS stream URL.
type Endpoint struct {
	Scheme string // SchemeTCP or SchemeRadSec
	// Transport is the same address as a package transport URL
	// (tcp://host:port or tls://host:port).
	Transport transport.Endpoint
}

// String returns the endpoint as a RADIUS URL.
func (e Endpoint) String() string { return e.Scheme + "://" + e.Transport.Address() }

// IsURL reports whether s has a RADIUS scheme (radius+tcp, radsec, or
// radius for UDP), so that a caller accepting both Diameter and RADIUS
// URLs knows which package parses it.
func IsURL(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	if !ok {
		return false
	}
	scheme = strings.ToLower(scheme)
	return scheme == SchemeTCP || scheme == SchemeRadSec || scheme == SchemeUDP
}

// ParseURL parses radius+tcp://host:port or radsec://host[:port]. The
// scheme is case-insensitive; paths, queries and user information are
// refused. radius+tcp needs a port (RADIUS/TCP has no port of its own:
// RFC 6613 uses 1812 and 1813 by application), radsec defaults to 2083.
func ParseURL(s string) (Endpoint, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("radpeer: bad URL %q: %w", s, err)
	}
	scheme := strings.ToLower(u.Scheme)
	var tscheme string
	switch scheme {
	case SchemeTCP:
		tscheme = transport.SchemeTCP
	case SchemeRadSec:
		tscheme = transport.SchemeTLS
	default:
		return Endpoint{}, fmt.Errorf("radpeer: URL %q: want radius+tcp://host:port or radsec://host[:port]", s)
	}
	host := u.Host
	if scheme == SchemeRadSec && u.Port() == "" {
		host = strings.TrimSuffix(host, ":") + fmt.Sprintf(":%d", DefaultRadSecPort)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return Endpoint{}, fmt.Errorf("radpeer: URL %q: only scheme://host:port is allowed", s)
	}
	ep, err := transport.ParseURL(tscheme + "://" + host)
	if err != nil {
		return Endpoint{}, fmt.Errorf("radpeer: URL %q: %w", s, err)
	}
	return Endpoint{Scheme: scheme, Transport: ep}, nil
}

// Secret returns the shared secret to use on ep: RadSecSecret for
// radsec, else secret, which must not be empty.
func (e Endpoint) Secret(secret []byte) ([]byte, error) {
	if e.Scheme == SchemeRadSec {
		return RadSecSecret, nil
	}
	if len(secret) == 0 {
		return nil, fmt.Errorf("radpeer: %s needs a shared secret", e)
	}
	return secret, nil
}

// streamOptions returns opts with RADIUS framing, after checking the
// TLS requirements of RFC 6614 for radsec: TLS 1.2 or later and, for
// mutual authentication, a client certificate (client) or a required and
// verified client certificate (server).
func streamOptions(ep Endpoint, opts transport.Options, server bool) (transport.Options, error) {
	opts.ReadFrame = radius.ReadFrame
	if ep.Scheme != SchemeRadSec {
		return opts, nil
	}
	cfg := opts.TLS
	if cfg == nil {
		return opts, errors.New("radpeer: radsec needs a TLS configuration with certificates (RFC 6614: mutual authentication)")
	}
	cfg = cfg.Clone()
	if cfg.MinVersion < tls.VersionTLS12 {
		cfg.MinVersion = tls.VersionTLS12
	}
	switch {
	case server && cfg.ClientAuth != tls.RequireAndVerifyClientCert:
		return opts, errors.New("radpeer: a radsec listener must require and verify client certificates (RFC 6614 2.4); give it a client CA")
	case !server && len(cfg.Certificates) == 0 && cfg.GetClientCertificate == nil:
		return opts, errors.New("radpeer: a radsec client must present a certificate (RFC 6614 2.4)")
	}
	opts.TLS = cfg
	return opts, nil
}

// Listen listens on rawURL (port 0 for any free port). A radsec listener
// needs opts.TLS with a certificate and a client CA.
func Listen(rawURL string, opts transport.Options) (transport.Listener, error) {
	ep, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if opts, err = streamOptions(ep, opts, true); err != nil {
		return nil, err
	}
	return transport.Listen(ep.Transport.String(), opts)
}

// ReadSecret returns the shared secret named by configuration: the
// contents of file (one trailing newline removed) when file is not "",
// else the value of the environment variable env. It never takes the
// secret itself, so that it does not show in a process listing.
func ReadSecret(file, env string) ([]byte, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("radpeer: reading the shared secret: %w", err)
		}
		b = []byte(strings.TrimRight(string(b), "\r\n"))
		if len(b) == 0 {
			return nil, fmt.Errorf("radpeer: shared secret file %s is empty", file)
		}
		return b, nil
	}
	if env != "" {
		if v := os.Getenv(env); v != "" {
			return []byte(v), nil
		}
	}
	return nil, fmt.Errorf("radpeer: no shared secret: give a secret file or set $%s", env)
}
