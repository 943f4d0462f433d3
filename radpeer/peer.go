package radpeer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aaatp/aaatp/internal/outbox"
	"github.com/aaatp/aaatp/internal/serial"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/internal/bus"
	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

// Peer is a client's view of one RADIUS server over radius+tcp:// or
// radsec://: one or more connections (up to Config.MaxConns), each with
// its own RFC 3539 watchdog driven by Status-Server on Identifier 0
// (RFC 6613 2.4, RFC 5997), each carrying up to 255 requests on
// Identifiers 1 to 255, reused least recently. The server is in service
// while any of its connections is OKAY.
//
// Every decision (watchdog steps, Identifier allocation, matching answers)
// is taken under one lock; the I/O and callbacks it implies run after the
// lock is released. Its methods are safe for concurrent use.
type Peer struct {
	cfg Config
	// notes delivers events and failover hand-overs in order, off the
	// goroutine and the lock that decided them; its Done is the Peer's.
	notes  *serial.Queue[notice]
	url    string
	ep     Endpoint
	secret []byte
	epoch  time.Time

	inService atomic.Bool
	stats     counters
	done      chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	// noteCtx is the context its subscribers get: done once the Peer is
	// closed, and carrying it as the publisher (Close).
	noteCtx context.Context

	mu      sync.Mutex
	links   []*link
	waiting []*rcall // for an Identifier; bounded by MaxWaiting
	closing bool
	leaving bool     // Drain: no new request; those in flight finish
	fx      []effect // effects of the decisions taken under mu, run by unlock
	// mismatch is the last sign of a wrong shared secret (Stats).
	mismatch string
	// restale looks at the full connections again (recycleStale) when
	// enough of the requests holding their Identifiers reach their
	// deadlines to make them stale, at restaleAt (zero: not armed).
	restale   *time.Timer
	restaleAt time.Time
}

type counters struct {
	sent, answered, late, unmatched, badAuth, noMA, timedOut, lost   atomic.Uint64
	movedOut, statusSent, statusAnswered, badFrames, requestsDropped atomic.Uint64
	openFailures, transitions, recycled, secretMismatch              atomic.Uint64
}

// Stats is a snapshot of a Peer's counters.
type Stats struct {
	Peer           string `json:"peer"`
	State          string `json:"state"`
	InService      bool   `json:"in_service"`
	Sent           uint64 `json:"sent"`            // requests sent, replays included
	Answered       uint64 `json:"answered"`        // verified answers that completed their call
	Late           uint64 `json:"late"`            // verified answers for calls already complete
	Unmatched      uint64 `json:"unmatched"`       // answers on an Identifier with no request: dropped
	BadAuth        uint64 `json:"bad_auth"`        // answers failing verification: dropped, connection closed
	NoMA           uint64 `json:"no_ma"`           // answers without a required Message-Authenticator: dropped
	TimedOut       uint64 `json:"timed_out"`       // calls that ended without an answer
	Lost           uint64 `json:"lost"`            // calls failed because their connection closed
	MovedOut       uint64 `json:"moved_out"`       // requests handed to another server by a Client
	StatusSent     uint64 `json:"status_sent"`     // Status-Server watchdogs sent
	StatusAnswered uint64 `json:"status_answered"` // and answered
	BadFrames      uint64 `json:"bad_frames"`
	// RequestsDropped counts the requests the server sent: a client
	// connection takes none, so each was dropped (and logged at a
	// bounded rate), the connection kept.
	RequestsDropped uint64      `json:"requests_dropped"`
	OpenFailed      uint64      `json:"open_failed"`
	Transitions     uint64      `json:"transitions"`
	RecycledConns   uint64      `json:"recycled_conns"` // connections replaced because stale reservations filled their Identifiers
	Waiting         int         `json:"waiting"`        // calls waiting for an Identifier
	Conns           []ConnStats `json:"conns"`
	// SecretMismatch counts connections that showed the signs of a shared
	// secret the server does not share: closed by the server after
	// requests were sent on them and before any verified answer, or whose
	// first answer failed verification. SecretMismatchReason is the last
	// one, naming the server's address; it ends in "shared secret
	// mismatch?".
	SecretMismatch       uint64 `json:"secret_mismatch"`
	SecretMismatchReason string `json:"secret_mismatch_reason,omitempty"`
}

// ConnStats describes one connection slot of a Peer.
type ConnStats struct {
	Name    string        `json:"name"`
	State   string        `json:"state"`
	Pending int           `json:"pending"` // Identifiers in use (answers awaited)
	Tw      time.Duration `json:"tw_ns"`
}

// Dial returns a Peer for rawURL (radius+tcp://host:port or
// radsec://host[:port]). It returns at once; the first connection is
// opened in the background and reopened as the watchdog says.
func Dial(rawURL string, cfg Config) (*Peer, error) {
	ep, cfg, secret, err := prepare(rawURL, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Peer{cfg: cfg, url: ep.String(), ep: ep, secret: secret, epoch: time.Now(), done: make(chan struct{}), ctx: ctx, cancel: cancel}
	p.notes = serial.New(p.deliverNotice)
	p.noteCtx = bus.WithPublisher(ctx, p)
	p.mu.Lock()
	p.addLink()
	p.unlock()
	return p, nil
}

// Check reports whether Dial would take rawURL and cfg, with the error
// Dial would return, without dialing.
func Check(rawURL string, cfg Config) error {
	_, _, _, err := prepare(rawURL, cfg)
	return err
}

// prepare checks rawURL and cfg as Dial takes them, and returns the
// endpoint, cfg with its defaults and transport options, and the secret.
func prepare(rawURL string, cfg Config) (Endpoint, Config, []byte, error) {
	ep, err := ParseURL(rawURL)
	if err != nil {
		return ep, cfg, nil, fmt.Errorf("radpeer: %w: %w", ErrConfig, err)
	}
	cfg, err = cfg.validate()
	if err != nil {
		return ep, cfg, nil, err
	}
	secret, err := ep.Secret(cfg.Secret)
	if err != nil {
		return ep, cfg, nil, fmt.Errorf("radpeer: %w: %w", ErrConfig, err)
	}
	if cfg.Dialer == nil {
		topts, err := streamOptions(ep, cfg.Transport, false)
		if err != nil {
			return ep, cfg, nil, fmt.Errorf("radpeer: %w: %w", ErrConfig, err)
		}
		cfg.Transport = topts
	}
	return ep, cfg, secret, nil
}

// Name returns the server's URL.
func (p *Peer) Name() string { return p.url }

// Events returns the bus the Peer publishes on.
func (p *Peer) Events() *peer.Bus { return p.cfg.Events }

// Done is closed when the Peer has been closed and every event and
// failover hand-over it made has been delivered.
func (p *Peer) Done() <-chan struct{} { return p.notes.Done() }

// InService reports whether any connection is OKAY.
func (p *Peer) InService() bool { return p.inService.Load() }

// State returns OKAY when any connection is OKAY, else the state of the
// first connection.
func (p *Peer) State() watchdog.State {
	if p.InService() {
		return watchdog.Okay
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.links[0].m.State()
}

// Exchange sends r and waits for its verified answer, until ctx is done
// or Config.RequestTimeout when ctx has no deadline.
func (p *Peer) Exchange(ctx context.Context, r *radius.Request) (*Response, error) {
	cl := newCall(r)
	if err := p.submit(cl); err != nil {
		return nil, err
	}
	return cl.wait(ctx, p.cfg.RequestTimeout)
}

// submit sends cl without waiting: its answer completes it. It fails
// with a *NotInServiceError unless a connection is OKAY, with
// ErrAlreadySent when cl may not go to this server now (see avoids), and
// with ErrBusy when no Identifier is free, no connection may be added and
// MaxWaiting calls already wait. A call that waits is sent as soon as an
// Identifier frees or a further connection comes up.
func (p *Peer) submit(cl *rcall) error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return fmt.Errorf("RADIUS server %s: %w", p.url, ErrClosed)
	}
	if !p.inService.Load() || p.leaving {
		st := p.links[0].m.State()
		p.mu.Unlock()
		return &NotInServiceError{Peer: p.url, State: st}
	}
	if cl.IsDone() {
		p.mu.Unlock()
		return nil
	}
	sent := p.sentOn(&cl.Call)
	if p.avoidsLocked(sent) {
		p.mu.Unlock()
		return fmt.Errorf("RADIUS server %s: %w", p.url, ErrAlreadySent)
	}
	if c := p.pickConn(sent); c != nil {
		p.assign(c, cl)
		p.unlock()
		return nil
	}
	p.recycleStale()
	if len(p.waiting) >= p.cfg.MaxWaiting {
		p.waiting = slices.DeleteFunc(p.waiting, (*rcall).IsDone)
	}
	if n := len(p.waiting); n >= p.cfg.MaxWaiting {
		p.mu.Unlock()
		err := fmt.Errorf("RADIUS server %s: %w (%d waiting)", p.url, ErrBusy, n)
		cl.TurnAway(err) // with no other server to take it, a dispatcher ends it with err
		return err
	}
	p.waiting = append(p.waiting, cl)
	cl.TurnAway(nil) // taken: another server's busy word no longer holds
	p.maybeGrow()
	p.unlock()
	return nil
}

