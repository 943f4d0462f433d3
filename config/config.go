// Package config reads the configuration file of an aaatp node: its
// identity, the URLs it listens on, the peers (Diameter) or servers
// (RADIUS) it talks to with their own settings, and its duplicate store.
//
// The file is TOML. Keys at the top are the node's own settings and the
// defaults of every peer; each [[peer]] table is one peer; each
// [[client]] table is one RADIUS client a server answers (see Client);
// [dedup] is the duplicate store:
//
//	origin-host = "client1.example.net"
//	origin-realm = "example.net"
//	destination-realm = "example.net"
//	tw = "30s"                      # watchdog interval, with its unit
//
//	[[peer]]
//	name = "hss1"
//	url = "tcp://10.0.0.1:3868"
//	role = "primary"
//
//	[[peer]]
//	name = "hss2"
//	url = "tcp://10.0.0.2:3868"
//	role = "secondary"
//
// The [dedup] table's url is "memory" or a Redis URL without a password;
// password-file or password-env (a file, or the environment variable
// named) gives the password, never on a command line that ps shows. Of a
// Sentinel URL (master_name=NAME, or the redis+sentinel scheme) that
// password is the master's, and sentinel-password-file or
// sentinel-password-env gives the sentinels' own, when they need one
// (the same file for both when they share it); the master's username, if
// any, is the URL's username parameter, the userinfo's the sentinels'
// (see Dedup.URLWithPassword):
//
//	[dedup]
//	url = "redis://10.0.0.5:26379/0?master_name=mymaster&addr=10.0.0.6:26379"
//	password-file = "redis.pw"
//	sentinel-password-file = "sentinel.pw"
//
// Load and Parse check the whole file and report every problem found,
// each with its line: unknown keys (a misspelt key is never silently
// ignored), values of the wrong type, URLs that are not URLs, durations
// without a unit, weights below 1, two peers or clients of one name, a
// client's source that is no address or prefix, a secret given both
// inline and as a file, files that cannot be read, and so on. Files
// named in the configuration (secret files, certificates, the store's
// password file) are read or opened at load, relative to the directory of
// the configuration file unless absolute; the secrets and the store's
// password are kept in the Config, so that two loads of a file compare
// equal only when what they configure is the same.
//
// Every key is optional here: what a command needs and did not get from
// the file it may get from its flags, and it reports what is still
// missing.
//
// Load and Parse share no state: they may run on several goroutines at
// once. A Config they return is plain data owned by the caller.
package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aaatp/aaatp/internal/storeurl"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
)

// MinTw is the shortest watchdog interval accepted: RFC 3539's minimum
// Twinit.
const MinTw = 6 * time.Second

// Config is a checked configuration file. Its zero values mean "not set
// in the file". It holds no pointers shared with anything else, so an old
// and a new Config can be compared field by field, peers by Name.
type Config struct {
	// File is the name the configuration was read from.
	File string

	// OriginHost and OriginRealm are the node's Diameter identity.
	OriginHost  string
	OriginRealm string
	// DestinationRealm is the Destination-Realm of a client's requests.
	DestinationRealm string

	// Tw is the watchdog interval Twinit: the listeners' and the default
	// of every peer.
	Tw time.Duration

	// Listen are the URLs a server listens on.
	Listen []string

	// TLS holds the node's certificate and key, presented on tls:// and
	// radsec:// listeners (and, by default, to every peer), the CA that
	// peers' certificates must chain to (CA), and the CA that clients of
	// a listener must present a certificate of (ClientCA, mutual TLS).
	TLS TLS

	// Secret is the RADIUS shared secret of radius:// and radius+tcp://
	// listeners, and the default of every RADIUS peer; SecretFile the file
	// it was read from ("" when given inline).
	Secret     []byte
	SecretFile string

	// Limits are every peer's default throttle limits.
	Limits Limits

	// Dedup is the duplicate store; nil when the file has no [dedup].
	Dedup *Dedup

	// Peers are the peers (Diameter) or servers (RADIUS) in file order,
	// each with the node's defaults filled in where the peer sets none.
	Peers []Peer

	// Clients are the RADIUS clients a server answers, in file order
	// (see Client); none: every source, with Secret.
	Clients []Client
}

// TLS names PEM files. Paths are absolute or relative to the working
// directory once loaded.
type TLS struct {
	Cert, Key, CA string
	ClientCA      string // listeners only
	// ServerName is the name a peer's certificate must carry (peers only,
	// tls-server-name); "": the host of its URL.
	ServerName string
}

// Limits are throttle limits of one peer; 0 means no limit.
type Limits struct {
	// MaxRate is at most this many requests a second.
	MaxRate int
	// MaxOutstanding is at most this many requests awaiting an answer.
	MaxOutstanding int
}

