package call

import "github.com/aaatp/aaatp/radius"

// Carrier is the dispatching layer's view of one protocol peer (a server
// and its connections).
type Carrier interface {
	// InService reports whether the peer takes new requests now.
	InService() bool
	// Submit sends c without waiting: its answer completes it. A call
	// already complete is not sent and Submit returns nil.
	Submit(c *Call) error
	// SubmitAll is Submit for a batch, in order; the calls the peer
	// refused (sent there before) come back for another peer. On error
	// none was sent.
	SubmitAll(calls []*Call) (refused []*Call, err error)
	// Avoids reports whether c must not be sent to this peer now.
	Avoids(c *Call) bool
}

// Failover receives the calls that left a peer (Moved), in send order,
// with why; from is the protocol's peer value. It runs without the
// peer's locks: send each call elsewhere, park it, or fail it.
type Failover func(from any, calls []*Call, reason string)

// Diameter is what package peer registers at init for the dispatching
// layer, so that its public API carries none of it.
var Diameter struct {
	// New wraps an encoded Diameter request (see peer's Request), its Key
	// filled in; keepT keeps a T flag it carries on the first send.
	New func(req []byte, keepT bool) (*Call, error)
	// Carrier returns the dispatch view of a *peer.Peer.
	Carrier func(p any) Carrier
	// WithFailover sets f as the failover hook of *cfg, a *peer.Config.
	WithFailover func(cfg any, f Failover)
}

// RADIUS is what package radpeer registers at init, as Diameter is for
// package peer.
var RADIUS struct {
	// New wraps a RADIUS request, its Key filled in; the answer is
	// delivered as a *radpeer.Response (Wait's aux).
	New func(r *radius.Request) *Call
	// Carrier returns the dispatch view of a *radpeer.Peer.
	Carrier func(p any) Carrier
	// WithFailover sets f as the failover hook of *cfg, a
	// *radpeer.Config.
	WithFailover func(cfg any, f Failover)
}