// avoids reports whether cl must not be submitted here: it was sent on a
// connection of this server that is still OKAY, or on one recycled and
// not closed yet (it is pending there, or was answered too late: RFC 6613
// 2.6.1 forbids sending it on another connection of the same server
// meanwhile), or no OKAY connection is left that it was not sent on. The
// dispatching layer asks this before it chooses the server.
func (p *Peer) avoids(cl *call.Call) bool {
	sent := p.sentOn(cl)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.avoidsLocked(sent)
}

// sentOn returns the connections of p that cl was sent on.
func (p *Peer) sentOn(cl *call.Call) []*call.Conn {
	return cl.AppendSentOn(nil, func(cn *call.Conn) bool { return cn.Peer() == call.Carrier(p) })
}

// avoidsLocked is avoids for the connections sent; p.mu is held.
func (p *Peer) avoidsLocked(sent []*call.Conn) bool {
	if len(sent) == 0 {
		return false
	}
	other := false
	for _, l := range p.links {
		if l.m.State() != watchdog.Okay {
			continue // its calls moved out, its recycled connections closed (with a Failover hook)
		}
		// A recycled connection takes nothing new but is still open: the
		// server may still answer there what it was sent, and a copy on
		// the replacement would be a duplicate the server cannot tell
		// (duplicate detection keys on the connection's source port).
		// Its close lifts this.
		for _, d := range l.draining {
			if slices.Contains(sent, &d.h) {
				return true
			}
		}
		c := l.cur
		if c == nil {
			continue
		}
		if slices.Contains(sent, &c.h) {
			return true
		}
		other = true
	}
	return !other
}

// WaitState waits until State() is want, the Peer is closed, or ctx ends.
func (p *Peer) WaitState(ctx context.Context, want watchdog.State) error {
	err := bus.Await(ctx, p.onTransition, func() bool { return p.State() == want }, p.done)
	switch {
	case err == bus.ErrDone:
		return fmt.Errorf("RADIUS server %s: %w", p.url, ErrClosed)
	case err != nil:
		return fmt.Errorf("RADIUS server %s is %s, waiting for %s: %w", p.url, p.State(), want, err)
	}
	return nil
}

// onTransition subscribes wake to the watchdog transitions of the
// server's connections.
func (p *Peer) onTransition(wake func()) (cancel func()) {
	return p.cfg.Events.Subscribe(func(_ context.Context, e peer.Event) {
		if e.Kind == peer.EventWatchdog {
			wake()
		}
	})
}

// Stats returns a snapshot of the counters.
func (p *Peer) Stats() Stats {
	s := &p.stats
	st := Stats{
		Peer: p.url, State: p.State().String(), InService: p.InService(),
		Sent: s.sent.Load(), Answered: s.answered.Load(), Late: s.late.Load(), Unmatched: s.unmatched.Load(),
		BadAuth: s.badAuth.Load(), NoMA: s.noMA.Load(), TimedOut: s.timedOut.Load(), Lost: s.lost.Load(),
		MovedOut: s.movedOut.Load(), StatusSent: s.statusSent.Load(), StatusAnswered: s.statusAnswered.Load(),
		BadFrames: s.badFrames.Load(), OpenFailed: s.openFailures.Load(), Transitions: s.transitions.Load(),
		RecycledConns: s.recycled.Load(), SecretMismatch: s.secretMismatch.Load(), RequestsDropped: s.requestsDropped.Load(),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st.SecretMismatchReason = p.mismatch
	st.Waiting = len(p.waiting)
	for _, l := range p.links {
		cs := ConnStats{Name: l.name, State: l.m.State().String(), Tw: l.m.Tw()}
		if l.cur != nil {
			cs.Pending = IDsPerConn - l.cur.free.n
		}
		st.Conns = append(st.Conns, cs)
	}
	return st
}

// drainPoll is how often Drain looks whether the calls in flight are
// done: answers complete calls on the connections' readers, which do not
// look for a drain, and a drain is rare.
const drainPoll = 10 * time.Millisecond

// Drain takes the server out of service for good, as a graceful close:
// no new request (Submit refuses it as not in service, and the calls
// waiting for an Identifier go to the failover hook), the calls in flight
// get their answers, then it closes (Close). RADIUS has no disconnect
// message: this is what a server removed from a configuration gets.
// It waits until the calls in flight are done or ctx ends, whichever is
// first; those still in flight then fail over as on Close.
func (p *Peer) Drain(ctx context.Context) error {
	p.mu.Lock()
	if !p.leaving && !p.closing {
		p.leaving = true
		if p.inService.Swap(false) && len(p.waiting) > 0 {
			w := p.waiting
			if p.cfg.Failover != nil {
				p.waiting = nil
			}
			p.moveOut(p.links[0], w, "server leaving")
		}
	}
	p.unlock()
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for p.inFlight() > 0 {
		select {
		case <-ctx.Done():
			return p.Close(context.WithoutCancel(ctx))
		case <-t.C:
		}
	}
	return p.Close(ctx)
}

// inFlight counts the calls sent and not done, and those waiting.
func (p *Peer) inFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, cl := range p.waiting {
		if !cl.IsDone() {
			n++
		}
	}
	for _, l := range p.links {
		for _, c := range append([]*conn{l.cur}, l.draining...) {
			if c == nil {
				continue
			}
			for i := range c.slots {
				if cl := c.slots[i].call; cl != nil && !cl.IsDone() {
					n++
				}
			}
		}
	}
	return n
}

