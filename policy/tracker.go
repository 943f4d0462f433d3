package policy

import (
	"fmt"
	"time"
)

// State is the policy state of one server.
type State uint8

// The four states of the 7750 SR text.
const (
	// Unknown: no reply received yet. The server gets ordinary traffic.
	Unknown State = iota
	// InService: the server replies. It gets ordinary traffic.
	InService
	// OutOfService: the down-timeout or a probe expired; the server gets
	// nothing until the hold-down ends.
	OutOfService
	// Probing: the hold-down is over; the server gets exactly one message,
	// the probe, never retried on it.
	Probing
	numStates = 4
)

var stateNames = [numStates]string{"unknown", "in-service", "out-of-service", "probing"}

// String returns the state's name as the 7750 SR shows it.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// ParseState is the inverse of State.String.
func ParseState(name string) (State, error) {
	for i, n := range stateNames {
		if n == name {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("policy: unknown state %q", name)
}

// MarshalText encodes s as its name (JSON events show "in-service").
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText is the inverse of MarshalText.
func (s *State) UnmarshalText(b []byte) error {
	v, err := ParseState(string(b))
	if err == nil {
		*s = v
	}
	return err
}

// Takes reports whether a server in state s takes ordinary requests (which
// may be retried on it). Probing takes only the probe: see Tracker.Allow.
func (s State) Takes() bool { return s == Unknown || s == InService }

// EventType is the Type under which the owner publishes policy events, in
// the same stream as the watchdog's.
const EventType = "policy"

// Reasons recorded on events. They are stable strings.
const (
	ReasonFirstReply    = "first reply received"
	ReasonReply         = "reply received"
	ReasonNoFirstReply  = "no reply to the first request within the down-timeout"
	ReasonDownTimeout   = "no reply within the down-timeout"
	ReasonHoldDownOver  = "hold-down over; probing"
	ReasonNoProbe       = "hold-down over; no other healthy server to probe against: ordinary traffic"
	ReasonProbeAnswered = "probe answered"
	ReasonProbeTimeout  = "probe not answered; hold-down restarts"
)

// Event is one state change of one server (an S-row transition).
type Event struct {
	Time   time.Time `json:"time"`
	Server string    `json:"server"`
	Index  int       `json:"index"` // the server's index in its Group
	From   State     `json:"from"`
	To     State     `json:"to"`
	Reason string    `json:"reason"`
}

func (e Event) String() string {
	return fmt.Sprintf("%s %s: %s -> %s (%s)", e.Time.Format("15:04:05.000"), e.Server, e.From, e.To, e.Reason)
}

// Send says which test-user request the owner must send now.
type Send uint8

const (
	// SendNothing: nothing to send.
	SendNothing Send = iota
	// SendProbe: send the test user's request as the probe: once, no retry.
	// The tracker recorded it as sent; report its reply with OnReply.
	SendProbe
	// SendKeepAlive: send the test user's request as a keep-alive. The
	// tracker recorded it as sent (OnSent); report its reply with OnReply.
	SendKeepAlive
)

func (s Send) String() string {
	switch s {
	case SendNothing:
		return "nothing"
	case SendProbe:
		return "probe"
	case SendKeepAlive:
		return "keep-alive"
	}
	return fmt.Sprintf("Send(%d)", uint8(s))
}

// maxEvents bounds the events of one call: a down-timeout expiry, then the
// end of the hold-down, then the call's own change.
const maxEvents = 3

// Output is the result of one call. It does not allocate.
type Output struct {
	// State is the state after the call.
	State State
	// Allow (from Allow) says the request may go to this server.
	Allow bool
	// Probe (from Allow) says the request is the probe: send it exactly
	// once and never retry it on this server; on no reply its caller gets
	// failover or an error. The tracker recorded it as sent.
	Probe bool
	// Send (from Tick) is a test-user request to send now.
	Send Send

	evs [maxEvents]Event
	n   uint8
}

// Events returns the state changes of the call, oldest first. The slice
// aliases o.
func (o *Output) Events() []Event { return o.evs[:o.n] }

// Changed reports whether the call changed the state.
func (o *Output) Changed() bool { return o.n > 0 }

// Tracker is the policy state of one server. It is not safe for concurrent
// use; a Group serialises calls to its trackers.
type Tracker struct {
	name  string
	index int
	cfg   Config
	state State

	downRunning bool
	downStart   time.Time // the down-timeout expires at downStart+DownTimeout

	holdEnd time.Time // OutOfService: the hold-down ends here

	probeOut      bool // Probing: the probe is in flight
	probeDeadline time.Time
	probingSince  time.Time

	keepAliveSet  bool
	nextKeepAlive time.Time

	replies uint64 // OnReply calls: ReplyMark
}

// NewTracker returns the tracker of one server, in state Unknown.
func NewTracker(name string, cfg Config) (*Tracker, error) {
	c, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Tracker{name: name, cfg: c}, nil
}

// Name returns the server's name.
func (t *Tracker) Name() string { return t.name }

// State returns the current state (as of the last call).
func (t *Tracker) State() State { return t.state }

// Config returns the configuration with defaults filled in.
func (t *Tracker) Config() Config { return t.cfg }

func (t *Tracker) moveTo(o *Output, to State, at time.Time, reason string) {
	if int(o.n) < len(o.evs) {
		o.evs[o.n] = Event{Time: at, Server: t.name, Index: t.index, From: t.state, To: to, Reason: reason}
		o.n++
	}
	t.state = to
}

// advance fires the timers that need no group decision: the down-timeout
// and the probe's timeout. The events carry the time the timer expired.
func (t *Tracker) advance(now time.Time, o *Output) {
	switch t.state {
	case Unknown, InService:
		if t.downRunning {
			at := t.downStart.Add(t.cfg.DownTimeout)
			if !now.Before(at) {
				reason := ReasonDownTimeout
				if t.state == Unknown {
					reason = ReasonNoFirstReply
				}
				t.downRunning = false
				t.holdEnd = at.Add(t.cfg.HoldDown)
				t.moveTo(o, OutOfService, at, reason)
			}
		}
	case Probing:
		if t.probeOut && !now.Before(t.probeDeadline) {
			t.probeOut = false
			t.holdEnd = t.probeDeadline.Add(t.cfg.HoldDown)
			t.moveTo(o, OutOfService, t.probeDeadline, ReasonProbeTimeout)
		}
	}
}

// endHold ends an expired hold-down: probing if probeOK, else Unknown.
func (t *Tracker) endHold(now time.Time, probeOK bool, o *Output) {
	if t.state != OutOfService || now.Before(t.holdEnd) {
		return
	}
	if probeOK {
		t.probeOut = false
		t.probingSince = now
		t.moveTo(o, Probing, now, ReasonHoldDownOver)
		return
	}
	t.downRunning = false
	t.keepAliveSet = false
	t.moveTo(o, Unknown, now, ReasonNoProbe)
}

// hold advances the timers and the hold-down, and nothing else.
func (t *Tracker) hold(now time.Time, probeOK bool) Output {
	var o Output
	t.advance(now, &o)
	t.endHold(now, probeOK, &o)
	o.State = t.state
	return o
}

func (t *Tracker) claimProbe(now time.Time) {
	t.probeOut = true
	t.probeDeadline = now.Add(t.cfg.ProbeTimeout)
}

// Tick advances time to now: the down-timeout, the probe's timeout and the
// hold-down. probeOK says whether probing is allowed now: several servers
// and at least one other healthy; a Group computes it. With a test
// user, Tick also says when to send its request (Output.Send): the probe,
// or a keep-alive. Call Tick at NextWakeup; calling it more often is
// harmless.
func (t *Tracker) Tick(now time.Time, probeOK bool) Output {
	var o Output
	t.advance(now, &o)
	t.endHold(now, probeOK, &o)
	if t.cfg.TestUser {
		switch t.state {
		case Probing:
			if !t.probeOut {
				t.claimProbe(now)
				o.Send = SendProbe
			}
		case Unknown, InService:
			if t.cfg.KeepAlive > 0 && (!t.keepAliveSet || !now.Before(t.nextKeepAlive)) {
				t.keepAliveSet = true
				t.nextKeepAlive = now.Add(t.cfg.KeepAlive)
				t.sent(now)
				o.Send = SendKeepAlive
			}
		}
	}
	o.State = t.state
	return o
}

// Allow advances time like Tick and says whether a new ordinary request may
// go to this server. In Unknown and InService it may. In OutOfService it
// may not. In Probing, without a test user, the first request allowed is the
// probe (Output.Probe): the tracker records it as sent, and refuses every
// other request until the probe is answered or times out. With a test user
// no real request probes (Tick sends the test user's).
func (t *Tracker) Allow(now time.Time, probeOK bool) Output {
	var o Output
	t.advance(now, &o)
	t.endHold(now, probeOK, &o)
	switch t.state {
	case Unknown, InService:
		o.Allow = true
	case Probing:
		if !t.cfg.TestUser && !t.probeOut {
			t.claimProbe(now)
			o.Allow, o.Probe = true, true
		}
	}
	o.State = t.state
	return o
}

func (t *Tracker) sent(now time.Time) {
	if !t.downRunning {
		t.downRunning = true
		t.downStart = now
	}
}

// OnSent records that an ordinary request was sent to the server at now: it
// starts the down-timeout unless it is running. A probe claimed by
// Allow needs no OnSent; calling it anyway is harmless.
func (t *Tracker) OnSent(now time.Time) Output {
	return t.OnSentSince(now, t.replies)
}

// ReplyMark returns a mark of the replies recorded so far, for
// OnSentSince: take it before the request is sent.
func (t *Tracker) ReplyMark() uint64 { return t.replies }

// OnSentSince is OnSent for a request sent after ReplyMark returned mark
// and recorded only now: its reply, or any other, may have been recorded
// (OnReply) in between. A reply since mark came after the request was
// sent and reset the down-timeout the request would have started, so it
// starts none; started now, it would wait for a reply that came already.
func (t *Tracker) OnSentSince(now time.Time, mark uint64) Output {
	var o Output
	t.advance(now, &o)
	if t.state.Takes() && t.replies == mark {
		t.sent(now)
	}
	o.State = t.state
	return o
}

// OnReply records a reply from the server, to any request of any
// subscriber: the down-timeout is reset to 0 (it starts again with the
// next request sent); Unknown and Probing turn InService. A late reply while
// OutOfService changes nothing: the hold-down runs its course.
func (t *Tracker) OnReply(now time.Time) Output {
	var o Output
	t.replies++
	t.advance(now, &o)
	switch t.state {
	case Unknown:
		t.downRunning = false
		t.moveTo(&o, InService, now, ReasonFirstReply)
	case InService:
		t.downRunning = false
	case Probing:
		t.probeOut = false
		t.downRunning = false
		t.moveTo(&o, InService, now, ReasonProbeAnswered)
	}
	o.State = t.state
	return o
}

// CancelProbe gives back a probe claimed by Allow or Tick that could not be
// sent (the connection refused it): the next request or Tick probes again.
func (t *Tracker) CancelProbe() {
	if t.state == Probing {
		t.probeOut = false
	}
}

// NextWakeup returns when Tick must next be called: the earliest of the
// down-timeout's expiry, the hold-down's end, the probe's timeout and the
// next keep-alive. A time in the past means now. ok is false when no timer
// is running.
func (t *Tracker) NextWakeup() (at time.Time, ok bool) { return t.nextWakeup(true) }

// nextWakeup is NextWakeup for a server whose connection can carry
// requests (avail) or not. An unavailable server is only held (see
// Group.Tick): it is sent no probe and no keep-alive, so those are no
// reason to wake; they become due at once when it is available again.
// Its down-timeout, probe deadline and hold-down end still are.
func (t *Tracker) nextWakeup(avail bool) (at time.Time, ok bool) {
	consider := func(x time.Time) {
		if !ok || x.Before(at) {
			at, ok = x, true
		}
	}
	switch t.state {
	case Unknown, InService:
		if t.downRunning {
			consider(t.downStart.Add(t.cfg.DownTimeout))
		}
		if avail && t.cfg.TestUser && t.cfg.KeepAlive > 0 {
			consider(t.nextKeepAlive) // zero before the first keep-alive: now
		}
	case OutOfService:
		consider(t.holdEnd)
	case Probing:
		if t.probeOut {
			consider(t.probeDeadline)
		} else if avail && t.cfg.TestUser {
			consider(t.probingSince)
		}
	}
	return at, ok
}
