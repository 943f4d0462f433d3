package radudp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/internal/ordered"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	lradius "layeh.com/radius"
)

// Client defaults.
const (
	// DefaultHoldDown is how long an out-of-service server gets nothing.
	DefaultHoldDown = policy.DefaultHoldDown
	// DefaultMaxQueued bounds the requests waiting in the throttle.
	DefaultMaxQueued = 100_000
	// MaxServers bounds Config.Servers.
	MaxServers = 64
)

// More errors of Client.Exchange.
var (
	// ErrNoServer: no server in service could take the request.
	ErrNoServer = errors.New("radudp: no RADIUS server in service")
	// ErrProbeFailed: the request was the probe of a server coming out of
	// hold-down and got no reply; it is not retried (send it again).
	ErrProbeFailed = errors.New("radudp: the request probed a server and got no reply; not retried")
)

// FailedError is the one error a caller gets when its request got no
// answer: the servers tried, in order, and the last error.
type FailedError struct {
	Tried []string
	Err   error
}

func (e *FailedError) Error() string {
	if len(e.Tried) == 0 {
		return e.Err.Error()
	}
	return fmt.Sprintf("radudp: no answer from %s: %v", strings.Join(e.Tried, ", "), e.Err)
}

func (e *FailedError) Unwrap() error { return e.Err }

// ServerSpec is one server of a Client.
type ServerSpec struct {
	// Name labels the server in events and stats; default: its URL.
	Name string
	// URL is radius://host[:port]: where every request goes, or only
	// Access-Requests and Status-Server when AcctURL is set.
	URL string
	// AcctURL, when set, is where Accounting-Requests go (the server's
	// accounting port).
	AcctURL string
	// Weight is the server's share of the Pearson table (default 1).
	Weight int
	// Secret is the server's shared secret; default Config.Secret.
	Secret []byte
	// StatusServer makes the probe and the keep-alive a Status-Server
	// (RFC 5997) instead of the test user's Access-Request.
	StatusServer bool
	// Auth and Accounting are the server's throttle limits (the ASR5K max
	// rate and max outstanding, separately per class).
	Auth, Accounting throttle.Limits
}

// TestUser is the account whose Access-Request probes servers and keeps
// them alive.
type TestUser struct {
	Name, Password string
}

// Config configures a Client.
type Config struct {
	Servers []ServerSpec
	// Secret is the shared secret of servers without their own.
	Secret []byte
	// Algorithm is the access algorithm: loadbalance.Direct (the lowest
	// index in service), RoundRobin or Hash (of User-Name, else
	// Acct-Session-Id, so a subscriber stays on one server). The zero
	// value is Pearson, the weighted hash with conversation memory.
	Algorithm loadbalance.Algorithm
	// Timeout and Retries: each request is sent up to Retries times,
	// Timeout apart, to a server before the next one is tried (defaults 3 s
	// and 3).
	Timeout time.Duration
	Retries int
	// DownTimeout (default Timeout x Retries), HoldDown (default 30 s) and
	// KeepAlive (default none; needs a TestUser or Status-Server) are the
	// 7750 SR server-state timers.
	DownTimeout, HoldDown, KeepAlive time.Duration
	// TestUser, when set, is the probe and keep-alive of the servers not
	// configured for Status-Server. Without it (and without Status-Server)
	// a real request probes: sent once, and its caller gets
	// ErrProbeFailed when it is not answered.
	TestUser *TestUser
	// Slot is the throttle's rate slot (default 50 ms); AlarmHigh and
	// AlarmLow the queue-depth alarm thresholds (0: no alarm).
	Slot                time.Duration
	AlarmHigh, AlarmLow int
	// MaxQueued bounds the requests waiting in the throttle's queues
	// (default DefaultMaxQueued); beyond it Exchange fails with ErrBusy.
	MaxQueued int
	// Peer options applied to every server (see PeerConfig).
	// RequireMessageAuthenticator's zero value requires a
	// Message-Authenticator in every reply to an Access-Request,
	// test-user probes included (BlastRADIUS); radpeer.RequireMANever is
	// for servers that sign no reply.
	MaxSockets                  int
	UpdateAcctDelayTime         bool
	RequireMessageAuthenticator radpeer.MessageAuthenticatorMode
	Dial                        func(ctx context.Context, addr string) (net.Conn, error)
	// Logger gets the servers' rate-limited warnings about dropped
	// replies. Default slog.Default().
	Logger *slog.Logger
	// RequestTimeout bounds an Exchange whose context has no deadline.
	// Default none: each server tried takes at most Timeout x Retries.
	RequestTimeout time.Duration
	// Events receives the server-state changes (client.EventPolicy),
	// failovers (client.EventFailover) and queue alarms
	// (client.EventQueueAlarm). Default: a new Bus.
	Events *client.Bus
}