// Close closes every connection (RADIUS has no disconnect message). As on
// any loss of an OKAY connection, its pending calls go to another server
// when a Client dispatches them; the others, and waiting calls, fail
// with ErrClosed. It waits for the Peer's goroutines, or ctx. Called with
// the context a subscriber got with one of this Peer's events, it closes
// and returns without waiting (waiting there would hold the Peer's later
// events; wait on Done from a goroutine of your own).
func (p *Peer) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closing {
		p.closing = true
		if p.restale != nil {
			p.restale.Stop()
		}
		for _, l := range p.links {
			l.timer.Stop()
			if c := l.cur; c != nil {
				if st := l.m.State(); st != watchdog.Down {
					p.apply(l, l.m.Step(watchdog.ConnectionDown))
				}
				p.dropConn(l, c, "peer closed", ErrClosed)
			}
			for _, c := range slices.Clone(l.draining) {
				p.dropConn(l, c, "peer closed", ErrClosed)
			}
			l.timer.Stop()
		}
		for _, cl := range p.waiting {
			p.fail(cl, ErrClosed)
		}
		p.waiting = nil
		p.inService.Store(false)
		p.cancel()
		p.fx = append(p.fx, effect{kind: fxDone})
		p.notes.End()
	}
	p.unlock()
	if bus.PublishedBy(ctx, p) {
		return nil // on p's notifier: see Close
	}
	waited := make(chan struct{})
	go func() {
		<-p.done // the first Close's last effect: its calls are failed
		p.wg.Wait()
		close(waited)
	}()
	select {
	case <-waited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unlock releases mu and carries out the effects decided under it.
func (p *Peer) unlock() {
	fx := p.fx
	p.fx = nil
	p.mu.Unlock()
	for i := range fx {
		p.run(&fx[i])
	}
}

// notice is one entry of the notice queue, as package peer's: an event,
// or a hand-over of calls to the failover hook.
type notice struct {
	ev       peer.Event
	failover bool
	calls    []*call.Call
	reason   string
	line     *serve.Line
	done     func() // HandOver's: called in its turn
}

// deliverNotice writes n's log line or hands n to the failover hook or
// the subscribers, on the notice queue's goroutine.
func (p *Peer) deliverNotice(n notice) {
	switch {
	case n.done != nil:
		n.done()
	case n.line != nil:
		n.line.Write(p.cfg.Logger)
	case n.failover:
		p.cfg.Failover(p, n.calls, n.reason)
	default:
		p.cfg.Events.Publish(p.noteCtx, n.ev)
	}
}

// effect is one action decided under Peer.mu and carried out after it
// (unlock), in the order decided: sockets are written and closed, calls
// completed and goroutines started off the lock. Its kind says which of
// the other fields it reads.
type effect struct {
	kind fxKind
	id   byte      // fxSend: the Identifier
	c    *conn     // fxSend, fxWrite, fxStart, fxAnswer
	cl   *rcall    // fxSend, fxFail, fxAnswer
	resp *Response // fxAnswer: its Raw is the answer read on c
	rare *rareFx   // the other kinds' fields: kept out of the two of every request
}

// rareFx holds the fields of the effects that are not a request's send
// or answer.
type rareFx struct {
	b    []byte         // fxWrite: the packet
	err  error          // fxFail: the call's error
	lost bool           // fxFail: counted as lost (Stats.Lost) when it ends the call
	on   *call.Conn     // fxFail: end the call only while it is in flight there
	tc   transport.Conn // fxClose
}

type fxKind uint8

const (
	fxSend    fxKind = iota + 1 // encode cl for Identifier id on c and write it
	fxWrite                     // write b on c
	fxFail                      // end cl with err
	fxAnswer                    // complete cl with resp, the answer b read on c
	fxClose                     // close tc
	fxStart                     // start c's reader
	fxDone                      // close Done: the Peer is closed
	fxReplied                   // tell Config.Replied of an answer
)

// run carries out e; p.mu is not held.
func (p *Peer) run(e *effect) {
	switch e.kind {
	case fxSend:
		e.c.sendRequest(e.id, e.cl)
	case fxWrite:
		e.c.out.Send(e.rare.b)
	case fxFail:
		if e.rare.on != nil {
			e.cl.FailOn(e.rare.on, e.rare.err)
		} else if e.cl.Fail(e.rare.err) && e.rare.lost {
			p.stats.lost.Add(1)
		}
	case fxAnswer:
		e.c.deliver(e.cl, e.resp)
	case fxClose:
		e.rare.tc.Close()
	case fxStart:
		go e.c.reader()
	case fxDone:
		close(p.done)
	case fxReplied:
		p.cfg.Replied(p)
	}
}

// closeLater closes tc after the lock. p.mu is held.
func (p *Peer) closeLater(tc transport.Conn) {
	p.fx = append(p.fx, effect{kind: fxClose, rare: &rareFx{tc: tc}})
}

// fail ends cl with err after the lock. p.mu is held.
func (p *Peer) fail(cl *rcall, err error) {
	p.fx = append(p.fx, effect{kind: fxFail, cl: cl, rare: &rareFx{err: fmt.Errorf("RADIUS server %s: %w", p.url, err)}})
}

func (p *Peer) mono() int64 { return int64(time.Since(p.epoch)) }

func (p *Peer) publish(name string, e peer.Event) {
	e.Time, e.Peer = time.Now(), name
	p.notes.Schedule(notice{ev: e})
}

// link is one connection slot of a Peer: a watchdog machine, its Tw
// timer, and the connection while one is open. Guarded by Peer.mu.
type link struct {
	p        *Peer
	name     string
	m        *watchdog.Machine
	timer    *time.Timer
	deadline int64 // ns since epoch
	armedAt  int64
	lastRx   int64 // receipt of the last verified answer (lazy Tw reset in OKAY)
	cur      *conn
	draining []*conn // recycled: closed when their live requests end
	dialing  bool
}

// addLink adds a connection slot and starts its machine (INITIAL:
// AttemptOpen, SetWatchdog). p.mu is held.
func (p *Peer) addLink() *link {
	m, _ := watchdog.New(p.cfg.Watchdog) // validated
	l := &link{p: p, m: m, name: p.url}
	if n := len(p.links); n > 0 {
		l.name = fmt.Sprintf("%s#%d", p.url, n+1)
	}
	l.timer = time.AfterFunc(time.Hour, l.fire)
	l.timer.Stop()
	p.links = append(p.links, l)
	p.apply(l, m.Start())
	return l
}

// maybeGrow opens a further connection when every Identifier is taken and
// none is being opened already. p.mu is held.
func (p *Peer) maybeGrow() {
	if len(p.links) >= p.cfg.MaxConns {
		return
	}
	for _, l := range p.links {
		if l.m.State() != watchdog.Okay || l.dialing {
			return // one is opening or reopening: it will take the waiters
		}
	}
	p.addLink()
}

// recycleStale replaces each OKAY connection whose Identifiers are all
// taken, more than half of them by requests that already ended (timed
// out: their callers have their error). Such an Identifier stays reserved
// until its late answer comes or the connection closes; from a server
// that silently drops some requests while answering Status-Server the
// answer never comes, and the Identifiers leak until none is left while
// the watchdog keeps the connection OKAY. The connection takes no new
// request, its slot dials a replacement (keeping its watchdog machine,
// so the server stays in service), and it is closed once its live
// requests are answered or end (at once when none is live), freeing its
// Identifiers with it.
//
// Why a majority: a healthy loaded connection has all 255 Identifiers
// held by live requests and is never recycled; a few stale ones on a busy
// connection are ordinary late answers, freed within a round trip, and
// closing for them would churn connections. When ended requests hold
// more Identifiers than live ones, stale reservations are what fills the
// connection, and every further timeout on it only adds to them. p.mu is
// held.
//
// It runs when a request finds no free Identifier; the requests left
// waiting then wait for an Identifier to free, a connection to come up,
// or this rule to hold. It may hold only later, as the requests holding
// the Identifiers end at their deadlines (in flight there, or handed
// over and waiting elsewhere: nothing tells the connection), with no new
// request to look again: restaleLater looks again then.
func (p *Peer) recycleStale() {
	if p.closing {
		return
	}
	var at time.Time
	// Armed already, the timer looks again then and sets the next time:
	// a submit that finds no Identifier free (every request of a flood)
	// does not sort the deadlines again.
	armed := !p.restaleAt.IsZero()
	for _, l := range p.links {
		c := l.cur
		if c == nil || c.free.n > 0 || l.dialing || l.m.State() != watchdog.Okay {
			continue
		}
		stale := c.count((*rcall).IsDone)
		if 2*stale > IDsPerConn {
			p.recycle(l, c, stale)
			continue
		}
		if armed {
			continue
		}
		if t, ok := c.staleAt(IDsPerConn/2 + 1 - stale); ok && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if !at.IsZero() {
		p.restaleLater(at)
	}
}

// restaleSlack is how long after the deadline that makes a connection's
// reservations stale recycleStale looks again: its request ends as its
// caller's wait does, at that deadline.
const restaleSlack = 10 * time.Millisecond

// restaleLater has recycleStale look again at at, for the requests
// waiting then. p.mu is held; the timer is not armed.
func (p *Peer) restaleLater(at time.Time) {
	p.restaleAt = at
	d := max(time.Until(at), 0) + restaleSlack
	if p.restale == nil {
		p.restale = time.AfterFunc(d, p.lookAgain)
	} else {
		p.restale.Reset(d)
	}
}

// lookAgain is restale's: the waiting requests look for an Identifier
// again, and recycleStale with them when none is free.
func (p *Peer) lookAgain() {
	p.mu.Lock()
	p.restaleAt = time.Time{}
	if !p.closing && p.inService.Load() && !p.leaving {
		p.drain()
	}
	p.unlock()
}

// recycle takes c off l for new requests, dials l a new connection, and
// closes c when its live requests have ended. p.mu is held.
func (p *Peer) recycle(l *link, c *conn, stale int) {
	note := fmt.Sprintf("connection recycled: %d Identifiers held by requests that timed out", stale)
	p.stats.recycled.Add(1)
	p.publish(l.name, peer.Event{Kind: peer.EventError, Pending: IDsPerConn - stale, Reason: note})
	p.log(slog.LevelWarn, "recycling connection", "peer", l.name, "stale", stale, "live", IDsPerConn-stale,
		"reason", fmt.Sprintf("%d Identifiers held by requests that timed out", stale))
	l.cur = nil
	c.recycling.Store(true)
	c.note = note
	l.draining = append(l.draining, c)
	p.closeIfDrained(l, c)
	p.attemptOpen(l)
}

// closeIfDrained closes c, a recycled connection of l, once no live
// request is left on it: none in flight there. A request that left it
// (refused, or handed over) and is not done yet goes on elsewhere, and
// its completion would not come back here to close it. p.mu is held.
func (p *Peer) closeIfDrained(l *link, c *conn) {
	if !c.closed && c.count(func(cl *rcall) bool { return cl.InFlightOn(&c.h) }) == 0 {
		p.dropConn(l, c, c.note, ErrConnectionLost)
	}
}

// pickConn returns the OKAY connection with the most free Identifiers,
// not one of skip (those a call was sent on), nil if none has one. p.mu
// is held.
func (p *Peer) pickConn(skip []*call.Conn) *conn {
	var best *conn
	for _, l := range p.links {
		if c := l.cur; c != nil && l.m.State() == watchdog.Okay && c.free.n > 0 && (best == nil || c.free.n > best.free.n) && !slices.Contains(skip, &c.h) {
			best = c
		}
	}
	return best
}

// assign boards cl on c with an Identifier of c and schedules its
// encoding and send; false if cl completed meanwhile. p.mu is held.
func (p *Peer) assign(c *conn, cl *rcall) bool {
	cl.Lock()
	b, err := cl.BoardLocked(&c.h)
	var id byte
	if err == nil {
		id = c.free.pop()
	}
	cl.Unlock()
	if err != nil {
		return false
	}
	c.seq++
	c.slots[id] = slot{call: cl, seq: c.seq, afterRefusal: b.AfterRefusal}
	p.fx = append(p.fx, effect{kind: fxSend, c: c, id: id, cl: cl})
	return true
}

// drain sends waiting calls while Identifiers are free. p.mu is held.
func (p *Peer) drain() {
	for len(p.waiting) > 0 {
		cl := p.waiting[0]
		if cl.IsDone() {
			p.waiting = p.waiting[1:]
			continue
		}
		sent := p.sentOn(&cl.Call)
		if len(sent) > 0 && p.avoidsLocked(sent) {
			// It may not go on this server now (a connection it was sent
			// on is OKAY again, or recycled and still open, since it
			// began to wait): back to the failover layer rather than
			// blocking the queue behind it.
			p.waiting = p.waiting[1:]
			if p.cfg.Failover == nil {
				p.fail(cl, ErrAlreadySent)
			} else {
				p.moveOut(p.links[0], []*rcall{cl}, "no connection it may be sent on")
			}
			continue
		}
		c := p.pickConn(sent)
		if c == nil {
			p.recycleStale()
			p.maybeGrow() // calls still wait: one more connection may take them
			return
		}
		p.waiting = p.waiting[1:]
		p.assign(c, cl)
	}
	p.waiting = nil // let the array go
}

// fire is a link's Tw timer.
func (l *link) fire() {
	p := l.p
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return
	}
	if now := p.mono(); now < l.deadline {
		l.timer.Reset(time.Duration(l.deadline - now))
		p.mu.Unlock()
		return
	}
	// In OKAY answers only record their time; if one came after the timer
	// was armed, Tw was reset then (RFC 3539 3.4.1 [2]).
	if l.m.State() == watchdog.Okay && l.lastRx > l.armedAt {
		p.applyAt(l, l.m.Step(watchdog.ReceiveOther), l.lastRx)
		if l.deadline <= p.mono() {
			p.apply(l, l.m.Step(watchdog.TimerExpired))
		}
	} else {
		p.apply(l, l.m.Step(watchdog.TimerExpired))
	}
	p.unlock()
}

func (p *Peer) apply(l *link, o watchdog.Output) { p.applyAt(l, o, p.mono()) }

// Reasons of a RADIUS connection's watchdog transitions, where the
// watchdog's own (package watchdog) speak of DWRs and DWAs: a RADIUS
// connection's watchdog message is Status-Server (RFC 5997). Its other
// reasons are the watchdog's. Stable strings, as the watchdog's are.
const (
	ReasonReopened      = "connection reopened; validating with Status-Server"
	ReasonStatusTimeout = "no Status-Server reply within Tw"
	ReasonSecondTimeout = "no Status-Server reply after a second Tw; closing"
	ReasonReopenTimeout = "Status-Server reply missed twice while reopening; closing"
	ReasonStatusReplied = "Status-Server reply received"
	ReasonReopenDone    = "enough Status-Server replies received after reopen"
)

// radiusReason is a watchdog transition's reason in RADIUS's words.
func radiusReason(r string) string {
	switch r {
	case watchdog.ReasonReopened:
		return ReasonReopened
	case watchdog.ReasonDWATimeout:
		return ReasonStatusTimeout
	case watchdog.ReasonSecondTimeout:
		return ReasonSecondTimeout
	case watchdog.ReasonReopenTimeout:
		return ReasonReopenTimeout
	case watchdog.ReasonDWAReceived:
		return ReasonStatusReplied
	case watchdog.ReasonReopenDone:
		return ReasonReopenDone
	}
	return r
}

// applyAt carries out a watchdog step's actions; base is the instant Tw
// counts from. p.mu is held.
func (p *Peer) applyAt(l *link, o watchdog.Output, base int64) {
	was := false
	if o.Changed {
		o.Transition.Reason = radiusReason(o.Transition.Reason)
		tr := o.Transition
		p.stats.transitions.Add(1)
		// InService first: a subscriber told of the transition (the
		// Client rebuilds its view on it) must read the new state.
		was = p.updateInService()
		p.publish(l.name, peer.Event{Kind: peer.EventWatchdog, From: tr.From, To: tr.To, Trigger: tr.Event, NumDWA: l.m.NumDWA(), Reason: tr.Reason})
		p.log(slog.LevelInfo, "watchdog", "peer", l.name, "from", tr.From.String(), "to", tr.To.String(), "reason", tr.Reason)
	}
	for _, a := range o.Actions() {
		switch a.Kind {
		case watchdog.ActionSetTimer:
			l.armedAt = base
			l.deadline = base + int64(a.After)
			l.timer.Reset(time.Duration(l.deadline - p.mono()))
		case watchdog.ActionSendDWR:
			if c := l.cur; c != nil {
				c.sendStatus()
			}
		case watchdog.ActionFailover:
			if p.cfg.Failover != nil {
				// Recycled connections go too: their calls move with the
				// rest (without a hook they stay, closing at their end).
				for _, c := range slices.Clone(l.draining) {
					p.dropConn(l, c, "recycled connection closed: "+o.Transition.Reason, ErrConnectionLost)
				}
			}
			if c := l.cur; c != nil && p.cfg.Failover != nil {
				// Handed over with nothing pending too: the hook records
				// every failover (RFC 3539 3.4.2 [5]), as a Diameter
				// peer's does.
				calls := c.leave(func(*rcall) bool { return true }, p.lossCause(c))
				p.handOver(calls, o.Transition.Reason)
			} else if c != nil {
				p.moveOut(l, c.inFlight(), o.Transition.Reason) // an event only: they stay
			}
		case watchdog.ActionFailback:
			p.publish(l.name, peer.Event{Kind: peer.EventFailback, Reason: "failback: back in service"})
		case watchdog.ActionCloseConnection:
			if c := l.cur; c != nil {
				p.dropConn(l, c, "closed by the watchdog: "+o.Transition.Reason, ErrConnectionLost)
			}
		case watchdog.ActionAttemptOpen:
			p.attemptOpen(l)
		}
	}
	if o.Changed {
		if l.m.State() == watchdog.Okay {
			p.moveOutAvoided()
		}
		p.serviceChanged(was)
	}
}

// moveOutAvoided hands the waiting calls that may no longer go on this
// server (a connection they were sent on is OKAY again) to the failover
// layer, wherever they are in the queue: drain looks only as far as the
// first call that finds no Identifier. p.mu is held.
func (p *Peer) moveOutAvoided() {
	if len(p.waiting) == 0 || p.cfg.Failover == nil {
		return
	}
	var out []*rcall
	p.waiting = slices.DeleteFunc(p.waiting, func(cl *rcall) bool {
		if sent := p.sentOn(&cl.Call); len(sent) > 0 && !cl.IsDone() && p.avoidsLocked(sent) {
			out = append(out, cl)
			return true
		}
		return false
	})
	p.moveOut(p.links[0], out, "no connection it may be sent on")
}

// updateInService recomputes InService after a transition and returns
// whether the peer was in service before. p.mu is held.
func (p *Peer) updateInService() (was bool) {
	in := false
	for _, l := range p.links {
		in = in || l.m.State() == watchdog.Okay
	}
	return p.inService.Swap(in && !p.leaving)
}

// serviceChanged carries out a transition's change of InService (see
// updateInService; was is the state before): on entering service the
// waiting calls go out; on leaving it they fail over.
func (p *Peer) serviceChanged(was bool) {
	in := p.inService.Load()
	switch {
	case in:
		p.drain()
	case was && !p.closing && len(p.waiting) > 0:
		w := p.waiting
		if p.cfg.Failover != nil {
			p.waiting = nil // they go to the hook; without one they keep waiting here
		}
		p.moveOut(p.links[0], w, "no connection in service")
	}
}

// moveOut hands calls that left their connection (or waited for one) to
// the failover hook (after the lock); without one it only says so, and
// they stay where they are. p.mu is held.
func (p *Peer) moveOut(l *link, calls []*rcall, reason string) {
	if p.cfg.Failover == nil || len(calls) == 0 {
		if len(calls) > 0 {
			p.publish(l.name, peer.Event{Kind: peer.EventFailover, Pending: len(calls), Reason: fmt.Sprintf("%s: %d requests pending, no alternate configured", reason, len(calls))})
		}
		return
	}
	p.handOver(calls, reason)
}

// handOver gives calls, moved out, to the failover hook after the lock,
// in order. p.mu is held.
func (p *Peer) handOver(calls []*rcall, reason string) {
	out := make([]*call.Call, len(calls))
	for i, cl := range calls {
		out[i] = &cl.Call
	}
	p.stats.movedOut.Add(uint64(len(calls)))
	p.notes.Schedule(notice{failover: true, calls: out, reason: reason})
}

// dropConn closes c and moves (or fails with err) the calls it still
// owns. p.mu is held.
func (p *Peer) dropConn(l *link, c *conn, note string, err error) {
	if l.cur == c {
		l.cur = nil
	}
	if len(l.draining) > 0 {
		l.draining = slices.DeleteFunc(l.draining, func(d *conn) bool { return d == c })
	}
	if c.closed {
		return
	}
	c.closed = true
	c.note = note
	p.publish(l.name, peer.Event{Kind: peer.EventConnDown, Reason: note})
	p.closeLater(c.tc)
	cause := p.lossCause(c)
	calls := c.leaveAll(cause)
	clear(c.slots[:])
	if err == ErrConnectionLost && p.cfg.Failover != nil && !p.closing {
		p.moveOut(l, calls, "connection lost")
		return
	}
	failErr := fmt.Errorf("RADIUS server %s: %w", p.url, err)
	if cause != nil && err == ErrConnectionLost {
		failErr = fmt.Errorf("%w: %w", failErr, cause)
	}
	for _, cl := range calls {
		p.fx = append(p.fx, effect{kind: fxFail, cl: cl, rare: &rareFx{err: failErr, lost: true}})
	}
}

// attemptOpen dials in the background unless a dial is running (W7).
// p.mu is held.
func (p *Peer) attemptOpen(l *link) {
	if l.dialing || p.closing {
		return
	}
	l.dialing = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(p.ctx, max(p.cfg.Transport.DialTimeout, transport.DefaultDialTimeout))
		defer cancel()
		var tc transport.Conn
		var err error
		if p.cfg.Dialer != nil {
			tc, err = p.cfg.Dialer(ctx, p.url)
		} else {
			tc, err = transport.Dial(ctx, p.ep.Transport.String(), p.cfg.Transport)
		}
		p.mu.Lock()
		l.dialing = false
		// A link still OKAY was dialing the replacement of a recycled
		// connection: its machine goes on over the new one.
		replacing := l.m.State() == watchdog.Okay
		switch {
		case p.closing:
			// Close cut the dial short or came during it: nothing to
			// report (the notice queue has ended) and nothing to keep.
			if err == nil {
				p.closeLater(tc)
			}
		case err != nil:
			p.stats.openFailures.Add(1)
			if inner := errors.Unwrap(err); inner != nil && p.cfg.Dialer == nil {
				// The transport names the tcp:// or tls:// it dialed: name
				// the server as the user gave it.
				err = fmt.Errorf("%s: %w", p.url, inner)
			}
			p.publish(l.name, peer.Event{Kind: peer.EventOpenFailed, Reason: "open failed: " + err.Error()})
			p.log(slog.LevelWarn, "open failed", "peer", l.name, "err", err.Error())
			if replacing {
				p.apply(l, l.m.Step(watchdog.ConnectionDown))
			}
		default:
			c := newConn(l, tc)
			l.cur = c
			network, addr := tc.Network(), tc.RemoteAddr().String()
			p.publish(l.name, peer.Event{Kind: peer.EventConnUp, Network: network, Addr: addr, Reason: "connected over " + network + " to " + addr})
			p.wg.Add(1)
			p.fx = append(p.fx, effect{kind: fxStart, c: c})
			if !replacing {
				p.apply(l, l.m.Step(watchdog.ConnectionUp))
				break
			}
			if l.m.Pending() {
				c.sendStatus() // the one awaited may have gone with the old connection
			}
			p.drain()
		}
		p.unlock()
	}()
}

