package watchdog

import (
	"fmt"
	"time"
)

// State is a watchdog state of RFC 3539 Appendix A.
type State uint8

// The five states of RFC 3539 Appendix A.
const (
	// Initial: no connection has been up yet.
	Initial State = iota
	// Okay: the connection is up and in service.
	Okay
	// Suspect: a DWR went unanswered for Tw; no new requests go here.
	Suspect
	// Down: the connection is closed; the owner tries to reopen it once per Tw.
	Down
	// Reopen: a connection is up again but carries no traffic until
	// Config.OkayDWAs DWR/DWA exchanges succeed.
	Reopen
	numStates = 5
)

var stateNames = [numStates]string{"INITIAL", "OKAY", "SUSPECT", "DOWN", "REOPEN"}

// String returns the state's name in capitals, as the RFC writes it.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// InService reports whether new requests may be sent on a connection in
// state s. Only OKAY carries traffic: SUSPECT is suspended (3.4.1 [4]) and
// REOPEN has not proved itself yet (3.4.1 [5]).
func (s State) InService() bool { return s == Okay }

// ParseState is the inverse of State.String.
func ParseState(name string) (State, error) {
	for i, n := range stateNames {
		if n == name {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("watchdog: unknown state %q", name)
}

// Event is something that happened to the connection.
type Event uint8

// Events of RFC 3539 Appendix A. The appendix has "receive non-DWA"; this
// package splits it into ReceiveDWR and ReceiveOther because a DWR must also
// be answered, which the appendix leaves to the base protocol.
const (
	// ConnectionUp: the transport is connected and capabilities exchanged.
	ConnectionUp Event = iota
	// ConnectionDown: the transport reported the connection closed or failed.
	ConnectionDown
	// TimerExpired: the Tw timer armed by the last ActionSetTimer fired.
	TimerExpired
	// ReceiveDWA: a Device-Watchdog-Answer arrived.
	ReceiveDWA
	// ReceiveDWR: a Device-Watchdog-Request arrived (a non-DWA message).
	ReceiveDWR
	// ReceiveOther: any other message arrived, request or answer.
	ReceiveOther
	numEvents = 6
)

var eventNames = [numEvents]string{"connection up", "connection down", "timer expired", "receive DWA", "receive DWR", "receive non-DWA"}

func (e Event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return fmt.Sprintf("Event(%d)", uint8(e))
}

// ActionKind says what the owner must do.
type ActionKind uint8

// Actions of RFC 3539 Appendix A, in the words of the appendix.
const (
	// ActionSetTimer: SetWatchdog(). (Re)arm the one Tw timer for
	// Action.After, cancelling any earlier arming.
	ActionSetTimer ActionKind = iota
	// ActionSendDWR: SendWatchdog(). Send one Device-Watchdog-Request.
	ActionSendDWR
	// ActionFailover: Failover(). Move this connection's unanswered requests
	// to an alternate peer and send no new ones here.
	ActionFailover
	// ActionFailback: Failback(). Put the connection back in service.
	ActionFailback
	// ActionCloseConnection: CloseConnection(). Close the transport.
	ActionCloseConnection
	// ActionAttemptOpen: AttemptOpen(). Try to open a connection.
	ActionAttemptOpen
	// ActionDiscard: Throwaway(). Do not deliver the received message.
	ActionDiscard
	// ActionAnswerDWR: answer the received DWR with a DWA now.
	ActionAnswerDWR
	numActions = 8
)

var actionNames = [numActions]string{"SetWatchdog", "SendWatchdog", "Failover", "Failback", "CloseConnection", "AttemptOpen", "Throwaway", "AnswerDWR"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is one effect for the owner to carry out, in the order given.
type Action struct {
	Kind ActionKind
	// After is the jittered Tw for ActionSetTimer; zero otherwise.
	After time.Duration
}

func (a Action) String() string {
	if a.Kind == ActionSetTimer {
		return fmt.Sprintf("%v(%v)", a.Kind, a.After)
	}
	return a.Kind.String()
}

// Reasons recorded on transitions. They are stable strings: event streams
// and operators' scripts match on them.
const (
	ReasonConnectionUp   = "connection up"
	ReasonReopened       = "connection reopened; validating with DWRs"
	ReasonConnectionDown = "connection down"
	ReasonDWATimeout     = "no DWA within Tw"
	ReasonSecondTimeout  = "no DWA after a second Tw; closing"
	ReasonReopenTimeout  = "DWA missed twice while reopening; closing"
	ReasonDWAReceived    = "DWA received"
	ReasonTraffic        = "message received"
	ReasonReopenDone     = "enough DWAs received after reopen"
)

// Transition records a state change. The owner adds the peer and the
// time, which the pure machine does not know.
type Transition struct {
	From, To State
	Event    Event
	Reason   string
}

// maxActions is the most actions one step returns (AnswerDWR plus a row of
// the table with at most three). Output keeps them in an array so that Step
// does not allocate: it runs for every message received.
const maxActions = 4

// Output is the result of one step.
type Output struct {
	// State is the state after the step.
	State State
	// Changed says whether the state changed; Transition is valid only then.
	Changed    bool
	Transition Transition
	// Ignored is true when the (state, event) pair is not in the appendix's
	// table, such as ConnectionUp while OKAY: nothing was done. The owner
	// may log it; it usually means a late or duplicate report.
	Ignored bool

	acts [maxActions]Action
	n    uint8
}

// Actions returns the actions to carry out, in order. The slice aliases o.
func (o *Output) Actions() []Action { return o.acts[:o.n] }

// Has reports whether the output contains an action of kind k.
func (o *Output) Has(k ActionKind) bool {
	for _, a := range o.acts[:o.n] {
		if a.Kind == k {
			return true
		}
	}
	return false
}

// Timer returns the duration of the ActionSetTimer in o, if any.
func (o *Output) Timer() (time.Duration, bool) {
	for _, a := range o.acts[:o.n] {
		if a.Kind == ActionSetTimer {
			return a.After, true
		}
	}
	return 0, false
}

func (o *Output) add(k ActionKind, after time.Duration) {
	o.acts[o.n] = Action{Kind: k, After: after}
	o.n++
}

// Machine is one connection's watchdog. Create it with New. Not safe for
// concurrent use; the owning connection's event loop serialises calls.
type Machine struct {
	cfg Config // validated; read-only after New

	state   State
	pending bool // a DWR is unanswered (W4)
	numDWA  int  // DWAs received while reopening; -1 after a miss
	missed  int  // expiries with Pending in OKAY; see Config.SuspectTimeouts
	tw      time.Duration

	transitions uint64
	byPair      [numStates][numStates]uint64
}

// New returns a machine in state INITIAL, or an error wrapping ErrConfig.
func New(cfg Config) (*Machine, error) {
	c, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Machine{cfg: c, state: Initial}, nil
}

// State returns the current state.
func (m *Machine) State() State { return m.state }

// Pending reports whether a DWR is outstanding.
func (m *Machine) Pending() bool { return m.pending }

// NumDWA returns the DWAs counted while reopening (-1 after a missed one).
func (m *Machine) NumDWA() int { return m.numDWA }

// Tw returns the last jittered interval armed (zero before the first).
func (m *Machine) Tw() time.Duration { return m.tw }

// Config returns the validated configuration, defaults filled in.
func (m *Machine) Config() Config { return m.cfg }

// Transitions returns how many state changes the machine has made.
func (m *Machine) Transitions() uint64 { return m.transitions }

// TransitionCount returns how many times the machine went from one state to
// another.
func (m *Machine) TransitionCount(from, to State) uint64 {
	if from >= numStates || to >= numStates {
		return 0
	}
	return m.byPair[from][to]
}

// Start returns what a client does when it creates a connection object in
// INITIAL: AttemptOpen() and SetWatchdog(), as the appendix's INITIAL timer
// row does on every later expiry. A server that accepted a connection skips
// Start and steps ConnectionUp at once. Start does nothing outside INITIAL.
func (m *Machine) Start() Output {
	o := Output{State: m.state}
	if m.state != Initial {
		o.Ignored = true
		return o
	}
	o.add(ActionAttemptOpen, 0)
	m.setWatchdog(&o)
	return o
}

// setWatchdog is SetWatchdog(): Tw = Twinit + U[-2 s, +2 s], fresh each time (W2).
func (m *Machine) setWatchdog(o *Output) {
	m.tw = Jitter(m.cfg.Twinit, m.cfg.Rand)
	o.add(ActionSetTimer, m.tw)
}

func (m *Machine) moveTo(o *Output, to State, ev Event, reason string) {
	o.Changed = true
	o.Transition = Transition{From: m.state, To: to, Event: ev, Reason: reason}
	m.transitions++
	m.byPair[m.state][to]++
	m.state = to
}

// Step feeds one event to the machine and returns what to do. It implements
// the table of RFC 3539 Appendix A row by row; the comments quote the
// rows as "STATE / event -> actions -> NEXT".
func (m *Machine) Step(ev Event) Output {
	var o Output

	// A DWR is answered in every state where a connection can exist; in
	// DOWN the connection has been closed, so there is nothing to answer on.
	if ev == ReceiveDWR && m.state != Down {
		o.add(ActionAnswerDWR, 0)
	}
	// Any traffic from the peer proves it alive for SuspectTimeouts.
	if ev == ReceiveDWA || ev == ReceiveDWR || ev == ReceiveOther {
		m.missed = 0
	}

	switch m.state {
	case Initial:
		switch ev {
		case ConnectionUp: // INITIAL / connection up -> SetWatchdog() -> OKAY
			m.setWatchdog(&o)
			m.moveTo(&o, Okay, ev, ReasonConnectionUp)
		case ReceiveDWA: // INITIAL / receive DWA -> Pending=false; throw away -> INITIAL
			m.pending = false
			o.add(ActionDiscard, 0)
		case ReceiveDWR, ReceiveOther: // INITIAL / receive non-DWA -> throw away -> INITIAL
			o.add(ActionDiscard, 0)
		case TimerExpired: // INITIAL / timer expires -> AttemptOpen(); SetWatchdog() -> INITIAL
			o.add(ActionAttemptOpen, 0)
			m.setWatchdog(&o)
		default:
			o.Ignored = true
		}

	case Okay:
		switch ev {
		case ReceiveDWA: // OKAY / receive DWA -> Pending=false; SetWatchdog() -> OKAY
			m.pending = false
			m.setWatchdog(&o)
		case ReceiveDWR, ReceiveOther: // OKAY / receive non-DWA -> SetWatchdog() -> OKAY
			m.setWatchdog(&o)
		case TimerExpired:
			if !m.pending { // OKAY / expiry, !Pending -> SendWatchdog(); SetWatchdog(); Pending=true -> OKAY
				o.add(ActionSendDWR, 0)
				m.setWatchdog(&o)
				m.pending = true
				break
			}
			// OKAY / expiry, Pending -> Failover(); SetWatchdog() -> SUSPECT
			// (after SuspectTimeouts such expiries; the RFC's is 1).
			m.missed++
			if m.missed < m.cfg.SuspectTimeouts {
				m.setWatchdog(&o)
				break
			}
			m.missed = 0
			o.add(ActionFailover, 0)
			m.setWatchdog(&o)
			m.moveTo(&o, Suspect, ev, ReasonDWATimeout)
		case ConnectionDown: // OKAY / connection down -> Failover(); SetWatchdog() -> DOWN
			o.add(ActionFailover, 0)
			m.setWatchdog(&o)
			m.moveTo(&o, Down, ev, ReasonConnectionDown)
		default:
			o.Ignored = true
		}

	case Suspect:
		switch ev {
		case ReceiveDWA: // SUSPECT / receive DWA -> Pending=false; Failback(); SetWatchdog() -> OKAY
			m.pending = false
			o.add(ActionFailback, 0)
			m.setWatchdog(&o)
			m.moveTo(&o, Okay, ev, ReasonDWAReceived)
		case ReceiveDWR, ReceiveOther: // SUSPECT / receive non-DWA -> Failback(); SetWatchdog() -> OKAY
			o.add(ActionFailback, 0)
			m.setWatchdog(&o)
			m.moveTo(&o, Okay, ev, ReasonTraffic)
		case TimerExpired: // SUSPECT / expiry -> CloseConnection(); SetWatchdog() -> DOWN
			o.add(ActionCloseConnection, 0)
			m.setWatchdog(&o)
			m.moveTo(&o, Down, ev, ReasonSecondTimeout)
		case ConnectionDown: // SUSPECT / connection down -> CloseConnection(); SetWatchdog() -> DOWN
			o.add(ActionCloseConnection, 0)
			m.setWatchdog(&o)
			m.moveTo(&o, Down, ev, ReasonConnectionDown)
		default:
			o.Ignored = true
		}

	case Down:
		switch ev {
		case TimerExpired: // DOWN / expiry -> AttemptOpen(); SetWatchdog() -> DOWN
			o.add(ActionAttemptOpen, 0)
			m.setWatchdog(&o)
		case ConnectionUp: // DOWN / connection up -> NumDWA=0; SendWatchdog(); SetWatchdog(); Pending=true -> REOPEN
			m.numDWA = 0
			o.add(ActionSendDWR, 0)
			m.setWatchdog(&o)
			m.pending = true
			m.moveTo(&o, Reopen, ev, ReasonReopened)
		case ReceiveDWA: // DOWN / receive DWA -> Pending=false; throw away -> DOWN
			m.pending = false
			o.add(ActionDiscard, 0)
		case ReceiveDWR, ReceiveOther: // DOWN / receive non-DWA -> throw away -> DOWN
			o.add(ActionDiscard, 0)
		default:
			o.Ignored = true
		}

	case Reopen:
		switch ev {
		case ReceiveDWA:
			m.pending = false
			m.numDWA++
			// REOPEN / DWA, NumDWA < 2 -> Pending=false; NumDWA++ -> REOPEN
			// REOPEN / DWA, NumDWA == 2 -> Pending=false; NumDWA++; Failback() -> OKAY
			// (2 is OkayDWAs-1; the comparison is made before the increment.)
			if m.numDWA >= m.cfg.OkayDWAs {
				o.add(ActionFailback, 0)
				m.moveTo(&o, Okay, ev, ReasonReopenDone)
			}
		case ReceiveDWR, ReceiveOther: // REOPEN / receive non-DWA -> throw away -> REOPEN
			o.add(ActionDiscard, 0)
		case TimerExpired:
			switch {
			case !m.pending: // REOPEN / expiry, !Pending -> SendWatchdog(); SetWatchdog(); Pending=true -> REOPEN
				o.add(ActionSendDWR, 0)
				m.setWatchdog(&o)
				m.pending = true
			case m.numDWA >= 0: // REOPEN / expiry, Pending, NumDWA >= 0 -> NumDWA=-1; SetWatchdog() -> REOPEN
				m.numDWA = -1
				m.setWatchdog(&o)
			default: // REOPEN / expiry, Pending, NumDWA < 0 -> CloseConnection(); SetWatchdog() -> DOWN
				o.add(ActionCloseConnection, 0)
				m.setWatchdog(&o)
				m.moveTo(&o, Down, ev, ReasonReopenTimeout)
			}
		case ConnectionDown: // REOPEN / connection down -> CloseConnection(); SetWatchdog() -> DOWN
			o.add(ActionCloseConnection, 0)
			m.setWatchdog(&o)
			m.moveTo(&o, Down, ev, ReasonConnectionDown)
		default:
			o.Ignored = true
		}
	}
	o.State = m.state
	return o
}
