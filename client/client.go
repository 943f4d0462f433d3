// Package client is the embedding API of aaatp: a Client owns a set of
// peers and offers one call, Send, that returns the answer to a request or
// a clear error (Exchange for RADIUS servers over radius+tcp:// and
// radsec://, through the same path: see Client.Exchange). Behind it, the RFC 3539 failover of 3.4.1 [3] and 3.4.2:
// when a peer's watchdog calls Failover() or its connection drops, the
// requests pending on it are replayed, in their original order, to an
// alternate peer in service, with a new Hop-by-Hop id, the same End-to-End
// id and Origin-Host, and the T flag set; with no alternate they wait
// for one until their deadline; a late answer on the old connection
// is delivered only if the caller has none yet.
//
// Two modes choose the peer for a new request: Balance (through package
// loadbalance: RFC 3074 Pearson hash over the NAI by default) and
// PrimarySecondary (the first peer in service, in configured order).
//
// A Client is safe for concurrent use.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/internal/bus"
	"github.com/aaatp/aaatp/internal/serial"
	"github.com/aaatp/aaatp/internal/view"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
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

// Errors of Send and Exchange. They are the same values for every
// protocol: package peer's and package radpeer's errors of the same name
// are these, so errors.Is works whatever the servers speak.
var (
	// ErrTimeout: no answer before the request's deadline (its
	// context's, or RequestTimeout). (peer.ErrTimeout, radpeer.ErrTimeout.)
	ErrTimeout = peer.ErrTimeout
	// ErrClosed: the Client was closed before the request was answered,
	// or before a call to it (SetPeers, WaitReady). (peer.ErrClosed,
	// radpeer.ErrClosed.)
	ErrClosed = peer.ErrClosed
	// ErrUnableToDeliver: the request names a Destination-Host whose
	// connection failed; it is not moved to another host (RFC 6733 5.5.4).
	ErrUnableToDeliver = errors.New("DIAMETER_UNABLE_TO_DELIVER (3002)")
	// ErrNoPeer: no peer in service before the request's deadline.
	ErrNoPeer = errors.New("no peer in service")
	// ErrConfig is matched by every error of New and by SetPeers' errors
	// about the peers given: a configuration the Client cannot take. It is
	// package peer's and package radpeer's ErrConfig too.
	ErrConfig = call.ErrConfig
)

// configError marks err as a configuration the Client cannot take: it
// reads as err and matches ErrConfig, and whatever err matches.
type configError struct{ error }

func (e configError) Is(target error) bool { return target == ErrConfig }
func (e configError) Unwrap() error        { return e.error }

// PeerSpec is one configured peer.
type PeerSpec struct {
	// URL is a Diameter peer's (tcp://host:port, tls://..., sctp://...)
	// or a RADIUS server's (radius://host:port over UDP,
	// radius+tcp://host:port, radsec://host[:port]).
	URL    string
	Name   string // label for the balancer and statistics; default URL
	Weight int    // balance weight; default 1
	// Secret is a radius:// or radius+tcp:// server's shared secret; nil:
	// Config.RADIUS.Secret. radsec:// servers use "radsec" (RFC 6614).
	Secret []byte
	// AccountingURL is where a radius:// server takes Accounting-Requests
	// (radius://host:port, its accounting port); "": at URL.
	AccountingURL string
	// Tw is this server's watchdog interval Twinit; 0: the template's
	// (Config.Peer's or Config.RADIUS's Watchdog.Twinit). radius://
	// servers have no watchdog.
	Tw time.Duration
	// TLS is how this tls:// or radsec:// server is connected to (client
	// certificate, CAs, server name); nil: the template's Transport.TLS.
	// A *tls.Config, as the templates take, so that it may come from
	// files, memory or a rotating GetClientCertificate.
	TLS *tls.Config
	// Throttle replaces Config.Throttle's Auth and Accounting limits for
	// this server; nil: Config.Throttle's. It needs Config.Throttle.
	Throttle *ThrottleLimits
}

// Config configures a Client.
type Config struct {
	Peers     []PeerSpec
	Mode      Mode
	Algorithm loadbalance.Algorithm // Balance mode; default Pearson
	// Balancer tunes the conversation memory of Balance mode. The Client
	// sweeps it every half IdleTimeout (at least every second).
	Balancer loadbalance.Options
	// Peer is the template for every Diameter peer (Origin-Host,
	// Watchdog, ...). Its Events are set by the Client, and its
	// RequestTimeout is not used: a request's deadline is its context's,
	// else the Client's RequestTimeout.
	Peer peer.Config
	// RADIUS is the template for every radius+tcp:// and radsec://
	// server (Secret, Watchdog, Transport, MaxConns, ...). Its Events are
	// set by the Client, and its RequestTimeout is not used, as Peer's.
	// A Client has Diameter peers or RADIUS servers, not both.
	RADIUS radpeer.Config
	// UDP is the template for every radius:// server (Timeout, Retries,
	// MaxSockets, ...); its Secret, RequireMessageAuthenticator and
	// Logger default to RADIUS's. Without a Policy, radius:// servers get
	// package policy's states with UDP's Timeout and Retries: over UDP
	// they are what tells a server that stopped answering.
	UDP radpeer.UDPConfig
	// RequestTimeout bounds a Send whose context has no deadline. Default:
	// FailoverDetection of the peers' longest Twinit plus peer.DefaultRequestTimeout
	// for the alternate's answer (74 s with the default Twinit of 30 s), so
	// that a hung peer's requests are replayed, not timed out; with only
	// radius:// servers, the attempts of every server but one (UDP's
	// Timeout x Retries each) plus radpeer.DefaultRequestTimeout. A
	// shorter one is logged as a warning by New.
	RequestTimeout time.Duration
	// MaxConnections, in PrimarySecondary mode, bounds how many peers are
	// connected at once (0: all). The first MaxConnections peers are dialed;
	// when one goes DOWN the next in order is dialed to fill its slot, while
	// the DOWN one keeps being retried. When it comes back, the least
	// preferred connection is closed, but only once it has been in service
	// for MinConnectionAge.
	MaxConnections int
	// MinConnectionAge is how long a working connection stays open before
	// it may be closed to respect MaxConnections. Default and minimum: 5
	// minutes (RFC 3539 3.3's BRINGDOWN_INTERVAL).
	MinConnectionAge time.Duration
	// Policy, when set, adds the server states of the Nokia 7750 SR
	// (unknown, in-service, out-of-service, probing): a server that
	// stops replying is held down, then probed with one message.
	Policy *policy.Config
	// TestRequest builds the test user's request sent to a server as a
	// probe or keep-alive (Policy.TestUser). Nil: real requests probe.
	TestRequest func(server string) []byte
	// RADIUSTestRequest is TestRequest for RADIUS servers (a test user's
	// Access-Request, or a Status-Server).
	RADIUSTestRequest func(server string) *radius.Request
	// Throttle, when set, limits each server's rate and outstanding
	// requests, with an instance queue and per-server queues.
	Throttle *Throttle
	// ForwardRetransmitFlag keeps the T flag a request already carries on
	// every send, a resend after a refusal included: for an agent
	// forwarding a request its origin retransmitted. Off, the first send
	// of a request clears it (the Client is its originator, RFC 6733 3);
	// either way replays after a lost connection set it, and a request
	// that came without it is resent without it after a refusal.
	ForwardRetransmitFlag bool
	// FailoverLog is how many failover records the Client keeps. Default 256.
	FailoverLog int
	// Events receives the events of every peer (EventPeer) and the
	// Client's own: failover records, balancer rebuilds, policy states,
	// queue alarms, connection slots. Default: a new Bus.
	Events *Bus
}