// slot is one Identifier of a connection.
type slot struct {
	call  *rcall
	auth  [radius.AuthenticatorLen]byte // of the send, once encoded
	code  lradius.Code
	ready bool   // encoded and queued: an answer can be matched
	seq   uint64 // assignment order on the connection
	// afterRefusal: the call's send before this one was refused (its
	// Boarding's AfterRefusal), restored should this send be undone.
	afterRefusal bool
}

// idRing hands out Identifiers 1-255 least recently used first: a
// released Identifier goes to the back.
type idRing struct {
	ids  [IDsPerConn]byte
	head int
	n    int
}

func newIDRing() idRing {
	var r idRing
	for i := range r.ids {
		r.ids[i] = byte(i + 1)
	}
	r.n = IDsPerConn
	return r
}

func (r *idRing) pop() byte {
	id := r.ids[r.head]
	r.head = (r.head + 1) % IDsPerConn
	r.n--
	return id
}

func (r *idRing) push(id byte) {
	r.ids[(r.head+r.n)%IDsPerConn] = id
	r.n++
}

// conn is one open transport connection of a link. Its fields are
// guarded by Peer.mu, except those set at creation.
type conn struct {
	h   call.Conn // this connection in the calls sent on it
	l   *link
	tc  transport.Conn
	out outbox.Outbox

	slots      [256]slot // by Identifier; 0 is never used for requests
	free       idRing
	statusAuth [radius.AuthenticatorLen]byte // of the Status-Server on ID 0
	statusOut  bool
	seq        uint64
	closed     bool
	note       string
	// sent counts the packets sent (requests and Status-Server); verified
	// says whether any answer passed the Response Authenticator check;
	// mismatch, when set, says why the connection looks like one to a
	// server with another shared secret (see suspectSecret), without the
	// question.
	sent     int
	verified bool
	mismatch string
	// rejected: an answer failed verification and the connection is
	// closing (verifyFailed).
	rejected bool
	// badFrame: the server sent a frame that breaks the framing rules,
	// which closed the connection; the cause of its calls' loss.
	badFrame error
	// recycling: taken off its link for new requests (recycleStale); set
	// under Peer.mu, read without it by retireCall.
	recycling atomic.Bool
}