// ClientServerStats describes one server of a Client.
type ClientServerStats struct {
	Name     string         `json:"name"`
	URL      string         `json:"url"`
	State    policy.State   `json:"state"`
	Auth     PeerStats      `json:"auth"`
	Acct     *PeerStats     `json:"acct,omitempty"` // with an AcctURL
	Throttle throttle.Stats `json:"throttle"`
	Probes   uint64         `json:"probes"` // test-user or Status-Server probes and keep-alives sent
}

// ClientStats are a Client's counters.
type ClientStats struct {
	Servers   []ClientServerStats `json:"servers"`
	Answered  uint64              `json:"answered"`
	Failed    uint64              `json:"failed"`
	Failovers uint64              `json:"failovers"` // requests moved to the next server
	Reasons   map[string]uint64   `json:"failed_by_reason"`
	Queued    int                 `json:"queued"`
}

type server struct {
	name    string
	spec    ServerSpec
	auth    *Peer // UDP
	acct    *Peer // UDP; nil: auth carries everything
	avail   bool
	lb      loadbalance.State // as last given to the balancer
	probes  atomic.Uint64
	testReq *radius.Request
}

func (s *server) peerFor(code lradius.Code) *Peer {
	if code == lradius.CodeAccountingRequest && s.acct != nil {
		return s.acct
	}
	return s.auth
}

// call is one request of a caller on its way through the servers.
type call struct {
	ctx      context.Context
	req      *radius.Request
	class    throttle.Class
	key      loadbalance.Request
	deadline time.Time
	tried    uint64 // bit i: server i was tried
	names    []string
	once     sync.Once
	res      chan callResult // cap 1
}

type callResult struct {
	resp *Response
	err  error
}

func (c *call) Deadline() time.Time { return c.deadline }

// finish completes cl once, counting its outcome before the caller sees
// it; it reports whether this call completed it.
func (c *Client) finish(cl *call, resp *Response, err error) bool {
	done := false
	cl.once.Do(func() {
		if err != nil {
			c.count(err)
			err = &FailedError{Tried: cl.names, Err: err}
		} else {
			c.answered.Add(1)
		}
		cl.res <- callResult{resp, err}
		done = true
	})
	return done
}

// Client sends RADIUS requests over UDP to a set of servers with the
// Nokia 7750 SR server states and access algorithms, and the Cisco ASR5K
// throttle: each request waits in the throttle's queues for its server's
// rate slot and a free outstanding place, is sent up to Retries times
// Timeout apart, and when that server does not answer, goes to the next
// server in service that the access algorithm gives, each server at most
// once. The caller gets one answer or one error.
//
// Server states: a server starts unknown; its first reply puts it in
// service; the down-timeout, started by a send and reset by any reply,
// puts it out of service when it expires; after the hold-down it is
// probed with one message, never retried (the test user's, Status-Server,
// or one real request); a reply puts it back in service at once, a timeout
// restarts the hold-down. Every change is published as an event.
//
// Its methods are safe for concurrent use.
type Client struct {
	cfg     Config
	servers []*server
	group   *policy.Group
	eventQ  ordered.Queue[client.Event] // policy and rebuild events, in the order of the changes (unlockPublish)
	bal     *loadbalance.Balancer
	events  *client.Bus
	maxQ    int

	mu      sync.Mutex
	pending []client.Event // rebuilds (syncLocked) and queue alarms (onAlarm) made under mu; empty whenever mu is free, as every unlock of mu is unlockPublish
	sched   *throttle.Scheduler[*call]
	closed  bool
	rr      int

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	answered, failed, failovers atomic.Uint64
	reasonsMu                   sync.Mutex
	reasons                     map[string]uint64

	flog failoverLog // under mu
}

