// Package client is the embedding API of aaatp: a Client owns a set of
// peers and offers one call, Send, that returns the answer to a request or
// a clear error. Behind it, the RFC 3539 failover of 3.4.1 [3] and 3.4.2:
// when a peer's watchdog calls Failover() or its connection drops, the
// requests pending on it are replayed, in their original order, to an
// alternate peer in service, with a new Hop-by-Hop id, the same End-to-End
// id and Origin-Host, and the T flag set (F2); with no alternate they wait
// for one until their deadline (F3); a late answer on the old connection
// is delivered only if the caller has none yet (F4).
//
// Two modes choose the peer for a new request: Balance (through package
// loadbalance: RFC 3074 Pearson hash over the NAI by default) and
// PrimarySecondary (the first peer in service, in configured order).
//
// A Client is safe for concurrent use.
package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// Mode chooses how new requests pick a peer.
type Mode uint8

const (
	// Balance spreads requests with the configured loadbalance algorithm.
	Balance Mode = iota
	// PrimarySecondary sends to the first peer in service, in order (3.4.2).
	PrimarySecondary
)

// ParseMode parses "balance" or "failover" (primary/secondary).
func ParseMode(s string) (Mode, error) {
	switch s {
	case "balance", "":
		return Balance, nil
	case "failover", "primary-secondary":
		return PrimarySecondary, nil
	}
	return 0, fmt.Errorf("client: unknown mode %q (want balance or failover)", s)
}

func (m Mode) String() string {
	if m == PrimarySecondary {
		return "failover"
	}
	return "balance"
}

// Errors of Send, beyond those of package peer.
var (
	// ErrUnableToDeliver: the request names a Destination-Host whose
	// connection failed; it is not moved to another host (RFC 6733 5.5.4).
	ErrUnableToDeliver = errors.New("DIAMETER_UNABLE_TO_DELIVER (3002)")
	// ErrNoPeer: no peer in service before the request's deadline.
	ErrNoPeer = errors.New("no peer in service")
)

// PeerSpec is one configured peer.
type PeerSpec struct {
	URL    string // tcp://host:port, tls://..., sctp://...
	Name   string // label for the balancer and statistics; default URL
	Weight int    // balance weight; default 1
}

// Config configures a Client.
type Config struct {
	Peers     []PeerSpec
	Mode      Mode
	Algorithm loadbalance.Algorithm // Balance mode; default Pearson
	// Balancer tunes the conversation memory of Balance mode.
	Balancer loadbalance.Options
	// Peer is the template for every peer (Origin-Host, Watchdog, ...).
	// Its OnFailover and Events are set by the Client.
	Peer peer.Config
	// RequestTimeout bounds a Send whose context has no deadline. Default
	// peer.DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxConnections, in PrimarySecondary mode, bounds how many peers are
	// connected at once (0: all). The first MaxConnections peers are dialed;
	// when one goes DOWN the next in order is dialed to fill its slot, while
	// the DOWN one keeps being retried. When it comes back, the least
	// preferred connection is closed, but only once it has been in service
	// for MinConnectionAge (F5).
	MaxConnections int
	// MinConnectionAge is how long a working connection stays open before
	// it may be closed to respect MaxConnections. Default and minimum: 5
	// minutes (RFC 3539 3.3's BRINGDOWN_INTERVAL).
	MinConnectionAge time.Duration
	// Policy, when set, adds the server states of the Nokia 7750 SR
	// (unknown, in-service, out-of-service, probing; S1-S5): a server that
	// stops replying is held down, then probed with one message.
	Policy *policy.Config
	// TestRequest builds the test user's request sent to a server as a
	// probe or keep-alive (Policy.TestUser). Nil: real requests probe.
	TestRequest func(server string) []byte
	// Throttle, when set, limits each server's rate and outstanding
	// requests, with an instance queue and per-server queues (Q1-Q5).
	Throttle *Throttle
	// FailoverLog is how many failover records the Client keeps. Default 256.
	FailoverLog int
	// Events receives the events of every peer (EventPeer) and the
	// Client's own: failover records, balancer rebuilds, policy states,
	// queue alarms, connection slots. Default: a new Bus.
	Events *Bus
}

type member struct {
	spec  PeerSpec
	index int
	pp    atomic.Pointer[peer.Peer] // nil until dialed (MaxConnections)
	stats serverStats

	// Owned under Client.mu.
	okaySince time.Time // when the watchdog last went OKAY; zero when not OKAY
}

// p returns the member's peer, or nil when it was not dialed.
func (m *member) p() *peer.Peer { return m.pp.Load() }