func newConn(l *link, tc transport.Conn) *conn {
	c := &conn{l: l, tc: tc, free: newIDRing()}
	c.out.Init(tc, nil, func(error) { tc.Close() })
	c.h.Init(l.p, c.retireCall)
	return c
}

// leave takes the calls in flight on c that moves reports true for off
// it (Moved) and returns them in send order. Those whose request still
// waits in c's write queue (queued behind a write the connection is slow
// to take, or in the same instant as the hand-over) are taken out of it
// and their send undone (call.Call.Unsend): written later, on a
// connection they were handed over from, they would reach the server
// after their copy on another connection of it (RFC 6613 2.6.1); never
// written, they may go on c again, and need no Identifier reserved for a
// late answer: theirs are free again. The others leave with their
// Identifiers reserved; a request the writer has taken is on its way.
// One assigned but not queued yet (its sendRequest to come) leaves too,
// its send not undone: undone, it could board c again before that
// sendRequest ran, which would then find it in flight on c and write it
// a second time. p.mu is held.
func (c *conn) leave(moves func(*rcall) bool, cause error) []*rcall {
	var leaving, queued [IDsPerConn + 1]bool // moves is asked once per call
	n := 0
	for id := 1; id <= IDsPerConn; id++ {
		if s := &c.slots[id]; s.call != nil && s.call.InFlightOn(&c.h) && moves(s.call) {
			leaving[id] = true
			if s.ready {
				queued[id] = true
				n++
			}
		}
	}
	var taken [IDsPerConn + 1]bool
	if n > 0 {
		c.out.Withdraw(func(m []byte) bool {
			if m[1] != 0 && queued[m[1]] {
				taken[m[1]] = true
				return true
			}
			return false
		})
	}
	var ss []slot
	for id := 1; id <= IDsPerConn; id++ {
		s := c.slots[id]
		if s.call == nil {
			continue
		}
		if taken[id] {
			c.slots[id] = slot{}
			c.free.push(byte(id))
			c.sent-- // counted when queued (sendRequest), never written
			c.l.p.stats.sent.Add(^uint64(0))
			if s.call.Unsend(&c.h, s.afterRefusal, cause) {
				ss = append(ss, s)
			}
			continue
		}
		if leaving[id] && s.call.Leave(&c.h, cause) {
			ss = append(ss, s)
		}
	}
	return bySend(ss)
}