// NewClient returns a running Client. Close it.
func NewClient(cfg Config) (*Client, error) {
	n := len(cfg.Servers)
	if n == 0 || n > MaxServers {
		return nil, fmt.Errorf("%w: %d servers, want 1..%d", ErrConfig, n, MaxServers)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Retries == 0 {
		cfg.Retries = DefaultRetries
	}
	if cfg.MaxQueued == 0 {
		cfg.MaxQueued = DefaultMaxQueued
	}
	if cfg.Timeout < 0 || cfg.Retries < 0 || cfg.MaxQueued < 0 {
		return nil, fmt.Errorf("%w: negative timeout, retries or queue bound", ErrConfig)
	}
	if cfg.Events == nil {
		cfg.Events = client.NewBus()
	}
	c := &Client{cfg: cfg, events: cfg.Events, maxQ: cfg.MaxQueued, wake: make(chan struct{}, 1),
		done: make(chan struct{}), reasons: make(map[string]uint64)}
	for i, sp := range cfg.Servers {
		if _, err := radpeer.ParseURL(sp.URL); err == nil {
			return nil, fmt.Errorf("%w: server %d: %s: RADIUS over TCP and TLS goes through client.Client", ErrConfig, i, sp.URL)
		}
	}
	testMsgs := 0
	names := make([]string, n)
	lbs := make([]loadbalance.Server, n)
	tsrv := make([]throttle.Server, n)
	for i, sp := range cfg.Servers {
		s := &server{spec: sp, name: sp.Name, avail: true, lb: loadbalance.InService}
		if s.name == "" {
			s.name = sp.URL
		}
		secret := sp.Secret
		if secret == nil {
			secret = cfg.Secret
		}
		pc := PeerConfig{Secret: secret, Timeout: cfg.Timeout, Retries: cfg.Retries, MaxSockets: cfg.MaxSockets,
			UpdateAcctDelayTime: cfg.UpdateAcctDelayTime, RequireMessageAuthenticator: cfg.RequireMessageAuthenticator,
			Logger: cfg.Logger, Dial: cfg.Dial, OnSend: c.onSend(i), OnReply: c.onReply(i)}
		var err error
		if s.auth, err = c.newPeer(sp.URL, pc); err != nil {
			c.closePeers()
			return nil, fmt.Errorf("server %d: %w", i, err)
		}
		c.servers = append(c.servers, s)
		if sp.AcctURL != "" {
			if s.acct, err = c.newPeer(sp.AcctURL, pc); err != nil {
				c.closePeers()
				return nil, fmt.Errorf("server %d accounting: %w", i, err)
			}
		}
		switch {
		case sp.StatusServer:
			s.testReq = &radius.Request{Code: lradius.CodeStatusServer}
			testMsgs++
		case cfg.TestUser != nil:
			r := &radius.Request{Code: lradius.CodeAccessRequest}
			r.Attributes.Add(radius.AttrUserName, lradius.Attribute(cfg.TestUser.Name))
			r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute(cfg.TestUser.Password))
			s.testReq = r
			testMsgs++
		}
		names[i] = s.name
		lbs[i] = loadbalance.Server{Name: s.name, Index: i, Weight: sp.Weight}
		tsrv[i] = throttle.Server{Name: s.name, Auth: sp.Auth, Accounting: sp.Accounting}
	}
	if testMsgs != 0 && testMsgs != n {
		c.closePeers()
		return nil, fmt.Errorf("%w: some servers have a test message (test user or Status-Server) and others not", ErrConfig)
	}
	var err error
	pcfg := policy.Config{RequestTimeout: cfg.Timeout, Retries: cfg.Retries, DownTimeout: cfg.DownTimeout,
		HoldDown: cfg.HoldDown, TestUser: testMsgs > 0, KeepAlive: cfg.KeepAlive}
	if c.group, err = policy.NewGroup(names, pcfg); err != nil {
		c.closePeers()
		return nil, err
	}
	if c.bal, err = loadbalance.New(cfg.Algorithm, lbs, loadbalance.Options{}); err != nil {
		c.closePeers()
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c.sched, err = throttle.New(throttle.Config[*call]{Servers: tsrv, Slot: cfg.Slot, AlarmHigh: cfg.AlarmHigh,
		AlarmLow: cfg.AlarmLow, OnAlarm: c.onAlarm, Pick: c.pick})
	if err != nil {
		c.closePeers()
		return nil, err
	}
	c.mu.Lock()
	c.syncLocked()
	c.unlockPublish(nil)
	c.wg.Add(1)
	go c.run()
	return c, nil
}

func (c *Client) newPeer(rawURL string, pc PeerConfig) (*Peer, error) {
	addr, err := radpeer.ParseUDPURL(rawURL)
	if err != nil {
		return nil, err
	}
	return NewPeer(addr, pc)
}

func (c *Client) closePeers() {
	for _, s := range c.servers {
		s.auth.Close()
		if s.acct != nil {
			s.acct.Close()
		}
	}
}

// Events returns the bus the Client publishes on.
func (c *Client) Events() *client.Bus { return c.events }

// Names returns the servers' names in index order.
func (c *Client) Names() []string {
	out := make([]string, len(c.servers))
	for i, s := range c.servers {
		out[i] = s.name
	}
	return out
}

// State returns server i's state.
func (c *Client) State(i int) policy.State { return c.group.State(i) }

// classOf is the throttle class of a RADIUS request.
func classOf(code lradius.Code) throttle.Class {
	if code == lradius.CodeAccountingRequest {
		return throttle.Accounting
	}
	return throttle.Auth
}

// Exchange sends r to the servers as the access algorithm, the server
// states and the throttle decide, and returns the first verified answer,
// or one error (a *FailedError naming the servers tried). The Client keeps
// r: do not change it afterwards.
func (c *Client) Exchange(ctx context.Context, r *radius.Request) (*Response, error) {
	if _, ok := ctx.Deadline(); !ok && c.cfg.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
		defer cancel()
	}
	cl := &call{ctx: ctx, req: r, class: classOf(r.Code), res: make(chan callResult, 1)}
	if v, ok := r.Attributes.Lookup(radius.AttrUserName); ok {
		cl.key.NAI = string(v)
	}
	if v, ok := r.Attributes.Lookup(radius.AttrAcctSessionID); ok {
		cl.key.SessionID = string(v)
	}
	if d, ok := ctx.Deadline(); ok {
		cl.deadline = d
	}
	c.mu.Lock()
	if c.closed {
		c.unlockPublish(nil)
		return nil, ErrClosed
	}
	// Timers due now (a hold-down ending) first, so that the request sees
	// the states of this instant.
	sends, evs := c.group.Tick(time.Now(), nil, nil)
	c.syncLocked()
	c.launch(sends)
	// A server out of hold-down with no test message is probed by the
	// next real request: once, no retry.
	if i, ok := c.group.ProbeWanted(); ok {
		o := c.group.Allow(i, time.Now())
		evs = append(evs, o.Events()...)
		c.syncLocked()
		if o.Probe {
			c.unlockPublish(evs)
			return c.probeWith(cl, i)
		}
	}
	if c.sched.Len() >= c.maxQ {
		c.unlockPublish(evs)
		c.count(ErrBusy)
		return nil, ErrBusy
	}
	c.sched.Enqueue(cl, cl.class)
	c.unlockPublish(evs)
	c.kick()
	select {
	case res := <-cl.res:
		return res.resp, res.err
	case <-ctx.Done():
		c.finish(cl, nil, ctx.Err()) // a dispatch that comes later sees it
		return nil, ctx.Err()
	}
}

