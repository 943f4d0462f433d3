package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/throttle"
	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// The file's shape. Tables are structs, so that the decoder reports every
// key it does not know; values are any, so that a value of the wrong type
// is reported here with the others instead of stopping the decoder.
type fileDoc struct {
	OriginHost       any          `toml:"origin-host"`
	OriginRealm      any          `toml:"origin-realm"`
	DestinationRealm any          `toml:"destination-realm"`
	Tw               any          `toml:"tw"`
	Listen           any          `toml:"listen"`
	Secret           any          `toml:"secret"`
	SecretFile       any          `toml:"secret-file"`
	TLSCert          any          `toml:"tls-cert"`
	TLSKey           any          `toml:"tls-key"`
	TLSCA            any          `toml:"tls-ca"`
	TLSClientCA      any          `toml:"tls-client-ca"`
	MaxRate          any          `toml:"max-rate"`
	MaxOutstanding   any          `toml:"max-outstanding"`
	Dedup            *fileDedup   `toml:"dedup"`
	Peer             []filePeer   `toml:"peer"`
	Client           []fileClient `toml:"client"`
}

type fileClient struct {
	Name       any `toml:"name"`
	Source     any `toml:"source"`
	Secret     any `toml:"secret"`
	SecretFile any `toml:"secret-file"`
	Protocol   any `toml:"protocol"`
}

type fileDedup struct {
	URL                  any `toml:"url"`
	PasswordFile         any `toml:"password-file"`
	PasswordEnv          any `toml:"password-env"`
	SentinelPasswordFile any `toml:"sentinel-password-file"`
	SentinelPasswordEnv  any `toml:"sentinel-password-env"`
}

type filePeer struct {
	Name           any `toml:"name"`
	URL            any `toml:"url"`
	Secret         any `toml:"secret"`
	SecretFile     any `toml:"secret-file"`
	Weight         any `toml:"weight"`
	Role           any `toml:"role"`
	Tw             any `toml:"tw"`
	TLSCert        any `toml:"tls-cert"`
	TLSKey         any `toml:"tls-key"`
	TLSCA          any `toml:"tls-ca"`
	TLSServerName  any `toml:"tls-server-name"`
	MaxRate        any `toml:"max-rate"`
	MaxOutstanding any `toml:"max-outstanding"`
}

// Keys are the keys of each table, for suggestions.
var (
	topKeys    = []string{"origin-host", "origin-realm", "destination-realm", "tw", "listen", "secret", "secret-file", "tls-cert", "tls-key", "tls-ca", "tls-client-ca", "max-rate", "max-outstanding", "dedup", "peer", "client"}
	dedupKeys  = []string{"url", "password-file", "password-env", "sentinel-password-file", "sentinel-password-env"}
	peerKeys   = []string{"name", "url", "secret", "secret-file", "weight", "role", "tw", "tls-cert", "tls-key", "tls-ca", "tls-server-name", "max-rate", "max-outstanding"}
	clientKeys = []string{"name", "source", "secret", "secret-file", "protocol"}
)

// checker collects the problems of one file.
type checker struct {
	file, dir string
	lines     map[string]int // dotted path (peer.2.url) -> line
	problems  []Problem
}

// problem records a problem with the key at path (its line; the key shown
// without array indexes).
func (c *checker) problem(path, format string, args ...any) {
	c.problems = append(c.problems, Problem{File: c.file, Line: c.lineOf(path), Key: displayKey(path), Msg: fmt.Sprintf(format, args...)})
}