// Role is a peer's place in primary/secondary operation.
type Role string

// The roles. A file gives every peer a role, or none (the peers share
// the load).
const (
	RoleNone      Role = ""
	RolePrimary   Role = "primary"
	RoleSecondary Role = "secondary"
)

// Peer is one [[peer]] table: a Diameter peer or a RADIUS server.
type Peer struct {
	// Name labels the peer in logs, events and metrics; default its URL.
	Name string
	// URL is tcp://, tls:// or sctp:// (Diameter), or radius:// (UDP),
	// radius+tcp:// or radsec:// (RADIUS).
	URL string
	// Secret is a RADIUS server's shared secret (radius:// and
	// radius+tcp://; radsec:// uses "radsec"); SecretFile is the file it
	// came from, if any.
	Secret     []byte
	SecretFile string
	// Weight is the peer's share of the load; 0: not set (1).
	Weight int
	// Role is primary, secondary or none.
	Role Role
	// Tw is the peer's watchdog interval; 0: not set. radius:// servers
	// have no watchdog: a tw of their own is a problem.
	Tw time.Duration
	// TLS is the certificate presented to this peer, the CA its
	// certificate must chain to and the name it must carry. Only tls://
	// and radsec:// peers may set their own; the others carry the
	// node's.
	TLS TLS
	// Limits are the peer's throttle limits, its own or the node's.
	Limits Limits
	// Own tells which of Tw, TLS and Limits the [[peer]] sets itself;
	// the others are the node's, from the top of the file. A program
	// that keeps the node's settings it started with across reloads
	// gives the peer those in place of the file's new ones, and keeps
	// the peer's own.
	Own Own
	// Line is the line of the peer's [[peer]] header, for messages; it is
	// not part of what the peer configures.
	Line int
}

// Own names the settings a [[peer]] sets itself rather than taking the
// node's. A peer's tls-server-name is always its own.
type Own struct {
	Tw             bool
	TLSCert        bool // tls-cert and tls-key, which go together
	TLSCA          bool
	MaxRate        bool
	MaxOutstanding bool
}

// Diameter reports whether the peer's URL is a Diameter one.
func (p Peer) Diameter() bool { return protocolOf(p.URL) == protoDiameter }

// Dedup is the duplicate store.
type Dedup struct {
	// URL is "memory" or a Redis URL, without a password.
	URL string
	// Password is the store's password, read from PasswordFile or from
	// the environment variable PasswordEnv; "" when neither is set. Of a
	// Sentinel URL (Sentinel), it is the master's.
	Password     string
	PasswordFile string
	PasswordEnv  string
	// SentinelPassword is the password of a Sentinel URL's sentinels,
	// read from SentinelPasswordFile or from the environment variable
	// SentinelPasswordEnv; "" when neither is set (only a Sentinel URL
	// may set them).
	SentinelPassword     string
	SentinelPasswordFile string
	SentinelPasswordEnv  string
}

// Sentinel reports whether URL names a master behind Redis Sentinel: the
// scheme redis+sentinel (rediss+sentinel), or redis (rediss) with a
// master_name parameter, as dedup.Open tells them.
func (d Dedup) Sentinel() bool {
	u, err := url.Parse(d.URL)
	return err == nil && sentinelURL(u)
}

// sentinelUser is the user name in the userinfo of a Sentinel URL, the
// sentinels'; "" for other URLs.
func (d Dedup) sentinelUser() string {
	u, err := url.Parse(d.URL)
	if err != nil || !sentinelURL(u) {
		return ""
	}
	return u.User.Username()
}

func sentinelURL(u *url.URL) bool {
	base, mode, _ := strings.Cut(strings.ToLower(u.Scheme), "+")
	if base != "redis" && base != "rediss" {
		return false
	}
	return mode == "sentinel" || mode == "" && u.Query().Has("master_name")
}

// URLWithPassword returns URL with the passwords in it, for opening the
// store; print URL, not this. Password goes where go-redis (dedup.Open)
// gives it to the server that keeps the data: in the userinfo of a URL of
// one server or of a cluster, in the password parameter of a Sentinel URL
// (the master's; the userinfo of a Sentinel URL authenticates to the
// sentinels, with SentinelPassword, and the master's username, if any, is
// the URL's username parameter).
func (d Dedup) URLWithPassword() string {
	if d.Password == "" && d.SentinelPassword == "" {
		return d.URL
	}
	u, err := url.Parse(d.URL)
	if err != nil {
		return d.URL
	}
	userinfo := func(password string) {
		name := ""
		if u.User != nil {
			name = u.User.Username()
		}
		u.User = url.UserPassword(name, password)
	}
	if !sentinelURL(u) {
		userinfo(d.Password)
		return u.String()
	}
	if d.Password != "" {
		q := u.Query()
		q.Set("password", d.Password)
		u.RawQuery = q.Encode()
	}
	if d.SentinelPassword != "" {
		userinfo(d.SentinelPassword)
	}
	return u.String()
}

