package main

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
)

const configUsage = `usage: aaa-peer config check FILE

Checks the configuration file FILE (TOML, the file of server and client
--config) and prints every problem found, each as FILE:LINE: KEY: MESSAGE:
unknown keys, values of the wrong type, URLs, durations without a unit,
weights below 1, two peers or clients of one name, a client's source
that is no address or prefix, a secret given twice, files that cannot be
read... Exit 0 with a one-line summary when the file is valid (and a
note naming the RADIUS listeners and peers it gives no shared secret,
which need --secret-file or $AAATP_RADIUS_SECRET at start), 2 when it is
not (or cannot be read).
`

// runConfig is "aaa-peer config check FILE".
func runConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, configUsage)
		return 0
	}
	if len(args) != 2 || args[0] != "check" {
		fmt.Fprint(stderr, configUsage)
		return 2
	}
	cfg, err := config.Load(args[1])
	if err != nil {
		printConfigError(stderr, "aaa-peer config check", err)
		return 2
	}
	fmt.Fprintf(stdout, "%s: valid: %s\n", args[1], cfg.Summary())
	if no := cfg.WithoutSecret(); len(no) > 0 {
		fmt.Fprintf(stdout, "%s: note: no RADIUS shared secret for %s: give --secret-file FILE or set $%s when starting\n", args[1], strings.Join(no, ", "), secretEnv)
	}
	return 0
}

// printConfigError prints err from config.Load: each problem on a line
// of its own, then how many; an error that is no problem of the file's
// lines (it cannot be read) after who (the command, or its flag) read it.
func printConfigError(w io.Writer, who string, err error) {
	var ce *config.Error
	if !errors.As(err, &ce) {
		fmt.Fprintf(w, "%s: %v\n", who, err)
		return
	}
	fmt.Fprintln(w, ce.Error())
	n := len(ce.Problems)
	fmt.Fprintf(w, "%s: %d problem%s\n", ce.Problems[0].File, n, map[bool]string{true: "", false: "s"}[n == 1])
}

// configFlag adds --config to fs.
func configFlag(fs *flag.FlagSet, path *string) {
	fs.StringVar(path, "config", "", "read settings from this TOML `FILE` (see 'aaa-peer config check'); flags given on the command line override it")
}

// loadConfig loads the --config file (path "": none, nil); on failure it
// prints every problem to stderr.
func loadConfig(path string, stderr io.Writer) (*config.Config, error) {
	if path == "" {
		return nil, nil
	}
	cfg, err := config.Load(path)
	if err != nil {
		printConfigError(stderr, "aaa-peer: --config", err)
		return nil, err
	}
	return cfg, nil
}

// configArg returns the value of --config in args, "" when none.
func configArg(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "config="); ok {
			return v
		} else if strings.TrimLeft(a, "-") == "config" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// configNamesRADIUS reports whether the --config file in args lists
// RADIUS servers (and no --peer overrides them): the RADIUS client then
// runs. A file that does not load is the Diameter client's to report.
func configNamesRADIUS(args []string) bool {
	path := configArg(args)
	if path == "" || len(peerArgs(args)) > 0 {
		return false
	}
	cfg, err := config.Load(path)
	return err == nil && len(cfg.Peers) > 0 && !cfg.Peers[0].Diameter()
}

// setFlags returns the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// applyConfig turns the --config file into the server's options: each
// setting the file has goes to the option of the flag of that name unless
// that flag was given on the command line (set). Repeatable flags
// (--listen) replace the file's list whole. It returns the parts of the
// file the server does not use. This is the one place a file becomes
// server options: a reload would load the file again, compare the new
// config.Config with the running one, and apply the difference.
func (o *serverOptions) applyConfig(cfg *config.Config, set map[string]bool) (unused []string) {
	if cfg == nil {
		return nil
	}
	setStr(&o.originHost, cfg.OriginHost, set["origin-host"])
	setStr(&o.originRealm, cfg.OriginRealm, set["origin-realm"])
	if cfg.Tw != 0 && !set["tw"] {
		o.tw = cfg.Tw
	}
	if len(cfg.Listen) > 0 && !set["listen"] {
		o.listen = append(stringList(nil), cfg.Listen...)
	}
	setStr(&o.tlsCert, cfg.TLS.Cert, set["tls-cert"])
	setStr(&o.tlsKey, cfg.TLS.Key, set["tls-key"])
	setStr(&o.tlsClientCA, cfg.TLS.ClientCA, set["tls-client-ca"])
	if cfg.Secret != nil && !set["secret-file"] {
		o.secret = cfg.Secret
	}
	o.clients = cfg.Clients
	if len(cfg.Clients) > 0 && !slices.ContainsFunc(o.listen, radpeer.IsURL) {
		unused = append(unused, "[[client]] (no RADIUS listener)")
	}
	if len(cfg.Clients) > 0 {
		// Each client has its own secret, and a source not in the table
		// is refused: the shared secret has no one to apply to.
		switch {
		case set["secret-file"]:
			unused = append(unused, "[[client]] tables: --secret-file is not used (each client has its own secret)")
		case cfg.Secret != nil:
			unused = append(unused, "secret (each [[client]] has its own)")
		}
	}
	if cfg.Dedup != nil && !set["dedup"] {
		o.dedup = cfg.Dedup.URLWithPassword() // printed through storeurl.Redacted
	}
	if cfg.DestinationRealm != "" {
		unused = append(unused, "destination-realm")
	}
	if cfg.TLS.CA != "" {
		unused = append(unused, "tls-ca (the server's is tls-client-ca)")
	}
	if cfg.Limits != (config.Limits{}) {
		unused = append(unused, "max-rate, max-outstanding")
	}
	if len(cfg.Peers) > 0 {
		unused = append(unused, "[[peer]]")
	}
	return unused
}

