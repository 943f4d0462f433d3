package peer

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/internal/serial"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/internal/bus"
	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// Handler answers one request received from a peer and returns the answer
// bytes (build them with message.NewAnswer(req)); the Peer copies the
// request's Hop-by-Hop and End-to-End ids into the answer and clears R and
// T. Returning nil sends no answer. ctx is cancelled when the connection
// closes. req is the handler's to keep and change (an agent forwards it):
// the answer gets the ids req arrived with.
//
// A Handler runs on the connection's reader, the goroutine that read its
// request, as long as it is fast: the next request is read once it
// returns, and one request costs no other goroutine. A Handler that runs
// longer than Config.InlineHandlerTime (it waits on a database, a lock,
// another request) never holds the connection up: a guard timer then
// starts a new reader, which goes on reading (DWRs, DPRs, answers, the
// next requests) while the Handler finishes on the old one, which then
// ends. After a slow Handler (one handed over, or two in a row that ran
// half that time or more) the connection's next requests, a few hundred,
// no longer run on the reader but on worker goroutines of the connection,
// concurrently with one another and with the reader: a request that
// arrives while every worker is busy starts one more, and a worker ends
// once no request waits. So Handlers may run concurrently with one
// another, and a slow or blocked Handler holds only its own goroutine:
// the other requests go on, up to Config.MaxUnanswered requests read and
// not answered, after which the connection stops reading.
//
// A Handler that panics does not end the process: the Peer recovers the
// panic, answers the request DIAMETER_UNABLE_TO_COMPLY (with an
// Error-Message that tells nothing of the panic), logs the panic with its
// stack (at most a few lines per ten seconds in the process), counts it in
// Stats.HandlerPanics, publishes an EventError and keeps the connection.
//
// A Handler should return soon once its ctx is done: Close and Disconnect,
// of a Peer or a Server, wait for the Handlers of the connections they
// close, but not past their own ctx.
type Handler func(ctx context.Context, p *Peer, req []byte) []byte

// Role says whether a Peer dials (client) or was accepted (server).
type Role uint8

const (
	RoleClient Role = iota // dials, and redials while DOWN
	RoleServer             // accepted; ends when its connection is DOWN
)

// e2e generates End-to-End ids for this process (RFC 6733 3: unique per
// originator for 4 minutes, across restarts).
var e2e = wire.NewEndToEndGenNow()

// NextEndToEnd returns a fresh End-to-End Identifier from the process-wide
// generator that Request uses for requests that carry none.
func NextEndToEnd() uint32 { return e2e.Next() }

// Peer is one connection object. See the package documentation.
type Peer struct {
	cfg   Config
	role  Role
	url   string // client: where to dial
	epoch time.Time
	// epochWall is epoch in unix ns, and twinit the watchdog's Twinit:
	// for onGrid.
	epochWall int64
	twinit    time.Duration

	label  atomic.Pointer[string] // remote Origin-Host once known, else address
	state  atomic.Uint32          // mirror of the machine's state for Request and the reader
	cur    atomic.Pointer[conn]   // the connection in use, nil when none
	lastRx atomic.Int64           // ns since epoch of the last message received
	tw     atomic.Int64           // the last Tw armed, for Stats
	since  atomic.Int64           // unix ns of the last state change
	stats  counters

	done   chan struct{} // closed when the Peer has ended
	opened chan struct{} // server: closed when the capabilities exchange is over, either way
	admit  func()        // server, set before it starts: called before a successful CEA is written
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of this peer (readers, dials, the writer)
	closeO sync.Once

	// notes delivers events and failover hand-overs in order, off the
	// goroutine and the lock that decided them (see run and notify); its Done
	// is the Peer's.
	notes *serial.Queue[notice]
	// noteCtx is the context its subscribers get: done once the Peer has
	// ended, and carrying it as the publisher (Disconnect).
	noteCtx context.Context

	leaving atomic.Bool // a graceful disconnect is draining: submit refuses

	// mu serialises every state decision: the events of the readers, the
	// dials and Close, and the timer's fires. It guards the fields below.
	// Nothing outside this package runs with it held (see run and notify).
	mu       sync.Mutex
	out      []effect // effects of the current step, run after unlocking
	finished bool     // finish has run
	deadline int64    // ns since epoch the timer is armed for
	m        *watchdog.Machine
	timer    *time.Timer
	armedAt  int64 // ns since epoch the timer was (lazily) armed from
	rxSeen   int64 // receipt time of the last message a step handled explicitly
	dialing  bool
	closing  bool
	// holdUntil (ns since epoch): no dial before it, after a DPR
	// that asked us not to reconnect.
	holdUntil int64
	ended     bool
	// downNote: why the connection being stepped down was lost, while
	// onConnDown steps the machine, for the calls it moves (failover).
	downNote string
	lastApp  atomic.Int64 // ns since epoch of the last application message (T4); written by any goroutine
	closeErr error
}

