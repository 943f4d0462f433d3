package main

import (
	"fmt"
	"time"

	"github.com/aaatp/aaatp/config"
)

// applyConfig turns the --config file into the RADIUS client's options, as
// clientOptions.applyConfig does for Diameter: a flag given on the command
// line (set) wins, and --peer given replaces the file's servers whole.
// The file's servers keep their order, weights and names; with roles the
// primaries come first and the access algorithm is direct unless
// --algorithm is given. One Tw, one set of TLS files and one set of
// throttle limits serve every server: servers that differ in these are
// refused. It returns each server's shared secret by URL (none for
// radsec://, whose secret is "radsec"), and sets --secret-file when the
// servers share one file.
func (o *radiusClientOptions) applyConfig(cfg *config.Config, set map[string]bool) (secrets map[string][]byte, err error) {
	if cfg == nil || len(cfg.Peers) == 0 || set["peer"] {
		return nil, nil
	}
	if cfg.Peers[0].Diameter() {
		return nil, usagef("--config %s:%d: %s is a Diameter peer, not a RADIUS server", cfg.File, cfg.Peers[0].Line, cfg.Peers[0].URL)
	}
	peers := byRole(cfg.Peers)
	tw, err := uniform(cfg, peers, "tw", func(p config.Peer) time.Duration { return p.Tw })
	if err != nil {
		return nil, err
	}
	tls, err := uniform(cfg, peers, "tls-cert, tls-key and tls-ca", func(p config.Peer) config.TLS { return p.TLS })
	if err != nil {
		return nil, err
	}
	lim, err := uniform(cfg, peers, "max-rate and max-outstanding", func(p config.Peer) config.Limits { return p.Limits })
	if err != nil {
		return nil, err
	}
	o.peers, secrets = nil, make(map[string][]byte, len(peers))
	for _, p := range peers {
		o.peers = append(o.peers, p.URL)
		if p.Secret != nil {
			secrets[p.URL] = p.Secret
		}
		if p.Weight > 0 && !set["weight"] {
			o.weights = append(o.weights, fmt.Sprintf("%s=%d", p.URL, p.Weight))
		}
	}
	if file, err := uniform(cfg, peers, "secret-file", func(p config.Peer) string { return p.SecretFile }); err == nil {
		setStr(&o.secretFile, file, set["secret-file"])
	}
	if peers[0].Role != config.RoleNone && !set["algorithm"] {
		o.algorithm = "direct"
	}
	if tw != 0 && !set["tw"] {
		o.tw = tw
	}
	setStr(&o.tlsCA, tls.CA, set["tls-ca"])
	setStr(&o.tlsCert, tls.Cert, set["tls-cert"])
	setStr(&o.tlsKey, tls.Key, set["tls-key"])
	if lim.MaxRate != 0 && !set["max-rate"] {
		o.maxRate = lim.MaxRate
	}
	if lim.MaxOutstanding != 0 && !set["max-outstanding"] {
		o.maxOut = lim.MaxOutstanding
	}
	return secrets, nil
}
