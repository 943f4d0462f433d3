package peer

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// Errors a Request can return. Match them with errors.Is.
var (
	// ErrNotInService: the watchdog is not OKAY (SUSPECT, DOWN, REOPEN or
	// not yet connected); send elsewhere or wait.
	ErrNotInService = errors.New("peer not in service")
	// ErrConnectionLost: the connection closed before the answer arrived.
	ErrConnectionLost = errors.New("connection lost before the answer")
	// ErrTimeout: no answer before the request's deadline.
	ErrTimeout = call.ErrTimeout
	// ErrClosed: the Peer was closed.
	ErrClosed = errors.New("peer closed")
	// ErrAlreadySent: the request was sent on this peer's connection
	// before; it is never sent twice on one connection (RFC 3539 2.10).
	ErrAlreadySent = call.ErrAlreadySent
	// ErrDisconnecting: the peer is closing its connection gracefully and
	// takes no new request.
	ErrDisconnecting = errors.New("peer disconnecting")
)

// NotInServiceError says which state refused the request.
type NotInServiceError struct {
	Peer  string
	State watchdog.State
}

func (e *NotInServiceError) Error() string {
	return fmt.Sprintf("peer %s: not in service (watchdog %s)", e.Peer, e.State)
}

// Is makes errors.Is(err, ErrNotInService) true.
func (e *NotInServiceError) Is(target error) bool { return target == ErrNotInService }

// dcall is a Diameter request: the shared lifecycle (call.Call) and what
// Diameter adds to each send. It may move between connections (a
// failover); its End-to-End id never changes, it is never sent twice on
// one connection, and every send after the first carries the T flag (RFC
// 6733 3, 5.5.4) unless the previous peer answered it with an error.
type dcall struct {
	call.Call
	// Under the Call's lock:
	raw          []byte // bytes of the latest send; each resend works on a copy
	hbh          uint32 // Hop-by-Hop id on the connection it boarded last
	keepT        bool   // an agent's forwarded request keeps its T flag
	afterRefusal bool   // the latest send followed a refusal (for testhook.Queued)
	seq          uint64 // send order on its connection (under that conn's mu)

	// via is the connection the caller may read for the answer (it wrote
	// the request there inline), nil when none; stop says its wait ended
	// or it completed (see baton).
	via  atomic.Pointer[conn]
	stop atomic.Bool
}

// newCall wraps an encoded request. It sets the R flag and, when the
// request carries none, an End-to-End id from the process's generator.
// The call takes req over. withKey fills in the call's routing key
// (User-Name, Session-Id, Destination-Host) for a dispatcher.
func newCall(req []byte, withKey bool) (*dcall, error) {
	if len(req) < wire.HeaderLen || int(wire.Length(req)) != len(req) {
		return nil, fmt.Errorf("request of %d bytes is not one whole Diameter message", len(req))
	}
	wire.SetFlags(req, wire.Flags(req)|wire.FlagRequest)
	if wire.EndToEnd(req) == 0 {
		wire.SetEndToEnd(req, e2e.Next())
	}
	d := &dcall{raw: req}
	d.Init()
	d.Ref, d.Proto = wire.EndToEnd(req), d
	if withKey {
		d.Key = routingKey(req)
		d.Accounting = throttle.ClassOf(wire.AppID(req), wire.CommandCode(req)) == throttle.Accounting
	}
	return d, nil
}

// routingKey reads a request's User-Name, Session-Id and Destination-Host
// (the first of each, as FindAVP finds them) in one walk, which ends once
// all three are found; one walk measured faster than three FindAVPs
// (49.6 against 88.8 ns on the harness's ACR).
func routingKey(req []byte) call.Key {
	var k call.Key
	var dest []byte
	var seen uint8
	_ = wire.WalkAVPs(req, func(a wire.AVP) bool { // a malformed AVP ends the walk, as it ends FindAVP's
		if a.Vendor != 0 {
			return true
		}
		var bit uint8
		switch a.Code {
		case message.UserName:
			bit = 1
		case message.SessionID:
			bit = 2
		case message.DestinationHost:
			bit = 4
		default:
			return true
		}
		if seen&bit == 0 {
			seen |= bit
			switch bit {
			case 1:
				k.NAI = a.Data
			case 2:
				k.SessionID = a.Data
			default:
				dest = a.Data
			}
		}
		return seen != 7
	})
	if seen&4 != 0 {
		k.Dest = string(dest)
	}
	return k
}

