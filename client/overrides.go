package client

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/watchdog"
)

// A PeerSpec may override, for its server alone, what the Client's
// templates give every server: the watchdog interval (Tw), the TLS
// configuration (TLS) and the throttle limits (Throttle). Each zero value
// means "the template's".

// ThrottleLimits are one server's throttle limits, in place of
// Config.Throttle's Auth and Accounting.
type ThrottleLimits struct {
	Auth, Accounting throttle.Limits
}

// checkOverrides refuses the overrides that cannot apply: a negative Tw,
// or one below the RFC 3539 minimum (the peer's Dial would refuse it:
// SetPeers would have drained the peer it replaces by then), a Tw on a
// radius:// server (no watchdog: its Timeout
// and Retries tell a server that stopped answering), TLS on a URL that
// does not speak it, Throttle without Config.Throttle (the Client would
// have no throttle to apply it in), and throttle limits the throttle
// would refuse, a server's own or Config.Throttle's (SetPeers adds its
// servers to the throttle after it has changed the balancer: refused
// there, it could not undo what it had done).
func checkOverrides(cfg Config) error {
	if t := cfg.Throttle; t != nil {
		if err := checkLimits(t.Auth, t.Accounting); err != nil {
			return fmt.Errorf("client: Config.Throttle: %w", err)
		}
	}
	for _, s := range cfg.Peers {
		_, udpErr := radpeer.ParseUDPURL(s.URL)
		switch {
		case s.Tw < 0:
			return fmt.Errorf("client: peer %s: Tw %v is negative", s.URL, s.Tw)
		case s.Tw != 0 && s.Tw < watchdog.MinTwinit:
			return fmt.Errorf("client: peer %s: Tw %v is below the RFC 3539 minimum of %v", s.URL, s.Tw, watchdog.MinTwinit)
		case s.Tw != 0 && udpErr == nil:
			return fmt.Errorf("client: peer %s: a Tw is for servers with a watchdog; radius:// servers have none (UDP.Timeout and Retries)", s.URL)
		case s.TLS != nil && !tlsURL(s.URL):
			return fmt.Errorf("client: peer %s: a TLS configuration is for tls:// and radsec:// servers", s.URL)
		case s.Throttle != nil && cfg.Throttle == nil:
			return fmt.Errorf("client: peer %s: Throttle limits need Config.Throttle (the Client's throttle)", s.URL)
		}
		if s.Throttle != nil {
			if err := checkLimits(s.Throttle.Auth, s.Throttle.Accounting); err != nil {
				return fmt.Errorf("client: peer %s: %w", s.URL, err)
			}
		}
	}
	return nil
}

// checkLimits checks one server's limits as the throttle does.
func checkLimits(auth, acct throttle.Limits) error {
	for c, l := range [...]throttle.Limits{throttle.Auth: auth, throttle.Accounting: acct} {
		if err := l.Check(); err != nil {
			return fmt.Errorf("%s %w", throttle.Class(c), err)
		}
	}
	return nil
}

// tlsURL reports whether a server's URL connects with TLS.
func tlsURL(u string) bool {
	scheme, _, _ := strings.Cut(u, "://")
	scheme = strings.ToLower(scheme)
	return scheme == "tls" || scheme == ProtocolRadSec
}

// maxTw is the longest watchdog interval of the servers: the one the
// default request deadline must let failover detection run for.
func maxTw(cfg Config, template time.Duration) time.Duration {
	template = cmp.Or(template, watchdog.DefaultTwinit)
	var tw time.Duration
	for _, s := range cfg.Peers {
		tw = max(tw, cmp.Or(s.Tw, template))
	}
	return tw
}

// peerConfig is the Diameter template with the spec's overrides.
func (s PeerSpec) peerConfig(pc peer.Config) peer.Config {
	if s.Tw != 0 {
		pc.Watchdog.Twinit = s.Tw
	}
	if s.TLS != nil {
		pc.Transport.TLS = s.TLS
	}
	return pc
}

// radiusConfig is the radius+tcp:// and radsec:// template with the
// spec's overrides.
func (s PeerSpec) radiusConfig(rc radpeer.Config) radpeer.Config {
	if s.Tw != 0 {
		rc.Watchdog.Twinit = s.Tw
	}
	if s.TLS != nil {
		rc.Transport.TLS = s.TLS
	}
	if s.Secret != nil {
		rc.Secret = s.Secret
	}
	return rc
}

// limits are the server's throttle limits: its own, else t's.
func (s PeerSpec) limits(t *Throttle) (auth, acct throttle.Limits) {
	if s.Throttle != nil {
		return s.Throttle.Auth, s.Throttle.Accounting
	}
	return t.Auth, t.Accounting
}