type counters struct {
	sent, answered, unmatched, late, timedOut, lost atomic.Uint64
	received, answersSent, dwrSent, dwaReceived     atomic.Uint64
	dwrReceived, badFrames, discarded, transitions  atomic.Uint64
	badAnswers                                      atomic.Uint64
	openFailures, failovers                         atomic.Uint64
	retransmitted, movedOut, premature              atomic.Uint64
	refused, paused, overload, eventsDropped        atomic.Uint64
	handlerPanics                                   atomic.Uint64
	lastDWA                                         atomic.Int64 // unix ns
}

// Stats is a snapshot of a Peer's counters.
type Stats struct {
	Peer          string        `json:"peer"`
	State         string        `json:"state"`
	Since         time.Time     `json:"since"`
	Tw            time.Duration `json:"tw_ns"`
	Sent          uint64        `json:"sent"`          // requests sent, replays included
	Retransmitted uint64        `json:"retransmitted"` // replays received from a failover, sent with T
	MovedOut      uint64        `json:"moved_out"`     // pending requests handed to the failover hook
	Premature     uint64        `json:"premature"`     // of those, answered too busy / unable to deliver
	Answered      uint64        `json:"answered"`      // answers matched to them
	Unmatched     uint64        `json:"unmatched"`
	BadAnswers    uint64        `json:"bad_answers"` // answers whose AVPs do not fit the message: the request failed with ErrMalformedAnswer, or (one that moved on) the answer was dropped
	Late          uint64        `json:"late"`        // answers for calls already complete
	TimedOut      uint64        `json:"timed_out"`   // calls that ended without an answer
	Lost          uint64        `json:"lost"`        // calls failed because their connection closed
	Pending       int           `json:"pending"`
	Unanswered    int           `json:"unanswered"` // requests read on the current connection, not answered on the wire yet (in a Handler, queued, being written)
	Received      uint64        `json:"received"`   // messages of any kind
	AnswersSent   uint64        `json:"answers_sent"`
	DWRSent       uint64        `json:"dwr_sent"`
	DWAReceived   uint64        `json:"dwa_received"`
	DWRReceived   uint64        `json:"dwr_received"`
	LastDWA       time.Time     `json:"last_dwa"`
	BadFrames     uint64        `json:"bad_frames"`
	Discarded     uint64        `json:"discarded"`
	Transitions   uint64        `json:"transitions"`
	OpenFailed    uint64        `json:"open_failed"`
	Failovers     uint64        `json:"failovers"`
	Refused       uint64        `json:"refused"`  // requests answered with an error before the Handler (malformed, wrong Origin-Host...)
	Paused        uint64        `json:"paused"`   // times the reader stopped reading: too many requests unanswered
	Overload      uint64        `json:"overload"` // requests answered DIAMETER_TOO_BUSY: their kind's handlers and queue were full
	// HandlerPanics counts the requests whose Handler panicked: each was
	// answered DIAMETER_UNABLE_TO_COMPLY and logged with its stack.
	HandlerPanics uint64 `json:"handler_panics"`
	// EventsDropped counts the events about one message (a request
	// refused or discarded, a late refusal) not published because the
	// Bus's subscribers were more than maxMessageEvents behind. Events
	// about the peer's state, connections and failovers are never dropped.
	EventsDropped uint64 `json:"events_dropped"`
}