// Lifecycle returns the Call d embeds (call.Payload).
func (d *dcall) Lifecycle() *call.Call { return &d.Call }

// dcallOf returns the Diameter record of a call, nil when it is another
// protocol's.
func dcallOf(c *call.Call) *dcall {
	d, _ := c.Proto.(*dcall)
	return d
}

// ErrOtherProtocol: a call of another protocol was submitted to a peer.
var ErrOtherProtocol = errors.New("request of another protocol")

// NewCall makes a call of an encoded Diameter request for a dispatcher
// (package client), its routing key filled in; the call takes req over.
// keepT keeps a T flag req carries on its first send (an agent forwarding
// a retransmitted request); otherwise the first send clears it.
func NewCall(req []byte, keepT bool) (*call.Call, error) {
	d, err := newCall(req, true)
	if err != nil {
		return nil, err
	}
	d.keepT = keepT
	return &d.Call, nil
}

// board makes d in flight on cn: the only way a request reaches a
// connection. cn.mu is held. It returns the bytes to queue and the
// Hop-by-Hop id, or an error without changing anything (see
// call.BoardLocked).
//
// The first send writes the Hop-by-Hop id into the caller's bytes and
// clears the T flag unless d keeps it (an agent forwarding a T-flagged
// request); every later send works on a copy, because the writer of a
// previous connection may still be reading the old bytes, and sets the T
// flag unless the last connection refused it with an error answer (a
// premature failover: that request was not lost, RFC 6733 3).
func (d *dcall) board(cn *conn) (raw []byte, id uint32, b call.Boarding, err error) {
	d.Lock()
	defer d.Unlock()
	b, err = d.BoardLocked(&cn.h)
	if err != nil {
		return nil, 0, b, err
	}
	raw = d.raw
	switch {
	case b.Sends == 0 && d.keepT:
	case b.Sends == 0 || b.AfterRefusal:
		if b.Sends > 0 {
			raw = slices.Clone(raw)
		}
		wire.SetFlags(raw, wire.Flags(raw)&^wire.FlagRetransmit)
	default:
		raw = slices.Clone(raw)
		wire.SetRetransmit(raw)
	}
	id = cn.hbh.Next()
	wire.SetHopByHop(raw, id)
	d.afterRefusal = b.Sends > 0 && b.AfterRefusal
	d.raw, d.hbh = raw, id
	return raw, id, b, nil
}

// request returns the request bytes as last sent. Read only.
func (d *dcall) request() []byte {
	d.Lock()
	defer d.Unlock()
	return d.raw
}

// retireCall takes a call that completed without its answer out of cn's
// pending table (cn.h's retire).
func (cn *conn) retireCall(c *call.Call, timedOut bool) {
	d := dcallOf(c)
	cn.retire(d, d.hbh) // hbh: written by the board that made cn the owner, before Finish
	if timedOut {
		cn.p.stats.timedOut.Add(1)
	}
}

// Submit sends c, a call of NewCall, without waiting: its answer
// completes it (call.Carrier). A call already complete is not sent.
func (p *Peer) Submit(c *call.Call) error {
	d := dcallOf(c)
	if d == nil {
		return fmt.Errorf("peer %s: %w", p.Name(), ErrOtherProtocol)
	}
	return p.submit(d)
}

// SubmitAll is Submit for a batch, in order (call.Carrier): the calls
// sent on this peer's connection before come back in refused; on error
// none was sent.
func (p *Peer) SubmitAll(calls []*call.Call) ([]*call.Call, error) {
	for _, c := range calls {
		if dcallOf(c) == nil {
			return nil, fmt.Errorf("peer %s: %w", p.Name(), ErrOtherProtocol)
		}
	}
	return p.submitAll(calls)
}

// Avoids reports whether c must not be sent to this peer now
// (call.Carrier): it was sent on the peer's current connection, or the
// peer refused it.
func (p *Peer) Avoids(c *call.Call) bool {
	var cn *call.Conn
	if cur := p.cur.Load(); cur != nil {
		cn = &cur.h
	}
	return c.Avoids(cn, p)
}