// leaveAll takes every call in flight on c off it (Moved) and returns
// them in send order; their Identifiers stay reserved for a late answer.
// p.mu is held.
func (c *conn) leaveAll(cause error) []*rcall {
	return c.calls(func(cl *rcall) bool { return cl.Leave(&c.h, cause) })
}

// lossCause is what is known of why c is lost: that it looked like a
// connection to a server with another shared secret, or that the server
// sent a bad frame; nil if nothing.
// p.mu is held.
func (p *Peer) lossCause(c *conn) error {
	if c.mismatch == "" {
		if c.badFrame != nil {
			return fmt.Errorf("the server sent a bad frame: %w", c.badFrame)
		}
		return nil
	}
	return fmt.Errorf("%s: %w", c.mismatch, ErrSecretMismatch)
}

// count returns how many Identifiers of c are held by calls that match
// f: those that ended (stale), those in flight on c (live). p.mu is held.
func (c *conn) count(f func(*rcall) bool) int {
	n := 0
	for _, s := range c.slots[1:] {
		if s.call != nil && f(s.call) {
			n++
		}
	}
	return n
}

// staleAt returns when n more of the requests holding c's Identifiers
// will have ended, at the latest, by their deadlines; false when fewer
// than n of those not ended have one. p.mu is held.
func (c *conn) staleAt(n int) (time.Time, bool) {
	var buf [IDsPerConn]time.Time
	dls := buf[:0]
	for _, s := range c.slots[1:] {
		if s.call != nil && !s.call.IsDone() && !s.call.Deadline.IsZero() {
			dls = append(dls, s.call.Deadline)
		}
	}
	if n <= 0 || len(dls) < n {
		return time.Time{}, false
	}
	slices.SortFunc(dls, time.Time.Compare)
	return dls[n-1], true
}

