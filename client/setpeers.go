package client

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/throttle"
)

// roster is the Client's configured members. It is immutable once
// stored: SetPeers stores a new one.
type roster struct {
	// all is every member the Client has had, by member index: SetPeers
	// only appends, and a member taken out stays (removed), so that an
	// index means one member for good.
	all []*member
	// order is the configured members, in configured order.
	order []*member
}

// maxMembers bounds the members a Client has over its life (New's and
// every SetPeers' additions and replacements): each keeps its index.
var maxMembers = 4096

// PeersChange is what SetPeers changed, by configured name.
type PeersChange struct {
	Added      []string // dialed
	Removed    []string // no new requests; their peers drain and close
	Replaced   []string // settings other than the weight changed: a new peer, the old one drains
	Reweighted []string // only the weight changed: the balancer's table follows
	Unchanged  []string
}

// checkNewPeers checks specs as SetPeers takes them: as New would, and
// without changing the protocol, nor adding radius:// servers to a Client
// made without any. It returns them with their defaults.
func (c *Client) checkNewPeers(specs []PeerSpec) ([]PeerSpec, error) {
	cfg := c.cfg
	cfg.Peers = specs
	norm, isRADIUS, err := checkPeers(cfg)
	if err != nil {
		return nil, err
	}
	if isRADIUS != c.radius {
		return nil, errors.New("client: SetPeers cannot change between Diameter peers and RADIUS servers")
	}
	if udpMembers(cfg) > 0 && udpMembers(c.cfg) == 0 {
		// New gave radius:// servers their defaults and their policy
		// states: a Client made without them cannot take one.
		return nil, errors.New("client: SetPeers cannot add radius:// servers to a Client created without any: create a new Client")
	}
	if c.radius {
		// What a RADIUS server's dial refuses (no secret, TLS options
		// its transport refuses) is refused here, before anything
		// changes, as New refuses it: dialed later, the server it
		// replaces would drain and nothing take its place.
		for _, s := range norm {
			if err := c.checkRADIUS(s); err != nil {
				return nil, err
			}
		}
	}
	return norm, nil
}

