package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/transport"
	lradius "layeh.com/radius"
)

// secretEnv is the environment variable holding the RADIUS shared secret
// when --secret-file is not given.
const secretEnv = "AAATP_RADIUS_SECRET"

// radiusFlags adds the RADIUS server flags.
func radiusFlags(fs *flag.FlagSet, secretFile *string) {
	fs.StringVar(secretFile, "secret-file", "", "`FILE` holding the RADIUS shared secret for radius:// and radius+tcp:// (else $"+secretEnv+"); radsec:// uses \"radsec\" (RFC 6614)")
}

// radiusServerFlags adds the RADIUS listeners' Message-Authenticator
// policy (BlastRADIUS): radpeer.ServerConfig's RequireMessageAuthenticator
// and LimitProxyState.
func radiusServerFlags(fs *flag.FlagSet, o *serverOptions) {
	fs.TextVar(&o.requireMA, "require-message-authenticator", radpeer.RequireMAAuto, "RADIUS: which Access-Requests must carry a Message-Authenticator (BlastRADIUS), `MODE` auto (those of a client, by source address, that has sent one), always or never; others are dropped, counted and never answered (Status-Server always needs one)")
	fs.TextVar(&o.proxyState, "limit-proxy-state", radpeer.LimitProxyStateAlways, "RADIUS: `MODE` always drops an Access-Request with Proxy-State and no Message-Authenticator (BlastRADIUS), never accepts it")
}

// radiusSecret is the RADIUS listeners' shared secret: --secret-file's,
// else the --config file's, else $AAATP_RADIUS_SECRET.
func (o *serverOptions) radiusSecret() ([]byte, error) {
	if o.secretFile == "" && o.secret != nil {
		return o.secret, nil
	}
	return readSecret(o.secretFile)
}

// readSecret is radpeer.ReadSecret of file, else $AAATP_RADIUS_SECRET,
// whose error without either names the flag to give, not "a secret
// file".
func readSecret(file string) ([]byte, error) {
	b, err := radpeer.ReadSecret(file, secretEnv)
	if err != nil && file == "" {
		return nil, fmt.Errorf("no RADIUS shared secret: give --secret-file FILE or set $%s", secretEnv)
	}
	return b, err
}

// validateRADIUSListen checks a radius+tcp:// or radsec:// --listen URL.
func (o *serverOptions) validateRADIUSListen(u string) error {
	if _, err := radpeer.ParseUDPURL(u); err == nil {
		return nil
	} else if scheme, _, _ := strings.Cut(strings.ToLower(u), "://"); scheme == radpeer.SchemeUDP {
		// radpeer.ParseURL would say what a stream listener wants.
		if pu, perr := url.Parse(u); perr == nil && pu.Hostname() != "" && pu.Port() == "" {
			return usagef("--listen %s: the port is missing (e.g. %s; port 0 picks a free one)", u, strings.TrimSuffix(u, ":")+":1812")
		}
		return usagef("--listen %s: %v", u, err)
	}
	ep, err := radpeer.ParseURL(u)
	if err != nil {
		return usagef("--listen %s: %v", u, err)
	}
	if ep.Scheme == radpeer.SchemeRadSec && (o.tlsCert == "" || o.tlsKey == "" || o.tlsClientCA == "") {
		return usagef("--listen %s: radsec needs --tls-cert, --tls-key and --tls-client-ca (RFC 6614: mutual certificates)", u)
	}
	return nil
}

// radiusHandler answers the RADIUS listeners' requests: accepted, after
// --answer-delay.
func (s *server) radiusHandler() radpeer.Handler {
	d := s.o.answerDelay
	if d <= 0 {
		return radpeer.AcceptAll
	}
	return func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, nil // the connection is gone: no answer
		}
		return radpeer.AcceptAll(ctx, req, raw)
	}
}

