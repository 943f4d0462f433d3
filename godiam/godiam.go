// Package godiam lets code written with github.com/fiorix/go-diameter
// (its diam.Message and dictionaries) use aaatp: send a *diam.Message
// through a client.Client or a peer.Peer and get a *diam.Message back, and
// answer requests in a peer.Server with a handler written in terms of
// *diam.Message.
//
// Every message that comes from the network (an answer to Send, a request
// to a Handler) is decoded by wire.Decode, not by go-diameter's own
// reader: its header and every AVP's bounds are checked before go-diameter
// sees the bytes, go-diameter's panics on malformed AVPs are recovered as
// errors, nothing is allocated beyond the message's real size, and the
// decoded message owns its bytes (go-diameter's reader hands out AVP
// values that alias a buffer it reuses for messages up to 1024 bytes).
// A malformed request never reaches a Handler: it is answered with an
// error answer.
//
// A Codec's methods are safe for concurrent use; go-diameter's
// dictionaries are only read.
package godiam

import (
	"context"
	"errors"
	"fmt"

	"github.com/fiorix/go-diameter/v4/diam"
	"github.com/fiorix/go-diameter/v4/diam/dict"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// Codec encodes and decodes messages with a go-diameter dictionary. The
// zero value uses dict.Default (the base protocol, accounting and credit
// control); load your own with dict.NewParser or dict.Default.Load.
type Codec struct {
	Dict *dict.Parser

	// KeepEndToEnd makes Send send a request with the End-to-End
	// Identifier in its header: a relay or proxy forwarding another
	// node's request must keep its id (RFC 6733 3: no agent changes it),
	// and so must a caller resending a request it sent before (with the T
	// flag) for the server to recognise the duplicate. A zero id still
	// gets a fresh one. Off by default: Send then gives every request a
	// fresh id, whatever its header says (see Send).
	KeepEndToEnd bool
}

func (c Codec) dict() *dict.Parser {
	if c.Dict == nil {
		return dict.Default
	}
	return c.Dict
}

// Encode returns the wire bytes of m. The header's Message-Length is
// computed from the AVPs, whatever m.Header says.
func (c Codec) Encode(m *diam.Message) (b []byte, err error) {
	if m == nil || m.Header == nil {
		return nil, errors.New("godiam: nil message")
	}
	defer func() {
		if r := recover(); r != nil { // an AVP with a nil or odd value
			b, err = nil, fmt.Errorf("godiam: encoding %s: %v", name(m), r)
		}
	}()
	b, err = m.Serialize()
	if err != nil {
		return nil, fmt.Errorf("godiam: encoding %s: %w", name(m), err)
	}
	if len(b) > wire.MaxMessageLen {
		return nil, fmt.Errorf("godiam: encoding %s: %d bytes, more than a Diameter message carries", name(m), len(b))
	}
	b[1], b[2], b[3] = byte(len(b)>>16), byte(len(b)>>8), byte(len(b))
	return b, nil
}

// Decode decodes one complete message with wire.Decode. Its errors match
// wire.ErrBadFrame.
func (c Codec) Decode(b []byte) (*diam.Message, error) {
	return wire.Decode(b, c.dict())
}

// Sender sends a request and returns its answer: *client.Client is one;
// SenderFunc((*peer.Peer).Request) makes a single peer one.
type Sender interface {
	Send(ctx context.Context, req []byte) ([]byte, error)
}

// SenderFunc adapts a function to Sender.
type SenderFunc func(ctx context.Context, req []byte) ([]byte, error)

// Send calls f.
func (f SenderFunc) Send(ctx context.Context, req []byte) ([]byte, error) { return f(ctx, req) }

// Send encodes req, sends it through s and decodes the answer. The error
// is s's (a deadline, no peer in service...), or an encoding or decoding
// error; an answer that decodes is returned whatever its Result-Code.
//
// The request is sent with a fresh End-to-End Identifier from aaatp's
// process-wide generator (peer.NextEndToEnd, the one a Peer uses for a
// request that carries none), not the one in req.Header: go-diameter's
// NewRequest draws that one at random, and random ids repeat within the 4
// minutes RFC 6733 3 asks them to stay unique, so that a server which
// detects duplicates by Origin-Host and End-to-End id would answer a new
// request with an earlier one's answer. req is not changed (Send only
// reads it); the id sent is the answer's Header.EndToEndID, as a Peer
// matches an answer to its request only when they carry the same id. To
// know the id before sending, or to keep one (a relay, a
// retransmission), set Codec.KeepEndToEnd and req.Header.EndToEndID, for
// example to peer.NextEndToEnd().
func (c Codec) Send(ctx context.Context, s Sender, req *diam.Message) (*diam.Message, error) {
	b, err := c.Encode(req)
	if err != nil {
		return nil, err
	}
	if !c.KeepEndToEnd || wire.EndToEnd(b) == 0 {
		wire.SetEndToEnd(b, peer.NextEndToEnd())
	}
	ans, err := s.Send(ctx, b)
	if err != nil {
		return nil, err
	}
	m, err := c.Decode(ans)
	if err != nil {
		return nil, fmt.Errorf("godiam: answer to %s: %w", name(req), err)
	}
	return m, nil
}

// Handler answers one request in terms of go-diameter messages; build the
// answer with req.Answer(code) and add Origin-Host and Origin-Realm
// (p.LocalIdentity() has them) and whatever else it needs. An answer
// whose Result-Code is a protocol error (3000 to 3999, such as
// diam.TooBusy) is sent with the E bit (RFC 6733 3, 7.1.3), which
// req.Answer does not set: the adapter sets it, so that a client (aaatp's
// among them) reads DIAMETER_TOO_BUSY or DIAMETER_UNABLE_TO_DELIVER as a
// refusal and tries another peer. The adapter never clears an E bit the
// Handler set. Returning nil sends no answer. It runs as a peer.Handler
// does: on its own goroutine, ctx cancelled when the connection closes.
// A panic in it (a go-diameter accessor on unexpected data, a bug one odd
// request reaches) is recovered by the Peer that runs it, as any
// Handler's: the request is answered DIAMETER_UNABLE_TO_COMPLY, the panic
// logged with its stack and counted (peer.Stats.HandlerPanics), and the
// connection kept.
type Handler func(ctx context.Context, p *peer.Peer, req *diam.Message) *diam.Message

// Handler returns h as a peer.Handler. A request that does not decode is
// answered for h: DIAMETER_COMMAND_UNSUPPORTED when the dictionary does not
// know its command, DIAMETER_INVALID_AVP_LENGTH when an AVP's length does
// not fit its type, DIAMETER_INVALID_AVP_VALUE otherwise, the last two
// with the offending AVP in a Failed-AVP (RFC 6733 7.1.5); an answer of h
// that does not encode becomes DIAMETER_UNABLE_TO_COMPLY. An answer of h
// with a protocol error (a top-level Result-Code of 3000 to 3999) gets the
// E bit.
func (c Codec) Handler(h Handler) peer.Handler {
	d := c.dict()
	return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		if len(req) < wire.HeaderLen {
			return nil // not a message: nothing to answer (a Peer never delivers one)
		}
		if _, err := d.FindCommand(wire.AppID(req), wire.CommandCode(req)); err != nil {
			return message.ErrorAnswer(req, identity(p), message.CommandUnsupported, "command not in the dictionary").Bytes()
		}
		m, err := c.Decode(req)
		if err != nil {
			return refusal(req, identity(p), err)
		}
		ans := h(ctx, p, m)
		if ans == nil {
			return nil
		}
		b, err := c.Encode(ans)
		if err != nil {
			return message.ErrorAnswer(req, identity(p), message.UnableToComply, "the answer could not be encoded").Bytes()
		}
		if rc, ok := message.ResultCodeOf(b); ok && rc >= 3000 && rc < 4000 {
			wire.SetFlags(b, wire.Flags(b)|wire.FlagError) // as message.Builder.ResultCode does
		}
		return b
	}
}

