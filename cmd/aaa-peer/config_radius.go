package main

import (
	"slices"
	"strings"

	"github.com/aaatp/aaatp/config"
)

// radiusUnused names the parts of cfg the RADIUS client does not use: the
// Diameter identity and the server's parts.
func radiusUnused(cfg *config.Config) []string {
	if cfg == nil {
		return nil
	}
	var unused []string
	for _, k := range []struct{ key, v string }{{"origin-host", cfg.OriginHost}, {"origin-realm", cfg.OriginRealm},
		{"destination-realm", cfg.DestinationRealm}} {
		if k.v != "" {
			unused = append(unused, k.key)
		}
	}
	return append(unused, serverParts(cfg)...)
}

// clientUnused names the top-level settings of cfg no peer of the client
// (peers, after the flags set) uses: tw when every server is radius://
// (no watchdog; --tw is refused there), the TLS files when no peer uses
// TLS, the file's secrets when --secret-file is given (see
// radiusClientOptions.applyConfig).
func clientUnused(cfg *config.Config, peers []string, set map[string]bool) []string {
	if cfg == nil {
		return nil
	}
	var unused []string
	allUDP, anyTLS := len(peers) > 0, false
	for _, u := range peers {
		scheme, _, _ := strings.Cut(strings.ToLower(u), "://")
		allUDP = allUDP && scheme == "radius"
		anyTLS = anyTLS || scheme == "tls" || scheme == "radsec"
	}
	if cfg.Tw != 0 && allUDP && !set["tw"] {
		unused = append(unused, "tw (radius:// servers have no watchdog)")
	}
	var files []string
	for _, k := range []struct{ key, v string }{{"tls-ca", cfg.TLS.CA}, {"tls-cert", cfg.TLS.Cert}, {"tls-key", cfg.TLS.Key}} {
		if k.v != "" && !set[k.key] {
			files = append(files, k.key)
		}
	}
	if len(files) > 0 && !anyTLS && len(peers) > 0 {
		unused = append(unused, strings.Join(files, ", ")+" (no tls:// or radsec:// peer)")
	}
	if set["secret-file"] && (cfg.Secret != nil || slices.ContainsFunc(cfg.Peers, func(p config.Peer) bool { return p.Secret != nil })) {
		unused = append(unused, "secret, secret-file (--secret-file is every server's secret, their own included)")
	}
	return unused
}

// applyConfig turns the --config file into the RADIUS client's options, as
// clientOptions.applyConfig does for Diameter: a flag given on the command
// line (set) wins, and --peer given replaces the file's servers whole.
// The file's servers keep their order, weights and names; with roles the
// primaries come first and --mode is failover unless given. The file's
// top-level tw, TLS files and limits are every server's; a server's own
// replace them for that server unless the flag is given (--max-rate-acct,
// given, stays every server's accounting rate). It returns each server's
// shared secret by URL (none for radsec://, whose secret is "radsec"):
// its own, else the file's top-level one; none at all when --secret-file
// is given, which is every server's secret, their own included, as --tw
// is every peer's watchdog interval. It sets --secret-file when the
// servers share one file.
func (o *radiusClientOptions) applyConfig(cfg *config.Config, set map[string]bool) (secrets map[string][]byte, err error) {
	if cfg == nil {
		return nil, nil
	}
	o.fileDefaults(cfg, set)
	if len(cfg.Peers) == 0 || set["peer"] {
		// The --peer servers: the file's secret is every one's default.
		if cfg.Secret == nil || set["secret-file"] {
			return nil, nil
		}
		secrets = make(map[string][]byte, len(o.peers))
		for _, u := range o.peers {
			if !strings.HasPrefix(strings.ToLower(u), "radsec://") {
				secrets[u] = cfg.Secret
			}
		}
		return secrets, nil
	}
	if cfg.Peers[0].Diameter() {
		return nil, usagef("--config %s:%d: %s is a Diameter peer, not a RADIUS server", cfg.File, cfg.Peers[0].Line, cfg.Peers[0].URL)
	}
	peers := o.filePeers(cfg.Peers, set)
	if set["secret-file"] {
		clear(o.secrets) // the flag's is every server's
	}
	if file := peers[0].SecretFile; file != "" && !set["secret-file"] {
		shared := true
		for _, p := range peers[1:] {
			shared = shared && p.SecretFile == file
		}
		if shared {
			o.secretFile = file
		}
	}
	return o.secrets, nil
}
