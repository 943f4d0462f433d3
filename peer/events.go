package peer

import (
	"context"
	"time"

	"github.com/aaatp/aaatp/internal/bus"
	"github.com/aaatp/aaatp/watchdog"
)

// EventKind says what an Event reports. Each kind documents which of
// Event's fields it sets; a consumer switches on Kind and never needs to
// read Reason, which is for people.
type EventKind uint8

const (
	// EventWatchdog: the watchdog changed state. From, To, Trigger and
	// NumDWA are set.
	EventWatchdog EventKind = iota + 1
	// EventConnUp: a transport connection opened and its capabilities
	// exchange succeeded. Network and Addr are set.
	EventConnUp
	// EventConnDown: the connection closed or was lost. DPR and DPA say
	// whether it ended with this side's DPR and whether the DPA came.
	EventConnDown
	// EventOpenFailed: an attempt to open a connection failed (dial,
	// TLS, or a refused capabilities exchange). ResultCode is set when
	// the peer refused the exchange.
	EventOpenFailed
	// EventIdle: the connection has carried no application message for
	// Idle and is being brought down (Config.IdleTimeout).
	EventIdle
	// EventFailover: the peer left service with Pending requests on its
	// connection and no Client to replay them elsewhere: they stay
	// matched there, answered late or failed at their deadline.
	EventFailover
	// EventFailback: the peer is back in service after a failover.
	EventFailback
	// EventError: a protocol error (bad frame, a CER on an open
	// connection, a request discarded in the wrong watchdog state...).
	// The connection is closed when the error is fatal to it.
	EventError
	// EventLateRefusal: a request that had left this peer's connection (a
	// failover) and waits for another peer was answered here, late, too
	// busy or unable to deliver: this peer did not apply it, and may be
	// offered it again. ResultCode is set. Package client wakes such
	// requests with it.
	EventLateRefusal
	// EventDisconnecting: the peer asked to disconnect (it sent a DPR):
	// its connection takes no new request from now on (InService is
	// false), and closes once the answers due on it are in, DPATimeout
	// after the DPR at most (EventConnDown then). No field but Reason,
	// which gives the Disconnect-Cause, is set. A Client sends elsewhere
	// on it at once.
	EventDisconnecting
)

var kindNames = [...]string{
	EventWatchdog:      "watchdog",
	EventConnUp:        "connection_up",
	EventConnDown:      "connection_down",
	EventOpenFailed:    "open_failed",
	EventIdle:          "idle",
	EventFailover:      "failover",
	EventFailback:      "failback",
	EventError:         "error",
	EventLateRefusal:   "late_refusal",
	EventDisconnecting: "disconnecting",
}

// String returns the kind's name in snake case ("connection_up").
func (k EventKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one observable happening on a peer.
type Event struct {
	Time time.Time
	Peer string // the remote Origin-Host once known, else its address
	Kind EventKind

	// EventWatchdog.
	From, To watchdog.State
	Trigger  watchdog.Event // what the machine stepped on
	NumDWA   int            // DWAs counted in REOPEN after the step; -1 after a missed one

	// EventConnUp.
	Network string // "tcp", "tls", "sctp"...
	Addr    string // the remote address

	// EventConnDown.
	DPR bool // this side sent a DPR first
	DPA bool // and the peer's DPA arrived

	// EventOpenFailed: the Result-Code of the peer's CEA when it refused
	// the capabilities exchange (DIAMETER_UNKNOWN_PEER...); 0 when the
	// attempt failed before a CEA. EventLateRefusal: the refusal's.
	ResultCode uint32

	// EventIdle.
	Idle time.Duration

	// EventFailover.
	Pending int

	// Reason explains the event to a person: the watchdog's rule, the
	// error, how the connection ended.
	Reason string
}

// Bus fans events out to subscribers. Its methods are safe for concurrent
// use. Publish calls each subscriber synchronously on the publishing
// goroutine (a Peer's notifier, which delivers that Peer's events one at
// a time and in order; a Bus shared by several Peers, or a radpeer.Server's,
// is called from several goroutines at once): subscribers must be quick,
// must not block (hand off to a channel of your own if you need to do
// I/O) and, on a shared Bus, must be safe for concurrent use.
type Bus struct{ b bus.Bus[Event] }

// NewBus returns an empty Bus.
func NewBus() *Bus { return &Bus{} }

// Subscribe registers fn and returns a function that unregisters it. fn
// gets the context the event was published with: a Peer's is done once
// the Peer has ended, and given to that Peer's Close or Disconnect it has
// them start the shutdown and return at once (waiting there would hold
// the Peer's later events; wait on Done from a goroutine of your own).
func (b *Bus) Subscribe(fn func(ctx context.Context, e Event)) (cancel func()) {
	return b.b.Subscribe(fn)
}

// Publish delivers e to every subscriber, with ctx, and counts it.
func (b *Bus) Publish(ctx context.Context, e Event) { b.b.Publish(ctx, uint8(e.Kind), e) }

// Count returns how many events of kind k were published.
func (b *Bus) Count(k EventKind) uint64 { return b.b.Count(uint8(k)) }