// SetPeers replaces the configured peers, as a reload of the
// configuration does; peers are matched by Name (the URL when Name is
// empty). A peer named before with the same settings keeps its
// connection; a weight change only rebuilds the balancer's table (the
// conversations in progress keep their servers while the old table
// lives, as on any change of the servers in service). A new name is
// dialed. A name left out takes no new request at once: the requests
// waiting or queued for it go elsewhere, those in flight are answered
// on its connection, then it closes (DPR for Diameter). A peer whose
// other settings changed (URL, secret, Tw, TLS: another *tls.Config,
// limits) is replaced: the
// old one drains as a removed one does, and the requests it still has
// at the server count against the new one's throttle limits. A Diameter peer's replacement,
// and a name added back while its old peer still drains, is dialed once
// the old connection has closed, since a server takes one connection per
// peer; of a name replaced again before that, only the latest member is
// dialed. A request naming in Destination-Host a replaced
// peer, or a name added back, waits for the new peer until it is dialed
// and has learned its server's identity; one naming a removed peer names
// none of the Client's peers: it goes to any.
//
// The list is checked whole first and nothing changes on an error: the
// same checks as New, a list that changes the protocol (Diameter
// peers and RADIUS servers stay apart), and radius:// servers given to a
// Client created without any (New sets up their defaults and policy
// states); such an error matches ErrConfig.
// RequestTimeout, when New derived
// it from the peers, is not derived again; a deadline now shorter than
// the failover detection of the new peers (a longer Tw) is logged as New
// logs it. SetPeers returns without
// waiting for the drains; Close waits for them. ctx bounds nothing yet
// but the call itself: it is there for the drains a later version may
// wait for.
func (c *Client) SetPeers(ctx context.Context, specs []PeerSpec) (PeersChange, error) {
	var ch PeersChange
	if err := ctx.Err(); err != nil {
		return ch, err
	}
	norm, err := c.checkNewPeers(specs)
	if err != nil {
		return ch, configError{err}
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ch, fmt.Errorf("client: %w", ErrClosed)
	}
	old := c.ros.Load()
	live := make(map[string]*member, len(old.order))
	for _, m := range old.order {
		live[m.spec.Name] = m
	}
	next := &roster{all: old.all}
	known := map[string]string{} // name -> the identity its last member learned
	for _, m := range old.all {
		if id := m.identity(); id != "" {
			known[m.spec.Name] = id
		}
	}
	var fresh, gone, reweigh []*member
	replacedBy := map[*member]*member{} // old member -> the new one replacing it
	replacing := map[*member]bool{}     // the new members that replace one
	lastOf := map[string]*member{}      // each name's latest member, removed ones too
	for _, m := range old.all {
		lastOf[m.spec.Name] = m
	}
	for _, s := range norm {
		m := live[s.Name]
		switch {
		case m != nil && sameSettings(m.spec, s):
			if m.spec.Weight != s.Weight {
				ch.Reweighted = append(ch.Reweighted, s.Name)
				reweigh = append(reweigh, m)
			} else {
				ch.Unchanged = append(ch.Unchanged, s.Name)
			}
			delete(live, s.Name)
			next.order = append(next.order, m)
			continue
		case m != nil:
			ch.Replaced = append(ch.Replaced, s.Name)
			delete(live, s.Name)
			gone = append(gone, m)
		default:
			ch.Added = append(ch.Added, s.Name)
		}
		// A Diameter member is dialed once the member of its name before
		// it (replaced now, or removed before and still draining) holds no
		// connection, and a peer learns its server's identity from its
		// CEA: until then, the requests naming the server by the identity
		// its name had wait for the new member.
		nm := &member{spec: s, index: len(next.all), ident: known[s.Name]}
		if m != nil {
			replacedBy[m], replacing[nm] = nm, true
		}
		if prev := lastOf[s.Name]; prev != nil && !c.radius && !prev.cleared && (prev.p() != nil || prev.after != nil) {
			nm.after = prev.clearLocked() // it holds, or will hold, a connection
		}
		next.all = append(next.all, nm)
		next.order = append(next.order, nm)
		fresh = append(fresh, nm)
	}
	for _, m := range old.order {
		if _, left := live[m.spec.Name]; left {
			ch.Removed = append(ch.Removed, m.spec.Name)
			gone = append(gone, m)
		}
	}
	if len(next.all) > maxMembers {
		c.mu.Unlock()
		return PeersChange{}, fmt.Errorf("client: more than %d peers over the Client's life: restart it", maxMembers)
	}
	// What can refuse comes first, so that a refusal changes nothing:
	// the new members' throttle limits (checkOverrides checked them; the
	// throttle takes its servers one by one and keeps those it took, so
	// they are checked again here, whole, before anything changes), then
	// the balancer's new table, which is replaced whole or not at all.
	// Past these nothing refuses.
	if c.sched != nil {
		for _, m := range fresh {
			ts := c.throttleServer(m)
			if err := checkLimits(ts.Auth, ts.Accounting); err != nil {
				c.mu.Unlock()
				return PeersChange{}, configError{fmt.Errorf("client: peer %s: %w", m.spec.URL, err)}
			}
		}
	}
	if c.bal != nil {
		servers := make([]loadbalance.Server, len(next.order))
		for i, m := range next.order {
			servers[i] = loadbalance.Server{Name: m.spec.Name, Weight: m.spec.Weight, Index: m.index}
		}
		// Weight: the spec's; a reweighted member keeps its spec, so
		// take the new one.
		for i, s := range norm {
			servers[i].Weight = s.Weight
		}
		if _, err := c.bal.SetServers(servers); err != nil {
			c.mu.Unlock()
			return PeersChange{}, fmt.Errorf("client: %w", err)
		}
	}
	if c.sched != nil {
		c.tmu.Lock()
		for _, m := range fresh {
			i, err := c.sched.AddServer(c.throttleServer(m))
			if err == nil && i != m.index {
				err = fmt.Errorf("throttle index %d for member %d", i, m.index)
			}
			if err != nil {
				// Checked above: a throttle whose servers and members
				// disagree, which nothing here can mend.
				c.unlockThrottle()
				c.mu.Unlock()
				return PeersChange{}, fmt.Errorf("client: %w", err)
			}
			c.sched.SetAvailable(i, false, c.monoNow()) // until its watchdog says OKAY
		}
		// A replacement is the same server: the requests its old member
		// still has there count against the new member's limits, so that
		// the server never carries both members' places while the old
		// one drains (a RADIUS replacement is dialed at once).
		for m, nm := range replacedBy {
			c.sched.Succeed(m.index, nm.index, c.monoNow())
		}
		c.unlockThrottle()
	}
	if c.group != nil {
		for _, m := range fresh {
			// Unavailable until its peer is in service (serverState),
			// from the start: the dispatcher's Tick does not wait for
			// c.mu, and the roster does not hold m yet.
			if i, err := c.group.Add(m.spec.Name); err != nil || i != m.index {
				c.mu.Unlock()
				return PeersChange{}, fmt.Errorf("client: policy index %d for member %d: %v", i, m.index, err)
			}
		}
		for _, m := range gone {
			c.group.Remove(m.index)
		}
	}
	for _, m := range gone {
		m.removed.Store(true)
	}
	for _, m := range reweigh {
		// Every copy of a whole spec is made under c.mu: the Weight is
		// written under it too.
		m.spec.Weight = norm[slices.Index(next.order, m)].Weight
	}
	c.ros.Store(next)
	var evs []Event
	var drains []func()
	now := time.Now()
	for _, m := range gone {
		nm := replacedBy[m]
		why := "removed"
		if nm != nil {
			why = "replaced"
		}
		evs = append(evs, Event{Time: now, Server: m.spec.Name, Kind: EventReconfigured, Change: why,
			Reason: why + ": takes no new request; its requests in flight are answered, then it closes"})
		if start := c.drain(m); start != nil {
			drains = append(drains, start)
		}
	}
	for _, m := range reweigh {
		evs = append(evs, Event{Time: now, Server: m.spec.Name, Kind: EventReconfigured, Change: "reweighted",
			Reason: fmt.Sprintf("weight changed to %d", m.spec.Weight)})
	}
	changeOf := func(m *member) string {
		if replacing[m] {
			return "replaced"
		}
		return "added"
	}
	for _, m := range fresh {
		change := changeOf(m)
		switch {
		case m.after != nil:
			evs = append(evs, Event{Time: now, Server: m.spec.Name, Kind: EventReconfigured, Change: change,
				Reason: change + ": dialed once the old connection of its name has closed"})
			c.closing.Add(1) // under c.mu, before Close could wait
			drains = append(drains, func() { go c.dialAfter(m, change) })
		case c.cfg.MaxConnections > 0:
			evs = append(evs, Event{Time: now, Server: m.spec.Name, Kind: EventReconfigured, Change: change,
				Reason: change + ": connected when a connection slot is free, in configured order"})
		default:
			evs = append(evs, c.dialAdded(m, change)...)
		}
	}
	if c.cfg.MaxConnections > 0 {
		// The free slots go to the first peers in the new order, kept or
		// added, as at New.
		evs = c.fillSlotsLocked(next.order, evs, func(m *member) []Event {
			if slices.Contains(fresh, m) {
				return c.dialAdded(m, changeOf(m))
			}
			if err := c.dialLocked(m); err != nil {
				return nil
			}
			return []Event{{Time: now, Server: m.spec.Name, Kind: EventSlotFilled,
				Reason: "connection slot filled: the configuration changed"}}
		})
	}
	c.note(evs...)
	c.mu.Unlock()
	c.refresh()
	for _, start := range drains { // after the events that say why they end
		start()
	}
	// The deadline stays as New set it: a peer of a longer Tw (or, over
	// UDP, another server to try) may now need longer to be failed over
	// than it leaves, which New would have said.
	cfg := c.cfg
	cfg.Peers = norm
	if detect, _ := deadlines(cfg, c.radius); cfg.RequestTimeout < detect {
		warnShortDeadline(cfg, c.radius, detect)
	}
	return ch, nil
}

