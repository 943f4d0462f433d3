package main

import (
	"context"
	"flag"
	"fmt"
	"net"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/transport"
)

// secretEnv is the environment variable holding the RADIUS shared secret
// when --secret-file is not given.
const secretEnv = "AAATP_RADIUS_SECRET"

// radiusFlags adds the RADIUS server flags.
func radiusFlags(fs *flag.FlagSet, secretFile *string) {
	fs.StringVar(secretFile, "secret-file", "", "`FILE` holding the RADIUS shared secret of radius+tcp:// listeners (else $"+secretEnv+"); radsec:// uses \"radsec\" (RFC 6614)")
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
	return radpeer.ReadSecret(o.secretFile, secretEnv)
}

// validateRADIUSListen checks a radius+tcp:// or radsec:// --listen URL.
func (o *serverOptions) validateRADIUSListen(u string) error {
	if _, err := radpeer.ParseUDPURL(u); err == nil {
		return nil
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

// listenRADIUS opens a RADIUS listener and serves it: Status-Server
// answered, Access-Request accepted, Accounting-Request answered, each
// accounting record applied once through store. It returns the bound URL.
func (s *server) listenRADIUS(u string, topts transport.Options, store dedup.Store, bus *peer.Bus) (string, error) {
	if addr, err := radpeer.ParseUDPURL(u); err == nil {
		return s.listenRADIUSUDP(addr, store, bus)
	}
	ep, err := radpeer.ParseURL(u)
	if err != nil {
		return "", err
	}
	var secret []byte
	if ep.Scheme == radpeer.SchemeTCP {
		if secret, err = s.o.radiusSecret(); err != nil {
			return "", err
		}
	}
	ln, err := radpeer.Listen(u, topts)
	if err != nil {
		return "", err
	}
	srv, err := radpeer.NewServer(ln, ep.Scheme, radpeer.ServerConfig{
		Secret:            secret,
		Handler:           radpeer.Dedup(store, radpeer.AcceptAll, &s.dd, radpeer.TrustNASIdentityFrom(s.o.radiusProxies...)),
		MaxInFlight:       s.o.maxHandlers,
		MaxQueued:         s.o.maxQueued,
		MaxUnanswered:     min(s.o.maxUnanswered, radpeer.DefaultMaxUnanswered), // one Identifier space
		MaxOpening:        s.o.maxOpening,
		MaxOpeningPerAddr: s.o.maxOpenPerIP,
		OpeningTimeout:    s.o.firstTimeout,
		IdleTimeout:       s.o.idleTimeout,
		Events:            bus,
		Logger:            s.log,

		RequireMessageAuthenticator: s.o.requireMA,
		LimitProxyState:             s.o.proxyState,
	})
	if err != nil {
		ln.Close()
		return "", err
	}
	bound := fmt.Sprintf("%s://%s", ep.Scheme, ln.Addr())
	s.serveRADIUS(srv, func() radiusListenerReport { st := srv.Stats(); return radiusListenerReport{URL: bound, Stream: &st} })
	return bound, nil
}

// listenRADIUSUDP serves RADIUS over UDP on addr, with the RFC 5080
// duplicate cache in front of the same handler.
func (s *server) listenRADIUSUDP(addr string, store dedup.Store, bus *peer.Bus) (string, error) {
	secret, err := s.o.radiusSecret()
	if err != nil {
		return "", err
	}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return "", err
	}
	srv, err := radpeer.NewUDPServer(pc, radpeer.ServerConfig{
		Secret: secret, Handler: radpeer.Dedup(store, radpeer.AcceptAll, &s.dd, radpeer.TrustNASIdentityFrom(s.o.radiusProxies...)), Events: bus, Logger: s.log,
		MaxInFlight: s.o.maxHandlers, MaxQueued: s.o.maxQueued,
		RequireMessageAuthenticator: s.o.requireMA, LimitProxyState: s.o.proxyState,
		DupBytes: s.o.udpDupBytes,
	})
	if err != nil {
		pc.Close()
		return "", err
	}
	bound := radpeer.SchemeUDP + "://" + pc.LocalAddr().String()
	s.serveRADIUS(srv, func() radiusListenerReport { st := srv.Stats(); return radiusListenerReport{URL: bound, UDP: &st} })
	return bound, nil
}

// radiusListenerReport is one RADIUS listener's counters in the server's
// report: Stream for radius+tcp:// and radsec://, UDP for radius://.
type radiusListenerReport struct {
	URL    string                  `json:"url"`
	Stream *radpeer.ServerStats    `json:"stream,omitempty"`
	UDP    *radpeer.UDPServerStats `json:"udp,omitempty"`
}

// radiusServer is a RADIUS server of any transport.
type radiusServer interface {
	Addr() net.Addr
	Serve() error
	Close(context.Context) error
}

// serveRADIUS serves srv on a goroutine of s.wg, keeping it to close and
// report for the server's report.
func (s *server) serveRADIUS(srv radiusServer, report func() radiusListenerReport) {
	s.rsrvs, s.rstats = append(s.rsrvs, srv), append(s.rstats, report)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(); err != nil {
			s.log.Error("serve", "addr", srv.Addr().String(), "err", err)
		}
	}()
}

// closeRADIUS closes the RADIUS servers.
func (s *server) closeRADIUS(ctx context.Context) {
	for _, srv := range s.rsrvs {
		if err := srv.Close(ctx); err != nil {
			s.log.Debug("close", "addr", srv.Addr().String(), "err", err)
		}
	}
}
