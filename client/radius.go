package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/watchdog"
)

// RADIUS servers over radius+tcp:// (RFC 6613) and radsec:// (RFC 6614)
// are members like Diameter peers: each is a radpeer.Peer (a Status-Server
// watchdog per connection, 255 requests per connection), and a RADIUS
// request takes the same dispatch path as a Diameter one (pick, admit,
// throttle, failover, records, statistics, events). What differs is the
// send, done by radpeer: an Identifier of the connection, the request
// encoded and signed with that server's secret, afresh for each replay;
// and where a replay may not go: another connection of a server while one
// it was sent on is OKAY (RFC 6613 2.6.1).

// radiusMembers reports whether cfg's peers are RADIUS servers, and
// refuses a mix, UDP servers and what does not apply to RADIUS.
func radiusMembers(cfg Config) (bool, error) {
	n := 0
	for _, s := range cfg.Peers {
		if _, err := radpeer.ParseUDPURL(s.URL); err == nil {
			return false, fmt.Errorf("client: %s: RADIUS over UDP has its own client (package radudp)", s.URL)
		}
		if _, err := radpeer.ParseURL(s.URL); err == nil {
			n++
		} else if s.Secret != nil {
			return false, fmt.Errorf("client: peer %s: a Secret is for radius+tcp:// servers", s.URL)
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

// dialRADIUS creates a RADIUS member's radpeer.Peer. c.mu is held.
func (c *Client) dialRADIUS(m *member) error {
	rc := c.cfg.RADIUS
	if m.spec.Secret != nil {
		rc.Secret = m.spec.Secret
	}
	if rc.RequestTimeout <= 0 {
		rc.RequestTimeout = c.cfg.RequestTimeout
	}
	rc.Events = peer.NewBus()
	rc.Failover = c.onFailover
	c.cancels = append(c.cancels, rc.Events.Subscribe(func(e peer.Event) { c.onRADIUSEvent(m, e) }))
	p, err := radpeer.Dial(m.spec.URL, rc)
	if err != nil {
		return fmt.Errorf("client: RADIUS server %s: %w", m.spec.Name, err)
	}
	m.rp.Store(p)
	c.byPeer.Store(p, m)
	// Its first connection may have come up before it was stored: look
	// again at the state every part of the Client keeps (nothing is
	// parked yet: New holds c.mu).
	c.serverState(m, p.State())
	c.ready.changed()
	return nil
}

// onRADIUSEvent is onPeerEvent for a RADIUS server: its state is the
// server's (OKAY while any of its connections is), not the connection's
// that changed; and a connection that closed may lift what a parked call
// had to avoid.
func (c *Client) onRADIUSEvent(m *member, e peer.Event) {
	c.events.Publish(Event{Time: e.Time, Server: m.spec.Name, Kind: EventPeer, Peer: &e, Reason: e.Reason})
	p := m.rp.Load()
	switch {
	case p == nil: // not stored yet: dialRADIUS looks at its state then
	case e.Kind == peer.EventWatchdog:
		defer c.ready.changed()
		st := p.State()
		// As for Diameter (onPeerEvent): the connection leaving OKAY hands
		// its pending requests over next, and that wakes the throttle.
		c.serverStateAt(m, st, e.From == watchdog.Okay && st != watchdog.Okay)
		if st == watchdog.Okay {
			c.unpark()
		}
	case e.Kind == peer.EventConnDown && p.InService():
		c.unpark()
	}
}

// radiusLimits caps a RADIUS server's outstanding requests at the
// Identifiers of its connections, 255 each.
func (c *Client) radiusLimits(l throttle.Limits) throttle.Limits {
	conns := c.cfg.RADIUS.MaxConns
	if conns <= 0 {
		conns = radpeer.DefaultMaxConns
	}
	most := radpeer.IDsPerConn * conns
	if l.MaxOutstanding <= 0 {
		l.MaxOutstanding = min(throttle.DefaultMaxOutstanding, most)
	}
	l.MaxOutstanding = min(l.MaxOutstanding, most)
	return l
}

// Exchange sends one RADIUS request to the Client's radius+tcp:// or
// radsec:// servers and returns its verified answer; the Client keeps r
// (do not change it afterwards). It takes Send's path: the server is
// picked by the balancer on User-Name (Acct-Session-Id for conversation
// memory) or in primary/secondary order, admitted by the policy and the
// throttle, and when the connection it waits on goes SUSPECT or DOWN the
// request is replayed to another server with a new Identifier, encoded
// and signed with that server's secret. Exchange waits until ctx is done,
// or RequestTimeout when ctx has no deadline; every request gets exactly
// one answer or one error.
//
// The request is a *radius.Request, not bytes as in Send, because each
// send re-encodes it: the Identifier, the authenticators and the hidden
// attributes belong to one connection and its secret.
func (c *Client) Exchange(ctx context.Context, r *radius.Request) (*radpeer.Response, error) {
	if !c.radius {
		return nil, errors.New("client: Exchange takes RADIUS requests; these servers are Diameter peers: use Send")
	}
	cl := radpeer.NewCall(r)
	if _, err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return radpeer.ResponseOf(cl), nil
}

// RADIUSPeers returns the RADIUS servers' peers in configured order, one
// entry per PeerSpec (nil entries for Diameter peers: see Peers).
func (c *Client) RADIUSPeers() []*radpeer.Peer {
	ps := make([]*radpeer.Peer, len(c.members))
	for i, m := range c.members {
		ps[i] = m.rp.Load()
	}
	return ps
}

// newTest makes the test user's call for m (a probe or keep-alive), false
// when none is configured for its protocol.
func (c *Client) newTest(m *member) (*call.Call, bool) {
	if m.rp.Load() != nil {
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
	return "", 0, false
}