// setStr sets *dst to v when the file has it (v != "") and the flag was
// not given.
func setStr(dst *string, v string, flagGiven bool) {
	if v != "" && !flagGiven {
		*dst = v
	}
}

// applyConfig turns the --config file into the Diameter client's options,
// as serverOptions.applyConfig does for the server: a flag given on the
// command line wins; --peer given replaces the file's peers whole (their
// names, weights and own settings too). The file's peers keep their names
// and weights (--weight given replaces every weight); with roles, the
// primaries come first and --mode is failover unless given. The file's
// top-level tw, TLS files and limits are every peer's; a peer's own
// replace them for that peer, unless the flag is given (--tw, a --tls-*,
// --max-rate, --max-outstanding), which sets them for every peer. It
// returns the parts of the file the client does not use.
func (o *clientOptions) applyConfig(cfg *config.Config, set map[string]bool) (unused []string, err error) {
	if cfg == nil {
		return nil, nil
	}
	setStr(&o.originHost, cfg.OriginHost, set["origin-host"])
	setStr(&o.originRealm, cfg.OriginRealm, set["origin-realm"])
	setStr(&o.destRealm, cfg.DestinationRealm, set["destination-realm"])
	o.fileDefaults(cfg, set)
	if len(cfg.Peers) > 0 && !set["peer"] {
		if !cfg.Peers[0].Diameter() {
			return nil, usagef("--config %s:%d: %s is a RADIUS server, not a Diameter peer", cfg.File, cfg.Peers[0].Line, cfg.Peers[0].URL)
		}
		o.filePeers(cfg.Peers, set)
	}
	if cfg.Secret != nil {
		unused = append(unused, "secret")
	}
	unused = append(unused, clientUnused(cfg, o.peers, set)...)
	return append(unused, serverParts(cfg)...), nil
}

// serverParts names the parts of cfg that only a server uses.
func serverParts(cfg *config.Config) []string {
	var parts []string
	if len(cfg.Listen) > 0 {
		parts = append(parts, "listen")
	}
	if cfg.Dedup != nil {
		parts = append(parts, "[dedup]")
	}
	if cfg.TLS.ClientCA != "" {
		parts = append(parts, "tls-client-ca")
	}
	if len(cfg.Clients) > 0 {
		parts = append(parts, "[[client]]")
	}
	return parts
}

// ownSetting is what the --config file sets for one peer in place of
// what every peer gets (the flags', else the file's top level): its
// watchdog interval, TLS files and server name, throttle limits. Zero
// values: none of its own.
type ownSetting struct {
	tw     time.Duration
	tls    *config.TLS
	limits *config.Limits
}