// okay reports whether the member's peer is dialed and in service.
func (m *member) okay() bool {
	p := m.pp.Load()
	return p != nil && p.State() == watchdog.Okay
}

// Client owns a set of peers. See the package documentation.
type Client struct {
	cfg     Config
	members []*member
	byPeer  sync.Map // *peer.Peer -> *member, every peer ever dialed; read on the hot path without c.mu
	byName  map[string]*member
	bal     *loadbalance.Balancer // Balance mode
	rr      atomic.Uint64
	events  *Bus
	cancels []func()

	mu      sync.Mutex
	parked  []*peer.Call // waiting for any peer in service (F3)
	closed  bool
	trimmer *time.Timer    // pending connection-limit check
	closing sync.WaitGroup // peers closed to respect MaxConnections

	log failoverLog

	group        *policy.Group              // nil without Policy
	sched        *throttle.Scheduler[*item] // nil without Throttle; guarded by tmu
	tmu          sync.Mutex
	wake         chan struct{}
	stopDispatch chan struct{}
	dispatchDone chan struct{}
	ctx          context.Context // cancelled by Close
	cancel       context.CancelFunc
}

// New dials every peer and returns at once; peers come into service in
// the background. Send before any is OKAY waits for one (bounded by its
// deadline).
func New(cfg Config) (*Client, error) {
	if len(cfg.Peers) == 0 {
		return nil, errors.New("client: no peers configured")
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = peer.DefaultRequestTimeout
	}
	if cfg.MinConnectionAge < peer.BringDownInterval {
		cfg.MinConnectionAge = peer.BringDownInterval
	}
	if cfg.Events == nil {
		cfg.Events = NewBus()
	}
	c := &Client{cfg: cfg, events: cfg.Events, byName: map[string]*member{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.log.init(cfg.FailoverLog)
	var servers []loadbalance.Server
	if cfg.MaxConnections < 0 || (cfg.MaxConnections > 0 && cfg.Mode != PrimarySecondary) {
		return nil, errors.New("client: MaxConnections applies to primary/secondary mode and must be positive")
	}
	for i, s := range cfg.Peers {
		if s.Name == "" {
			s.Name = s.URL
		}
		if s.Weight == 0 {
			s.Weight = 1
		}
		if _, dup := c.byName[s.Name]; dup {
			return nil, fmt.Errorf("client: peer %q configured twice", s.Name)
		}
		m := &member{spec: s, index: i}
		c.members = append(c.members, m)
		c.byName[s.Name] = m
		servers = append(servers, loadbalance.Server{Name: s.Name, Weight: s.Weight, Index: i})
	}
	if cfg.Mode == Balance {
		opts := cfg.Balancer
		opts.InitialState = loadbalance.Down
		b, err := loadbalance.New(cfg.Algorithm, servers, opts)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		c.bal = b
	}
	// Peer goroutines reach the Client only through paths that take c.mu
	// first (onFailover, unpark): holding it while the members are filled
	// in keeps them from seeing a half-built Client.
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.setupLimits(); err != nil {
		return nil, err
	}
	for _, m := range c.members {
		if c.cfg.Mode == PrimarySecondary && c.cfg.MaxConnections > 0 && c.dialedLocked() >= c.cfg.MaxConnections {
			break // the rest wait for a slot (F5)
		}
		if err := c.dialLocked(m); err != nil {
			c.mu.Unlock()
			c.Close(context.Background())
			c.mu.Lock()
			return nil, err
		}
	}
	return c, nil
}

// dialLocked creates the member's peer. c.mu is held.
func (c *Client) dialLocked(m *member) error {
	pc := c.cfg.Peer
	pc.OnFailover = c.onFailover
	pc.Events = peer.NewBus() // per peer, so we know whose event it is
	self := new(atomic.Pointer[peer.Peer])
	c.cancels = append(c.cancels, pc.Events.Subscribe(func(e peer.Event) { c.onPeerEvent(m, self, e) }))
	p, err := peer.Dial(m.spec.URL, pc)
	if err != nil {
		return fmt.Errorf("client: peer %s: %w", m.spec.Name, err)
	}
	if testHookDialed != nil {
		testHookDialed(p)
	}
	self.Store(p)
	m.pp.Store(p)
	c.byPeer.Store(p, m)
	if c.sched != nil {
		// The peer may have come up before it was stored just now, and
		// the throttle then saw it as unavailable: look again.
		c.refreshAvailability()
	}
	return nil
}

// testHookDialed, set by tests, runs between a peer's Dial and its
// storing in its member.
var testHookDialed func(*peer.Peer)

// dialedLocked counts the members with a peer object.
func (c *Client) dialedLocked() int {
	n := 0
	for _, m := range c.members {
		if m.p() != nil {
			n++
		}
	}
	return n
}

// memberOf returns the member a peer belongs to (nil for nil).
func (c *Client) memberOf(p *peer.Peer) *member {
	if p == nil {
		return nil
	}
	if m, ok := c.byPeer.Load(p); ok {
		return m.(*member)
	}
	return nil
}

// Events returns the bus of the Client's events (Config.Events).
func (c *Client) Events() *Bus { return c.events }

// Peers returns the peers in configured order.
func (c *Client) Peers() []*peer.Peer {
	ps := make([]*peer.Peer, len(c.members))
	for i, m := range c.members {
		ps[i] = m.p()
	}
	return ps
}

// Balancer returns the balancer of Balance mode (nil otherwise).
func (c *Client) Balancer() *loadbalance.Balancer { return c.bal }

// Send sends one request and returns its answer. req is an encoded request
// (message.NewRequest(...).Bytes()); the Client takes it over. Send waits
// until ctx is done, or RequestTimeout when ctx has no deadline. Every
// request gets exactly one answer or one error.
func (c *Client) Send(ctx context.Context, req []byte) ([]byte, error) {
	cl, err := peer.NewCall(req)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	start := time.Now()
	var it *item
	if c.sched != nil {
		dl, ok := ctx.Deadline()
		if !ok {
			dl = start.Add(c.cfg.RequestTimeout)
		}
		it = c.sendThrottled(cl, dl)
	} else {
		c.dispatch(cl, nil)
	}
	ans, err := cl.Wait(ctx, c.cfg.RequestTimeout)
	if it != nil {
		c.release(it) // the answer arrived or the request timed out (Q2)
	}
	if err == nil {
		c.replied(cl.AnsweredBy())
	}
	// The outcome counts for the server the request was first sent to,
	// wherever a failover took it (RFC 3539 3.4.3 [4] statistics).
	if m := c.memberOf(cl.FirstPeer()); m != nil {
		m.stats.done(err == nil, time.Since(start))
	}
	if err != nil {
		if errors.Is(err, peer.ErrTimeout) && cl.Sends() == 0 {
			return nil, fmt.Errorf("client: %w: %w", ErrNoPeer, err)
		}
		return nil, fmt.Errorf("client: %w", err)
	}
	return ans, nil
}

// dispatch submits cl to a peer in service other than avoid, or parks it.
// It returns the member it went to (nil when parked or completed).
func (c *Client) dispatch(cl *peer.Call, avoid *member) *member {
	var refused []*member // by the policy or a connection lost just now
	for range len(c.members) + 1 {
		m := c.pick(cl, avoid, refused...)
		if m == nil {
			break
		}
		ok, probe := c.admit(m)
		if !ok {
			refused = append(refused, m)
			continue
		}
		first := cl.Sends() == 0
		if err := m.p().Submit(cl); err != nil {
			if probe {
				c.group.CancelProbe(m.index)
			}
			refused = append(refused, m)
			continue
		}
		if first {
			m.stats.sent.Add(1)
		}
		c.sent(m)
		return m
	}
	c.park(cl)
	return nil
}

// pick chooses a member in service for cl, never avoid nor one of skip.
// With a policy, a server whose state takes no traffic is passed over; a
// server waiting for a real request to probe it gets this one (S4).
func (c *Client) pick(cl *peer.Call, avoid *member, skip ...*member) *member {
	usable := func(m *member) bool {
		if m == avoid || !m.okay() || slices.Contains(skip, m) {
			return false
		}
		return c.group == nil || c.group.State(m.index).Takes()
	}
	if c.group != nil {
		if i, ok := c.group.ProbeWanted(); ok {
			if m := c.members[i]; m != avoid && m.okay() && !slices.Contains(skip, m) {
				return m
			}
		}
	}
	if c.bal != nil {
		req := cl.Request()
		nai, _ := wire.FindAVP(req, message.UserName, 0)
		sid, _ := wire.FindAVP(req, message.SessionID, 0)
		if s, err := c.bal.Pick(loadbalance.Request{NAI: string(nai), SessionID: string(sid)}); err == nil {
			if m := c.byName[s.Name]; usable(m) {
				return m
			}
		}
		// The balancer's view lags a transition by a moment: fall back to
		// round-robin over the peers in service.
		n := uint64(len(c.members))
		start := c.rr.Add(1)
		for i := range n {
			m := c.members[(start+i)%n]
			if usable(m) {
				return m
			}
		}
		return nil
	}
	for _, m := range c.members { // primary first, then secondaries in order
		if usable(m) {
			return m
		}
	}
	return nil
}

func (c *Client) park(cl *peer.Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.parked) >= 1024 && len(c.parked)%1024 == 0 {
		// Drop calls whose callers gave up, so the queue stays bounded by
		// the requests still waiting.
		c.parked = slices.DeleteFunc(c.parked, (*peer.Call).IsDone)
	}
	c.parked = append(c.parked, cl)
}

// unpark sends parked calls now that a peer is in service, oldest first.
func (c *Client) unpark() {
	c.mu.Lock()
	calls := c.parked
	c.parked = nil
	c.mu.Unlock()
	for i, cl := range calls {
		if !cl.IsDone() && c.dispatch(cl, nil) == nil {
			// Parked again: nothing is in service after all. Keep the
			// rest, in order, behind it.
			c.mu.Lock()
			c.parked = append(c.parked, calls[i+1:]...)
			c.mu.Unlock()
			return
		}
	}
}

// onPeerEvent runs on the peer's goroutines: keep the balancer's view and
// wake parked calls.
func (c *Client) onPeerEvent(m *member, self *atomic.Pointer[peer.Peer], e peer.Event) {
	c.events.Publish(Event{Time: e.Time, Server: m.spec.Name, Kind: EventPeer, Peer: &e, Reason: e.Reason})
	if e.Kind != peer.EventWatchdog {
		return
	}
	to := e.To
	if c.bal != nil {
		st := loadbalance.Down
		switch to {
		case watchdog.Okay:
			st = loadbalance.InService
		case watchdog.Suspect:
			st = loadbalance.Suspended
		}
		if rebuilt, err := c.bal.SetState(m.spec.Name, st); err == nil && rebuilt {
			gen := c.bal.Generation()
			c.events.Publish(Event{Time: time.Now(), Server: m.spec.Name, Kind: EventBalancerRebuilt, Generation: gen,
				Reason: fmt.Sprintf("balancer table rebuilt (generation %d)", gen)})
		}
	}
	if c.cfg.MaxConnections > 0 {
		c.balanceSlots(m, self, to)
	}
	if c.group != nil {
		c.group.SetAvailable(m.index, to == watchdog.Okay)
	}
	if c.sched != nil {
		c.refreshAvailability()
	}
	if to == watchdog.Okay {
		c.unpark()
	}
}

// balanceSlots keeps MaxConnections peers connected in primary/secondary
// mode (F5): a peer going DOWN lets the next undialed one in; a peer back
// in service makes the least preferred connected one surplus, closed once
// it has worked for MinConnectionAge.
func (c *Client) balanceSlots(m *member, self *atomic.Pointer[peer.Peer], to watchdog.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || m.p() == nil || m.p() != self.Load() {
		return // a peer closed to respect the limit: its DOWN frees no slot
	}
	if to == watchdog.Okay {
		m.okaySince = time.Now()
	} else {
		m.okaySince = time.Time{}
	}
	live := 0 // dialed and not DOWN: holding or about to hold a connection
	for _, x := range c.members {
		if p := x.p(); p != nil && p.State() != watchdog.Down {
			live++
		}
	}
	if to == watchdog.Down && live < c.cfg.MaxConnections {
		for _, x := range c.members {
			if x.p() == nil {
				if err := c.dialLocked(x); err == nil {
					c.events.Publish(Event{Time: time.Now(), Server: x.spec.Name, Kind: EventSlotFilled, Because: m.spec.Name,
						Reason: fmt.Sprintf("connection slot filled: %s is DOWN", m.spec.Name)})
				}
				break
			}
		}
	}
	c.trimLocked()
}

// trimLocked closes surplus connections, least preferred first, once they
// are old enough; otherwise it schedules itself for when one will be.
func (c *Client) trimLocked() {
	okay := 0
	for _, x := range c.members {
		if x.okay() {
			okay++
		}
	}
	if okay <= c.cfg.MaxConnections {
		return
	}
	for i := len(c.members) - 1; i >= 0; i-- {
		x := c.members[i]
		if !x.okay() || x.okaySince.IsZero() {
			continue
		}
		age := time.Since(x.okaySince)
		if age < c.cfg.MinConnectionAge {
			if c.trimmer != nil {
				c.trimmer.Stop()
			}
			c.trimmer = time.AfterFunc(c.cfg.MinConnectionAge-age, func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				if !c.closed {
					c.trimLocked()
				}
			})
			return
		}
		p := x.p()
		x.pp.Store(nil)
		x.okaySince = time.Time{}
		c.events.Publish(Event{Time: time.Now(), Server: x.spec.Name, Kind: EventSlotReleased, Age: age, Limit: c.cfg.MaxConnections,
			Reason: fmt.Sprintf("closed to respect the limit of %d connections after %v in service", c.cfg.MaxConnections, age.Truncate(time.Second))})
		c.closing.Add(1)
		go func() {
			defer c.closing.Done()
			p.Close(context.Background())
		}()
		return
	}
}