type member struct {
	spec  PeerSpec
	index int // in roster.all, the policy group and the throttle, for good
	// removed: SetPeers took the member out of the configuration; it
	// takes no new request and its peer drains.
	removed atomic.Bool
	pp      atomic.Pointer[peer.Peer]       // nil until dialed (MaxConnections)
	rp      atomic.Pointer[radpeer.Peer]    // a radius+tcp:// or radsec:// server's
	up      atomic.Pointer[radpeer.UDPPeer] // a radius:// server's
	stats   serverStats
	// openErr is why its peer's last attempt to connect failed; nil once
	// it connected (openNoted).
	openErr atomic.Pointer[string]

	// ident is the identity the members of its name before it learned
	// (SetPeers: a replacement, a name added back), set before the member
	// is published: a request naming it in Destination-Host names this
	// member, also before its own peer is dialed (a replacement, after
	// the old one's drain) and has learned its server's identity, and
	// waits for it rather than go to another host.
	ident string
	// released is the identity of the peer the connection limit closed
	// last (trimLocked), nil if none: a request naming it is one of ours.
	// Undialed, no connection can take it, and it fails as undeliverable
	// (deliverable) rather than go to another host; dialed again, it
	// waits for the peer until the peer learns its identity (pinned).
	released atomic.Pointer[string]

	// Owned under Client.mu.
	okaySince time.Time // when the watchdog last went OKAY; zero when not OKAY
	// clear is closed once the member holds no connection to its server
	// and never will: its drain ended, or it was removed before it was
	// dialed (made when first asked for, see clearLocked). The next
	// Diameter member of its name is dialed only then: a Diameter server
	// takes one connection per peer (RFC 6733 5.6.4).
	clear   chan struct{}
	cleared bool
	// after, while set, is the clear of the member of its name before it,
	// which this one waits for to be dialed (dialAfter).
	after <-chan struct{}
}

// clearLocked returns m's clear channel. c.mu is held.
func (m *member) clearLocked() chan struct{} {
	if m.clear == nil {
		m.clear = make(chan struct{})
	}
	return m.clear
}

// markClearLocked closes m's clear channel, once. c.mu is held.
func (m *member) markClearLocked() {
	if !m.cleared {
		m.cleared = true
		close(m.clearLocked())
	}
}

// p returns the member's peer, or nil when it was not dialed.
func (m *member) p() *peer.Peer { return m.pp.Load() }

// okay reports whether the member's peer is dialed and in service.
func (m *member) okay() bool {
	k := m.carrier()
	return k != nil && k.InService()
}

// Client owns a set of peers. See the package documentation.
type Client struct {
	cfg Config
	// epoch is the origin of the monotonic clock readings of do and of
	// the throttle's (monoNow).
	epoch time.Time
	// ros is the configured members (roster); SetPeers swaps it, under
	// mu. The view (av) keeps the roster it was built from.
	ros atomic.Pointer[roster]
	// byPeer maps each peer dialed to its member (call.Carrier ->
	// *member), read on the hot path without c.mu. A peer released to
	// respect MaxConnections is forgotten once its drain has ended
	// (forgetLocked); the others stay.
	byPeer sync.Map
	bal    *loadbalance.Balancer // Balance mode
	rr     atomic.Uint64
	radius bool // the members are RADIUS servers
	events *Bus
	subs   map[call.Carrier]func() // each peer's subscription to its events, by peer; under mu
	// av is the view of where requests may go (avail); refresh, under
	// avMu, swaps it.
	av   atomic.Pointer[avail]
	avMu sync.Mutex
	// retries counts the ticks at which the waiting requests lost and
	// refused everywhere are asked for again (see waitFor); under avMu,
	// copied into each view.
	retries uint64

	// notes delivers the Client's events to its Bus, in the order
	// scheduled, on a goroutine of its own: never under a lock nor on a
	// peer's, a caller's or the dispatcher's goroutine. A change made
	// under a lock schedules its events under that lock, so they keep the
	// order of the changes: the balancer's rebuilds (avMu), the policy's
	// states (pmu), the queue alarms (tmu). Bounded: past maxQueuedEvents
	// (a subscriber that blocks) events are dropped and counted.
	notes   *serial.Queue[Event]
	dropped atomic.Uint64
	// pmu orders the policy group's changes with their events.
	pmu sync.Mutex

	mu     sync.Mutex
	closed bool
	// waiting counts the requests waiting for a view change (strand),
	// bounded by maxWaiting; waiters counts their goroutines (waitFor),
	// which Close waits for. waiters is added to under mu, before closed.
	waiting    atomic.Int64
	waiters    sync.WaitGroup
	lastWaiter *waiter // the waiter started last (strand); under mu
	retryMu    sync.Mutex
	retry      *time.Timer    // the retry tick's, while set (retryLater); under retryMu
	retryOff   bool           // closed: no more retry ticks; under retryMu
	trimmer    *time.Timer    // pending connection-limit check
	sweeper    *time.Timer    // the balancer's sweep (Pearson); reset under mu
	closing    sync.WaitGroup // peers closed to respect MaxConnections
	trimmed    []*peer.Peer   // those peers; under mu

	log failoverLog

	group  *policy.Group              // nil without Policy
	sched  *throttle.Scheduler[*item] // nil without Throttle; guarded by tmu
	tmu    sync.Mutex
	alarms []Event // queue alarms made under tmu, for unlockThrottle; empty whenever tmu is free
	// wakeAt: when the dispatcher's timer wakes it for the scheduler at
	// the latest (the dispatcher sets it as it polls; see
	// dueSoonerLocked). Under tmu.
	wakeAt time.Time
	// retryPoll pokes the dispatcher giveBackRetry after requests were
	// given back (giveBack), while retryPollArmed; under tmu.
	retryPoll      *time.Timer
	retryPollArmed bool
	// released: what the scheduler released, batch after batch in the
	// order it did, waiting for the goroutine placing it (placing). One
	// goroutine at a time places them: two side by side would let a
	// later release leave first. Under tmu.
	released [](*[]throttle.Dispatch[*item])
	placing  bool
	// handing: the hand-overs still to come, one entry per wait (a
	// peer's watchdog change, refreshForFailover; a server policy's
	// down-timeout, awaitHandOver); while there is one, pollLocked
	// releases nothing. missedHandOvers counts the waits that ended
	// without theirs: a watchdog's at the peer's next change
	// (handOverMissed), any at handOverWaitMax (lapseWaitsLocked), whose
	// peers' names wait in lapsed for unlockThrottle to log. Under tmu.
	handing         []handOverWait
	missedHandOvers uint64
	lapsed          []string
	// held: the requests coming back to the scheduler that no peer could
	// take, kept out of it until a view gives them one (holdLocked,
	// unhold); unsettled: those of them the scheduler handed back
	// (heldByPollLocked), for unlockThrottle to settle. Under tmu.
	held      []*item
	unsettled []*item
	// schedGen: the generation of the view the scheduler's servers'
	// availability follows (rebuild), ahead of c.view() until that view
	// is stored; unheldGen: the view unhold last offered the held
	// requests; pollDeferred: a poll waited for unheldGen to catch up
	// with schedGen (pollLocked), and unhold polls again. Under tmu.
	schedGen, unheldGen uint64
	pollDeferred        bool
	wake                chan struct{}
	stopDispatch        chan struct{}
	dispatchDone        chan struct{}
	ctx                 context.Context // cancelled by Close
	cancel              context.CancelFunc
	closeO              sync.Once     // the first Close shuts down
	shut                chan struct{} // closed when the first Close has ended every peer
	gone                chan struct{} // closed when Close has ended every peer and their events are out (Done)
}

// FailoverDetection is the longest the watchdog takes to declare a silent
// peer SUSPECT, the moment its pending requests are replayed: two Tw
// intervals at their longest (Twinit plus 2 s of jitter each, RFC 3539
// 3.4.1). A zero twinit means watchdog.DefaultTwinit.
func FailoverDetection(twinit time.Duration) time.Duration {
	if twinit <= 0 {
		twinit = watchdog.DefaultTwinit
	}
	return 2 * (twinit + watchdog.MaxJitter)
}

// deadlines returns the failover detection of cfg's peers (the longest
// Tw's, or over UDP alone one server's attempts) and the request deadline
// derived from it when Config.RequestTimeout is not set: the detection
// plus the answer's time (over UDP alone, every other server's attempts
// too). cfg.UDP has its defaults when a peer is radius://.
func deadlines(cfg Config, isRADIUS bool) (detect, derived time.Duration) {
	twinit, answerTime := cfg.Peer.Watchdog.Twinit, peer.DefaultRequestTimeout
	if isRADIUS {
		twinit, answerTime = cfg.RADIUS.Watchdog.Twinit, radpeer.DefaultRequestTimeout
	}
	detect = FailoverDetection(maxTw(cfg, twinit))
	if udp := udpMembers(cfg); udp > 0 && udp == len(cfg.Peers) {
		// No watchdog: each server tried takes Timeout x Retries, and
		// the throttle's queues may hold a request before that.
		detect = cfg.UDP.Timeout * time.Duration(cfg.UDP.Retries)
		answerTime = detect*time.Duration(len(cfg.Peers)-1) + radpeer.DefaultRequestTimeout
	}
	return detect, detect + answerTime
}

