package peer

import (
	"sync"
	"sync/atomic"
	"time"
)

// Event types, the "type" field of aaa-peer's --events lines.
const (
	EventWatchdog   = "watchdog"   // a watchdog state change: From and To are set
	EventConnection = "connection" // a transport connection opened, closed or failed to open
	EventFailover   = "failover"   // pending requests moved or failed because of a state change
	EventError      = "error"      // a protocol error: bad frame, unmatched answer, rejected CER...
)

// Event is one observable happening on a peer (W9).
type Event struct {
	Time   time.Time `json:"time"`
	Peer   string    `json:"peer"` // the remote Origin-Host once known, else its address
	Type   string    `json:"type"`
	From   string    `json:"from,omitempty"` // watchdog states, in capitals as in the RFC
	To     string    `json:"to,omitempty"`
	Reason string    `json:"reason"`

	// Failover events of the client layer (RFC 3539 3.4.2 [5]).
	FromPeer string   `json:"from_peer,omitempty"`
	ToPeer   string   `json:"to_peer,omitempty"`
	Moved    int      `json:"moved,omitempty"`
	EndToEnd []uint32 `json:"end_to_end,omitempty"`
}

// Bus fans events out to subscribers. Its methods are safe for concurrent
// use. Publish calls each subscriber synchronously on the publishing
// goroutine: subscribers must be quick and must not block (hand off to a
// channel of your own if you need to do I/O).
type Bus struct {
	mu     sync.Mutex             // serialises Subscribe and cancel
	subs   atomic.Pointer[[]*sub] // copy-on-write: Publish never locks
	counts [4]atomic.Uint64       // by type, see typeIndex
}

type sub struct{ fn func(Event) }

// NewBus returns an empty Bus.
func NewBus() *Bus { return &Bus{} }

// Subscribe registers fn and returns a function that unregisters it.
func (b *Bus) Subscribe(fn func(Event)) (cancel func()) {
	s := &sub{fn: fn}
	b.mu.Lock()
	defer b.mu.Unlock()
	var cur []*sub
	if p := b.subs.Load(); p != nil {
		cur = *p
	}
	next := append(append([]*sub(nil), cur...), s)
	b.subs.Store(&next)
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		cur := *b.subs.Load()
		next := make([]*sub, 0, len(cur))
		for _, x := range cur {
			if x != s {
				next = append(next, x)
			}
		}
		b.subs.Store(&next)
	}
}

// Publish delivers e to every subscriber and counts it.
func (b *Bus) Publish(e Event) {
	if i := typeIndex(e.Type); i >= 0 {
		b.counts[i].Add(1)
	}
	if p := b.subs.Load(); p != nil {
		for _, s := range *p {
			s.fn(e)
		}
	}
}

// Count returns how many events of the given type were published.
func (b *Bus) Count(typ string) uint64 {
	if i := typeIndex(typ); i >= 0 {
		return b.counts[i].Load()
	}
	return 0
}

func typeIndex(t string) int {
	switch t {
	case EventWatchdog:
		return 0
	case EventConnection:
		return 1
	case EventFailover:
		return 2
	case EventError:
		return 3
	}
	return -1
}