// Problem is one thing wrong in a configuration file.
type Problem struct {
	File string
	Line int    // 1-based; 0 when the problem has no one line
	Key  string // the key concerned, dotted (peer.url), or ""
	Msg  string
}

func (p Problem) String() string {
	where := p.File
	if p.Line > 0 {
		where = fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	if p.Key != "" {
		return where + ": " + p.Key + ": " + p.Msg
	}
	return where + ": " + p.Msg
}

// Error lists every problem found in a configuration file, in line order.
type Error struct {
	Problems []Problem
}

// Error returns one problem a line, each as FILE:LINE: KEY: MESSAGE.
func (e *Error) Error() string {
	s := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		s[i] = p.String()
	}
	return strings.Join(s, "\n")
}

// maxConfig bounds what Load reads of a configuration file: thousands of
// peers and clients fit in far less, and a device named by mistake
// (/dev/zero) is refused instead of read until the memory runs out.
const maxConfig = 4 << 20

// Load reads and checks the configuration file at path, of at most 4 MiB.
// On failure the error is an *Error listing every problem (or the error
// reading it).
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxConfig {
		return nil, &Error{Problems: []Problem{{File: path, Msg: fmt.Sprintf("longer than %d MiB: not a configuration file", maxConfig>>20)}}}
	}
	return Parse(path, b)
}

// Parse checks a configuration read from the file name (used in
// messages, and its directory for relative paths). On failure the error is
// an *Error listing every problem.
func Parse(name string, data []byte) (*Config, error) {
	c := &checker{file: name, dir: filepath.Dir(name)}
	cfg := c.parse(data)
	if len(c.problems) > 0 {
		slices.SortStableFunc(c.problems, func(a, b Problem) int { return a.Line - b.Line })
		return nil, &Error{Problems: c.problems}
	}
	return cfg, nil
}

// Summary is one line saying what cfg configures.
func (cfg *Config) Summary() string {
	var parts []string
	if cfg.OriginHost != "" {
		parts = append(parts, "origin-host "+cfg.OriginHost)
	}
	parts = append(parts, plural(len(cfg.Listen), "listener"), plural(len(cfg.Peers), "peer"))
	if len(cfg.Clients) > 0 {
		parts = append(parts, plural(len(cfg.Clients), "client"))
	}
	if cfg.Dedup != nil {
		parts = append(parts, "dedup "+cfg.Dedup.URL)
	}
	return strings.Join(parts, ", ")
}

// WithoutSecret returns the RADIUS listeners and peers (radsec:// aside,
// whose secret is "radsec") that the file gives no shared secret: valid,
// but the program needs one from elsewhere for them (a flag, the
// environment). A listener needs none when the file has clients, each
// with its own.
func (cfg *Config) WithoutSecret() []string {
	var out []string
	if cfg.Secret == nil && len(cfg.Clients) == 0 {
		for _, u := range cfg.Listen {
			if needsSecret(u) {
				out = append(out, u)
			}
		}
	}
	for _, p := range cfg.Peers {
		if needsSecret(p.URL) && p.Secret == nil { // the file's default is a peer's Secret already
			out = append(out, p.URL)
		}
	}
	return out
}

// needsSecret reports whether u is a RADIUS URL that needs a shared
// secret: radius:// and radius+tcp://, not radsec:// ("radsec", RFC 6614).
func needsSecret(u string) bool {
	p := protocolOf(u)
	return p == protoRADIUSUDP || (p == protoRADIUSStream && !strings.HasPrefix(strings.ToLower(u), "radsec://"))
}

func plural(n int, s string) string {
	if n == 1 {
		return "1 " + s
	}
	return fmt.Sprintf("%d %ss", n, s)
}

type protocol int

const (
	protoUnknown protocol = iota
	protoDiameter
	protoRADIUSUDP
	protoRADIUSStream
)

// protocolOf tells a URL's protocol by its scheme.
func protocolOf(u string) protocol {
	scheme, _, _ := strings.Cut(u, "://")
	switch strings.ToLower(scheme) {
	case "tcp", "tls", "sctp":
		return protoDiameter
	case "radius":
		return protoRADIUSUDP
	case "radius+tcp", "radsec":
		return protoRADIUSStream
	}
	return protoUnknown
}

const schemes = "tcp, tls, sctp (Diameter); radius (UDP), radius+tcp, radsec (RADIUS)"