type evKind uint8

const (
	evConnUp evKind = iota
	evOpenFailed
	evConnDown
	evDWA
	evDWR
	evOther // a message while not OKAY
	evDPR
	evClose
	evDrained // a graceful disconnect's wait for answers is over
	evCloseDone
	evHandOver // the application gave up on the pending requests (HandOver)
)

type input struct {
	kind evKind
	c    *conn
	msg  []byte
	note string
	dpa  bool  // evCloseDone: the DPA arrived
	at   int64 // receive events: ns since epoch the reader got the message
	// cause: evClose's Disconnect-Cause; evOpenFailed's CEA Result-Code
	// (0: the attempt failed before a CEA).
	cause uint32
	keep  func(*call.Call) bool // evHandOver: the calls that stay
	done  func()                // evHandOver: called after the hand-over, on the notifier
}

func newPeer(cfg Config, role Role, url, label string) (*Peer, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	m, err := watchdog.New(cfg.Watchdog)
	if err != nil {
		return nil, fmt.Errorf("peer: %w: %w", ErrConfig, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Peer{
		cfg: cfg, role: role, url: url, epoch: time.Now(), m: m,
		done: make(chan struct{}), opened: make(chan struct{}), ctx: ctx, cancel: cancel,
	}
	p.notes = serial.New(p.deliver)
	p.noteCtx = bus.WithPublisher(ctx, p)
	p.epochWall = p.epoch.UnixNano()
	p.twinit = cmp.Or(cfg.Watchdog.Twinit, watchdog.DefaultTwinit)
	p.label.Store(&label)
	p.since.Store(time.Now().UnixNano())
	// The one Tw timer is a runtime timer, not a goroutine: an idle peer
	// costs its reader and writer goroutines and nothing else.
	p.timer = time.AfterFunc(time.Hour, p.fire)
	p.timer.Stop()
	return p, nil
}

// Dial returns a client Peer for the URL (tcp://, tls://, sctp://). It
// returns at once; the connection is opened in the background and retried
// as the watchdog says (once per Tw while DOWN). Use WaitState to wait for
// OKAY. Configuration errors are returned here.
func Dial(url string, cfg Config) (*Peer, error) {
	if _, err := transport.ParseDialURL(url); err != nil {
		return nil, fmt.Errorf("peer: %w: %w", ErrConfig, err)
	}
	p, err := newPeer(cfg, RoleClient, url, url)
	if err != nil {
		return nil, err
	}
	if t, host := p.cfg.Table, p.cfg.RemoteHost; t != nil && host != "" && !t.register(p, host) {
		p.cancel()
		return nil, fmt.Errorf("peer: %w: another client Peer of this Table dials %s", ErrConfig, host)
	}
	p.mu.Lock()
	p.apply(p.m.Start(), p.mono()) // INITIAL: AttemptOpen(), SetWatchdog()
	p.mu.Unlock()
	return p, nil
}

// Accept returns a server Peer for a connection a listener accepted. It
// returns at once: the CER is awaited in the background (CEATimeout), then
// the connection is in service (INITIAL -> OKAY). The Peer ends when its
// connection goes DOWN; a server does not redial.
func Accept(tc transport.Conn, cfg Config) (*Peer, error) { return accept(tc, cfg, nil) }

// accept is Accept, with admit called before a successful CEA is
// written (Server: the connection is admitted then).
func accept(tc transport.Conn, cfg Config, admit func()) (*Peer, error) {
	p, err := newPeer(cfg, RoleServer, "", tc.RemoteAddr().String())
	if err != nil {
		tc.Close()
		return nil, err
	}
	p.admit = admit
	// Its first step is ConnectionUp once the CER is answered; the
	// exchange goroutine bounds the wait for the CER (CEATimeout).
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		cp, err := p.exchangeServer(tc)
		close(p.opened)
		if err != nil {
			tc.Close()
			p.publish(Event{Kind: EventError, Reason: "capabilities exchange: " + err.Error()})
			p.logLimited(slog.LevelInfo, serve.KindBadOpening, "connection refused in the capabilities exchange", "remote", tc.RemoteAddr().String(), "reason", err.Error())
			p.step(input{kind: evOpenFailed, note: err.Error()})
			return
		}
		if cp.handTo != nil { // the client Peer of the identity takes it
			if c := newConn(cp.handTo, tc, cp.OriginHost); !cp.handTo.step(input{kind: evConnUp, c: c, note: cp.handWhy}) {
				c.close("peer closed") // the Table lets the identity go
			}
			p.step(input{kind: evOpenFailed, note: "connection handed to the client peer of " + cp.OriginHost})
			return
		}
		if c := newConn(p, tc, cp.OriginHost); !p.step(input{kind: evConnUp, c: c}) {
			c.close("peer closed")
		}
	}()
	return p, nil
}

// Name returns the remote Origin-Host once known, else its address.
func (p *Peer) Name() string { return *p.label.Load() }

// Role returns RoleClient or RoleServer.
func (p *Peer) Role() Role { return p.role }

// State returns the watchdog state.
func (p *Peer) State() watchdog.State { return watchdog.State(p.state.Load()) }

// Events returns the bus this peer publishes on.
func (p *Peer) Events() *Bus { return p.cfg.Events }

// Done is closed when the Peer has ended (Close, or a server connection
// gone DOWN) and every event and failover hand-over it made has been
// delivered.
func (p *Peer) Done() <-chan struct{} { return p.notes.Done() }

// Stats returns a snapshot of the counters.
func (p *Peer) Stats() Stats {
	s := &p.stats
	st := Stats{
		Peer: p.Name(), State: p.State().String(), Since: time.Unix(0, p.since.Load()),
		Tw:   time.Duration(p.tw.Load()),
		Sent: s.sent.Load(), Retransmitted: s.retransmitted.Load(), MovedOut: s.movedOut.Load(), Answered: s.answered.Load(), Unmatched: s.unmatched.Load(),
		Late: s.late.Load(), TimedOut: s.timedOut.Load(), Lost: s.lost.Load(), BadAnswers: s.badAnswers.Load(),
		Received: s.received.Load(), AnswersSent: s.answersSent.Load(),
		DWRSent: s.dwrSent.Load(), DWAReceived: s.dwaReceived.Load(), DWRReceived: s.dwrReceived.Load(),
		BadFrames: s.badFrames.Load(), Discarded: s.discarded.Load(), Transitions: s.transitions.Load(),
		OpenFailed: s.openFailures.Load(), Failovers: s.failovers.Load(),
		Premature: s.premature.Load(),
		Refused:   s.refused.Load(), Paused: s.paused.Load(), Overload: s.overload.Load(),
		EventsDropped: s.eventsDropped.Load(), HandlerPanics: s.handlerPanics.Load(),
	}
	if t := s.lastDWA.Load(); t != 0 {
		st.LastDWA = time.Unix(0, t)
	}
	if c := p.cur.Load(); c != nil {
		st.Pending = c.pendingLen()
		c.out.Mu.Lock()
		st.Unanswered = c.bp.Unanswered()
		c.out.Mu.Unlock()
	}
	return st
}

// WaitState waits until the peer is in state want, the peer ends, or ctx
// is done.
func (p *Peer) WaitState(ctx context.Context, want watchdog.State) error {
	err := bus.Await(ctx, p.onTransition, func() bool { return p.State() == want }, p.done)
	switch {
	case err == bus.ErrDone:
		return fmt.Errorf("peer %s ended in %s: %w", p.Name(), p.State(), ErrClosed)
	case err != nil:
		return fmt.Errorf("peer %s is %s, waiting for %s: %w", p.Name(), p.State(), want, err)
	}
	return nil
}

// onTransition subscribes wake to the peer's watchdog transitions.
func (p *Peer) onTransition(wake func()) (cancel func()) {
	return p.cfg.Events.Subscribe(func(_ context.Context, e Event) {
		if e.Kind == EventWatchdog {
			wake()
		}
	})
}

// Request sends one request and waits for its answer. req must be a whole
// encoded request (message.NewRequest(...).Bytes(), or go-diameter's
// Serialize); the Peer takes it over: it writes the Hop-by-Hop id into it,
// and an End-to-End id when it carries none. The answer is returned as raw
// bytes the caller owns (read it with package message or wire.Decode).
//
// Request refuses at once with a *NotInServiceError (errors.Is
// ErrNotInService) unless the watchdog is OKAY, and with ErrDisconnecting
// while a graceful disconnect drains the connection: ours, or the peer's
// after it sent a DPR. It waits until ctx is done, or RequestTimeout when
// ctx has no deadline. It is safe for concurrent use.
func (p *Peer) Request(ctx context.Context, req []byte) ([]byte, error) {
	cl, err := newCall(req, false)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", p.Name(), err)
	}
	if err := p.submit(cl); err != nil {
		return nil, err
	}
	ans, err := cl.Wait(ctx, p.cfg.RequestTimeout)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", p.Name(), err)
	}
	return ans, nil
}