// radiusDedup is the RADIUS listeners' handler: radiusHandler behind the
// --dedup store, counted in s.dd with the Diameter listeners' requests (a
// record dropped for the store's failure in Dropped, not answered; a
// request other than an accounting record in PassedThrough).
func (s *server) radiusDedup(store dedup.Store) radpeer.Handler {
	return radpeer.Dedup(store, s.radiusHandler(), &s.dd, radpeer.TrustNASIdentityFrom(s.o.radiusProxies...), radpeer.LogStoreErrors(s.storeErrs))
}

// openRADIUS opens the socket of the RADIUS listener u and its server,
// which verifies requests with sec.
func (s *server) openRADIUS(u string, sec radiusSecrets, topts transport.Options, store dedup.Store, bus *peer.Bus) (*radiusListener, error) {
	rl := &radiusListener{url: u, log: s.log, proto: clientProto(u)}
	secret, clients := sec.of(rl.proto)
	cfg := radpeer.ServerConfig{
		Secret:                secret,
		Clients:               clients,
		Handler:               s.radiusDedup(store),
		MaxInFlight:           s.o.maxHandlers,
		MaxQueued:             s.o.maxQueued,
		MaxUnanswered:         min(s.o.maxUnanswered, radpeer.DefaultMaxUnanswered), // one Identifier space
		MaxOpening:            s.o.maxOpening,
		MaxOpeningPerAddr:     s.o.maxOpenPerIP,
		MaxConnections:        s.o.maxConns,
		MaxConnectionsPerAddr: s.o.maxConnsPerIP,
		OpeningTimeout:        s.o.firstTimeout,
		IdleTimeout:           s.o.idleTimeout,
		DupBytes:              s.o.udpDupBytes,
		Events:                bus,
		Logger:                s.log,

		RequireMessageAuthenticator: s.o.requireMA,
		LimitProxyState:             s.o.proxyState,
	}
	if addr, err := radpeer.ParseUDPURL(u); err == nil {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, err
		}
		cfg.AccountingPort = accountingPort(pc.LocalAddr())
		srv, err := radpeer.NewUDPServer(pc, cfg)
		if err != nil {
			pc.Close()
			return nil, err
		}
		rl.srv, rl.bound = srv, radpeer.SchemeUDP+"://"+pc.LocalAddr().String()
		rl.stats = func() radiusListenerReport { st := srv.Stats(); return radiusListenerReport{UDP: &st} }
		return rl, nil
	}
	ep, err := radpeer.ParseURL(u)
	if err != nil {
		return nil, err
	}
	ln, err := radpeer.Listen(u, topts)
	if err != nil {
		return nil, err
	}
	srv, err := radpeer.NewServer(ln, ep.Scheme, cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	rl.srv, rl.bound = srv, fmt.Sprintf("%s://%s", ep.Scheme, ln.Addr())
	rl.stats = func() radiusListenerReport { st := srv.Stats(); return radiusListenerReport{Stream: &st} }
	return rl, nil
}

// accountingPort tells a RADIUS/UDP socket on an accounting port by its
// number (RFC 2866's 1813, or 1646 of old), where Status-Server is
// answered Accounting-Response (RFC 5997).
func accountingPort(a net.Addr) bool {
	ua, ok := a.(*net.UDPAddr)
	return ok && (ua.Port == 1813 || ua.Port == 1646)
}

// radiusListenerReport is one RADIUS listener's counters in the server's
// report: Stream for radius+tcp:// and radsec://, UDP for radius://.
type radiusListenerReport struct {
	URL    string                  `json:"url"`
	Stream *radpeer.ServerStats    `json:"stream,omitempty"`
	UDP    *radpeer.UDPServerStats `json:"udp,omitempty"`
}

// closeRADIUS closes the RADIUS listeners.
func (s *server) closeRADIUS(ctx context.Context) {
	s.lmu.Lock()
	rls := append([]*radiusListener(nil), s.rls...)
	s.lmu.Unlock()
	for _, rl := range rls {
		rl.close(ctx)
	}
}