// checkURL checks a listener's or a peer's URL.
func checkURL(s string) error {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		example := "tcp://127.0.0.1:3868"
		if strings.Contains(s, ":") && !strings.ContainsAny(s, "/ ") {
			example = "tcp://" + s
		}
		return fmt.Errorf("%q has no scheme: write it as a URL such as %s (schemes: %s)", s, example, schemes)
	}
	scheme = strings.ToLower(scheme)
	switch scheme {
	case "tcp", "tls", "sctp":
	case "radius+tcp":
		scheme = "tcp"
	case "radsec":
		scheme = "tls"
		if u, err := url.Parse(s); err == nil && u.Port() == "" {
			rest = strings.TrimSuffix(u.Host, ":") + ":2083"
		}
	case "radius":
		u, err := url.Parse(s)
		if err != nil || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Hostname() == "" || u.Port() == "" {
			return fmt.Errorf("%q: want radius://host:port", s)
		}
		scheme = "tcp" // the same host and port rules
	case "radius+udp", "udp":
		return fmt.Errorf("%q: unknown scheme %s: RADIUS over UDP is radius://", s, scheme)
	default:
		return fmt.Errorf("%q: unknown scheme %s (schemes: %s)", s, scheme, schemes)
	}
	if _, err := transport.ParseURL(scheme + "://" + rest); err != nil {
		msg := strings.TrimPrefix(err.Error(), "transport: ")
		if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, "URL ") {
			msg = msg[i+2:]
		}
		return fmt.Errorf("%q: %s", s, msg)
	}
	return nil
}

// serverKey is what tells two spellings of one server's URL apart from
// two servers: the scheme and host in lower case, the default port
// (radsec://'s 2083) filled in, no trailing slash. A URL that does not
// parse is its own key (checkURL says what is wrong with it).
func serverKey(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return s
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" && scheme == "radsec" {
		port = "2083"
	}
	host := strings.ToLower(u.Hostname())
	if port != "" {
		host = net.JoinHostPort(host, port)
	}
	key := scheme + "://" + host + strings.TrimRight(u.EscapedPath(), "/")
	if u.RawQuery != "" {
		key += "?" + u.RawQuery
	}
	return key
}

// checkDedupURL checks the store's URL, which must not hold a password.
// Its problems show it without one (storeurl.Redacted).
func checkDedupURL(s string) error {
	if s == "memory" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		msg := errors.Unwrap(err).Error()
		if strings.Contains(s, "@") || strings.Contains(strings.ToLower(s), "password") {
			// Where a password ends cannot be told: show the scheme
			// alone, and not what the parser quotes.
			s, msg = storeurl.Redacted(s), storeurl.Unquoted(msg)
		}
		return fmt.Errorf("%q is not a URL: %s", s, msg)
	}
	switch strings.ToLower(u.Scheme) {
	case "redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster":
	default:
		return fmt.Errorf("%q: want memory or a redis://, rediss://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster:// URL", storeurl.Redacted(s))
	}
	if u.Host == "" {
		return fmt.Errorf("%q: no host", storeurl.Redacted(s))
	}
	if storeurl.StrayAt(u) {
		return fmt.Errorf("%q holds an '@' after its host: a password written in it, whose '/' or '?' ends the host? Leave it out and give %s", storeurl.Redacted(s), passwordKeys(u))
	}
	if _, ok := u.User.Password(); ok {
		return fmt.Errorf("%q holds a password: leave it out (anyone can read it in ps and logs) and give %s", storeurl.Redacted(s), passwordKeys(u))
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		// A pair that does not parse would be dropped: refused.
		return fmt.Errorf("%q: its query does not parse: %s", storeurl.Redacted(s), storeurl.Unquoted(err.Error()))
	}
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") {
			return fmt.Errorf("%q holds a password in its query: leave it out and give %s", storeurl.Redacted(s), passwordKeys(u))
		}
	}
	if strings.HasSuffix(strings.ToLower(u.Scheme), "+sentinel") && !q.Has("master_name") {
		return fmt.Errorf("%q: a Sentinel URL names its master: add master_name=NAME", storeurl.Redacted(s))
	}
	return nil
}

// passwordKeys names the keys that give the passwords of the store at u.
func passwordKeys(u *url.URL) string {
	if sentinelURL(u) {
		return "password-file or password-env (the master's), sentinel-password-file or sentinel-password-env (the sentinels')"
	}
	return "password-file or password-env"
}

// checkIdentity checks a DiameterIdentity.
func checkIdentity(s string) error {
	if err := message.CheckIdentity(s); err != nil {
		return fmt.Errorf("want a DiameterIdentity such as aaa1.example.net: %v", err)
	}
	return nil
}