// InService reports whether Request would take a new request now: the
// watchdog is OKAY, a connection is up and no graceful disconnect is
// draining it, neither ours (Close) nor the peer's (a DPR it sent, after
// which its connection only waits for the answers still due).
func (p *Peer) InService() bool {
	c := p.cur.Load()
	return p.State() == watchdog.Okay && c != nil && !p.leaving.Load() && !c.dprIn.Load()
}

// Close disconnects gracefully with Disconnect-Cause
// DO_NOT_WANT_TO_TALK_TO_YOU (this side is done with the peer, which
// should not redial): see Disconnect.
func (p *Peer) Close(ctx context.Context) error {
	return p.Disconnect(ctx, message.DisconnectDoNotWantToTalkToU)
}

// Disconnect disconnects gracefully: DPR with the given Disconnect-Cause
// (message.DisconnectRebooting when the process restarts and wants the
// peer back soon, DisconnectBusy, DisconnectDoNotWantToTalkToU), waits
// for the DPA up to DPATimeout or ctx, then for the answers still owed to
// requests of the peer's that crossed the DPR (DPATimeout more at most),
// closes the connection and ends the Peer. Requests still pending fail
// with ErrClosed. It waits for the Peer's connections and timers to end,
// and for its Handlers, but not past ctx (a Handler that does not return
// once its ctx is done is left to finish on its own), and not for its
// subscribers and failover hook: the events and hand-overs
// queued for them are delivered after, on the Peer's notifier, so a
// subscriber may call Disconnect itself. Done is closed once they are out. Only the first Close or
// Disconnect sends a DPR; later calls wait for the same end, and any
// call whose ctx ends first ends the Peer without waiting for the DPA.
//
// Called with the context a subscriber got with one of this Peer's events,
// it starts the shutdown and returns nil at once: the DPR is sent, and the
// rest (the DPA, the end of the connection, the events that tell of them)
// follows on the Peer's goroutines.
func (p *Peer) Disconnect(ctx context.Context, cause uint32) error {
	p.closeO.Do(func() { p.step(input{kind: evClose, cause: cause, note: "closed by the application"}) })
	if bus.PublishedBy(ctx, p) { // on p's notifier
		return nil
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.end(ErrClosed) // without waiting for the DPA
	}
	// The connections are closed; what is left are goroutines finishing:
	// readers, and Handlers, which may not watch their ctx. Those are not
	// waited for past ctx.
	finished := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closeErr
}