// ownSettings returns by URL the settings peers set themselves that
// differ from those of every peer (the template, after the flags). What a peer takes from the top of the file is the template's,
// not its own: at a reload the template is the running one (a change of
// the top level needs a restart), so a peer's own setting is told by
// config.Peer.Own, not by comparing its value with the file's new top
// level, which a reload may have moved to it. A flag given on the
// command line sets its setting for every peer: --tw the watchdog
// interval, any of --tls-ca, --tls-cert, --tls-key the three files (a
// peer's tls-server-name stays), --max-rate and --max-outstanding their
// limit.
func ownSettings(peers []config.Peer, set map[string]bool, tmpl peerTemplate) map[string]ownSetting {
	tw, tls, lim := tmpl.tw, tmpl.tls, tmpl.lim
	own := make(map[string]ownSetting)
	for _, p := range peers {
		var s ownSetting
		if !set["tw"] && p.Own.Tw && p.Tw != tw {
			s.tw = p.Tw
		}
		t := tls
		t.ClientCA, t.ServerName = "", p.TLS.ServerName
		if !set["tls-ca"] && !set["tls-cert"] && !set["tls-key"] {
			if p.Own.TLSCert {
				t.Cert, t.Key = p.TLS.Cert, p.TLS.Key
			}
			if p.Own.TLSCA {
				t.CA = p.TLS.CA
			}
		}
		if t != tls {
			s.tls = &t
		}
		l := lim
		if p.Own.MaxRate && !set["max-rate"] {
			l.MaxRate = p.Limits.MaxRate
		}
		if p.Own.MaxOutstanding && !set["max-outstanding"] {
			l.MaxOutstanding = p.Limits.MaxOutstanding
		}
		if l != lim {
			s.limits = &l
		}
		if s != (ownSetting{}) {
			own[p.URL] = s
		}
	}
	return own
}

// apply sets the peer's own settings in spec, its TLS files read; the
// accounting limits take acctRate as their rate when it is not nil (the
// RADIUS client's --max-rate-acct).
func (s ownSetting) apply(spec *client.PeerSpec, acct acctRate) error {
	spec.Tw = s.tw
	if t := s.tls; t != nil {
		tc, err := peerTLS(*t)
		if err != nil {
			return fmt.Errorf("peer %s: %w", spec.Name, err)
		}
		spec.TLS = tc
	}
	if l := s.limits; l != nil {
		auth := throttle.Limits{MaxRate: l.MaxRate, MaxOutstanding: l.MaxOutstanding}
		accounting := auth
		accounting.MaxRate = acct.of(l.MaxRate)
		spec.Throttle = &client.ThrottleLimits{Auth: auth, Accounting: accounting}
	}
	return nil
}

// peerTLSCache holds the TLS configurations peerTLS built, by their
// files' contents and server name. Bounded: past maxPeerTLS it starts
// again (a config built before then is built anew, which only costs a
// peer's reconnection at the next reload).
var peerTLSCache struct {
	sync.Mutex
	m map[[sha256.Size]byte]*tls.Config
}

const maxPeerTLS = 256

// peerTLS returns a peer's own TLS configuration, built from t's files;
// the same *tls.Config while their contents and the server name do not
// change. client.Client.SetPeers tells a peer's TLS settings apart by
// that identity (a *tls.Config cannot be compared by value), so a reload
// that changes nothing of a peer's TLS keeps its connection.
func peerTLS(t config.TLS) (*tls.Config, error) {
	h := sha256.New()
	if err := writeFiles(h, t.CA, t.Cert, t.Key); err != nil {
		return nil, err
	}
	fmt.Fprintf(h, "%s", t.ServerName)
	var key [sha256.Size]byte
	h.Sum(key[:0])
	peerTLSCache.Lock()
	defer peerTLSCache.Unlock()
	if tc, ok := peerTLSCache.m[key]; ok {
		return tc, nil
	}
	tc, err := transport.ClientTLSConfig(t.CA, t.Cert, t.Key, t.ServerName)
	if err != nil {
		return nil, err
	}
	if peerTLSCache.m == nil || len(peerTLSCache.m) >= maxPeerTLS {
		peerTLSCache.m = make(map[[sha256.Size]byte]*tls.Config)
	}
	peerTLSCache.m[key] = tc
	return tc, nil
}

// filesSum is a digest of files, their names and contents (an
// unreadable file's error in place of what follows; "" is no file): a
// reload tells by it a file rewritten in place, such as a certificate
// renewed at the same path.
func filesSum(files ...string) string {
	h := sha256.New()
	if err := writeFiles(h, files...); err != nil {
		fmt.Fprintf(h, "error %s", err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeFiles writes files' names and contents to h, each with its length
// first ("" is no file), for a digest; it stops at the first file it
// cannot read, and returns why.
func writeFiles(h io.Writer, files ...string) error {
	for _, f := range files {
		var b []byte
		if f != "" {
			var err error
			if b, err = os.ReadFile(f); err != nil {
				return err
			}
		}
		fmt.Fprintf(h, "%d:%s|%d:", len(f), f, len(b))
		h.Write(b)
	}
	return nil
}

// byRole returns peers with the primaries first, each group in file order.
func byRole(peers []config.Peer) []config.Peer {
	out := make([]config.Peer, 0, len(peers))
	for _, r := range []config.Role{config.RoleNone, config.RolePrimary, config.RoleSecondary} {
		for _, p := range peers {
			if p.Role == r {
				out = append(out, p)
			}
		}
	}
	return out
}