// identity returns the Diameter identity m's peer learned from its
// server's CEA, else the one m took over from the members of its name
// before it (ident); "" if none.
func (m *member) identity() string {
	if p := m.p(); p != nil && p.Name() != m.spec.URL {
		return p.Name()
	}
	return m.ident
}

// drain closes a member SetPeers took out, in the background (Close
// waits for it): its peer finishes what is in flight and closes, and
// then the member is clear (the next member of its name may connect).
// It returns the function that starts the drain, to call after the
// events that say why (nil: nothing to drain). c.mu is held.
func (c *Client) drain(m *member) (start func()) {
	// Each carrier's graceful end: a Diameter peer's Close answers what
	// is in flight, then DPR; a RADIUS server's Drain and a UDP
	// server's Close let what is in flight finish, then close.
	var closer func(context.Context) error
	var done <-chan struct{}
	switch {
	case m.p() != nil:
		closer, done = m.p().Close, m.p().Done()
	case m.rp.Load() != nil:
		closer, done = m.rp.Load().Drain, m.rp.Load().Done()
	case m.up.Load() != nil:
		up := m.up.Load()
		closer = func(ctx context.Context) error {
			// Its requests waiting for an Identifier go elsewhere now,
			// as the doc of SetPeers says (a closed UDP peer would send
			// them to the server as Identifiers free).
			up.HandOver("removed from the configuration: never sent there", nil, nil)
			return up.Close(ctx)
		}
	}
	if closer == nil {
		if m.after == nil {
			m.markClearLocked() // never dialed; else dialAfter clears it
		}
		return nil
	}
	c.closing.Add(1) // under c.mu, before Close could wait
	return func() { go c.finishDrain(m, closer, done) }
}