func (p *Peer) mono() int64 { return int64(time.Since(p.epoch)) }

// step handles one input under p.mu, on the caller's goroutine (a
// connection's reader, a dial, Close); false if the Peer has ended.
func (p *Peer) step(e input) bool {
	p.mu.Lock()
	if p.finished {
		p.mu.Unlock()
		return false
	}
	p.stepLocked(e)
	p.settle()
	out := p.takeOut()
	p.mu.Unlock()
	p.run(out)
	return true
}

// fire is the Tw timer's function. A fire that lost the race with a
// re-arm (Reset cannot stop a function already started) finds its deadline
// moved and does nothing.
func (p *Peer) fire() {
	p.mu.Lock()
	if p.finished {
		p.mu.Unlock()
		return
	}
	if now := p.mono(); now < p.deadline {
		// Early: the timer was re-armed meanwhile (then this Reset is
		// harmless) or fired a hair before our clock reached the deadline.
		// Either way, never lose the watchdog's one timer.
		p.timer.Reset(time.Duration(p.deadline - now))
		p.mu.Unlock()
		return
	}
	// Counted until its effects are carried out (a DWR written, calls
	// failed): Close waits for the Peer's timers. Added under p.mu while
	// the Peer has not finished, so before Close's Wait.
	p.wg.Add(1)
	defer p.wg.Done()
	p.onTimer()
	p.settle()
	out := p.takeOut()
	p.mu.Unlock()
	p.run(out)
}