// lineOf is the line of path, else of the nearest enclosing key found.
func (c *checker) lineOf(path string) int {
	for {
		if l, ok := c.lines[path]; ok {
			return l
		}
		i := strings.LastIndexByte(path, '.')
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
}

// displayKey drops the array indexes of a path: peer.2.url is peer.url.
func displayKey(path string) string {
	parts := strings.Split(path, ".")
	out := parts[:0]
	for _, p := range parts {
		if _, err := strconv.Atoi(p); err != nil {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

func (c *checker) parse(data []byte) *Config {
	var doc fileDoc
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	err := dec.Decode(&doc)
	var strict *toml.StrictMissingError
	var de *toml.DecodeError
	switch {
	case err == nil:
	case errors.As(err, &strict):
		for _, e := range strict.Errors {
			line, _ := e.Position()
			c.problems = append(c.problems, Problem{File: c.file, Line: line, Key: strings.Join(e.Key(), "."), Msg: unknownKey(e.Key())})
		}
	case errors.As(err, &de):
		// A syntax error, or a table where a value goes (or the reverse):
		// the rest cannot be read reliably.
		line, _ := de.Position()
		c.problems = append(c.problems, Problem{File: c.file, Line: line, Key: strings.Join(de.Key(), "."), Msg: strings.TrimPrefix(de.Error(), "toml: ")})
		return nil
	default:
		c.problems = append(c.problems, Problem{File: c.file, Msg: strings.TrimPrefix(err.Error(), "toml: ")})
		return nil
	}
	c.lines = lineIndex(data)
	return c.check(&doc)
}

// unknownKey says that the last part of key is not known, with the
// closest known key of its table when one is close.
func unknownKey(key []string) string {
	known := topKeys
	if len(key) > 1 {
		switch key[0] {
		case "dedup":
			known = dedupKeys
		case "peer":
			known = peerKeys
		case "client":
			known = clientKeys
		}
	}
	last := key[len(key)-1]
	best, bestD := "", 3 // suggest only within 2 edits
	for _, k := range known {
		if d := editDistance(last, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key %q (did you mean %q?)", last, best)
	}
	return fmt.Sprintf("unknown key %q (known here: %s)", last, strings.Join(known, ", "))
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// lineIndex maps the dotted path of every key, table and array element of
// a document (parsed without error) to its line. Array tables and arrays
// count from 0: the second [[peer]]'s url is peer.1.url.
func lineIndex(data []byte) map[string]int {
	lines := make(map[string]int)
	arrays := make(map[string]int) // array table path -> elements so far
	var p unstable.Parser
	p.Reset(data)
	line := func(n *unstable.Node) int { return p.Shape(n.Raw).Start.Line }
	prefix := ""
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			var keys []*unstable.Node
			for it := e.Key(); it.Next(); {
				keys = append(keys, it.Node())
			}
			if len(keys) == 0 {
				continue
			}
			path := ""
			last := len(keys)
			if e.Kind == unstable.ArrayTable {
				last-- // the array itself is not one of its elements
			}
			for _, k := range keys[:last] {
				path = join(path, string(k.Data))
				if n, ok := arrays[path]; ok {
					path += "." + strconv.Itoa(n-1)
				}
			}
			if e.Kind == unstable.ArrayTable {
				path = join(path, string(keys[last].Data))
				n := arrays[path]
				arrays[path] = n + 1
				if _, ok := lines[path]; !ok {
					lines[path] = line(keys[0])
				}
				path += "." + strconv.Itoa(n)
			}
			lines[path] = line(keys[0])
			prefix = path
		case unstable.KeyValue:
			indexKeyValue(lines, prefix, e, line)
		}
	}
	return lines
}

func indexKeyValue(lines map[string]int, prefix string, kv *unstable.Node, line func(*unstable.Node) int) {
	path := prefix
	first := true
	for it := kv.Key(); it.Next(); {
		path = join(path, string(it.Node().Data))
		if first {
			lines[path] = line(it.Node())
			first = false
		}
	}
	indexValue(lines, path, kv.Value(), line)
}

func indexValue(lines map[string]int, path string, v *unstable.Node, line func(*unstable.Node) int) {
	switch v.Kind {
	case unstable.InlineTable:
		for it := v.Children(); it.Next(); {
			if n := it.Node(); n.Kind == unstable.KeyValue {
				indexKeyValue(lines, path, n, line)
			}
		}
	case unstable.Array:
		i := 0
		for it := v.Children(); it.Next(); {
			n := it.Node()
			if n.Kind == unstable.Comment {
				continue
			}
			el := path + "." + strconv.Itoa(i)
			i++
			if n.Raw.Length > 0 {
				lines[el] = line(n)
			}
			indexValue(lines, el, n, line)
		}
	}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// check turns the decoded document into a Config, recording every problem.
func (c *checker) check(doc *fileDoc) *Config {
	cfg := &Config{File: c.file}
	if s, ok := c.str("origin-host", doc.OriginHost); ok {
		if err := checkIdentity(s); err != nil {
			c.problem("origin-host", "%v", err)
		}
		cfg.OriginHost = s
	}
	if s, ok := c.str("origin-realm", doc.OriginRealm); ok {
		if err := checkIdentity(s); err != nil {
			c.problem("origin-realm", "%v", err)
		}
		cfg.OriginRealm = s
	}
	if s, ok := c.str("destination-realm", doc.DestinationRealm); ok {
		if err := checkIdentity(s); err != nil {
			c.problem("destination-realm", "%v", err)
		}
		cfg.DestinationRealm = s
	}
	cfg.Tw, _ = c.tw("tw", doc.Tw)
	cfg.Listen = c.urls("listen", doc.Listen)
	cfg.Secret, cfg.SecretFile = c.secret("", doc.Secret, doc.SecretFile)
	cfg.TLS = TLS{
		Cert: c.fileName("tls-cert", doc.TLSCert), Key: c.fileName("tls-key", doc.TLSKey),
		CA: c.fileName("tls-ca", doc.TLSCA), ClientCA: c.fileName("tls-client-ca", doc.TLSClientCA),
	}
	if (doc.TLSCert == nil) != (doc.TLSKey == nil) {
		c.problem(pick(doc.TLSCert != nil, "tls-cert", "tls-key"), "tls-cert and tls-key go together")
	}
	cfg.Limits = c.limits("", doc.MaxRate, doc.MaxOutstanding)
	c.checkListeners(cfg, doc)
	if doc.Dedup != nil {
		cfg.Dedup = c.dedup(doc.Dedup)
	}
	c.peers(cfg, doc)
	c.clients(cfg, doc)
	return cfg
}

// checkListeners checks what the listeners need of the rest of the file.
func (c *checker) checkListeners(cfg *Config, doc *fileDoc) {
	for i, u := range cfg.Listen {
		scheme, _, _ := strings.Cut(strings.ToLower(u), "://")
		path := "listen." + strconv.Itoa(i)
		switch {
		case (scheme == "tls" || scheme == "radsec") && (doc.TLSCert == nil || doc.TLSKey == nil):
			c.problem(path, "%s:// needs tls-cert and tls-key", scheme)
		case scheme == "radsec" && doc.TLSClientCA == nil:
			c.problem(path, "radsec:// needs tls-client-ca (RFC 6614: clients present certificates)")
		}
	}
}

func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

func (c *checker) peers(cfg *Config, doc *fileDoc) {
	names := map[string]int{} // name -> line
	urls := map[string]int{}
	roles, badRoles := 0, 0
	primaries := 0
	var firstProto protocol
	firstProtoLine := 0
	for i, fp := range doc.Peer {
		base := "peer." + strconv.Itoa(i)
		at := func(k string) string { return base + "." + k }
		p := Peer{Line: c.lineOf(base)}
		if u, ok := c.str(at("url"), fp.URL); ok {
			if err := checkURL(u); err != nil {
				c.problem(at("url"), "%v", err)
			}
			p.URL = u
		} else if fp.URL == nil {
			c.problem(base, "no url: every [[peer]] needs one, such as url = \"tcp://aaa1.example.net:3868\"")
		}
		p.Name = p.URL
		if s, ok := c.str(at("name"), fp.Name); ok {
			if s == "" || strings.ContainsAny(s, " \t\r\n\"") {
				c.problem(at("name"), "%q: want a name without spaces or quotes", s)
			}
			p.Name = s
		}
		sameName := false
		if p.Name != "" {
			if l, dup := names[p.Name]; dup {
				c.problem(pick(fp.Name != nil, at("name"), at("url")), "two peers named %q (the other at line %d): names must differ", p.Name, l)
				sameName = true
			} else {
				names[p.Name] = c.lineOf(base)
			}
		}
		if p.URL != "" && !(sameName && fp.Name == nil) { // a URL for a name: said once
			if l, dup := urls[serverKey(p.URL)]; dup {
				c.problem(at("url"), "%s is also the url of the peer at line %d", p.URL, l)
			} else {
				urls[serverKey(p.URL)] = c.lineOf(base)
			}
		}
		proto := protocolOf(p.URL)
		if proto != protoUnknown {
			if firstProto == protoUnknown {
				firstProto, firstProtoLine = proto, c.lineOf(base)
			} else if proto != firstProto {
				c.problem(at("url"), "%s: a node speaks one protocol to its peers: this peer is %s, the one at line %d %s", p.URL, proto, firstProtoLine, firstProto)
			}
		}
		p.Secret, p.SecretFile = c.secret(base, fp.Secret, fp.SecretFile)
		if p.Secret != nil && proto != protoRADIUSUDP && proto != protoRADIUSStream {
			c.problem(pick(fp.Secret != nil, at("secret"), at("secret-file")), "only RADIUS servers (radius://, radius+tcp://) have a shared secret; %s is Diameter", p.URL)
		} else if p.Secret != nil && strings.HasPrefix(strings.ToLower(p.URL), "radsec://") {
			c.problem(pick(fp.Secret != nil, at("secret"), at("secret-file")), "radsec:// servers use the secret \"radsec\" (RFC 6614): leave it out")
		}
		if p.Secret == nil && needsSecret(p.URL) {
			p.Secret, p.SecretFile = cfg.Secret, cfg.SecretFile
		}
		if n, ok := c.int(at("weight"), fp.Weight); ok {
			if n < 1 || n > loadbalance.MaxWeight {
				c.problem(at("weight"), "%d: want an integer from 1 to %d (the peer's share of the load)", n, loadbalance.MaxWeight)
			}
			p.Weight = n
		}
		if s, ok := c.str(at("role"), fp.Role); ok {
			switch Role(s) {
			case RolePrimary:
				primaries++
			case RoleSecondary:
			default:
				c.problem(at("role"), "%q: want primary or secondary", s)
				badRoles++
			}
			p.Role = Role(s)
			roles++
		}
		p.Tw = cfg.Tw
		if d, ok := c.tw(at("tw"), fp.Tw); ok {
			if proto == protoRADIUSUDP {
				c.problem(at("tw"), "radius:// servers have no watchdog (a server that stops replying is found by the timeout and retries of its requests): leave tw out")
			}
			p.Tw, p.Own.Tw = d, true
		}
		p.TLS = TLS{Cert: cfg.TLS.Cert, Key: cfg.TLS.Key, CA: cfg.TLS.CA}
		if p.URL != "" && !tlsScheme(p.URL) {
			// Said once a key; the files of a setting that cannot apply
			// are not looked at.
			for _, k := range []struct {
				key string
				v   any
			}{{"tls-cert", fp.TLSCert}, {"tls-key", fp.TLSKey}, {"tls-ca", fp.TLSCA}, {"tls-server-name", fp.TLSServerName}} {
				if k.v != nil {
					c.problem(at(k.key), "%s does not use TLS: %s is for tls:// and radsec:// peers", p.URL, k.key)
				}
			}
		} else {
			c.peerTLS(&p.TLS, at, fp)
			p.Own.TLSCert, p.Own.TLSCA = fp.TLSCert != nil || fp.TLSKey != nil, fp.TLSCA != nil
		}
		p.Limits = cfg.Limits
		l := c.limits(base, fp.MaxRate, fp.MaxOutstanding)
		if fp.MaxRate != nil {
			p.Limits.MaxRate, p.Own.MaxRate = l.MaxRate, true
		}
		if fp.MaxOutstanding != nil {
			p.Limits.MaxOutstanding, p.Own.MaxOutstanding = l.MaxOutstanding, true
			c.identifiers(at("max-outstanding"), proto, p.Limits.MaxOutstanding)
		}
		cfg.Peers = append(cfg.Peers, p)
	}
	if doc.MaxOutstanding != nil && len(cfg.Peers) > 0 {
		c.identifiers("max-outstanding", firstProto, cfg.Limits.MaxOutstanding)
	}
	if roles > 0 && roles < len(doc.Peer) {
		for i, fp := range doc.Peer {
			if fp.Role == nil {
				c.problem("peer."+strconv.Itoa(i), "no role: give every peer a role (primary or secondary), or none")
			}
		}
	}
	if roles > 0 && primaries == 0 && badRoles == 0 {
		c.problem("peer.0.role", "no peer is primary")
	}
}

// peerTLS reads a TLS peer's own tls-* keys into t, which holds the
// node's.
func (c *checker) peerTLS(t *TLS, at func(string) string, fp filePeer) {
	if s, ok := c.str(at("tls-server-name"), fp.TLSServerName); ok {
		if s == "" || strings.ContainsAny(s, " \t\r\n/:@") {
			c.problem(at("tls-server-name"), "%q: want the host name the peer's certificate names, such as aaa1.example.net", s)
		}
		t.ServerName = s
	}
	if fp.TLSCert != nil || fp.TLSKey != nil {
		if (fp.TLSCert == nil) != (fp.TLSKey == nil) {
			c.problem(pick(fp.TLSCert != nil, at("tls-cert"), at("tls-key")), "tls-cert and tls-key go together")
		}
		t.Cert, t.Key = c.fileName(at("tls-cert"), fp.TLSCert), c.fileName(at("tls-key"), fp.TLSKey)
	}
	if fp.TLSCA != nil {
		t.CA = c.fileName(at("tls-ca"), fp.TLSCA)
	}
}

// tlsScheme reports whether a peer's URL connects with TLS.
func tlsScheme(u string) bool {
	scheme, _, _ := strings.Cut(u, "://")
	scheme = strings.ToLower(scheme)
	return scheme == "tls" || scheme == "radsec"
}

func (p protocol) String() string {
	switch p {
	case protoDiameter:
		return "Diameter"
	case protoRADIUSUDP:
		return "RADIUS over UDP"
	case protoRADIUSStream:
		return "RADIUS over TCP or TLS"
	}
	return "unknown"
}

func (c *checker) dedup(fd *fileDedup) *Dedup {
	d := &Dedup{URL: "memory"}
	if s, ok := c.str("dedup.url", fd.URL); ok {
		if err := checkDedupURL(s); err != nil {
			c.problem("dedup.url", "%v", err)
		}
		d.URL = s
	}
	d.Password, d.PasswordFile, d.PasswordEnv = c.dedupPassword(d, "", fd.PasswordFile, fd.PasswordEnv)
	d.SentinelPassword, d.SentinelPasswordFile, d.SentinelPasswordEnv = c.dedupPassword(d, "sentinel-", fd.SentinelPasswordFile, fd.SentinelPasswordEnv)
	if d.sentinelUser() != "" && d.SentinelPassword == "" {
		// go-redis would send the name to no one: a user name without
		// a password authenticates nothing.
		c.problem("dedup.url", "the user name of a Sentinel URL is the sentinels', with sentinel-password-file or sentinel-password-env; the master's is the username parameter (?username=NAME)")
	}
	return d
}

// dedupPassword reads the password of d's store that the keys
// PREFIXpassword-file (fv) or PREFIXpassword-env (ev) give: "" and
// "sentinel-", the sentinels' own, which only a Sentinel URL has.
func (c *checker) dedupPassword(d *Dedup, prefix string, fv, ev any) (password, file, env string) {
	fileKey, envKey := "dedup."+prefix+"password-file", "dedup."+prefix+"password-env"
	pf, pfOK := c.str(fileKey, fv)
	pe, peOK := c.str(envKey, ev)
	switch {
	case pfOK && peOK:
		c.problem(envKey, "give %spassword-file or %spassword-env, not both", prefix, prefix)
	case (pfOK || peOK) && d.URL == "memory":
		c.problem(pick(pfOK, fileKey, envKey), "the memory store has no password")
	case (pfOK || peOK) && prefix != "" && !d.Sentinel():
		c.problem(pick(pfOK, fileKey, envKey), "the URL names no Sentinel master (master_name): give the store's password as password-file or password-env")
	case pfOK:
		file = c.path(pf)
		if b, ok := c.readFile(fileKey, file); ok {
			password = strings.TrimRight(string(b), "\r\n")
			if password == "" {
				c.problem(fileKey, "%s is empty", file)
			}
		}
	case peOK:
		env = pe
		if !validEnvName(pe) {
			c.problem(envKey, "%q is not an environment variable name (letters, digits, _)", pe)
		} else if password = os.Getenv(pe); password == "" {
			c.problem(envKey, "the environment variable %s is not set", pe)
		}
	}
	return password, file, env
}

func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// str reads a string value; ok is false when it is absent or of another
// type (recorded).
func (c *checker) str(path string, v any) (string, bool) {
	switch s := v.(type) {
	case nil:
		return "", false
	case string:
		return s, true
	}
	c.problem(path, "%s: want a string in quotes", describe(v))
	return "", false
}

// int reads an integer value.
func (c *checker) int(path string, v any) (int, bool) {
	switch n := v.(type) {
	case nil:
		return 0, false
	case int64:
		if n > math.MaxInt32 || n < math.MinInt32 {
			c.problem(path, "%d is out of range", n)
			return 0, false
		}
		return int(n), true
	}
	c.problem(path, "%s: want an integer", describe(v))
	return 0, false
}

// limits reads max-rate and max-outstanding under base ("" at the top).
func (c *checker) limits(base string, rate, out any) Limits {
	var l Limits
	if n, ok := c.int(join(base, "max-rate"), rate); ok {
		// The throttle's own bound: a file past it would pass the check
		// and then stop the client at start, or refuse its reload.
		if n < 0 || n > throttle.MaxRate {
			c.problem(join(base, "max-rate"), "%d: want 0 (no limit) to %d requests a second", n, throttle.MaxRate)
		}
		l.MaxRate = n
	}
	if n, ok := c.int(join(base, "max-outstanding"), out); ok {
		if n < 0 {
			c.problem(join(base, "max-outstanding"), "%d: want 0 (no limit) or more requests", n)
		}
		l.MaxOutstanding = n
	}
	return l
}

// A RADIUS server takes one request in flight per Identifier: 256 per
// socket over UDP (radpeer.IDsPerSocket, radpeer.DefaultUDPSockets
// sockets), 255 per connection over TCP and TLS (radpeer.IDsPerConn, at
// most radpeer.MaxConnsLimit connections, --max-conns). Kept here, not
// imported: the command's tests check they are radpeer's.
const (
	udpIdentifiers    = 256 * 4
	streamIdentifiers = 255 * 64
)

// identifiers checks a max-outstanding (at path) of a server of proto
// against its Identifiers; Diameter has no such bound.
func (c *checker) identifiers(path string, proto protocol, n int) {
	switch {
	case proto == protoRADIUSUDP && n > udpIdentifiers:
		c.problem(path, "%d: a radius:// server takes at most %d requests in flight, one per Identifier", n, udpIdentifiers)
	case proto == protoRADIUSStream && n > streamIdentifiers:
		c.problem(path, "%d: a radius+tcp:// or radsec:// server takes at most %d requests in flight, one per Identifier of its most connections (%d)", n, streamIdentifiers, streamIdentifiers/255)
	}
}

// tw reads a watchdog interval.
func (c *checker) tw(path string, v any) (time.Duration, bool) {
	d, ok := c.duration(path, v)
	if ok && d < MinTw {
		c.problem(path, "%v is below the RFC 3539 minimum of %v", d, MinTw)
	}
	return d, ok
}

// duration reads a duration: a string with its unit ("30s", "1m30s").
func (c *checker) duration(path string, v any) (time.Duration, bool) {
	switch x := v.(type) {
	case nil:
		return 0, false
	case int64:
		c.problem(path, "%d has no unit: write it in quotes with one, such as \"%ds\"", x, x)
		return 0, false
	case float64:
		c.problem(path, "%v has no unit: write it in quotes with one, such as \"%vs\"", x, x)
		return 0, false
	case string:
		d, err := time.ParseDuration(x)
		if err != nil {
			if _, nerr := strconv.ParseFloat(x, 64); nerr == nil {
				c.problem(path, "%q has no unit: write \"%ss\" (or ms, m, h)", x, x)
			} else {
				c.problem(path, "%q: want a duration such as \"30s\" or \"1m30s\"", x)
			}
			return 0, false
		}
		if d <= 0 {
			c.problem(path, "%q: want a positive duration", x)
			return 0, false
		}
		return d, true
	}
	c.problem(path, "%s: want a duration in quotes, such as \"30s\"", describe(v))
	return 0, false
}

// urls reads a list of URLs.
func (c *checker) urls(path string, v any) []string {
	var list []any
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		c.problem(path, "want a list, such as [%q]", x)
		return nil
	case []any:
		list = x
	default:
		c.problem(path, "%s: want a list of URLs, such as [\"tcp://0.0.0.0:3868\"]", describe(v))
		return nil
	}
	var out []string
	seen := map[string]int{} // serverKey -> line
	for i, e := range list {
		el := path + "." + strconv.Itoa(i)
		s, ok := c.str(el, e)
		if !ok {
			continue
		}
		if err := checkURL(s); err != nil {
			c.problem(el, "%v", err)
		}
		if l, dup := seen[serverKey(s)]; dup {
			c.problem(el, "%s is also listed at line %d", s, l)
		} else {
			seen[serverKey(s)] = c.lineOf(el)
		}
		out = append(out, s)
	}
	return out
}

// secret reads secret and secret-file under base; both set is a problem.
func (c *checker) secret(base string, inline, file any) ([]byte, string) {
	s, sOK := "", false
	switch v := inline.(type) {
	case nil:
	case string:
		s, sOK = v, true
	default:
		// The value is not shown: what was meant as a secret is one
		// still, and problems go to terminals and logs.
		c.problem(join(base, "secret"), "%s: want a string in quotes", kind(v))
	}
	f, fOK := c.str(join(base, "secret-file"), file)
	switch {
	case sOK && fOK:
		c.problem(join(base, "secret-file"), "give secret or secret-file, not both")
	case sOK:
		if s == "" {
			c.problem(join(base, "secret"), "empty secret")
			return nil, ""
		}
		return []byte(s), ""
	case fOK:
		p := c.path(f)
		if b, ok := c.readFile(join(base, "secret-file"), p); ok {
			b = bytes.TrimRight(b, "\r\n")
			if len(b) == 0 {
				c.problem(join(base, "secret-file"), "%s is empty", p)
				return nil, p
			}
			return b, p
		}
		return nil, p
	}
	return nil, ""
}

// file_ reads the name of a file that must be readable; it returns the
// name as loaded (relative to the configuration's directory).
func (c *checker) fileName(path string, v any) string {
	s, ok := c.str(path, v)
	if !ok {
		return ""
	}
	p := c.path(s)
	if f, err := os.Open(p); err != nil {
		c.problem(path, "%s", fileErr(p, err))
	} else {
		f.Close()
	}
	return p
}

// maxSecret bounds what is read of a secret or password file.
const maxSecret = 64 << 10

// readFile reads a secret or password file, at most maxSecret bytes (a
// device such as /dev/zero named by mistake is refused, not read forever).
func (c *checker) readFile(path, name string) ([]byte, bool) {
	f, err := os.Open(name)
	if err != nil {
		c.problem(path, "%s", fileErr(name, err))
		return nil, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
	switch {
	case err != nil:
		c.problem(path, "%s", fileErr(name, err))
		return nil, false
	case len(b) > maxSecret:
		c.problem(path, "%s is longer than %d KiB: not a secret", name, maxSecret>>10)
		return nil, false
	}
	return b, true
}

func fileErr(name string, err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("%s: no such file", name)
	case errors.Is(err, os.ErrPermission):
		return fmt.Sprintf("%s: permission denied", name)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s: %v", name, pe.Err)
	}
	return err.Error()
}

// path resolves a file name against the configuration's directory.
func (c *checker) path(name string) string {
	if name == "" || filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(c.dir, name)
}

// kind names a decoded TOML value's type, not its value.
func kind(v any) string {
	switch v.(type) {
	case int64:
		return "an integer"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	}
	return describe(v) // a list, a table, a date...: no value shown
}

// describe names a decoded TOML value's type for messages.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}
