package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/watchdog"
)

// RADIUS servers are members like Diameter peers: over radius+tcp://
// (RFC 6613) and radsec:// (RFC 6614) each is a radpeer.Peer (a
// Status-Server watchdog per connection, 255 requests per connection),
// over radius:// a radpeer.UDPPeer (retransmissions, no watchdog: the
// policy's states tell a server that stopped answering). A RADIUS request
// takes the same dispatch path as a Diameter one (pick, admit, throttle,
// failover, records, statistics, events). What differs is the send, done
// by radpeer: an Identifier of the connection or socket, the request
// encoded and signed with that server's secret, afresh for each replay;
// and where a replay may not go: another connection of a server while one
// it was sent on is OKAY (RFC 6613 2.6.1), a UDP server it was sent to.

// radiusMembers reports whether cfg's peers are RADIUS servers, and
// refuses a mix and what does not apply to RADIUS.
func radiusMembers(cfg Config) (bool, error) {
	n := 0
	for _, s := range cfg.Peers {
		_, udpErr := radpeer.ParseUDPURL(s.URL)
		_, streamErr := radpeer.ParseURL(s.URL)
		switch {
		case udpErr == nil || streamErr == nil:
			n++
		case radpeer.IsURL(s.URL): // a RADIUS scheme, the rest wrong
			if strings.HasPrefix(strings.ToLower(s.URL), radpeer.SchemeUDP+"://") {
				return false, fmt.Errorf("client: peer %s: %w", s.URL, udpErr)
			}
			return false, fmt.Errorf("client: peer %s: %w", s.URL, streamErr)
		case s.Secret != nil:
			return false, fmt.Errorf("client: peer %s: a Secret is for RADIUS servers", s.URL)
		}
		if s.AccountingURL != "" {
			if udpErr != nil {
				return false, fmt.Errorf("client: peer %s: an AccountingURL is for radius:// servers", s.URL)
			}
			if _, err := radpeer.ParseUDPURL(s.AccountingURL); err != nil {
				return false, fmt.Errorf("client: peer %s: AccountingURL: %w", s.URL, err)
			}
		}
	}
	switch {
	case n == 0:
		return false, nil
	case n != len(cfg.Peers):
		return false, errors.New("client: Diameter peers and RADIUS servers in one Client: use one Client per protocol")
	case cfg.MaxConnections > 0:
		return false, errors.New("client: MaxConnections is for Diameter peers; a RADIUS server's connections are Config.RADIUS.MaxConns")
	}
	return true, nil
}

// udpMembers counts cfg's radius:// servers.
func udpMembers(cfg Config) int {
	n := 0
	for _, s := range cfg.Peers {
		if _, err := radpeer.ParseUDPURL(s.URL); err == nil {
			n++
		}
	}
	return n
}

// udpDefaults fills in cfg.UDP's defaults and, without a Policy, the
// policy the radius:// servers need.
func udpDefaults(cfg Config) Config {
	u := &cfg.UDP
	if u.Timeout <= 0 {
		u.Timeout = radpeer.DefaultUDPTimeout
	}
	if u.Retries <= 0 {
		u.Retries = radpeer.DefaultUDPRetries
	}
	if u.Secret == nil {
		u.Secret = cfg.RADIUS.Secret
	}
	if u.RequireMessageAuthenticator == radpeer.RequireMAAuto {
		u.RequireMessageAuthenticator = cfg.RADIUS.RequireMessageAuthenticator
	}
	if u.Logger == nil {
		u.Logger = cfg.RADIUS.Logger
	}
	if cfg.Policy == nil {
		cfg.Policy = &policy.Config{RequestTimeout: u.Timeout, Retries: u.Retries}
	}
	return cfg
}

// dialUDP creates a radius:// member's radpeer.UDPPeer. c.mu is held.
func (c *Client) dialUDP(m *member) error {
	uc := c.udpConfig(m.spec)
	uc.Failover = c.onFailover
	// Every reply the server sends tells the policy it is alive, as it
	// comes: also one its request no longer waits for (the caller's
	// deadline passed as the request was handed to it, or another server
	// answered first). Told only through the answers callers got, a
	// server whose one reply came late stayed under a down-timeout that
	// nothing reset, and was held down while it answered everything.
	uc.Replied = c.repliedHook(uc.Replied)
	p, err := radpeer.NewUDPPeer(m.spec.URL, uc)
	if err != nil {
		return fmt.Errorf("client: RADIUS server %s: %w", m.spec.Name, err)
	}
	m.up.Store(p)
	c.byPeer.Store(call.Carrier(p), m)
	c.refresh() // no watchdog: the policy's states decide
	return nil
}