// inFlight returns the calls in flight on c, in send order, leaving them
// there. p.mu is held.
func (c *conn) inFlight() []*rcall {
	return c.calls(func(cl *rcall) bool { return cl.InFlightOn(&c.h) })
}

// calls returns the calls of c's Identifiers for which keep is true, in
// send order. p.mu is held.
func (c *conn) calls(keep func(*rcall) bool) []*rcall {
	var ss []slot
	for _, s := range c.slots[1:] {
		if s.call != nil && keep(s.call) {
			ss = append(ss, s)
		}
	}
	return bySend(ss)
}

// bySend returns the calls of ss in the order they were assigned.
func bySend(ss []slot) []*rcall {
	slices.SortFunc(ss, func(a, b slot) int { return cmp.Compare(a.seq, b.seq) })
	calls := make([]*rcall, len(ss))
	for i, s := range ss {
		calls[i] = s.call
	}
	return calls
}

// sendStatus sends the watchdog's Status-Server on Identifier 0 with a
// fresh authenticator and a Message-Authenticator. p.mu is held.
func (c *conn) sendStatus() {
	p := c.l.p
	b, auth, err := radius.EncodeRequest(&radius.Request{Code: lradius.CodeStatusServer}, 0, p.secret)
	if err != nil {
		p.publish(c.l.name, peer.Event{Kind: peer.EventError, Reason: "encoding Status-Server: " + err.Error()})
		return
	}
	c.statusAuth, c.statusOut = auth, true
	c.sent++
	p.stats.statusSent.Add(1)
	p.fx = append(p.fx, effect{kind: fxWrite, c: c, rare: &rareFx{b: b}})
}

// sendRequest encodes cl for Identifier id and queues it. Called without
// p.mu: encoding (MD5, HMAC, random bytes) is kept out of the lock.
func (c *conn) sendRequest(id byte, cl *rcall) {
	p := c.l.p
	b, auth, err := cl.encode(id, p.secret)
	p.mu.Lock()
	s := &c.slots[id]
	if s.call != cl || c.closed {
		p.unlock() // the connection went away meanwhile, with the call
		return
	}
	if !cl.InFlightOn(&c.h) {
		// It left c before it was written (a failover or hand-over
		// meanwhile, and it may be on another connection of the server
		// already: RFC 6613 2.6.1), or it ended: it is not written, and
		// its Identifier, which no answer can come for, is free again.
		*s = slot{}
		c.free.push(id)
		p.drain()
		p.unlock()
		return
	}
	if err != nil {
		*s = slot{}
		c.free.push(id)
		p.fail(cl, err)
		p.drain()
		p.unlock()
		return
	}
	s.auth, s.code, s.ready = auth, cl.req.Code, true
	c.sent++
	p.stats.sent.Add(1)
	// Queued before p.mu is released: a hand-over that takes cl off c
	// after the unlock finds its bytes in the queue and withdraws them;
	// queued after it, they would be written on the connection cl left.
	c.out.Post(b, false, false, unlocker{p})
}

// unlocker is p.mu as a sync.Locker whose Unlock is p.unlock (the
// effects run after the lock): the lock a write queue's Post releases
// once the request is queued.
type unlocker struct{ p *Peer }

func (u unlocker) Lock()   { u.p.mu.Lock() }
func (u unlocker) Unlock() { u.p.unlock() }

// deliver completes cl with resp, the verified answer read on c,
// after the lock: decoding the attributes is kept out of it.
func (c *conn) deliver(cl *rcall, resp *Response) {
	p := c.l.p
	resp.Packet, _ = radius.Decode(resp.Raw, p.secret) // validated by ReadFrame
	switch ok, owner := cl.answer(resp, &c.h, &p.stats.answered); {
	case !ok:
		p.stats.late.Add(1) // completed meanwhile
	case owner != nil:
		owner.Retire(&cl.Call, false) // answered here while in flight elsewhere
	}
}

// reader reads answers until the connection fails. A bad frame or an
// answer failing verification closes only this connection.
func (c *conn) reader() {
	p := c.l.p
	defer p.wg.Done()
	for {
		b, err := c.tc.ReadMessage()
		if err != nil {
			note := ""
			// byServer: the server closed the connection (FIN or RST),
			// not we, nor a TLS alert, nor a bad frame.
			byServer := errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
			switch {
			case errors.Is(err, radius.ErrBadFrame):
				p.stats.badFrames.Add(1)
				note = "bad frame: " + err.Error()
			case errors.Is(err, io.EOF):
				note = "closed by the server"
			case errors.Is(err, net.ErrClosed):
				note = "closed"
			default:
				note = err.Error()
			}
			c.tc.Close()
			c.out.Close(true)
			p.mu.Lock()
			if byServer && c.note == "" && !c.closed && c.sent > 0 && !c.verified {
				c.suspectSecret(fmt.Sprintf("the server at %s closed the connection after %d request(s) and no answer", c.addr(), c.sent))
			}
			if errors.Is(err, radius.ErrBadFrame) && c.note == "" && !c.closed {
				c.badFrame = err
				p.logLimited(serve.KindBadFrame, "closing RADIUS connection: bad frame from the server", "peer", c.l.name, "remote", c.addr(), "err", err)
			}
			switch {
			case c.mismatch != "":
				note = c.mismatch + ": " + ErrSecretMismatch.Error()
			case c.note != "":
				note = c.note
			}
			if !c.closed && c.l.cur == c {
				// Step while the connection is current, so that OKAY's
				// Failover() takes its calls with the machine's reason.
				p.apply(c.l, c.l.m.Step(watchdog.ConnectionDown))
			}
			p.dropConn(c.l, c, "connection down: "+note, ErrConnectionLost)
			p.unlock()
			return
		}
		c.received(b)
	}
}

