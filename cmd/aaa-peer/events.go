package main

import (
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/peer"
)

// eventLine is one line of --events; the format is in the package
// documentation (main.go).
type eventLine struct {
	Time       time.Time `json:"time"`
	Peer       string    `json:"peer"`
	Type       string    `json:"type"`
	Kind       string    `json:"kind"`
	From       string    `json:"from,omitempty"`
	To         string    `json:"to,omitempty"`
	Reason     string    `json:"reason"`
	Trigger    string    `json:"trigger,omitempty"`
	NumDWA     *int      `json:"num_dwa,omitempty"`
	Network    string    `json:"network,omitempty"`
	Addr       string    `json:"addr,omitempty"`
	DPR        bool      `json:"dpr,omitempty"`
	DPA        bool      `json:"dpa,omitempty"`
	Pending    int       `json:"pending,omitempty"`
	FromPeer   string    `json:"from_peer,omitempty"`
	ToPeer     string    `json:"to_peer,omitempty"`
	Moved      int       `json:"moved,omitempty"`
	EndToEnd   []uint32  `json:"end_to_end,omitempty"`
	Outcome    string    `json:"outcome,omitempty"`
	Generation uint64    `json:"generation,omitempty"`
	Raised     bool      `json:"raised,omitempty"`
	Depth      int       `json:"depth,omitempty"`
	Because    string    `json:"because,omitempty"`
}

// peerEventType is the type field of a peer event's line.
func peerEventType(k peer.EventKind) string {
	switch k {
	case peer.EventWatchdog:
		return "watchdog"
	case peer.EventConnUp, peer.EventConnDown, peer.EventOpenFailed, peer.EventIdle:
		return "connection"
	case peer.EventFailover, peer.EventFailback:
		return "failover"
	}
	return "error"
}

func peerLine(e peer.Event) eventLine {
	l := eventLine{Time: e.Time, Peer: e.Peer, Type: peerEventType(e.Kind), Kind: e.Kind.String(), Reason: e.Reason,
		Network: e.Network, Addr: e.Addr, DPR: e.DPR, DPA: e.DPA, Pending: e.Pending}
	if e.Kind == peer.EventWatchdog {
		n := e.NumDWA
		l.From, l.To, l.Trigger, l.NumDWA = e.From.String(), e.To.String(), e.Trigger.String(), &n
	}
	return l
}

func clientLine(e client.Event) eventLine {
	l := eventLine{Time: e.Time, Peer: e.Server, Kind: e.Kind.String(), Reason: e.Reason}
	switch e.Kind {
	case client.EventPeer:
		if e.Peer != nil {
			return peerLine(*e.Peer)
		}
	case client.EventFailover:
		l.Type = "failover"
		if r := e.Failover; r != nil {
			l.FromPeer, l.ToPeer, l.Moved, l.EndToEnd, l.Outcome = r.From, r.To, r.Moved, r.EndToEnd, r.Outcome.String()
		}
	case client.EventBalancerRebuilt:
		l.Type, l.Generation = "balancer", e.Generation
	case client.EventPolicy:
		l.Type = "policy"
		if p := e.Policy; p != nil {
			l.From, l.To = p.From.String(), p.To.String()
		}
	case client.EventQueueAlarm:
		l.Type, l.Raised, l.Depth = "queue", e.Raised, e.Depth
	case client.EventSlotFilled:
		l.Type, l.Because = "connection", e.Because
	case client.EventSlotReleased:
		l.Type = "connection"
	}
	return l
}

// peerLines and clientLines adapt a bus to the writer of --events.
func peerLines(b *peer.Bus) func(func(eventLine)) func() {
	return func(fn func(eventLine)) func() { return b.Subscribe(func(e peer.Event) { fn(peerLine(e)) }) }
}

func clientLines(b *client.Bus) func(func(eventLine)) func() {
	return func(fn func(eventLine)) func() { return b.Subscribe(func(e client.Event) { fn(clientLine(e)) }) }
}
