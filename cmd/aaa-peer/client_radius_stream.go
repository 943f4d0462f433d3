package main

import (
	"log/slog"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

// clientConfig is the RADIUS client's client.Config: RADIUS over UDP,
// TCP and TLS goes through client.Client, the dispatch path Diameter
// requests take: the access algorithm is the Client's balancer, the
// Nokia 7750 SR states its policy (probing with Status-Server, or the
// test user; over UDP without either, one real request), the ASR5K
// limits its throttle.
func (o *radiusClientOptions) clientConfig(secret []byte, events *client.Bus, log *slog.Logger) (client.Config, error) {
	cfg := client.Config{
		Mode: o.clientMode, Algorithm: o.alg, Events: events, RequestTimeout: o.requestTimeout,
		RADIUS: radpeer.Config{Secret: secret, Watchdog: watchdog.Config{Twinit: o.tw}, MaxConns: o.maxConns, Logger: log,
			RequireMessageAuthenticator: o.requireMA},
		UDP: radpeer.UDPConfig{Timeout: o.timeout, Retries: o.retries},
		Policy: &policy.Config{RequestTimeout: o.timeout, Retries: o.retries, DownTimeout: o.downTimeout,
			HoldDown: o.holdDown, TestUser: o.stream || o.testUser != "" || o.statusServer, KeepAlive: o.keepAlive},
		Throttle: &client.Throttle{Slot: o.slot, AlarmHigh: o.alarmHigh, AlarmLow: o.alarmLow,
			Auth:       throttle.Limits{MaxRate: o.maxRate, MaxOutstanding: o.maxOutstanding},
			Accounting: throttle.Limits{MaxRate: o.maxRateAcct.of(o.maxRate), MaxOutstanding: o.maxOutstanding}},
		RADIUSTestRequest: func(string) *radius.Request { return o.testRequest() },
	}
	var err error
	cfg.RADIUS.Transport.NoDelay = o.noDelay
	if cfg.RADIUS.Transport.TLS, err = o.tlsConfig(); err != nil {
		return cfg, err
	}
	cfg.Peers, err = o.peerSpecs(o.acctPeers)
	return cfg, err
}

// testRequest is the probe and keep-alive: the test user's
// Access-Request, else Status-Server (RFC 5997).
func (o *radiusClientOptions) testRequest() *radius.Request {
	if o.testUser == "" {
		return &radius.Request{Code: lradius.CodeStatusServer}
	}
	r := &radius.Request{Code: lradius.CodeAccessRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute(o.testUser))
	r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute(o.testPassword))
	return r
}