// finishDrain closes a removed member's peer and marks the member clear
// once the peer is done (see drain).
func (c *Client) finishDrain(m *member, closer func(context.Context) error, done <-chan struct{}) {
	defer c.closing.Done()
	// No request lives longer than RequestTimeout: nor does a drain. Not
	// cut short when the Client closes: Close closes this peer too, with
	// its own ctx, which bounds the drain as it does the others'.
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
	closer(ctx)
	cancel()
	if done != nil {
		<-done
	}
	c.mu.Lock()
	m.markClearLocked()
	if c.cfg.MaxConnections > 0 && !c.closed {
		// Its slot is free now. A peer that drained from service said so
		// with its DOWN (balanceSlots); one that was DOWN already when it
		// was removed changes no state as it closes: fill the slot here.
		c.note(c.fillSlotsLocked(c.ros.Load().order, nil, func(x *member) []Event {
			if err := c.dialLocked(x); err != nil {
				return nil
			}
			return []Event{{Time: time.Now(), Server: x.spec.Name, Kind: EventSlotFilled, Because: m.spec.Name,
				Reason: fmt.Sprintf("connection slot filled: removed peer %s closed", m.spec.Name)}}
		})...)
	}
	c.mu.Unlock()
}

// fillSlotsLocked dials, with dial, the first members of order not dialed
// while MaxConnections leaves slots free, and returns evs with the events
// of the dials. A member that will take its slot once the old connection
// of its name has closed holds it. c.mu is held.
func (c *Client) fillSlotsLocked(order []*member, evs []Event, dial func(*member) []Event) []Event {
	waiting := 0
	for _, m := range order {
		if c.dialedLocked()+waiting >= c.cfg.MaxConnections {
			break
		}
		if m.after != nil {
			waiting++
			continue
		}
		if m.p() == nil {
			evs = append(evs, dial(m)...)
		}
	}
	return evs
}

// dialAfter dials m, which SetPeers added or made to replace another,
// once the member of its name before it is clear (m.after), unless m was
// taken out meanwhile: then m is clear in its turn, never dialed.
func (c *Client) dialAfter(m *member, change string) {
	defer c.closing.Done()
	c.mu.Lock()
	after := m.after
	c.mu.Unlock()
	select {
	case <-after:
	case <-c.ctx.Done():
		return
	}
	var evs []Event
	c.mu.Lock()
	m.after = nil
	switch {
	case c.closed:
	case m.removed.Load():
		m.markClearLocked()
	default:
		evs = c.dialAdded(m, change)
	}
	c.note(evs...)
	c.mu.Unlock()
}

// dialAdded dials a member SetPeers added (change "added") or that
// replaces another ("replaced"), unless MaxConnections leaves it to
// wait for a slot, and returns the events to publish after c.mu. c.mu
// is held.
func (c *Client) dialAdded(m *member, change string) []Event {
	if c.cfg.MaxConnections > 0 && c.dialedLocked() >= c.cfg.MaxConnections {
		return []Event{{Time: time.Now(), Server: m.spec.Name, Kind: EventReconfigured, Change: change,
			Reason: change + ": waits for a connection slot"}}
	}
	e := Event{Time: time.Now(), Server: m.spec.Name, Kind: EventReconfigured, Change: change, Reason: change + ": dialing"}
	if err := c.dialLocked(m); err != nil {
		e.Reason = change + ": " + err.Error()
	}
	return []Event{e}
}

// sameSettings reports whether two specs of one name differ in nothing
// but the weight. TLS configurations are the same when they are the same
// *tls.Config: one cannot be compared by value (its CA pool holds
// functions), so a caller passes the one it passed before for a peer
// whose TLS did not change.
func sameSettings(a, b PeerSpec) bool {
	if a.TLS != b.TLS {
		return false
	}
	a.Weight, b.Weight, a.TLS, b.TLS = 0, 0, nil, nil
	return reflect.DeepEqual(a, b)
}

// throttleServer is m's throttle configuration.
func (c *Client) throttleServer(m *member) throttle.Server {
	auth, acct := m.spec.limits(c.cfg.Throttle)
	s := throttle.Server{Name: m.spec.Name, Auth: auth, Accounting: acct}
	if c.radius {
		s.Auth, s.Accounting = c.radiusLimits(m, auth), c.radiusLimits(m, acct)
	}
	return s
}