// probeWith sends a real request as the probe of server i.
func (c *Client) probeWith(cl *call, i int) (*Response, error) {
	s := c.servers[i]
	cl.names = append(cl.names, s.name)
	resp, err := s.peerFor(cl.req.Code).ExchangeAttempts(cl.ctx, cl.req, 1)
	if err != nil {
		if errors.Is(err, ErrTimeout) {
			err = fmt.Errorf("%w (%v)", ErrProbeFailed, err)
		}
		c.finish(cl, nil, err)
		res := <-cl.res
		return nil, res.err
	}
	c.finish(cl, resp, nil)
	res := <-cl.res
	return res.resp, nil
}

func (c *Client) count(err error) {
	c.failed.Add(1)
	reason := "error"
	switch {
	case errors.Is(err, ErrProbeFailed):
		reason = "probe not answered"
	case errors.Is(err, ErrTimeout):
		reason = "no answer from any server tried"
	case errors.Is(err, ErrNoServer):
		reason = "no server in service"
	case errors.Is(err, ErrBusy):
		reason = "queue full"
	case errors.Is(err, throttle.ErrExpired):
		reason = "deadline passed in the throttle queue"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		reason = "caller gave up"
	case errors.Is(err, ErrClosed):
		reason = "client closed"
	}
	c.reasonsMu.Lock()
	c.reasons[reason]++
	c.reasonsMu.Unlock()
}