// onFailover runs on the failed peer's loop: replay its pending requests
// elsewhere, in order (F2).
func (c *Client) onFailover(from *peer.Peer, calls []*peer.Call, reason string) {
	c.mu.Lock() // also waits for New to finish filling the members
	closed := c.closed
	c.mu.Unlock()
	fm := c.memberOf(from)
	if fm == nil {
		return
	}
	if len(calls) == 0 {
		// Still a failover event for the table of 3.4.2 [5] (the peer left
		// service), unless we are shutting down.
		if !closed {
			c.record(FailoverRecord{Time: time.Now(), From: fm.spec.Name, Outcome: NothingPending, Reason: reason + "; nothing pending", EndToEnd: []uint32{}})
		}
		return
	}
	fm.stats.failedOver.Add(uint64(len(calls)))
	moved := map[*member][]uint32{}
	var parked, refused []uint32
	// Choose every call's alternate first, then send each group in one
	// batch (original order kept within a group).
	groups := map[*member][]*peer.Call{}
	var order []*member
	for _, cl := range calls {
		if cl.IsDone() {
			continue
		}
		if dh, ok := cl.DestinationHost(); ok && dh == from.Name() {
			cl.Fail(fmt.Errorf("%w: Destination-Host %s is not reachable (%s)", ErrUnableToDeliver, dh, reason))
			refused = append(refused, cl.EndToEnd())
			continue
		}
		to := c.pick(cl, fm)
		if to == nil {
			c.park(cl)
			parked = append(parked, cl.EndToEnd())
			continue
		}
		if _, ok := groups[to]; !ok {
			order = append(order, to)
		}
		groups[to] = append(groups[to], cl)
	}
	for _, to := range order {
		g := groups[to]
		if err := to.p().SubmitAll(g); err == nil {
			for _, cl := range g {
				moved[to] = append(moved[to], cl.EndToEnd())
			}
			continue
		}
		for _, cl := range g { // that alternate just left service
			if m := c.dispatch(cl, fm); m != nil {
				moved[m] = append(moved[m], cl.EndToEnd())
			} else {
				parked = append(parked, cl.EndToEnd())
			}
		}
	}
	now := time.Now()
	for to, ids := range moved {
		c.record(FailoverRecord{Time: now, From: fm.spec.Name, To: to.spec.Name, Outcome: Moved, Reason: reason, Moved: len(ids), EndToEnd: ids})
	}
	if len(parked) > 0 {
		c.record(FailoverRecord{Time: now, From: fm.spec.Name, Outcome: Parked, Reason: reason + "; no alternate in service: waiting", Moved: len(parked), EndToEnd: parked})
	}
	if len(refused) > 0 {
		c.record(FailoverRecord{Time: now, From: fm.spec.Name, Outcome: Refused, Reason: reason + "; Destination-Host was the failed peer: DIAMETER_UNABLE_TO_DELIVER", EndToEnd: refused})
	}
}

func (c *Client) record(r FailoverRecord) {
	c.log.add(r)
	c.events.Publish(Event{Time: r.Time, Server: r.From, Kind: EventFailover, Failover: &r, Reason: r.Reason})
}

// Close closes every peer (DPR/DPA) and fails parked requests.
func (c *Client) Close(ctx context.Context) error {
	var wg sync.WaitGroup
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	if c.stopDispatch != nil {
		close(c.stopDispatch)
		<-c.dispatchDone
	}
	for _, m := range c.members {
		p := m.p()
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Close(ctx)
		}()
	}
	wg.Wait()
	c.closing.Wait()
	c.mu.Lock()
	if c.trimmer != nil {
		c.trimmer.Stop()
	}
	cancels := c.cancels
	c.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
	c.mu.Lock()
	calls := c.parked
	c.parked = nil
	c.mu.Unlock()
	for _, cl := range calls {
		cl.Fail(fmt.Errorf("client closed: %w", peer.ErrClosed))
	}
	return nil
}