// end stops the Peer now with err (unless it has ended already).
func (p *Peer) end(err error) {
	p.mu.Lock()
	if !p.ended && p.closeErr == nil {
		p.closeErr = err
	}
	p.ended = true
	p.settle()
	out := p.takeOut()
	p.mu.Unlock()
	p.run(out)
}

// settle runs finish once when a step has ended the Peer. p.mu is held.
func (p *Peer) settle() {
	if p.ended && !p.finished {
		p.finished = true
		p.finish()
	}
}

// publish stamps e with the time and the peer's name and queues it for
// the notifier.
func (p *Peer) publish(e Event) {
	e.Time, e.Peer = time.Now(), p.Name()
	p.notify(notice{ev: e})
}

// maxMessageEvents bounds the notices waiting for the notifier past which
// an event about one message (publishPerMessage) is dropped: a peer that
// sends what is refused as fast as it can must not make the queue grow
// behind a subscriber that lags.
const maxMessageEvents = 4096

// publishPerMessage publishes e, an event about one message, unless the
// notice queue holds maxMessageEvents or more: then it is counted in
// Stats.EventsDropped instead.
func (p *Peer) publishPerMessage(e Event) {
	e.Time, e.Peer = time.Now(), p.Name()
	if !p.notes.ScheduleUnder(notice{ev: e}, maxMessageEvents) {
		p.stats.eventsDropped.Add(1)
	}
}

// Effects after the lock. A step decides under p.mu and records what must
// happen in two places, both run once p.mu is released (as etcd-io/raft
// hands back a Ready instead of acting inside Step):
//
//   - p.out: writes (DWR, DWA, DPR, the held DPA) and calls failed by a
//     lost connection, carried out by the goroutine that stepped, right
//     after it unlocks;
//   - the notice queue: events and hand-overs to the failover hook, in the order
//     the steps made them, delivered by one notifier goroutine per peer
//     that runs while notices are queued and exits when none are (an idle
//     peer costs no goroutine for it).
//
// Subscribers and the failover hook therefore never run under p.mu, and
// never on a connection's reader: they may call any method of the peer,
// Close included, which does not wait for the notifier (Done does).

// effect is one entry of p.out.
type effect struct {
	c    *conn
	msg  []byte // write msg on c
	hold bool   // msg is a DPA: hold it until the answers owed are out
	// closeConn: close c's socket (closeLater)
	closeConn bool
	flush     bool // close c once its queue is written (flushLater)
	fail      []*call.Call
	err       error
	ended     bool // the Peer has ended: close p.done (the last effect of finish)
}

// notice is one entry of the notice queue: an event, a hand-over of
// calls to the failover hook, or a log line.
type notice struct {
	ev       Event
	failover bool
	calls    []*call.Call
	reason   string
	line     *serve.Line
	done     func() // HandOver's: called in its turn
}

// flushLater records, if flush, that c closes once its queue is written
// (drainedLocked said so): after the lock, since it may start a writer.
// p.mu is held.
func (p *Peer) flushLater(c *conn, flush bool) {
	if flush {
		p.out = append(p.out, effect{c: c, flush: true})
	}
}