func (c *Client) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// unlockPublish lets go of c.mu and publishes evs, the policy events of
// the changes made under it, then the other events made under it (the
// balancer rebuilds of syncLocked, the queue alarms). Every unlock of c.mu
// goes through here. The event queue is taken before c.mu is let go, so
// that the events of changes made one after the other by different
// goroutines are published in the order of the changes: the rebuilds in
// the order of their generations, an alarm's clearing after its raising.
func (c *Client) unlockPublish(evs []policy.Event) {
	if len(evs) == 0 && len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	out := make([]client.Event, 0, len(evs)+len(c.pending))
	for _, e := range evs {
		out = append(out, client.Event{Time: e.Time, Server: e.Server, Kind: client.EventPolicy, Policy: &e, Reason: e.Reason})
	}
	out = append(out, c.pending...)
	clear(c.pending)
	c.pending = c.pending[:0]
	c.eventQ.Lock()
	c.mu.Unlock()
	c.eventQ.PublishLocked(c.events.Publish, out...)
}

func (c *Client) onAlarm(a throttle.Alarm) {
	what := "cleared"
	if a.Raised {
		what = "raised"
	}
	// Called under c.mu by the scheduler: unlockPublish publishes it once
	// c.mu is let go, after the events made before it; none after Close.
	if c.closed {
		return
	}
	c.pending = append(c.pending, client.Event{Time: a.Time, Server: a.Server, Kind: client.EventQueueAlarm, Raised: a.Raised, Depth: a.Depth,
		Reason: fmt.Sprintf("queue alarm %s at depth %d", what, a.Depth)})
}

// syncLocked makes the throttle's and the balancer's view of which
// servers take requests follow the policy states. c.mu is held, and the
// caller lets go of it with unlockPublish, which publishes the rebuilds.
func (c *Client) syncLocked() {
	now := time.Now()
	for i, s := range c.servers {
		takes := c.group.State(i).Takes()
		st := loadbalance.Down
		if takes {
			st = loadbalance.InService
		}
		if takes != s.avail {
			s.avail = takes
			c.sched.SetAvailable(i, takes, now)
		}
		if st != s.lb {
			s.lb = st
			if rebuilt, err := c.bal.SetState(s.name, st); err == nil && rebuilt {
				gen := c.bal.Generation()
				c.pending = append(c.pending, client.Event{Time: now, Server: s.name, Kind: client.EventBalancerRebuilt, Generation: gen,
					Reason: fmt.Sprintf("balancer table rebuilt (generation %d)", gen)})
			}
		}
	}
}

func (c *Client) onSend(i int) func(time.Time) {
	return func(now time.Time) {
		c.mu.Lock()
		o := c.group.OnSent(i, now)
		c.syncLocked()
		c.unlockPublish(o.Events())
		c.kick() // the down-timeout may be a new timer
	}
}