// Send is Codec{}.Send: dict.Default's messages.
func Send(ctx context.Context, s Sender, req *diam.Message) (*diam.Message, error) {
	return Codec{}.Send(ctx, s, req)
}

// NewHandler is Codec{}.Handler: dict.Default's messages.
func NewHandler(h Handler) peer.Handler { return Codec{}.Handler(h) }

// maxFailedData bounds the data of the AVP a Failed-AVP copies from a
// request.
const maxFailedData = 256

// refusal answers req, which Decode refused with err: an AVP whose length
// does not fit gets DIAMETER_INVALID_AVP_LENGTH, anything else
// DIAMETER_INVALID_AVP_VALUE, with the offending AVP in a Failed-AVP
// when Decode named one (RFC 6733 7.1.5).
func refusal(req []byte, from message.Identity, err error) []byte {
	b := message.ErrorAnswer(req, from, message.InvalidAVPValue, "malformed request")
	if errors.Is(err, wire.ErrAVPLength) {
		b = message.ErrorAnswer(req, from, message.InvalidAVPLength, "an AVP's length does not fit its value")
	}
	var fe *wire.FrameError
	if errors.As(err, &fe) && fe.Failed != nil {
		f := fe.Failed
		b.Group(message.FailedAVP, 0, true).Octets(f.Code, f.Vendor, true, f.Data[:min(len(f.Data), maxFailedData)]).End()
	}
	return b.Bytes()
}

func identity(p *peer.Peer) message.Identity {
	if p == nil {
		return message.Identity{}
	}
	return p.LocalIdentity()
}

func name(m *diam.Message) string {
	if m.Header == nil {
		return "message"
	}
	return fmt.Sprintf("command %d (application %d)", m.Header.CommandCode, m.Header.ApplicationID)
}
