package client

import (
	"time"

	"github.com/aaatp/aaatp/peer"
)

// EventLine is the JSON form of a Client's or a peer's event, one object a
// line in an event log (aaa-peer's --events): the same fields for both,
// each kind filling its own and leaving the others out. Decoding a line
// into an EventLine gives them back.
type EventLine struct {
	Time time.Time `json:"time"`
	// Peer is the peer's remote Origin-Host (else its address); for the
	// Client's own events, the server's configured name.
	Peer string `json:"peer"`
	// Type groups the kinds: watchdog, connection, failover, error,
	// balancer, policy, queue.
	Type   string `json:"type"`
	Kind   string `json:"kind"` // EventKind's or peer.EventKind's String
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"` // watchdog and policy states
	Reason string `json:"reason"`

	Trigger    string   `json:"trigger,omitempty"`     // watchdog
	NumDWA     *int     `json:"num_dwa,omitempty"`     // watchdog: set for every step
	Network    string   `json:"network,omitempty"`     // connection up
	Addr       string   `json:"addr,omitempty"`        // connection up
	DPR        bool     `json:"dpr,omitempty"`         // connection down
	DPA        bool     `json:"dpa,omitempty"`         // connection down
	Pending    int      `json:"pending,omitempty"`     // a peer's failover
	ResultCode uint32   `json:"result_code,omitempty"` // open failed (the CEA's), late refusal
	FromPeer   string   `json:"from_peer,omitempty"`   // failover record
	ToPeer     string   `json:"to_peer,omitempty"`
	Moved      int      `json:"moved,omitempty"`
	EndToEnd   []uint32 `json:"end_to_end,omitempty"`
	Outcome    string   `json:"outcome,omitempty"`
	Generation uint64   `json:"generation,omitempty"` // balancer rebuilt
	Raised     bool     `json:"raised,omitempty"`     // queue alarm
	Depth      int      `json:"depth,omitempty"`
	Because    string   `json:"because,omitempty"` // slot filled
}

// Line returns e's JSON form; a peer's event (EventPeer) has PeerLine's.
func (e Event) Line() EventLine {
	l := EventLine{Time: e.Time, Peer: e.Server, Kind: e.Kind.String(), Reason: e.Reason}
	switch e.Kind {
	case EventPeer:
		if e.Peer != nil {
			return PeerLine(*e.Peer)
		}
	case EventFailover:
		l.Type = "failover"
		if r := e.Failover; r != nil {
			l.FromPeer, l.ToPeer, l.Moved, l.EndToEnd, l.Outcome = r.From, r.To, r.Moved, r.EndToEnd, r.Outcome.String()
		}
	case EventBalancerRebuilt:
		l.Type, l.Generation = "balancer", e.Generation
	case EventPolicy:
		l.Type = "policy"
		if p := e.Policy; p != nil {
			l.From, l.To = p.From.String(), p.To.String()
		}
	case EventQueueAlarm:
		l.Type, l.Raised, l.Depth = "queue", e.Raised, e.Depth
	case EventSlotFilled:
		l.Type, l.Because = "connection", e.Because
	case EventSlotReleased:
		l.Type = "connection"
	}
	return l
}

// PeerLine returns the JSON form of a peer's event.
func PeerLine(e peer.Event) EventLine {
	l := EventLine{Time: e.Time, Peer: e.Peer, Type: "error", Kind: e.Kind.String(), Reason: e.Reason,
		Network: e.Network, Addr: e.Addr, DPR: e.DPR, DPA: e.DPA, Pending: e.Pending, ResultCode: e.ResultCode}
	switch e.Kind {
	case peer.EventWatchdog:
		n := e.NumDWA
		l.Type, l.From, l.To, l.Trigger, l.NumDWA = "watchdog", e.From.String(), e.To.String(), e.Trigger.String(), &n
	case peer.EventConnUp, peer.EventConnDown, peer.EventOpenFailed, peer.EventIdle, peer.EventDisconnecting:
		l.Type = "connection"
	case peer.EventFailover, peer.EventFailback, peer.EventLateRefusal:
		l.Type = "failover"
	}
	return l
}