// write records a write for after the lock. p.mu is held.
func (p *Peer) write(c *conn, msg []byte) { p.out = append(p.out, effect{c: c, msg: msg}) }

// takeOut returns the effects recorded so far. p.mu is held.
func (p *Peer) takeOut() []effect {
	out := p.out
	p.out = nil
	return out
}

// run carries out effects; p.mu is not held.
func (p *Peer) run(out []effect) {
	for _, e := range out {
		switch {
		case e.ended:
			close(p.done)
		case e.closeConn:
			e.c.tc.Close()
		case e.flush:
			e.c.closeAfterFlush()
		case e.hold:
			e.c.holdDPA(e.msg, p.cfg.DPATimeout)
		case e.msg != nil:
			if e.c.enqueueLone(e.msg) == nil && wire.IsRequest(e.msg) && wire.CommandCode(e.msg) == wire.CmdDeviceWatchdog {
				p.stats.dwrSent.Add(1)
			}
		}
		var from *call.Conn // the connection the calls were failed for, if any
		if e.c != nil {
			from = &e.c.h
		}
		for _, cl := range e.fail {
			if ok, owner := cl.Finish(nil, 0, e.err, from, &p.stats.lost); ok && owner != nil {
				owner.Retire(cl, false)
			}
		}
	}
}

// notify queues n for delivery after the lock, in order. Called with or
// without p.mu; notices queued under p.mu keep the order of the steps.
func (p *Peer) notify(n notice) { p.notes.Schedule(n) }