// received matches one packet from the server. p.mu is taken.
func (c *conn) received(b []byte) {
	p := c.l.p
	code, id := radius.Code(b), radius.Identifier(b)
	now := p.mono()
	p.mu.Lock()
	defer p.unlock()
	if c.closed {
		return
	}
	// What the server sends that matches nothing is counted and logged at
	// a bounded rate (never one line or event each: a server, or whoever
	// forges its packets, must not fill the logs).
	if radius.IsRequest(code) {
		p.stats.requestsDropped.Add(1)
		p.logLimited(serve.KindBadRequest, "RADIUS request from the server dropped: a client connection takes no requests",
			"peer", c.l.name, "code", code.String())
		return
	}
	if id == 0 {
		if !c.statusOut || !radius.Answers(lradius.CodeStatusServer, code) {
			p.stats.unmatched.Add(1)
			p.logLimited(serve.KindUnmatched, "RADIUS answer matches no request: dropped", "peer", c.l.name, "code", code.String(), "id", id)
			return
		}
		// Not required by default: FreeRADIUS before 3.2.5 answers
		// Status-Server without one, and the watchdog must keep working
		// against it; verified when present.
		require := p.cfg.RequireMessageAuthenticator.AnswerNeedsMA(lradius.CodeStatusServer)
		switch err := radius.VerifyResponse(b, c.statusAuth, p.secret, require); {
		case errors.Is(err, radius.ErrNoMessageAuthenticator):
			c.verified = true // the Response Authenticator passed
			p.noMA(c, err)
			return // no watchdog answer
		case err != nil:
			c.verifyFailed(err)
			return
		}
		c.verified = true
		c.statusOut = false
		p.stats.statusAnswered.Add(1)
		if c.l.cur == c || c.recycling.Load() {
			p.applyAt(c.l, c.l.m.Step(watchdog.ReceiveDWA), now)
		}
		return
	}
	s := c.slots[id]
	if s.call == nil || !s.ready || !radius.Answers(s.code, code) {
		p.stats.unmatched.Add(1)
		p.logLimited(serve.KindUnmatched, "RADIUS answer matches no request: dropped", "peer", c.l.name, "code", code.String(), "id", id)
		return
	}
	err := radius.VerifyResponse(b, s.auth, p.secret, p.cfg.RequireMessageAuthenticator.AnswerNeedsMA(s.code))
	if errors.Is(err, radius.ErrAuthenticator) {
		c.verifyFailed(err)
		return
	}
	c.verified = true
	c.slots[id] = slot{}
	c.free.push(id)
	cl := s.call
	if err != nil { // no Message-Authenticator although required
		// It ends the request only while the request is in flight here:
		// one that left this connection (a failover, a hand-over) and is
		// in flight at another server, or waiting for one, is not ended
		// by what this server sends late.
		p.noMA(c, err)
		p.fx = append(p.fx, effect{kind: fxFail, cl: cl, rare: &rareFx{err: fmt.Errorf("RADIUS server %s: %w", p.url, err), on: &c.h}})
		if c.recycling.Load() {
			// FailOn retires nothing: its slot cleared, the call no
			// longer counts as live here (closeIfDrained reads the
			// slots), so this may have been the last.
			p.closeIfDrained(c.l, c)
		}
		p.drain()
		return
	}
	// A verified answer: traffic for the watchdog, and for the client's
	// server states, told before the answer completes its call.
	c.l.lastRx = now
	if p.cfg.Replied != nil {
		p.fx = append(p.fx, effect{kind: fxReplied})
	}
	if c.l.cur == c && c.l.m.State() != watchdog.Okay {
		p.applyAt(c.l, c.l.m.Step(watchdog.ReceiveOther), now)
	}
	if cl.IsDone() {
		p.stats.late.Add(1)
	} else {
		resp := &Response{Raw: b, RequestAuthenticator: s.auth, Peer: p, Attempts: 1}
		p.fx = append(p.fx, effect{kind: fxAnswer, c: c, cl: cl, resp: resp})
	}
	if c.recycling.Load() {
		p.closeIfDrained(c.l, c)
	}
	p.drain()
}

// noMA counts and logs an answer dropped for want of a required
// Message-Authenticator; the connection stays up. p.mu is held.
func (p *Peer) noMA(c *conn, err error) {
	p.stats.noMA.Add(1)
	p.logLimited(serve.KindBadAuth, "RADIUS answer dropped: no Message-Authenticator (BlastRADIUS); a server that never sends one needs RequireMessageAuthenticator never",
		"peer", c.l.name, "err", err)
}

// log queues a line for the notice queue, as package peer's: written in
// order with the events, so that a slow Logger holds neither p.mu nor a
// reader.
func (p *Peer) log(level slog.Level, msg string, args ...any) {
	if l := serve.NewLine(p.cfg.Logger, level, msg, args...); l != nil {
		p.notes.Schedule(notice{line: l})
	}
}

// logLimited counts a warning of kind k and queues it as log does, unless
// that kind is over its rate (serve.Log).
func (p *Peer) logLimited(k serve.Kind, msg string, args ...any) {
	if l := serve.Limited(p.cfg.Logger, slog.LevelWarn, k, msg, args...); l != nil {
		p.notes.Schedule(notice{line: l})
	}
}

// verifyFailed drops an answer that failed verification and closes the
// connection (RFC 6613 2.6.4). The first answer of a connection failing
// is the sign of a wrong shared secret; a later one, after answers that
// passed, is not (a forged or corrupted packet). p.mu is held.
func (c *conn) verifyFailed(err error) {
	p := c.l.p
	p.stats.badAuth.Add(1)
	if c.rejected {
		// Closing already: the answers its read buffer still held are
		// dropped, and no new sign of a mismatch.
		return
	}
	c.rejected = true
	note := "answer failed verification: " + err.Error()
	p.publish(c.l.name, peer.Event{Kind: peer.EventError, Reason: note})
	c.note = note
	if !c.verified {
		c.suspectSecret(fmt.Sprintf("the first answer from the server at %s failed verification (%v)", c.addr(), err))
	} else {
		p.logLimited(serve.KindBadAuth, "closing RADIUS connection: answer failed verification", "peer", c.l.name, "remote", c.addr(), "err", err)
	}
	p.closeLater(c.tc) // the reader reports the loss
}

// ErrSecretMismatch is matched by the error of a call that failed on a
// connection that looked like one to a server with another shared secret
// (see Stats.SecretMismatch), and by a radius:// request's *TimeoutError
// when replies came that failed verification. A server that drops what
// fails its own check without a word (RFC 2865 says to; aaatp's UDP
// server, FreeRADIUS) gives no such sign over UDP: the request ends with
// ErrNoReply only.
var ErrSecretMismatch = errors.New("shared secret mismatch?")

// suspectSecret records that c looks like a connection to a server that
// does not share our secret, for why: counted, kept as the Peer's last
// reason, logged at a bounded rate, and the error of the calls that fail
// with the connection. p.mu is held.
func (c *conn) suspectSecret(why string) {
	p := c.l.p
	c.mismatch = why
	p.mismatch = why + ": " + ErrSecretMismatch.Error()
	p.stats.secretMismatch.Add(1)
	p.logLimited(serve.KindBadAuth, "closing RADIUS connection: "+p.mismatch, "peer", c.l.name, "remote", c.addr())
}

// addr is the server's address on c.
func (c *conn) addr() string {
	if a := c.tc.RemoteAddr(); a != nil {
		return a.String()
	}
	return c.l.p.ep.Transport.Address()
}
