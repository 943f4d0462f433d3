package main

import (
	"context"
	"log/slog"
	"strings"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/status"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

// streamDriver runs RADIUS over TCP and TLS through client.Client, the
// dispatch path Diameter requests take: the access algorithm is the
// Client's balancer, the Nokia 7750 SR states its policy (probing with
// Status-Server, or the test user), the ASR5K limits its throttle.
type streamDriver struct {
	c *client.Client
}

func (o *radiusClientOptions) newStreamDriver(secret []byte, events *client.Bus, log *slog.Logger) (*streamDriver, error) {
	cfg := client.Config{
		Mode: client.Balance, Algorithm: o.alg, Events: events, RequestTimeout: o.requestTimeout,
		RADIUS: radpeer.Config{Secret: secret, Watchdog: watchdog.Config{Twinit: o.tw}, MaxConns: o.maxConns, Logger: log,
			RequireMessageAuthenticator: o.requireMA},
		Policy: &policy.Config{RequestTimeout: o.timeout, Retries: o.retries, DownTimeout: o.downTimeout,
			HoldDown: o.hold, TestUser: true, KeepAlive: o.keepAlive},
		Throttle: &client.Throttle{Slot: o.slot, AlarmHigh: o.alarmHigh, AlarmLow: o.alarmLow,
			Auth:       throttle.Limits{MaxRate: o.maxRate, MaxOutstanding: o.maxOut},
			Accounting: throttle.Limits{MaxRate: o.maxRateAcct, MaxOutstanding: o.maxOut}},
		RADIUSTestRequest: func(string) *radius.Request { return o.testRequest() },
	}
	if o.tlsCA != "" || o.tlsCert != "" {
		tc, err := transport.ClientTLSConfig(o.tlsCA, o.tlsCert, o.tlsKey, "")
		if err != nil {
			return nil, err
		}
		cfg.RADIUS.Transport.TLS = tc
	}
	for _, u := range o.peers {
		cfg.Peers = append(cfg.Peers, client.PeerSpec{URL: u, Name: u, Weight: o.weightOf[u]})
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, err
	}
	return &streamDriver{c}, nil
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

func (d *streamDriver) exchange(ctx context.Context, r *radius.Request) (*radpeer.Response, error) {
	return d.c.Exchange(ctx, r)
}

func (d *streamDriver) states() string {
	pol := d.c.PolicyStates()
	var states []string
	for i, s := range d.c.ServerStats() {
		states = append(states, s.Server+":"+pol[i]+":"+s.State)
	}
	return strings.Join(states, ",")
}

func (d *streamDriver) snapshot(sent uint64) status.Snapshot {
	var snap status.Snapshot
	var answered, failed, moved uint64
	pol, peers := d.c.PolicyStates(), d.c.RADIUSPeers()
	for i, s := range d.c.ServerStats() {
		var w *radpeer.Stats
		if p := peers[i]; p != nil {
			st := p.Stats()
			w = &st
		}
		snap.Peers = append(snap.Peers, streamRow(s, pol[i], w))
		answered, failed, moved = answered+s.Answered, failed+s.Failed, moved+s.FailedOver
	}
	var queued int
	for _, q := range d.c.QueueDepths() {
		snap.Queues = append(snap.Queues, status.Queue{Server: q.Server, Depth: q.Depth, Alarm: q.Alarm})
		queued += q.Depth
	}
	snap.Totals = status.Totals{Sent: sent, Answered: answered, Failed: failed, Pending: uint64(queued), Moved: moved}
	return snap
}

// streamRow is the status row of a RADIUS stream server: the Client's
// view of it (s, policy) and its peer's counters (w, nil while it has no
// peer).
func streamRow(s client.ServerStats, policy string, w *radpeer.Stats) status.PeerStatus {
	ps := status.PeerStatus{Peer: s.Peer, Server: s.Server, Policy: policy, Protocol: status.ProtocolRADIUS, State: s.State}
	if w != nil {
		ps.Pending, ps.Sent, ps.Answered, ps.MovedOut, ps.RecycledConns = w.Waiting, w.Sent, w.Answered, w.MovedOut, w.RecycledConns
		for _, cs := range w.Conns {
			ps.Pending += cs.Pending
			ps.Tw = cs.Tw
		}
	}
	return ps
}

func (d *streamDriver) fill(rep *radiusClientReport) {
	rep.FailoverLog, rep.FailoverRecords = d.c.FailoverLog()
	pol, peers := d.c.PolicyStates(), d.c.RADIUSPeers()
	for i, s := range d.c.ServerStats() {
		r := radiusServerReport{Client: &s}
		r.Name, r.URL = s.Server, s.Server
		_ = r.State.UnmarshalText([]byte(pol[i]))
		if p := peers[i]; p != nil {
			st := p.Stats()
			r.Stream = &st
		}
		rep.Failovers += s.FailedOver
		rep.Servers = append(rep.Servers, r)
	}
}

func (d *streamDriver) close() { d.c.Close(context.Background()) }
