package radudp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aaatp/aaatp/client"
	core "github.com/aaatp/aaatp/internal/call"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
)

// StreamConfig configures the radius+tcp:// and radsec:// servers of a
// Client: each is a radpeer.Peer, whose connections run the RFC 3539
// watchdog with Status-Server and carry up to 255 requests each.
type StreamConfig struct {
	// Watchdog is every connection's watchdog (Twinit default 30 s).
	Watchdog watchdog.Config
	// Transport configures dialing: Nagle, and the TLS certificates of
	// radsec:// (mutual, RFC 6614).
	Transport transport.Options
	// MaxConns is how many connections each server may have (default 1);
	// a further one opens when every Identifier of the open ones is in
	// use. The throttle's outstanding limit of a server is at most 255 x
	// MaxConns.
	MaxConns int
	// Dialer replaces dialing (tests); see radpeer.Config.Dialer.
	Dialer func(ctx context.Context, url string) (transport.Conn, error)
	// Logger gets the watchdog's state changes. Default slog.Default().
	Logger *slog.Logger
}

// maxLogged bounds the failover table.
const maxLogged = 256

// failoverLog keeps the last maxLogged failover records.
type failoverLog struct {
	recs  []client.FailoverRecord
	next  int
	total uint64
}

func (l *failoverLog) add(r client.FailoverRecord) {
	l.total++
	if len(l.recs) < maxLogged {
		l.recs = append(l.recs, r)
		return
	}
	l.recs[l.next] = r
	l.next = (l.next + 1) % maxLogged
}

func (l *failoverLog) get() ([]client.FailoverRecord, uint64) {
	out := make([]client.FailoverRecord, 0, len(l.recs))
	out = append(out, l.recs[l.next:]...)
	out = append(out, l.recs[:l.next]...)
	return out, l.total
}

// FailoverLog returns the last 256 failover records, oldest first, and
// how many were ever made.
func (c *Client) FailoverLog() ([]client.FailoverRecord, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flog.get()
}

func (c *Client) record(r client.FailoverRecord) {
	c.mu.Lock()
	c.flog.add(r)
	c.mu.Unlock()
	c.events.Publish(client.Event{Time: r.Time, Server: r.From, Kind: client.EventFailover, Failover: &r, Reason: r.Reason})
}

// setupStream decides whether the servers are stream servers (all of
// them) or UDP ones, and sets the stream defaults.
func (c *Client) setupStream() error {
	streams := 0
	for i, sp := range c.cfg.Servers {
		if _, err := radpeer.ParseURL(sp.URL); err == nil {
			streams++
			if sp.AcctURL != "" {
				return fmt.Errorf("%w: server %d: AcctURL is for UDP; a %s connection carries every code", ErrConfig, i, sp.URL)
			}
		}
	}
	switch streams {
	case 0:
		return nil
	case len(c.cfg.Servers):
	default:
		return fmt.Errorf("%w: RADIUS/UDP and RADIUS/TCP or TLS servers in one Client", ErrConfig)
	}
	c.stream = true
	if c.cfg.Stream.MaxConns == 0 {
		c.cfg.Stream.MaxConns = radpeer.DefaultMaxConns
	}
	if c.cfg.RequestTimeout == 0 {
		c.cfg.RequestTimeout = client.FailoverDetection(c.cfg.Stream.Watchdog.Twinit) + radpeer.DefaultRequestTimeout
	}
	return nil
}

// limits caps a stream server's outstanding requests at the Identifiers
// of its connections: 255 each.
func (c *Client) limits(l throttle.Limits) throttle.Limits {
	if !c.stream {
		return l
	}
	most := radpeer.IDsPerConn * c.cfg.Stream.MaxConns
	if l.MaxOutstanding == 0 {
		l.MaxOutstanding = min(throttle.DefaultMaxOutstanding, most)
	}
	if l.MaxOutstanding < 0 || l.MaxOutstanding > most {
		l.MaxOutstanding = most
	}
	return l
}

// dialStream creates server i's radpeer.Peer. Its events are the
// Client's, as EventPeer; its failovers come to onStreamFailover.
func (c *Client) dialStream(i int, s *server, secret []byte) error {
	bus := peer.NewBus()
	sc := c.cfg.Stream
	pc := radpeer.Config{
		Secret: secret, Watchdog: sc.Watchdog, Transport: sc.Transport, Dialer: sc.Dialer,
		MaxConns: sc.MaxConns, RequestTimeout: c.cfg.RequestTimeout,
		RequireMessageAuthenticator: c.cfg.RequireMessageAuthenticator,
		Events:                      bus, Logger: sc.Logger,
	}
	core.RADIUS.WithFailover(&pc, func(_ any, calls []*core.Call, reason string) {
		<-c.ready
		c.onStreamFailover(i, calls, reason)
	})
	p, err := radpeer.Dial(s.spec.URL, pc)
	if err != nil {
		return err
	}
	s.stream = p
	c.cancels = append(c.cancels, bus.Subscribe(func(e peer.Event) { c.onStreamEvent(i, e) }))
	return nil
}