// logger returns the Logger cfg gives its peers (of RADIUS servers if
// isRADIUS), or slog's default.
func logger(cfg Config, isRADIUS bool) *slog.Logger {
	log := cfg.Peer.Logger
	if isRADIUS {
		log = cfg.RADIUS.Logger
	}
	if log == nil {
		log = slog.Default()
	}
	return log
}

// warnShortDeadline logs that cfg's request deadline is shorter than the
// failover detection of its peers.
func warnShortDeadline(cfg Config, isRADIUS bool, detect time.Duration) {
	logger(cfg, isRADIUS).Warn("the request deadline is shorter than failover detection: a hung peer's requests will time out instead of being replayed",
		"deadline", cfg.RequestTimeout.String(), "detection", detect.String())
}

// New dials every peer and returns at once; peers come into service in
// the background. Send before any is OKAY waits for one (bounded by its
// deadline). Its errors match ErrConfig.
func New(cfg Config) (*Client, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, configError{err}
	}
	return c, nil
}

func newClient(cfg Config) (*Client, error) {
	specs, isRADIUS, err := checkPeers(cfg)
	if err != nil {
		return nil, err
	}
	cfg.Peers = specs
	if udpMembers(cfg) > 0 {
		cfg = udpDefaults(cfg)
	}
	detect, derived := deadlines(cfg, isRADIUS)
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = derived
	} else if cfg.RequestTimeout < detect {
		warnShortDeadline(cfg, isRADIUS, detect)
	}
	if cfg.MinConnectionAge < peer.BringDownInterval {
		cfg.MinConnectionAge = peer.BringDownInterval
	}
	if cfg.Events == nil {
		cfg.Events = NewBus()
	}
	c := &Client{cfg: cfg, events: cfg.Events, radius: isRADIUS, gone: make(chan struct{}), shut: make(chan struct{}), epoch: time.Now()}
	if testHookEpoch != nil {
		c.epoch = testHookEpoch(c.epoch)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	noteCtx := bus.WithPublisher(c.ctx, c)
	c.notes = serial.Bounded(func(e Event) { c.events.Publish(noteCtx, e) }, maxQueuedEvents)
	c.log.init(cfg.FailoverLog)
	var servers []loadbalance.Server
	if cfg.MaxConnections < 0 || (cfg.MaxConnections > 0 && cfg.Mode != PrimarySecondary) {
		return nil, errors.New("client: MaxConnections applies to primary/secondary mode and must be positive")
	}
	ros := new(roster)
	for i, s := range cfg.Peers {
		m := &member{spec: s, index: i}
		ros.all = append(ros.all, m)
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
	ros.order = ros.all
	c.ros.Store(ros)
	c.av.Store(newAvail(ros))
	// Peer goroutines reach the Client only through paths that take c.mu
	// first (onFailover, strand): holding it while the members are filled
	// in keeps them from seeing a half-built Client.
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.setupLimits(); err != nil {
		return nil, err
	}
	for _, m := range ros.order {
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
	if c.bal != nil && cfg.Algorithm == loadbalance.Pearson {
		// The balancer forgets idle conversations only when asked (and at
		// each rebuild): with a server down for long it would remember
		// every new one up to MaxSessions. Set once New cannot fail: Close
		// stops it.
		every := max(c.bal.IdleTimeout()/2, time.Second)
		c.sweeper = time.AfterFunc(every, func() { c.sweepBalancer(every) })
	}
	return c, nil
}

// dialLocked creates the member's peer. c.mu is held.
func (c *Client) dialLocked(m *member) error {
	if c.radius {
		return c.dialRADIUS(m)
	}
	pc := m.spec.peerConfig(c.cfg.Peer)
	pc.Failover = c.onFailover
	pc.Replied = c.repliedHook(pc.Replied) // see dialUDP
	pc.Events = peer.NewBus()              // per peer, so we know whose event it is
	self := new(atomic.Pointer[peer.Peer])
	cancel := pc.Events.Subscribe(func(_ context.Context, e peer.Event) { c.onPeerEvent(m, self, e) })
	p, err := peer.Dial(m.spec.URL, pc)
	if err != nil {
		cancel()
		return fmt.Errorf("client: peer %s: %w", m.spec.Name, err)
	}
	c.subscribedLocked(p, cancel)
	if testHookDialed != nil {
		testHookDialed(p)
	}
	self.Store(p)
	m.pp.Store(p)
	c.byPeer.Store(p, m)
	// The peer may have come up before it was stored just now, unseen by
	// the view: look again.
	c.refresh()
	return nil
}

// subscribedLocked keeps cancel, p's subscription to its events, for
// Close or forgetLocked. c.mu is held.
func (c *Client) subscribedLocked(p call.Carrier, cancel func()) {
	if c.subs == nil {
		c.subs = make(map[call.Carrier]func())
	}
	c.subs[p] = cancel
}

// forgetLocked lets go of p, a peer whose drain has ended: its
// subscription and its place in byPeer. Only for a peer nothing can
// complete a request on any more, long after its last call was
// accounted. c.mu is held.
func (c *Client) forgetLocked(p call.Carrier) {
	if cancel, ok := c.subs[p]; ok {
		cancel()
		delete(c.subs, p)
	}
	c.byPeer.Delete(p)
}

// testHookDialed, set by tests, runs between a peer's Dial and its
// storing in its member.
var testHookDialed func(*peer.Peer)

// dialedLocked counts the members with a peer object: those configured,
// and those SetPeers removed while their peer still drains (it holds its
// connection until it is done).
func (c *Client) dialedLocked() int {
	n := 0
	for _, m := range c.ros.Load().all {
		p := m.p()
		if p == nil {
			continue
		}
		if m.removed.Load() {
			select {
			case <-p.Done():
				continue
			default:
			}
		}
		n++
	}
	return n
}

// memberOf returns the member a peer (a call's First or AnsweredBy)
// belongs to (nil for nil).
func (c *Client) memberOf(p call.Carrier) *member {
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

// Peers returns the servers' peers in configured order, one entry per
// PeerSpec (nil for RADIUS servers: see RADIUSPeers). With MaxConnections, a server not dialed at the moment (it
// waits for a slot, or its connection was closed to respect the limit)
// has a nil entry; take it again after a slot event (EventSlotFilled,
// EventSlotReleased) for the current set. Without MaxConnections no
// entry is ever nil. ServerStats says the same per server, without nil.
func (c *Client) Peers() []*peer.Peer {
	order := c.ros.Load().order
	ps := make([]*peer.Peer, len(order))
	for i, m := range order {
		ps[i] = m.p()
	}
	return ps
}

// Balancer returns a copy of the balancer's state in Balance mode (ok is
// false in PrimarySecondary mode): each server's name, weight, state and
// buckets in the current table, the table and its generation, the older
// generations still kept for conversations in progress. The copy is the
// caller's; the balancer itself is the Client's alone, driven by the
// watchdog of each server's peer.
func (c *Client) Balancer() (snap loadbalance.Snapshot, ok bool) {
	if c.bal == nil {
		return loadbalance.Snapshot{}, false
	}
	return c.bal.Snapshot(), true
}

// Send sends one request and returns its answer. req is an encoded request
// (message.NewRequest(...).Bytes()); the Client takes it over. Send waits
// until ctx is done, or RequestTimeout when ctx has no deadline; a request
// whose ctx is done already is not sent, and fails with ctx's error. Every
// request gets exactly one answer or one error.
func (c *Client) Send(ctx context.Context, req []byte) ([]byte, error) {
	if c.radius {
		return nil, errors.New("client: Send takes Diameter requests; these servers are RADIUS: use Exchange")
	}
	cl, err := peer.NewCall(req, c.cfg.ForwardRetransmitFlag)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return c.do(ctx, cl)
}

// checkPeers checks the peers of cfg as New and SetPeers take them, and
// returns them with their defaults (Name: the URL, Weight 1), and whether
// they are RADIUS servers.
func checkPeers(cfg Config) (specs []PeerSpec, isRADIUS bool, err error) {
	if len(cfg.Peers) == 0 {
		return nil, false, errors.New("client: no peers configured")
	}
	if isRADIUS, err = radiusMembers(cfg); err != nil {
		return nil, false, err
	}
	if !isRADIUS {
		// As New's dials would: SetPeers dials after its answer.
		for _, s := range cfg.Peers {
			if _, err := transport.ParseDialURL(s.URL); err != nil {
				return nil, false, fmt.Errorf("client: peer %s: %w", s.URL, err)
			}
		}
	}
	if err := checkOverrides(cfg); err != nil {
		return nil, false, err
	}
	specs = make([]PeerSpec, len(cfg.Peers))
	seen := make(map[string]bool, len(cfg.Peers))
	for i, s := range cfg.Peers {
		if s.Name == "" {
			s.Name = s.URL
		}
		if s.Weight == 0 {
			s.Weight = 1
		}
		if seen[s.Name] {
			return nil, false, fmt.Errorf("client: peer %q configured twice", s.Name)
		}
		seen[s.Name] = true
		specs[i] = s
	}
	return specs, isRADIUS, nil
}

// monoNow returns the time now as c.epoch plus the monotonic time
// since: a reading whose wall part never steps with the system clock.
// The throttle compares the wall parts of its readings and deadlines
// (UnixNano), so every time given to it is one of these: a clock set
// forward or back (NTP's first sync, a suspended VM) must neither expire
// every queued request at once nor stall the rate slots.
func (c *Client) monoNow() time.Time { return c.epoch.Add(time.Since(c.epoch)) }

// testHookEpoch, set by tests, changes a new Client's epoch.
var testHookEpoch func(time.Time) time.Time

// do is Send and Exchange once the request is a call: dispatch it, wait
// for its one answer or error, and account for it.
func (c *Client) do(ctx context.Context, cl *call.Call) ([]byte, error) {
	start := time.Since(c.epoch) // one clock read: time.Now reads two
	dl, ok := ctx.Deadline()
	if !ok {
		dl = c.epoch.Add(start + c.cfg.RequestTimeout)
	}
	cl.Deadline = dl
	// A request whose caller gave up before Send is not sent: a server
	// would answer, or apply, what nobody waits for. It fails as its wait
	// would (Await finds the context ended).
	ended := false
	if done := ctx.Done(); done != nil {
		select {
		case <-done:
			ended = true
		default:
		}
	}
	var it *item
	if c.sched != nil && !ended {
		// The throttle's deadline in monoNow's terms: the time left,
		// measured on the monotonic clock, from a reading of them; a
		// deadline without a monotonic reading (made from a wall time)
		// is the wall clock's.
		now := c.epoch.Add(start)
		left := dl.Sub(now)
		if dl == dl.Round(0) {
			left = time.Until(dl)
		}
		it = c.newItem(cl, now.Add(left))
	}
	if !ended {
		c.dispatch(cl)
	}
	if beforeAwait != nil {
		beforeAwait(cl)
	}
	r := cl.Await(ctx, c.cfg.RequestTimeout)
	ans, err := r.Ans, r.Err
	if it != nil {
		c.release(it) // the answer arrived or the request timed out (Q2)
	}
	noPeer := err != nil && c.foundNoPeer(cl, r)
	c.account(r, time.Since(c.epoch)-start, noPeer)
	if err != nil {
		if noPeer {
			return nil, fmt.Errorf("client: %w%s: %w", ErrNoPeer, c.notInService(), err)
		}
		if tried := cl.Refusers(); len(tried) > 1 {
			names := make([]string, len(tried))
			for i, p := range tried {
				names[i] = p.Name()
			}
			return nil, fmt.Errorf("client: no answer from %s: %w", strings.Join(names, ", "), err)
		}
		return nil, fmt.Errorf("client: %w", err)
	}
	return ans, nil
}

// account counts a completed request: its outcome for the server it was
// first sent to (ServerStats); an answer by class and latency for the
// server that answered it; an error by reason for the server it was first
// sent to (or the Client's unsent errors). took is the time from Send or
// Exchange to completion.
func (c *Client) account(r call.Result, took time.Duration, noPeer bool) {
	// The outcome counts for the server the request was first sent to,
	// wherever a failover took it (RFC 3539 3.4.3 [4] statistics).
	first := c.memberOf(r.First)
	if first != nil {
		first.stats.done(r.Err == nil)
	}
	if r.Err != nil {
		i := reasonOf(r.Err, noPeer)
		if first != nil {
			first.stats.errors[i].Add(1)
		} else {
			c.log.unsent[i].Add(1)
		}
		return
	}
	m := first // usually the server that answered
	if r.By != r.First {
		m = c.memberOf(r.By)
	}
	if m == nil {
		return
	}
	if c.radius {
		m.stats.answers[radiusClass(r.Code)].Add(1)
	} else {
		m.stats.answers[diameterClass(r.Code)].Add(1)
	}
	m.stats.answerLat.Record(took)
}

// foundNoPeer reports whether cl, which failed with r, did so because
// it found no server to go to before its deadline: it never left, and
// not because it waited while a server it could go to was in service
// (in a throttle's queue, or in a RADIUS server's queue for an
// Identifier: that is a timeout).
func (c *Client) foundNoPeer(cl *call.Call, r call.Result) bool {
	if r.Sends > 0 || !errors.Is(r.Err, ErrTimeout) {
		return false
	}
	return c.pick(cl, c.view()) == nil
}

// carrier returns what dispatching needs of the member's peer (whether
// it takes new requests, a way to queue one, whether a request must
// avoid it), nil when not dialed.
func (m *member) carrier() call.Carrier {
	if p := m.p(); p != nil {
		return p
	}
	if p := m.rp.Load(); p != nil {
		return p
	}
	if p := m.up.Load(); p != nil {
		return p
	}
	return nil
}

// view returns the current view of where requests may go (see avail).
func (c *Client) view() *avail { return c.av.Load() }

// dispatch is the one way a request reaches a peer. First sends, replays
// after a failover, requests that waited for a peer, premature-failover
// resends and throttled sends all come here (or to dispatchAll, for a
// batch) and meet the same checks: pick (a peer in service in the view
// whose policy state takes traffic, that the request must not avoid:
// never a connection it was sent on), admit (the policy's probe rules;
// with a throttle, a rate and outstanding place first), submit. A request
// no peer can take in the view waits for the view to change, or, when
// peers refused it as too busy, is completed with the last refusal
// (strand). It returns the member the request went to; nil when it waits
// (for a view change or in the throttle) or ended.
func (c *Client) dispatch(cl *call.Call) *member {
	if c.sched != nil {
		if it, ok := cl.Holder().(*item); ok {
			c.throttled(it)
			return nil
		}
	}
	v := c.view()
	m := c.placeOne(cl, v, nil)
	if m == nil {
		if beforeStrand != nil {
			beforeStrand([]*call.Call{cl})
		}
		c.strand([]*call.Call{cl}, v)
	}
	return m
}

// placeOne picks a member for cl in view v and places it there, trying
// the next when one refuses (its policy, or its connection lost a moment
// ago); nil when none took it. skip: members not to try.
func (c *Client) placeOne(cl *call.Call, v *avail, skip []*member) *member {
	for range len(c.ros.Load().order) + 1 {
		m := c.pick(cl, v, skip...)
		if m == nil {
			return nil
		}
		if c.place(cl, m) {
			return m
		}
		skip = append(skip, m)
	}
	return nil
}

// dispatchAll is dispatch for a batch (a failover's requests, requests
// that waited for a view change), against one view and in order: a run
// of consecutive requests picked for the same peer goes in one batch (one
// wake-up of its writer), and a request a peer refused is placed again
// before the next run, so that requests leave in the order given to
// every peer. Those no peer can take in the view wait together, in
// order. It returns what it did with each, in the order of calls.
func (c *Client) dispatchAll(calls []*call.Call) []placement {
	out := make([]placement, len(calls))
	if c.sched != nil {
		// Every call waits in the throttle (none placed here): replays
		// go back to the head of its instance queue, in order. Those
		// naming a peer the connection limit closed fail here, as in
		// strand, to be recorded (throttled would fail them too).
		its := make([]*item, 0, len(calls))
		v := c.view()
		for i, cl := range calls {
			if c.undeliverable(cl, v) {
				out[i].undeliverable = true
			} else if it, ok := cl.Holder().(*item); ok {
				its = append(its, it)
			}
		}
		c.throttled(its...)
		return out
	}
	v := c.view()
	c.joinLine(v)
	to := make([]*member, len(calls))
	wait := c.placeAll(calls, v, to)
	for i, m := range to {
		out[i].to = m
	}
	if len(wait) == 0 {
		return out
	}
	if beforeStrand != nil {
		beforeStrand(wait)
	}
	waiting, concluded, undeliverable := c.strand(wait, v)
	if len(waiting)+len(concluded)+len(undeliverable) == 0 {
		return out
	}
	at := make(map[*call.Call]int, len(wait))
	for i, cl := range calls {
		if to[i] == nil {
			at[cl] = i
		}
	}
	for _, cl := range waiting {
		out[at[cl]].waiting = true
	}
	for _, cl := range concluded {
		out[at[cl]].concluded = true
	}
	for _, cl := range undeliverable {
		out[at[cl]].undeliverable = true
	}
	return out
}

// placement is what dispatchAll did with a call: sent it to a member, had
// it wait for a view change, concluded it with its last refusal, or failed
// it as undeliverable (its Destination-Host a peer the connection limit
// closed); none of these when the throttle queued it (it is recorded where
// it leaves) or it ended otherwise (it was complete, or the Client
// closed).
type placement struct {
	to                                *member
	waiting, concluded, undeliverable bool
}

// placeAll places calls against view v, in order, and returns those no
// peer can take in v, in order; to (if not nil) gets where each went. A
// run of consecutive requests picked for the same peer goes in one batch
// (one wake-up of its writer), and a request a peer refused is placed
// again before the next run, so that requests leave in the order given
// to every peer. Once a request that nothing of its own kept from a peer
// waits (holdsBack), the requests after it that go anywhere wait behind
// it: what kept it (its peers leaving service as it was submitted, a
// view a step behind them) may be gone a moment later, and the next
// request placed then would leave before it on the peer it takes once it
// is placed. Likewise, once a peer leaving service refused a run whose
// request then waits, the requests after it that go anywhere do not go
// to that peer before it: its refusal may be of a moment (a connection
// lost and back at once), and its leaving changes the view, which
// places them again. A refusal of one request by a peer that stays in
// service (sent there before, in flight elsewhere, busy) holds back
// nothing: no view change would follow.
func (c *Client) placeAll(calls []*call.Call, v *avail, to []*member) (wait []*call.Call) {
	went := func(i int, m *member) {
		if to != nil {
			to[i] = m
		}
	}
	var run []*call.Call // picked for runTo, not submitted yet
	var runAt []int      // their indexes in calls
	var runTo *member
	holding := false // a request that holds back those after it waits
	// behind: peers leaving service that refused a run of the batch
	// with a request that waits now. The refusal may be of a moment (a
	// connection lost and back at once): the requests after it picked
	// for that peer wait behind it, rather than reach the peer first.
	var behind []*member
	waits := func(cl *call.Call, why string, not *member) {
		wait = append(wait, cl)
		holding = holding || c.holdsBack(cl, v)
		if onWait != nil {
			if not != nil {
				why += " (refused by " + not.spec.Name + ")"
			}
			onWait(cl, v, why)
		}
	}
	elsewhere := func(i int, cl *call.Call, not *member) {
		if holding && c.anywhere(cl, v) {
			waits(cl, "held back", not)
		} else if m := c.placeOne(cl, v, c.skipping(cl, v, not, behind)); m != nil {
			went(i, m)
		} else if !cl.IsDone() {
			waits(cl, "no other peer took it", not)
		}
	}
	flush := func() {
		if len(run) == 0 {
			return
		}
		refused, left := c.submitRun(runTo, run)
		for k, cl := range run {
			if !slices.Contains(refused, cl) {
				went(runAt[k], runTo)
				continue
			}
			n := len(wait)
			elsewhere(runAt[k], cl, runTo)
			if left && len(wait) > n && !slices.Contains(behind, runTo) {
				behind = append(behind, runTo)
			}
		}
		run, runAt = run[:0], runAt[:0]
	}
	for i, cl := range calls {
		if cl.IsDone() {
			continue
		}
		var m *member
		if !holding || !c.anywhere(cl, v) {
			m = c.pick(cl, v)
		}
		if m == nil {
			flush() // those before it first, in case they end up waiting too
			why := "no peer in the view"
			if holding && c.anywhere(cl, v) {
				why = "held back"
			}
			waits(cl, why, nil)
			continue
		}
		if slices.Contains(behind, m) && c.anywhere(cl, v) {
			flush()
			waits(cl, "held back behind a request "+m.spec.Name+" refused", nil)
			continue
		}
		if m != runTo {
			flush()
			runTo = m
			if holding && c.anywhere(cl, v) {
				// The flush left a request before this one waiting: cl
				// was picked before, and now waits behind it.
				waits(cl, "held back", nil)
				continue
			}
		}
		ok, probe := true, false
		if c.group != nil {
			ok, probe = c.admit(m)
		}
		switch {
		case !ok: // refused by the policy: the others
			flush()
			elsewhere(i, cl, m)
		case probe: // the one probe goes alone
			flush()
			if holding && c.anywhere(cl, v) {
				// As above: the flush left a request before it waiting.
				c.group.CancelProbe(m.index)
				waits(cl, "held back", nil)
			} else if c.submit(cl, m, true) {
				went(i, m)
			} else {
				elsewhere(i, cl, m)
			}
		default:
			run, runAt = append(run, cl), append(runAt, i)
		}
	}
	flush()
	return wait
}

// skipping returns the members placeAll's retry of cl is not to try: not,
// which refused it, and, unless cl may go to only some of them (pinned,
// or refused before), the peers leaving service that refused a request
// before it in its batch, which waits (behind).
func (c *Client) skipping(cl *call.Call, v *avail, not *member, behind []*member) []*member {
	if len(behind) == 0 || !c.anywhere(cl, v) {
		return []*member{not}
	}
	return append([]*member{not}, behind...)
}

// holdsBack reports whether cl, which found no peer in v, holds back the
// requests after it in its batch: nothing of its own kept it from a peer
// open in v (no Destination-Host, no refusal, no connection of such a
// peer it was sent on). One that waits for its own reason does not: the
// others need not wait for its host, its refusals to be forgotten, or a
// connection it was never sent on.
func (c *Client) holdsBack(cl *call.Call, v *avail) bool {
	if !c.anywhere(cl, v) {
		return false
	}
	for _, m := range v.ros.all {
		if k := m.carrier(); v.open[m.index] && k != nil && k.Avoids(cl) {
			return false
		}
	}
	return true
}

// anywhere reports whether cl may go to any peer in v: it names none of
// them in Destination-Host (a host that is not a peer, a home server
// behind a relay, routes as no Destination-Host does) and no peer
// refused it.
func (c *Client) anywhere(cl *call.Call, v *avail) bool {
	if _, ok := c.pinned(cl, v); ok {
		return false
	}
	return len(cl.Refusers()) == 0
}

// submitRun submits calls to m in one batch and returns those it refused;
// left: m refused them all for itself (not dialed, out of service), not
// call by call (sent there before, in flight elsewhere, no Identifier
// free), which no view change follows.
func (c *Client) submitRun(m *member, calls []*call.Call) (refused []*call.Call, left bool) {
	for _, cl := range calls {
		if cl.Attempts() != 0 {
			cl.SetAttempts(0) // no probe here: the peer's own retransmissions
		}
	}
	k := m.carrier()
	if k == nil {
		return slices.Clone(calls), true
	}
	mark := c.replyMark(m)
	refused, err := k.SubmitAll(calls)
	if err != nil {
		return slices.Clone(calls), true // that peer just left service
	}
	if beforeSent != nil {
		beforeSent(calls)
	}
	// Sent counts the requests m took first, those waiting in the peer
	// for an Identifier included: not those m refused (they go elsewhere,
	// and are counted there), nor those it skipped, complete before they
	// boarded, nor those another peer took before (and handed over).
	firsts := 0
	for _, cl := range calls {
		if !slices.Contains(refused, cl) && cl.FirstTaken() && !(cl.Sends() == 0 && cl.IsDone()) {
			firsts++
		}
	}
	m.stats.sent.Add(uint64(firsts))
	for range len(calls) - len(refused) {
		if c.group != nil {
			c.sent(m, mark)
		}
	}
	return refused, false
}

// place is admit and submit of cl on m; false if m refused it.
func (c *Client) place(cl *call.Call, m *member) bool {
	if cl.IsDone() {
		return true
	}
	ok, probe := true, false
	if c.group != nil {
		ok, probe = c.admit(m)
	}
	if !ok {
		return false
	}
	if f := afterAdmit.Load(); f != nil {
		(*f)(c, cl)
	}
	return c.submit(cl, m, probe)
}

// afterAdmit, when set, runs between the policy's admission of a request
// and its submit: a test can let the server leave service in between.
var afterAdmit atomic.Pointer[func(*Client, *call.Call)]

// submit sends cl to m, which admitted it (a probe when probe); false if
// m refused it.
func (c *Client) submit(cl *call.Call, m *member, probe bool) bool {
	k := m.carrier()
	if probe {
		cl.SetAttempts(1) // a probe is one message, never retransmitted
	} else if cl.Attempts() != 0 {
		cl.SetAttempts(0) // a load, not a store, on the usual send
	}
	mark := c.replyMark(m)
	if k == nil || k.Submit(cl) != nil {
		if probe {
			c.group.CancelProbe(m.index)
		}
		return false
	}
	if beforeSent != nil {
		beforeSent([]*call.Call{cl})
	}
	if cl.FirstTaken() && !(cl.Sends() == 0 && cl.IsDone()) { // as in submitRun
		m.stats.sent.Add(1)
	}
	if c.group != nil {
		c.sent(m, mark)
	}
	return true
}

// beforeSent, when set, runs after requests were submitted to a server
// and before the policy is told they were sent: a test can let their
// replies in first.
var beforeSent func([]*call.Call)

// beforeAwait, when set, runs on a Send's goroutine once its request
// was dispatched, as its wait for the answer begins. For tests: until
// then the caller may be placing other requests the throttle released.
var beforeAwait func(*call.Call)

// beforeFailover, when set, runs as onFailover starts: after the view
// change of the server that left (refreshForFailover), before its calls
// are dispatched. For tests.
var beforeFailover func()

// refusedRetry is how long a request lost on a connection and then
// refused everywhere waits before it asks the peers again. A variable
// for tests.
var refusedRetry = time.Second

// pinned returns the member a request's Destination-Host names, if it
// names one of our peers (RFC 6733 6.1; DiameterIdentity ignores case).
func (c *Client) pinned(cl *call.Call, v *avail) (*member, bool) {
	dh := cl.Key.Dest
	if dh == "" {
		return nil, false
	}
	for _, m := range v.ros.order {
		p := m.p()
		if p != nil && message.EqualIdentity(p.Name(), dh) {
			return m, true
		}
		if m.ident != "" && message.EqualIdentity(m.ident, dh) {
			return m, true // its own peer may not know it yet
		}
		if r := m.released.Load(); r != nil && message.EqualIdentity(*r, dh) && (p == nil || p.Name() == m.spec.URL) {
			return m, true // closed for the connection limit, or dialed again and not knowing it yet
		}
	}
	return nil, false
}

// pick chooses a member for cl in view v, never one of skip nor one cl
// must avoid. A request naming one of our peers in Destination-Host goes
// there or nowhere. With a policy, a server whose state takes no traffic
// is passed over; a server waiting for a real request to probe it gets
// this one (S4), and so does a probing server that the request names.
func (c *Client) pick(cl *call.Call, v *avail, skip ...*member) *member {
	open := func(m *member) bool { // the connection may take cl
		if !v.open[m.index] || slices.Contains(skip, m) {
			return false
		}
		k := m.carrier()
		return k != nil && !k.Avoids(cl)
	}
	usable := func(m *member) bool { // ...and the policy lets it
		return v.takes[m.index] && open(m)
	}
	if m, ok := c.pinned(cl, v); ok {
		// A server waiting for a request to probe it takes this one: a
		// request for it alone would otherwise wait until some other
		// request happened to probe it.
		if usable(m) || v.probes[m.index] && open(m) {
			return m
		}
		return nil
	}
	if c.group != nil {
		// A server waiting for a request to probe it takes the first
		// request that may go there: the lowest index of those, for this
		// request. Asking only for the lowest probing server would pass
		// over a request that must avoid it (sent there before) and give
		// the next server's probe to a younger request of the same
		// hand-over, which would then leave ahead of it.
		for i, m := range v.ros.all {
			if v.probes[i] && open(m) && c.group.WantsProbe(i) {
				return m
			}
		}
	}
	if c.bal != nil && c.cfg.Algorithm != loadbalance.Direct {
		s, err := v.pick.Pick(balanceKeys(cl.Key))
		if err == nil && s.Index < len(v.ros.all) {
			m := v.ros.all[s.Index] // Index: the member's
			if usable(m) {
				return m
			}
			// The balancer's choice is one the request must avoid (a
			// connection it was sent on, a server that refused it) or
			// a peer closing: the next usable member after it, so that
			// the requests of one key that meet this go to one server.
			n := len(v.ros.all)
			for i := 1; i < n; i++ {
				if m := v.ros.all[(s.Index+i)%n]; usable(m) {
					return m
				}
			}
			return nil
		}
		// None in service in the balancer's table, yet one usable here
		// (a state the table has not been told yet): take turns.
		n := uint64(len(v.ros.order))
		start := c.rr.Add(1)
		for i := range n {
			m := v.ros.order[(start+i)%n]
			if usable(m) {
				return m
			}
		}
		return nil
	}
	// Primary first, then secondaries in order; the balancer's direct is
	// the same: the first in service in configured order (7750 SR
	// "direct"), also when the first is refused: the next requests go to
	// the next in order, not to any other.
	return firstUsable(v.ros.order, usable)
}

// firstUsable returns the first member in configured order that usable
// accepts, nil if none.
func firstUsable(order []*member, usable func(*member) bool) *member {
	for _, m := range order {
		if usable(m) {
			return m
		}
	}
	return nil
}

// balanceKeys is the balancer's view of a request's keys: strings over the
// request's own bytes, which do not change while it is dispatched. Pick
// keeps neither (a conversation it remembers holds a copy), so nothing
// is allocated per request.
func balanceKeys(k call.Key) loadbalance.Request {
	return loadbalance.Request{NAI: view.String(k.NAI), SessionID: view.String(k.SessionID)}
}

// onPeerEvent runs on the peer's notifier: publish the event and, for a
// watchdog change, keep the connection slots and the view; the view too
// when the peer's DPR took its connection out of service.
func (c *Client) onPeerEvent(m *member, self *atomic.Pointer[peer.Peer], e peer.Event) {
	c.note(Event{Time: e.Time, Server: m.spec.Name, Kind: EventPeer, Peer: &e, Reason: e.Reason})
	m.openNoted(e)
	if e.Kind == peer.EventLateRefusal {
		// A waiting request learned that m did not apply it: its waiter
		// (or the throttle) asks again once the refusal is forgotten.
		c.bump()
		c.poke()
		return
	}
	if e.Kind == peer.EventOpenFailed && c.cfg.MaxConnections > 0 {
		// A peer that never came up stays INITIAL as its opens fail: its
		// slot goes to the next in order, as a DOWN one's does.
		c.balanceSlots(m, self, watchdog.Initial, true)
		return
	}
	if e.Kind == peer.EventDisconnecting {
		// The peer sent a DPR: its connection takes no new request
		// (InService is false) though the watchdog stays OKAY until it
		// closes. The view, and the throttle's, send elsewhere now.
		c.refresh()
		return
	}
	if e.Kind != peer.EventWatchdog {
		return
	}
	if beforeRefresh != nil {
		beforeRefresh()
	}
	if c.cfg.MaxConnections > 0 {
		c.balanceSlots(m, self, e.To, false)
	}
	k := self.Load()
	if k != nil && failoverFollows(e) {
		c.refreshForFailover(k)
		return
	}
	if k != nil {
		c.handOverMissed(k)
	}
	c.refresh()
}

// failoverFollows reports whether a watchdog change e hands the peer's
// requests over next (onFailover).
func failoverFollows(e peer.Event) bool {
	return e.From == watchdog.Okay && (e.To == watchdog.Suspect || e.To == watchdog.Down)
}

// setBalancerStateLocked gives the balancer m's state and returns the
// event of the rebuild it caused, if any, with its generation; c.avMu
// is held, so that the rebuilds are scheduled in the order of their
// generations.
func (c *Client) setBalancerStateLocked(m *member, st loadbalance.State) (Event, bool) {
	if rebuilt, err := c.bal.SetState(m.spec.Name, st); err != nil || !rebuilt {
		return Event{}, false
	}
	gen := c.bal.Generation()
	return Event{Time: time.Now(), Server: m.spec.Name, Kind: EventBalancerRebuilt, Generation: gen,
		Reason: fmt.Sprintf("balancer table rebuilt (generation %d)", gen)}, true
}

// balanceSlots keeps MaxConnections peers connected in primary/secondary
// mode (F5): a peer going DOWN lets the next undialed one in; a peer back
// in service makes the least preferred connected one surplus, closed once
// it has worked for MinConnectionAge.
func (c *Client) balanceSlots(m *member, self *atomic.Pointer[peer.Peer], to watchdog.State, openFailed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || m.p() == nil || m.p() != self.Load() {
		return // a peer closed to respect the limit: its DOWN frees no slot
	}
	switch {
	case openFailed && m.p().State() != watchdog.Initial:
		return // it was up once: its DOWN said so
	case openFailed:
	case to == watchdog.Okay:
		m.okaySince = time.Now()
	default:
		m.okaySince = time.Time{}
	}
	order := c.ros.Load().order
	live := 0 // dialed and not DOWN: holding or about to hold a connection
	for _, x := range order {
		if p := x.p(); p != nil && p.State() != watchdog.Down && !x.neverUp(p.State()) {
			live++
		}
	}
	if (to == watchdog.Down || openFailed) && live < c.cfg.MaxConnections {
		for _, x := range order {
			if x.p() == nil {
				if x.after != nil {
					break // its slot: dialed once its name's old connection has closed (dialAfter)
				}
				if err := c.dialLocked(x); err == nil {
					why := "is DOWN"
					if openFailed {
						why = "could not be opened"
					}
					c.note(Event{Time: time.Now(), Server: x.spec.Name, Kind: EventSlotFilled, Because: m.spec.Name,
						Reason: fmt.Sprintf("connection slot filled: %s %s", m.spec.Name, why)})
				}
				break
			}
		}
	}
	c.trimLocked()
}

// openNoted keeps what e says of m's attempts to connect: why the last
// failed, until one succeeds.
func (m *member) openNoted(e peer.Event) {
	switch e.Kind {
	case peer.EventOpenFailed:
		why := strings.TrimPrefix(e.Reason, "open failed: ")
		m.openErr.Store(&why)
	case peer.EventConnUp:
		m.openErr.Store(nil)
	}
}

// neverUp reports whether m's peer, in state st, never was up and its
// opens fail: it holds no connection slot (balanceSlots).
func (m *member) neverUp(st watchdog.State) bool {
	return st == watchdog.Initial && m.openErr.Load() != nil
}

// notInService names, in parentheses after a space, the servers whose
// connection is not in service, each with its state and why its last
// attempt to connect failed, if it did: for the errors of a request or a
// wait that found none; "" when there is none to name. A server not
// dialed on purpose (MaxConnections) is left out.
func (c *Client) notInService() string {
	var parts []string
	for _, m := range c.ros.Load().order {
		_, st, ok := m.stateOf()
		if !ok || st == watchdog.Okay {
			continue
		}
		part := m.spec.Name + " " + st.String()
		if why := m.openErr.Load(); why != nil {
			part += ", open failed: " + *why
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// trimLocked closes surplus connections, least preferred first, once they
// are old enough; otherwise it schedules itself for when one will be.
func (c *Client) trimLocked() {
	order := c.ros.Load().order
	okay := 0
	for _, x := range order {
		if x.okay() {
			okay++
		}
	}
	if okay <= c.cfg.MaxConnections {
		return
	}
	for i := len(order) - 1; i >= 0; i-- {
		x := order[i]
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
		if n := p.Name(); n != x.spec.URL {
			x.released.Store(&n)
		}
		x.pp.Store(nil)
		x.okaySince = time.Time{}
		c.refresh()
		c.note(Event{Time: time.Now(), Server: x.spec.Name, Kind: EventSlotReleased, Age: age, Limit: c.cfg.MaxConnections,
			Reason: fmt.Sprintf("closed to respect the limit of %d connections after %v in service", c.cfg.MaxConnections, age.Truncate(time.Second))})
		c.closing.Add(1)
		// Close bounds its drain by its ctx; those ended are let go.
		// The peers released before whose drain has ended are let go:
		// their last requests were accounted long ago (a release comes
		// MinConnectionAge after the one before at the soonest).
		c.trimmed = append(slices.DeleteFunc(c.trimmed, func(q *peer.Peer) bool {
			select {
			case <-q.Done():
				c.forgetLocked(q)
				return true
			default:
				return false
			}
		}), p)
		go func() {
			defer c.closing.Done()
			p.Close(context.Background())
		}()
		return
	}
}

// testCall tags the test user's requests (probes, keep-alives): each is
// one message to one server, never replayed elsewhere.
type testCall struct{ cl *call.Call }

func (t *testCall) Held() *call.Call { return t.cl }

// endTests fails the test requests among calls that left a peer and
// returns the others, in order.
func endTests(calls []*call.Call, reason string) []*call.Call {
	var rest []*call.Call
	for i, cl := range calls {
		if _, ok := cl.Holder().(*testCall); !ok {
			if rest != nil {
				rest = append(rest, cl)
			}
			continue
		}
		if rest == nil {
			rest = append(make([]*call.Call, 0, len(calls)), calls[:i]...)
		}
		cl.Fail(fmt.Errorf("client: test request not replayed to another server (%s)", reason))
	}
	if rest == nil {
		return calls
	}
	return rest
}

// names reports whether Destination-Host dh names from, the peer a
// failover took requests off. from, not the member's current peer: the
// member may have let go of it (the connection limit) or dialed anew.
func names(dh string, from call.Carrier) bool {
	return message.EqualIdentity(dh, from.Name())
}

// onFailover receives the requests that left a peer: pending when its
// watchdog called Failover() or its connection dropped (replayed elsewhere
// in order, F2), still unanswered after a graceful disconnect's drain
// (F8), or answered too busy / unable to deliver (premature failover,
// F9). It runs on the peer's notifier, without the peer's mutex.
func (c *Client) onFailover(from call.Carrier, calls []*call.Call, reason string) {
	if beforeFailover != nil {
		beforeFailover()
	}
	c.mu.Lock() // also waits for New to finish filling the members
	closed := c.closed
	c.mu.Unlock()
	fm := c.memberOf(from)
	if fm == nil {
		for _, cl := range calls {
			cl.Fail(fmt.Errorf("%s: %w", reason, ErrNoPeer)) // do says "client: "
		}
		return
	}
	if c.sched != nil {
		defer c.handedOver(from) // after the replays are queued
	}
	calls = endTests(calls, reason)
	if len(calls) == 0 {
		// Still a failover event for the table of 3.4.2 [5] (the peer left
		// service), unless we are shutting down.
		if !closed {
			c.record(FailoverRecord{Time: time.Now(), From: fm.spec.Name, Outcome: NothingPending, Reason: reason + "; nothing pending", EndToEnd: []uint32{}})
		}
		return
	}
	if closed {
		// Each says why its connection was lost (call.Call.Leave).
		failAll(calls, errClientClosed)
		return
	}
	moved := map[*member][]uint32{}
	counts := map[*member]int{}
	// Counted apart from the ids: a record is written for every request,
	// named or not (appendRef).
	nwaiting, nrefused, nconcluded, nclosedHost := 0, 0, 0, 0
	var order []*member
	var waiting, refused, concluded, closedHost []uint32
	live := make([]*call.Call, 0, len(calls))
	for _, cl := range calls {
		if cl.IsDone() {
			continue
		}
		if cl.LeftRefused() && cl.RefusedBy(from) {
			fm.stats.premature.Add(1)
		} else if dh := cl.Key.Dest; dh != "" && names(dh, from) {
			// Addressed to the peer that failed: not moved to another host
			// (RFC 6733 5.5.4).
			cl.Fail(fmt.Errorf("%w: Destination-Host %s is not reachable (%s)", ErrUnableToDeliver, dh, reason))
			refused = appendRef(refused, cl)
			nrefused++
			continue
		}
		live = append(live, cl)
	}
	if c.sched != nil {
		// Queued in the throttle: each is recorded where it goes (execute).
		c.tmu.Lock()
		for _, cl := range live {
			if it, ok := cl.Holder().(*item); ok {
				it.movedFrom, it.movedWhy = fm, reason
			}
		}
		c.unlockThrottle()
	}
	// Recorded as decided: a call's state a moment later may say
	// otherwise (a waiting call ended by its deadline, or placed by its
	// waiter).
	placed := c.dispatchAll(live)
	// Moved away: not those pinned to it (they failed above, or in
	// dispatchAll: a peer the connection limit closed), nor those
	// already complete.
	moves := len(live)
	for _, p := range placed {
		if p.undeliverable {
			moves--
		}
	}
	fm.stats.failedOver.Add(uint64(moves))
	for i, p := range placed {
		cl := live[i]
		switch {
		case p.to != nil:
			to := p.to
			if _, ok := moved[to]; !ok {
				order = append(order, to)
			}
			moved[to] = appendRef(moved[to], cl)
			counts[to]++
		case p.waiting:
			waiting = appendRef(waiting, cl)
			nwaiting++
		case p.concluded:
			concluded = appendRef(concluded, cl)
			nconcluded++
		case p.undeliverable:
			closedHost = appendRef(closedHost, cl)
			nclosedHost++
		default: // queued in the throttle: recorded when it leaves (execute)
		}
	}
	now := time.Now()
	for _, to := range order {
		c.record(FailoverRecord{Time: now, From: fm.spec.Name, To: to.spec.Name, Outcome: Moved, Reason: reason, Moved: counts[to], EndToEnd: moved[to]})
	}
	if nwaiting > 0 {
		c.record(FailoverRecord{Time: now, From: fm.spec.Name, Outcome: Parked, Reason: reason + "; no alternate in service: waiting", Moved: nwaiting, EndToEnd: waiting})
	}
	if nconcluded > 0 {
		c.record(FailoverRecord{Time: now, From: fm.spec.Name, Outcome: Refused, Reason: reason + "; no other peer left: the last refusal is the answer", EndToEnd: concluded})
	}
	if nrefused > 0 {
		c.record(FailoverRecord{Time: now, From: fm.spec.Name, Outcome: Refused, Reason: reason + "; Destination-Host was the failed peer: DIAMETER_UNABLE_TO_DELIVER", EndToEnd: refused})
	}
	if nclosedHost > 0 {
		c.record(FailoverRecord{Time: now, From: fm.spec.Name, Outcome: Refused, Reason: reason + "; Destination-Host was closed for the connection limit: DIAMETER_UNABLE_TO_DELIVER", EndToEnd: closedHost})
	}
}

// appendRef appends the name of a request in the records: its Diameter
// End-to-End id, or the number a RADIUS request was given when made (its
// Identifier changes with each send); none if it has neither.
func appendRef(ids []uint32, cl *call.Call) []uint32 {
	if cl.Ref != 0 {
		ids = append(ids, cl.Ref)
	}
	return ids
}

func (c *Client) record(r FailoverRecord) {
	c.log.add(r)
	c.note(Event{Time: r.Time, Server: r.From, Kind: EventFailover, Failover: &r, Reason: r.Reason})
}

// Done is closed once Close has ended every peer and every event, the
// peers' and the Client's, has been delivered.
func (c *Client) Done() <-chan struct{} { return c.gone }

// Close closes every peer and fails the requests waiting for one, and
// those in flight, with ErrClosed: a Diameter peer sends its DPR and
// waits for the DPA (bounded by its DPATimeout and ctx), a radius+tcp://
// or radsec:// server's connections close at once, a radius:// server
// waits for the retransmissions under way. It returns ctx's error when
// ctx ended before that was done (as http.Server.Shutdown does), else
// nil. It does not wait for event subscribers and failover hand-overs
// still running on the peers' notifiers (so a subscriber may call
// Close): Done is closed once they are out. Only the first Close shuts
// the Client down; later calls wait for that shutdown, or for their own
// ctx.
//
// Called with the context a subscriber got with one of the Client's
// events, Close starts the shutdown and returns nil at once: requests
// fail with ErrClosed from then on, and the peers' DPR/DPA, each bounded
// by its DPATimeout, and the events that tell of them follow (waiting
// there would hold those events). Done says when it has ended.
func (c *Client) Close(ctx context.Context) error {
	first := false
	c.closeO.Do(func() {
		first = true
		c.mu.Lock()
		c.closed = true
		if c.sweeper != nil {
			c.sweeper.Stop()
		}
		c.mu.Unlock()
		c.retryMu.Lock()
		c.retryOff = true
		if c.retry != nil {
			c.retry.Stop()
		}
		c.retryMu.Unlock()
		c.tmu.Lock()
		if c.retryPoll != nil {
			c.retryPoll.Stop()
		}
		c.tmu.Unlock()
		c.cancel()
	})
	if bus.PublishedBy(ctx, c) {
		if first {
			go func() {
				c.shutdown(context.WithoutCancel(ctx)) // its ctx is done now: the DPAs get their time
				close(c.shut)
			}()
		}
		return nil
	}
	if first {
		c.shutdown(ctx)
		close(c.shut)
		return ctx.Err()
	}
	select {
	case <-c.shut:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sweepBalancer has the balancer forget the conversations idle past its
// IdleTimeout and end a transition none is left in, every half of it
// until the Client closes.
func (c *Client) sweepBalancer(every time.Duration) {
	c.bal.Sweep()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.sweeper.Reset(every)
	}
}

// shutdown is the first Close's: it closes the peers with ctx and waits
// for them and for what the Client runs, then delivers the last events
// and closes Done on a goroutine of its own.
func (c *Client) shutdown(ctx context.Context) {
	var wg sync.WaitGroup
	var dones []<-chan struct{}
	if c.stopDispatch != nil {
		close(c.stopDispatch)
		<-c.dispatchDone
	}
	if c.sched != nil {
		c.failQueued()
	}
	for _, m := range c.ros.Load().all { // removed ones too: they may still drain
		var p interface{ Close(context.Context) error }
		if dp := m.p(); dp != nil {
			p = dp
			dones = append(dones, dp.Done())
		} else if rp := m.rp.Load(); rp != nil {
			p = rp
			dones = append(dones, rp.Done())
		} else if up := m.up.Load(); up != nil {
			p = up
		} else {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Close(ctx)
		}()
	}
	c.mu.Lock()
	trimmed := c.trimmed
	c.mu.Unlock()
	for _, p := range trimmed {
		// Draining in the background (trimLocked): ended by ctx, as the
		// others are, rather than waited for past it.
		dones = append(dones, p.Done())
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
	cancels := make([]func(), 0, len(c.subs))
	for _, cancel := range c.subs {
		cancels = append(cancels, cancel)
	}
	c.mu.Unlock()
	c.waiters.Wait() // requests waiting for a peer failed at c.cancel
	// The last view: every peer closed. A Diameter or stream peer's DOWN
	// would refresh it on its notifier; a radius:// server has no watchdog
	// to say it closed, and a request after Close would still pick it (and
	// the policy admit it, publishing after Done). Its events are
	// scheduled here, before the queue ends.
	c.refresh()
	go func() {
		for _, d := range dones {
			<-d // the peers' last events are scheduled here before this
		}
		// Only now: a peer's Close returns before its notifier has
		// delivered its last events (its connection down, its DOWN).
		for _, cancel := range cancels {
			cancel()
		}
		c.notes.End()
		<-c.notes.Done()
		close(c.gone)
	}()
}

// maxQueuedEvents bounds the events waiting for the Bus's subscribers.
const maxQueuedEvents = 4096

// note schedules e for the Bus (see notes), counting it dropped past the
// bound, or once Close has delivered the last events (a request racing
// Close): nothing is delivered after Done.
func (c *Client) note(evs ...Event) {
	for _, e := range evs {
		if !c.notes.ScheduleBeforeEnd(e) {
			c.dropped.Add(1)
		}
	}
}

// EventsDropped returns how many events were dropped because the Bus's
// subscribers fell behind by more than a few thousand events, or because
// they came after Done (a request racing Close).
func (c *Client) EventsDropped() uint64 { return c.dropped.Load() }