// udpConfig is the configuration of a radius:// server's peer.
func (c *Client) udpConfig(s PeerSpec) radpeer.UDPConfig {
	uc := c.cfg.UDP
	if s.Secret != nil {
		uc.Secret = s.Secret
	}
	if s.AccountingURL != "" {
		uc.AccountingAddr, _ = radpeer.ParseUDPURL(s.AccountingURL) // checked by radiusMembers
	}
	return uc
}

// streamConfig is the configuration of a RADIUS/TCP or RADIUS/TLS
// server's peer.
func (c *Client) streamConfig(s PeerSpec) radpeer.Config {
	rc := s.radiusConfig(c.cfg.RADIUS)
	if rc.RequestTimeout <= 0 {
		rc.RequestTimeout = c.cfg.RequestTimeout
	}
	return rc
}

// checkRADIUS reports whether the peer of RADIUS server s could be made,
// with the error its dial would return: SetPeers checks a new server
// before anything changes.
func (c *Client) checkRADIUS(s PeerSpec) error {
	var err error
	if _, notUDP := radpeer.ParseUDPURL(s.URL); notUDP == nil {
		err = radpeer.CheckUDP(s.URL, c.udpConfig(s))
	} else {
		err = radpeer.Check(s.URL, c.streamConfig(s))
	}
	if err != nil {
		return fmt.Errorf("client: RADIUS server %s: %w", s.Name, err)
	}
	return nil
}

// dialRADIUS creates a RADIUS member's radpeer.Peer. c.mu is held.
func (c *Client) dialRADIUS(m *member) error {
	if _, err := radpeer.ParseUDPURL(m.spec.URL); err == nil {
		return c.dialUDP(m)
	}
	rc := c.streamConfig(m.spec)
	rc.Events = peer.NewBus()
	rc.Failover = c.onFailover
	rc.Replied = c.repliedHook(rc.Replied) // see dialUDP
	cancel := rc.Events.Subscribe(func(_ context.Context, e peer.Event) { c.onRADIUSEvent(m, e) })
	p, err := radpeer.Dial(m.spec.URL, rc)
	if err != nil {
		cancel()
		return fmt.Errorf("client: RADIUS server %s: %w", m.spec.Name, err)
	}
	c.subscribedLocked(p, cancel)
	m.rp.Store(p)
	c.byPeer.Store(call.Carrier(p), m)
	// Its first connection may have come up before it was stored: look
	// again.
	c.refresh()
	return nil
}

// superseded reports whether SetPeers replaced m with another member of
// its name, which is dialed while m drains (a RADIUS server's): the old
// peer's events, its drain's DOWN among them, are not published, as
// subscribers would read them as the new member's, which has its name.
func (c *Client) superseded(m *member) bool {
	if !m.removed.Load() {
		return false
	}
	for _, x := range c.ros.Load().order {
		if x != m && x.spec.Name == m.spec.Name {
			return true
		}
	}
	return false
}

// onRADIUSEvent is onPeerEvent for a RADIUS server: its state is the
// server's (OKAY while any of its connections is), not the connection's
// that changed; and a connection that closed (a recycled one among them,
// whose watchdog went to its replacement: no watchdog event says so), or
// one that opened while the server stays in service (that replacement),
// may lift what a waiting request had to avoid (a request handed back may
// not go on another connection of the server while the one it was sent on
// is OKAY, or recycled and still open, nor on a server with no OKAY
// connection it was not sent on).
func (c *Client) onRADIUSEvent(m *member, e peer.Event) {
	if !c.superseded(m) {
		c.note(Event{Time: e.Time, Server: m.spec.Name, Kind: EventPeer, Peer: &e, Reason: e.Reason})
	}
	m.openNoted(e)
	p := m.rp.Load()
	switch {
	case p == nil: // not stored yet: dialRADIUS looks at its state then
	case e.Kind == peer.EventWatchdog:
		if beforeRefresh != nil {
			beforeRefresh()
		}
		// Not DOWN: a RADIUS connection lost with nothing pending hands
		// nothing over (no onFailover to wake the dispatcher).
		if failoverFollows(e) && e.To == watchdog.Suspect {
			c.refreshForFailover(p)
		} else {
			c.handOverMissed(p)
			c.refresh()
		}
	case (e.Kind == peer.EventConnDown || e.Kind == peer.EventConnUp) && p.InService():
		c.bump()
	}
}

