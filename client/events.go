package client

import (
	"context"
	"time"

	"github.com/aaatp/aaatp/internal/bus"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
)

// EventKind says what a client Event reports and which of its fields are
// set. A consumer switches on Kind and never needs to read Reason, which
// is for people.
type EventKind uint8

const (
	// EventPeer: one of the servers' peers published Peer (a watchdog
	// transition, a connection up or down, an error...).
	EventPeer EventKind = iota + 1
	// EventFailover: a server left service and Failover says where its
	// pending requests went (one row of FailoverLog).
	EventFailover
	// EventBalancerRebuilt: in Balance mode, the balancer's table was
	// rebuilt; Generation is the new table's. A Client publishes these
	// in the order of their generations,
	// even when several servers change state at once, as long as
	// subscribers return quickly (a subscriber that blocks lets later
	// ones through out of order, none lost).
	EventBalancerRebuilt
	// EventPolicy: a server's policy state changed (Config.Policy). They
	// are published in the order of the changes, under the same proviso:
	// each server's events chain, the From of one being the To of the
	// one before.
	EventPolicy
	// EventQueueAlarm: a server's queue crossed its alarm threshold
	// (Config.Throttle); Raised and Depth are set. An alarm's clearing is
	// published after its raising.
	EventQueueAlarm
	// EventSlotFilled: with MaxConnections, Server was dialed to fill the
	// slot of Because, which went DOWN.
	EventSlotFilled
	// EventSlotReleased: with MaxConnections, Server's connection was
	// closed to respect the limit, after Age in service.
	EventSlotReleased
	// EventReconfigured: SetPeers changed Server; Change says how:
	// "added", "removed" (it takes no new request and drains),
	// "replaced" (its settings changed: a new peer replaces the old,
	// which drains) or "reweighted". A replacement is two events of
	// Change "replaced", the old peer's as it starts draining and the new
	// one's as it is dialed; a name added back while its old peer drains
	// is two of Change "added", one at SetPeers and one when it is dialed,
	// once the old connection has closed. Reason says which.
	EventReconfigured
)

var kindNames = [...]string{
	EventPeer:            "peer",
	EventFailover:        "failover",
	EventBalancerRebuilt: "balancer_rebuilt",
	EventPolicy:          "policy",
	EventQueueAlarm:      "queue_alarm",
	EventSlotFilled:      "slot_filled",
	EventSlotReleased:    "slot_released",
	EventReconfigured:    "reconfigured",
}

// String returns the kind's name in snake case ("balancer_rebuilt").
func (k EventKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one observable happening in a Client or one of its peers.
type Event struct {
	Time   time.Time
	Server string // the configured name (PeerSpec.Name) of the server concerned
	Kind   EventKind

	Peer     *peer.Event     // EventPeer
	Failover *FailoverRecord // EventFailover
	Policy   *policy.Event   // EventPolicy

	Generation uint64        // EventBalancerRebuilt
	Raised     bool          // EventQueueAlarm: raised (true) or cleared
	Depth      int           // EventQueueAlarm: the queue's depth then
	Because    string        // EventSlotFilled: the server that went DOWN
	Age        time.Duration // EventSlotReleased: how long it had been in service
	Limit      int           // EventSlotReleased: Config.MaxConnections
	Change     string        // EventReconfigured: added, removed, replaced or reweighted

	// Reason explains the event to a person.
	Reason string
}

// Bus fans a Client's events out to subscribers. Its methods are safe
// for concurrent use. Publish calls each subscriber synchronously on the
// publishing goroutine (the Client's notifier, which delivers its events
// one at a time and in order): subscribers must be quick and must not
// block (hand off to a channel of your own for I/O).
type Bus struct{ b bus.Bus[Event] }

// NewBus returns an empty Bus.
func NewBus() *Bus { return &Bus{} }

// Subscribe registers fn and returns a function that unregisters it. fn
// gets the context the event was published with: a Client's is done once
// the Client is closing, and given to that Client's Close it has Close
// start the shutdown and return at once (waiting there would hold the
// Client's later events; wait on Done from a goroutine of your own).
func (b *Bus) Subscribe(fn func(ctx context.Context, e Event)) (cancel func()) {
	return b.b.Subscribe(fn)
}

// Publish delivers e to every subscriber, with ctx, and counts it.
func (b *Bus) Publish(ctx context.Context, e Event) { b.b.Publish(ctx, uint8(e.Kind), e) }

// Count returns how many events of kind k were published.
func (b *Bus) Count(k EventKind) uint64 { return b.b.Count(uint8(k)) }