func (c *Client) onReply(i int) func(time.Time) {
	return func(now time.Time) {
		c.mu.Lock()
		o := c.group.OnReply(i, now)
		c.syncLocked()
		c.unlockPublish(o.Events())
		if o.Changed() {
			c.kick()
		}
	}
}

// pick is the throttle's balancer: the access algorithm's server among
// those in service that the request has not tried. c.mu is held.
func (c *Client) pick(cl *call, _ throttle.Class) int {
	tried := c.triedNames(cl)
	if c.cfg.Algorithm == loadbalance.RoundRobin {
		for range c.servers {
			s, err := c.bal.Pick(cl.key)
			if err != nil {
				return -1
			}
			if i := c.index(s.Name); i >= 0 && !c.avoids(cl, i) {
				return i
			}
		}
		return -1
	}
	if len(tried) == 0 {
		s, err := c.bal.Pick(cl.key)
		if err != nil {
			return -1
		}
		return c.index(s.Name)
	}
	key := cl.key.NAI
	if key == "" {
		key = cl.key.SessionID
	}
	_, name, err := c.bal.Route(key, tried...)
	if err != nil {
		return -1
	}
	return c.index(name)
}

// triedNames names the servers cl tried and must avoid. c.mu is held.
func (c *Client) triedNames(cl *call) []string {
	var out []string
	for t := cl.tried; t != 0; t &= t - 1 {
		if i := bits.TrailingZeros64(t); c.avoids(cl, i) {
			out = append(out, c.servers[i].name)
		}
	}
	return out
}

// avoids reports whether cl must not go to server i: it tried it. c.mu
// is held.
func (c *Client) avoids(cl *call, i int) bool { return cl.tried&(1<<i) != 0 }

func (c *Client) index(name string) int {
	for i, s := range c.servers {
		if s.name == name {
			return i
		}
	}
	return -1
}

// untriedInService reports whether a server in service has not been
// tried by cl. c.mu is held.
func (c *Client) untriedInService(cl *call) bool {
	for i, s := range c.servers {
		if s.avail && !c.avoids(cl, i) {
			return true
		}
	}
	return false
}