// deliver writes n's log line or hands n to the failover hook or the
// subscribers, on the notice queue's goroutine.
func (p *Peer) deliver(n notice) {
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

// log queues a line for the notice queue: the Peer's lines are written
// there, in order with its events, so that a slow Logger holds neither
// p.mu nor a reader. Called with or without p.mu.
func (p *Peer) log(level slog.Level, msg string, args ...any) {
	if l := serve.NewLine(p.cfg.Logger, level, msg, args...); l != nil {
		p.notify(notice{line: l})
	}
}

// logLimited counts one line of kind k and queues it as log does, unless
// that kind is over its rate (serve.Log).
func (p *Peer) logLimited(level slog.Level, k serve.Kind, msg string, args ...any) {
	if l := serve.Limited(p.cfg.Logger, level, k, msg, args...); l != nil {
		p.notify(notice{line: l})
	}
}

// The rare cases of received are functions of their own, so that the
// frequent ones (a DWA, a DWR, an answer) run on a small stack: see
// transitioned.

// refuseCER answers a CER on an open connection with
// DIAMETER_UNABLE_TO_COMPLY.
func (p *Peer) refuseCER(c *conn, msg []byte, now int64) {
	p.publishPerMessage(Event{Kind: EventError, Reason: "CER on an open connection: answered DIAMETER_UNABLE_TO_COMPLY"})
	c.enqueueLone(message.ErrorAnswer(msg, p.cfg.identity(), message.UnableToComply, "capabilities already exchanged").Bytes())
	p.notifyOther(c, now)
}

// unmatched counts and logs an answer that matches no pending request,
// and closes the connection after MaxUnmatched in a row, reporting
// whether it did. An answer whose Hop-by-Hop id this connection issued
// lately (issuedWindow), to a request it no longer remembers (goneMax) or
// answered already, is late, not unmatched: a slow server catching up is
// not a broken one.
func (p *Peer) unmatched(c *conn, hbh uint32, msg []byte, crossed bool) (closed bool) {
	if !crossed && c.hbh.issued(hbh) {
		p.stats.late.Add(1)
		return false
	}
	p.stats.unmatched.Add(1)
	what := "answer matches no pending request: dropped"
	if crossed {
		what = "answer carries another End-to-End id or Command Code than the request its Hop-by-Hop id names: dropped"
	}
	p.logLimited(slog.LevelWarn, serve.KindUnmatched, what, "peer", p.Name(), "hop_by_hop", hbh, "end_to_end", wire.EndToEnd(msg), "command", message.CommandName(msg))
	if c.unmatchedRun++; p.cfg.MaxUnmatched > 0 && c.unmatchedRun >= p.cfg.MaxUnmatched {
		select {
		case <-c.closed:
			// Closed already: the answers its read buffer still held
			// are no new reason to report.
			return true
		default:
		}
		// Its answers cannot reach their callers: a broken peer, out of
		// service like a lost connection (its requests fail over).
		note := fmt.Sprintf("%d answers in a row matched no pending request (or carried another's ids)", c.unmatchedRun)
		p.publish(Event{Kind: EventError, Reason: note + ": closing the connection"})
		p.log(slog.LevelWarn, "closing connection: "+note, "peer", p.Name(), "remote", c.tc.RemoteAddr().String())
		c.close(note)
		return true
	}
	return false
}

// strayDPA counts and logs a DPA that answers no DPR of ours (none was
// sent, or it carries another Hop-by-Hop id), and drops it: it must not
// let a later Close take its own DPR for answered. Unlike an unmatched
// application answer, it does not count toward MaxUnmatched.
func (p *Peer) strayDPA(c *conn, msg []byte) {
	p.stats.unmatched.Add(1)
	p.logLimited(slog.LevelWarn, serve.KindUnmatched, "DPA that answers no DPR of ours: dropped", "peer", p.Name(),
		"hop_by_hop", wire.HopByHop(msg), "remote", c.tc.RemoteAddr().String())
}

// malformedAnswer takes an answer to cl on c whose AVPs do not fit it
// (bad, the first such AVP): it fails cl with ErrMalformedAnswer if cl is
// in flight on c, and drops it otherwise (a request that moved on is
// answered where it went), counted and logged either way. The connection stays: its framing is intact, and
// the other answers on it are whole.
func (p *Peer) malformedAnswer(c *conn, cl *dcall, ans []byte, bad *wire.BadAVP) {
	p.stats.badAnswers.Add(1)
	err := fmt.Errorf("%w from %s: AVP %d at offset %d: %s", ErrMalformedAnswer, p.Name(), bad.Code, bad.Offset, bad.Reason)
	what := "malformed answer: its request fails"
	if !cl.FailOn(&c.h, err) {
		p.stats.late.Add(1)
		what = "malformed answer to a request answered or sent elsewhere: dropped"
	}
	p.logLimited(slog.LevelWarn, serve.KindBadFrame, what, "peer", p.Name(),
		"end_to_end", wire.EndToEnd(ans), "command", message.CommandName(ans), "avp", bad.Code, "offset", bad.Offset, "reason", bad.Reason)
}

// premature hands a call answered DIAMETER_TOO_BUSY or
// DIAMETER_UNABLE_TO_DELIVER (ans, with that Result-Code rc: refusalOf)
// to the failover hook, to be tried at another peer (RFC 6733 7.1.3, RFC
// 3539 2.10), and reports whether it did.
func (p *Peer) premature(c *conn, cl *dcall, ans []byte, rc uint32) bool {
	if !cl.Refuse(&c.h, ans, rc, nil) {
		return false
	}
	// Its caller, reading c (see baton), reads it no more: its answer
	// comes on the connection the failover sends it to, or none.
	cl.via.CompareAndSwap(c, nil)
	p.stats.premature.Add(1)
	p.notify(notice{failover: true, calls: []*call.Call{&cl.Call}, reason: fmt.Sprintf("premature failover: %d %s", rc, resultName(rc))})
	return true
}

// serve runs the Handler for req, read at now: on the reader unless
// Handlers run on workers (see Handler); moved as for received.
func (p *Peer) serve(c *conn, req []byte) (moved bool) {
	if p.cfg.InlineHandlerTime < 0 || c.slowLeft.Load() > 0 && c.slowLeft.Add(-1) >= 0 {
		p.serveOnWorker(c, req)
		return false
	}
	c.owed.Add(1)
	c.out.Held(false)
	// The Handler's time on the reader counts from the reader's latest
	// clock reading: the socket read that brought req, or the end of the
	// Handler before it in the same burst (whose bytes arrived together).
	// One reading per request, not two, and never the burst's wait.
	return c.answerInline(req, c.clock)
}