// onStreamEvent keeps the policy, the throttle and the balancer in step
// with server i's watchdog, and wakes the requests waiting for a server.
func (c *Client) onStreamEvent(i int, e peer.Event) {
	<-c.ready
	if c.sched == nil {
		return // NewClient failed
	}
	c.events.Publish(client.Event{Time: e.Time, Server: c.servers[i].name, Kind: client.EventPeer, Peer: &e, Reason: e.Reason})
	if e.Kind != peer.EventWatchdog && e.Kind != peer.EventConnDown {
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.group.SetAvailable(i, c.servers[i].stream.InService())
	c.syncLocked()
	c.unparkLocked() // a connection that closed lifts what it forbade
	c.mu.Unlock()
	c.kick()
}

// parkLocked keeps a stream call until a server it may go to is in
// service; its deadline still runs. c.mu is held.
func (c *Client) parkLocked(cl *call) {
	if cl.at >= 0 {
		c.sched.Done(cl.at, cl.class)
		cl.at = -1
	}
	c.parked = append(c.parked, cl)
}

// unparkLocked puts the parked calls back in the instance queue, oldest
// first. c.mu is held.
func (c *Client) unparkLocked() {
	for _, cl := range c.parked {
		if cl.rc == nil || !cl.rc.IsDone() {
			c.sched.Enqueue(cl, cl.class)
		}
	}
	c.parked = nil
}

// submitStream sends cl to stream server i, where the throttle gave it a
// place.
func (c *Client) submitStream(cl *call, i int) {
	s := c.servers[i]
	c.mu.Lock()
	cl.at = i
	rc := cl.rc
	c.mu.Unlock()
	err := core.RADIUS.Carrier(s.stream).Submit(rc)
	if err == nil {
		c.onSend(i)(time.Now())
		return
	}
	if errors.Is(err, radpeer.ErrBusy) || errors.Is(err, radpeer.ErrClosed) {
		c.finish(cl, nil, err)
		return
	}
	// Not in service after all, or not allowed there: wait for the next
	// change of a server's state.
	c.mu.Lock()
	if !c.closed && !rc.IsDone() {
		c.parkLocked(cl)
	}
	c.mu.Unlock()
}

// await waits for a stream call's one answer or error, wherever
// failovers take it, and completes it. It runs on the caller's goroutine.
func (c *Client) await(cl *call) {
	_, aux, err := cl.rc.Wait(cl.ctx, c.cfg.RequestTimeout)
	c.mu.Lock()
	if cl.at >= 0 {
		c.sched.Done(cl.at, cl.class) // the answer frees its place (Q2)
		cl.at = -1
	}
	delete(c.byRC, cl.rc)
	c.mu.Unlock()
	c.kick()
	if err != nil {
		c.finish(cl, nil, err)
		return
	}
	resp := aux.(*radpeer.Response)
	i := c.indexOf(resp.Peer)
	if i >= 0 {
		c.onReply(i)(time.Now())
	}
	c.finish(cl, &Response{Raw: resp.Raw, Packet: resp.Packet, RequestAuthenticator: resp.RequestAuthenticator,
		Server: resp.Peer.Name(), Attempts: cl.rc.Sends()}, nil)
}

func (c *Client) indexOf(p *radpeer.Peer) int {
	for i, s := range c.servers {
		if s.stream == p {
			return i
		}
	}
	return -1
}

// onStreamFailover receives the calls pending on a connection of server i
// that left service, in send order: each goes back into the
// dispatch path (the throttle's instance queue) and from there to another
// server, never to that connection, nor to another connection of that
// server while one it was sent on is OKAY; with none in service, it waits.
func (c *Client) onStreamFailover(i int, calls []*core.Call, reason string) {
	from := c.servers[i].name
	var moved, parked int
	var closed []*core.Call
	c.mu.Lock()
	for _, rc := range calls {
		cl := c.byRC[rc]
		if cl == nil || c.closed {
			closed = append(closed, rc)
			continue
		}
		if cl.at == i {
			c.sched.Done(i, cl.class)
			cl.at = -1
		}
		if c.untriedInService(cl) {
			c.sched.Enqueue(cl, cl.class)
			moved++
		} else {
			c.parkLocked(cl)
			parked++
		}
	}
	c.mu.Unlock()
	for _, rc := range closed {
		rc.Fail(fmt.Errorf("RADIUS server %s (%s): %w", from, reason, ErrClosed))
	}
	now := time.Now()
	if moved > 0 {
		c.failovers.Add(uint64(moved))
		c.record(client.FailoverRecord{Time: now, From: from, Outcome: client.Moved, Moved: moved,
			Reason: reason + ": re-signed with a new Identifier for another server"})
	}
	if parked > 0 {
		c.failovers.Add(uint64(parked))
		c.record(client.FailoverRecord{Time: now, From: from, Outcome: client.Parked, Moved: parked,
			Reason: reason + "; no other server in service: waiting"})
	}
	c.kick()
}

// testSendStream sends a Status-Server probe or keep-alive to stream
// server i: once, never retried, bounded by Timeout.
func (c *Client) testSendStream(i int) {
	s := c.servers[i]
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if _, err := s.stream.Exchange(ctx, s.testReq); err == nil {
		c.onReply(i)(time.Now())
	}
	c.kick()
}

// balancerState is what the balancer sees of server i (tests).
func (c *Client) balancerState(name string) loadbalance.State {
	for _, st := range c.bal.Snapshot().Servers {
		if st.Name == name {
			return st.State
		}
	}
	return loadbalance.Down
}

// StreamState returns server i's watchdog state (OKAY while any of its
// connections is) and true for a stream server; false over UDP.
func (c *Client) StreamState(i int) (watchdog.State, bool) {
	if s := c.servers[i].stream; s != nil {
		return s.State(), true
	}
	return 0, false
}