// run is the dispatch loop: the throttle's slots, the policy's timers and
// the test-user messages.
func (c *Client) run() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var ds []throttle.Dispatch[*call]
	var sends []policy.TestSend
	var evs []policy.Event
	for {
		c.mu.Lock()
		now := time.Now()
		sends, evs = c.group.Tick(now, sends[:0], evs[:0])
		c.syncLocked()
		c.launch(sends)
		ds = c.sched.Poll(now, ds[:0])
		next, ok := c.group.NextWakeup()
		if at, sok := c.sched.NextWakeup(now); sok && (!ok || at.Before(next)) {
			next, ok = at, true
		}
		// The attempts start before the events are published (a queue
		// alarm comes from Poll): they wait for c.mu, not for subscribers.
		for _, d := range ds {
			if d.Err == nil {
				c.wg.Add(1)
				go c.attempt(d.Item, d.Server)
			}
		}
		c.unlockPublish(evs)
		for _, d := range ds {
			if d.Err != nil {
				c.finish(d.Item, nil, d.Err)
			}
		}
		clear(ds)
		wait := time.Hour
		if ok {
			wait = max(time.Until(next), 0)
		}
		if len(ds) > 0 && wait == 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-c.done:
			return
		case <-c.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// attempt sends cl to server i, the throttle having given it a place.
func (c *Client) attempt(cl *call, i int) {
	defer c.wg.Done()
	defer c.kick()
	s := c.servers[i]
	var evs []policy.Event
	c.mu.Lock()
	if err := cl.ctx.Err(); err != nil || c.closed {
		c.sched.Done(i, cl.class)
		c.unlockPublish(nil)
		if err == nil {
			err = ErrClosed
		}
		c.finish(cl, nil, err)
		return
	}
	if c.avoids(cl, i) {
		// The throttle fell back to a server this request tried: no server
		// in service is left for it.
		c.sched.Done(i, cl.class)
		c.unlockPublish(nil)
		c.finish(cl, nil, ErrTimeout)
		return
	}
	o := c.group.Allow(i, time.Now())
	evs = append(evs, o.Events()...)
	c.syncLocked()
	if !o.Allow {
		c.sched.Done(i, cl.class)
		requeue := c.untriedInService(cl)
		if requeue {
			c.sched.Enqueue(cl, cl.class)
		}
		c.unlockPublish(evs)
		if !requeue {
			c.finish(cl, nil, ErrNoServer)
		}
		return
	}
	cl.tried |= 1 << i
	cl.names = append(cl.names, s.name)
	c.unlockPublish(evs)
	attempts := c.cfg.Retries
	if o.Probe {
		attempts = 1
	}
	resp, err := s.peerFor(cl.req.Code).ExchangeAttempts(cl.ctx, cl.req, attempts)
	c.mu.Lock()
	c.sched.Done(i, cl.class)
	if err == nil {
		c.unlockPublish(nil)
		c.finish(cl, resp, nil)
		return
	}
	if errors.Is(err, ErrTimeout) && !o.Probe && cl.ctx.Err() == nil && !c.closed && c.untriedInService(cl) {
		c.sched.Enqueue(cl, cl.class)
		c.unlockPublish(nil)
		c.failovers.Add(1)
		c.record(client.FailoverRecord{Time: time.Now(), From: s.name, Outcome: client.Moved, Moved: 1,
			Reason: fmt.Sprintf("no reply to %d attempts: the request goes to the next server in service", attempts)})
		return
	}
	c.unlockPublish(nil)
	if o.Probe && errors.Is(err, ErrTimeout) {
		err = fmt.Errorf("%w (%v)", ErrProbeFailed, err)
	}
	c.finish(cl, nil, err)
}

// launch starts the test-message sends; c.mu is held.
func (c *Client) launch(sends []policy.TestSend) {
	for _, s := range sends {
		c.wg.Add(1)
		go c.testSend(s)
	}
}

// testSend sends the test message (test user or Status-Server) to server
// s.Index as a probe or keep-alive: once, never retried. The policy saw
// it sent; its reply reaches the policy through OnReply.
func (c *Client) testSend(ts policy.TestSend) {
	defer c.wg.Done()
	s := c.servers[ts.Index]
	if s.testReq == nil {
		c.mu.Lock()
		c.group.CancelProbe(ts.Index)
		c.unlockPublish(nil)
		return
	}
	s.probes.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, _ = s.auth.ExchangeAttempts(ctx, s.testReq, 1)
	c.kick()
}

// Stats returns the counters.
func (c *Client) Stats() ClientStats {
	st := ClientStats{Answered: c.answered.Load(), Failed: c.failed.Load(), Failovers: c.failovers.Load(),
		Reasons: make(map[string]uint64)}
	c.mu.Lock()
	st.Queued = c.sched.Len()
	for i, s := range c.servers {
		ss := ClientServerStats{Name: s.name, URL: s.spec.URL, State: c.group.State(i),
			Throttle: c.sched.Stats(i), Probes: s.probes.Load()}
		ss.Auth = s.auth.Stats()
		if s.acct != nil {
			a := s.acct.Stats()
			ss.Acct = &a
		}
		st.Servers = append(st.Servers, ss)
	}
	c.unlockPublish(nil)
	c.reasonsMu.Lock()
	for k, v := range c.reasons {
		st.Reasons[k] = v
	}
	c.reasonsMu.Unlock()
	return st
}

// Close stops the Client: queued requests and those in progress fail with
// ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.unlockPublish(nil)
		return nil
	}
	c.closed = true
	close(c.done)
	c.unlockPublish(nil)
	c.closePeers()
	c.wg.Wait()
	c.mu.Lock()
	rest := c.sched.Release(nil)
	c.unlockPublish(nil)
	for _, cl := range rest {
		c.finish(cl, nil, ErrClosed)
	}
	return nil
}