// radiusLimits caps a RADIUS server's outstanding requests at the
// Identifiers of its connections, 255 each, or of its UDP sockets, 256
// each.
func (c *Client) radiusLimits(m *member, l throttle.Limits) throttle.Limits {
	conns := c.cfg.RADIUS.MaxConns
	if conns <= 0 {
		conns = radpeer.DefaultMaxConns
	}
	most := radpeer.IDsPerConn * conns
	if _, err := radpeer.ParseUDPURL(m.spec.URL); err == nil {
		socks := c.cfg.UDP.MaxSockets
		if socks <= 0 {
			socks = radpeer.DefaultUDPSockets
		}
		most = radpeer.IDsPerSocket * socks
	}
	if l.MaxOutstanding <= 0 {
		l.MaxOutstanding = min(throttle.DefaultMaxOutstanding, most)
	}
	l.MaxOutstanding = min(l.MaxOutstanding, most)
	return l
}

// Exchange sends one RADIUS request to the Client's RADIUS servers and
// returns its verified answer; the Client keeps r (do not change it
// afterwards). It takes Send's path: the server is picked by the
// balancer on User-Name (Acct-Session-Id for conversation memory) or in
// primary/secondary order, admitted by the policy and the throttle. When
// the connection it waits on goes SUSPECT or DOWN (radius+tcp://,
// radsec://), or a radius:// server did not reply to any of its
// retransmissions, the request goes to another server with a new
// Identifier, encoded and signed with that server's secret, each UDP
// server at most once; when no server is left, the error says which did
// not reply. Exchange waits until ctx is done,
// or RequestTimeout when ctx has no deadline; a request whose ctx is done
// already is not sent, and fails with ctx's error. Every request gets
// exactly one answer or one error.
//
// The request is a *radius.Request, not bytes as in Send, because each
// send re-encodes it: the Identifier, the authenticators and the hidden
// attributes belong to one connection and its secret.
func (c *Client) Exchange(ctx context.Context, r *radius.Request) (*radpeer.Response, error) {
	if !c.radius {
		return nil, errors.New("client: Exchange takes RADIUS requests; these servers are Diameter peers: use Send")
	}
	if r == nil {
		return nil, errors.New("client: Exchange of a nil request")
	}
	cl := radpeer.NewCall(r)
	if _, err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return radpeer.ResponseOf(cl), nil
}

// RADIUSPeers returns the radius+tcp:// and radsec:// servers' peers in
// configured order, one entry per PeerSpec (nil entries for the others:
// see Peers, UDPPeers).
func (c *Client) RADIUSPeers() []*radpeer.Peer {
	order := c.ros.Load().order
	ps := make([]*radpeer.Peer, len(order))
	for i, m := range order {
		ps[i] = m.rp.Load()
	}
	return ps
}

// UDPPeers returns the radius:// servers' peers in configured order, one
// entry per PeerSpec (nil entries for the others).
func (c *Client) UDPPeers() []*radpeer.UDPPeer {
	order := c.ros.Load().order
	ps := make([]*radpeer.UDPPeer, len(order))
	for i, m := range order {
		ps[i] = m.up.Load()
	}
	return ps
}

// newTest makes the test user's call for m (a probe or keep-alive), false
// when none is configured for its protocol.
func (c *Client) newTest(m *member) (*call.Call, bool) {
	if m.rp.Load() != nil || m.up.Load() != nil {
		if c.cfg.RADIUSTestRequest == nil {
			return nil, false
		}
		return radpeer.NewCall(c.cfg.RADIUSTestRequest(m.spec.Name)), true
	}
	if c.cfg.TestRequest == nil {
		return nil, false
	}
	cl, err := peer.NewCall(c.cfg.TestRequest(m.spec.Name), false)
	return cl, err == nil
}

// stateOf returns a member's watchdog state and the name its peer goes
// by, ok false when it is not dialed.
func (m *member) stateOf() (name string, st watchdog.State, ok bool) {
	if p := m.p(); p != nil {
		return p.Name(), p.State(), true
	}
	if p := m.rp.Load(); p != nil {
		return p.Name(), p.State(), true
	}
	if p := m.up.Load(); p != nil {
		if !p.InService() {
			return p.Name(), watchdog.Down, true
		}
		return p.Name(), watchdog.Okay, true
	}
	return "", 0, false
}
