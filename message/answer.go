package message

import (
	"encoding/binary"
	"fmt"

	"github.com/aaatp/aaatp/wire"
)

// Identity is the Origin-Host and Origin-Realm a node signs its messages
// with.
type Identity struct {
	Host  string
	Realm string
}

// ErrorAnswer starts the answer that refuses req with result: the one
// builder of error answers, so that every refusal has the same shape,
// whoever sends it. The answer has req's command, application, Hop-by-Hop
// and End-to-End ids and P bit (R and T cleared); then, in this order,
// req's Session-Id when it has one (first, as RFC 6733 8.8 wants),
// Result-Code, from's Origin-Host and Origin-Realm, Error-Message when
// errMsg is not empty, and a copy of every Proxy-Info AVP of req, in the
// order req has them (RFC 6733 6.2: a proxy or relay in front of this node
// keeps its state for the request there, and needs it back to route the
// answer). A protocol error (3xxx) gets the E bit.
//
// Append anything else the refusal needs (a Failed-AVP group) to the
// Builder, then call Bytes. A zero field of from is left out: only a test
// that runs a handler without a Peer has no identity to sign with.
//
// What is echoed of req is bounded, so that the answer, with room for what
// a refusal appends, stays short enough for its header: Bytes never fails
// on an answer to a peer's request. A Session-Id longer than
// MaxEchoedSessionID octets is left out, and so are the Proxy-Info AVPs
// when they and the Session-Id echoed take more than that together; only
// a request near wire.MaxMessageLen can hold that much.
func ErrorAnswer(req []byte, from Identity, result uint32, errMsg string) *Builder {
	var e echoes
	_ = wire.WalkAVPs(req, func(a wire.AVP) bool { // a malformed AVP ends the walk, as it ends FindAVP's
		e.visit(a)
		return true
	})
	e.settle()
	b := NewAnswer(req)
	if e.hasSID {
		b.Octets(SessionID, 0, true, e.sid)
	}
	b.ResultCode(result)
	if from.Host != "" {
		b.String(OriginHost, 0, true, from.Host)
	}
	if from.Realm != "" {
		b.String(OriginRealm, 0, true, from.Realm)
	}
	if errMsg != "" {
		b.String(ErrorMessage, 0, false, errMsg)
	}
	for _, pi := range e.proxy {
		b.Octets(ProxyInfo, 0, true, pi)
	}
	return b
}

// MaxEchoedSessionID is the most ErrorAnswer and SuccessAnswer echo of a
// request: a Session-Id of at most this many octets, and Proxy-Info AVPs
// whose size, with that of the Session-Id echoed, is at most this many.
// It is wire.MaxMessageLen less 64 KiB, the room an answer's other AVPs
// may take. Real Session-Ids are a few dozen octets, real Proxy-Info AVPs
// a few hundred.
const MaxEchoedSessionID = wire.MaxMessageLen - 64<<10

// echoes is what an answer copies of its request: the first Session-Id,
// and every Proxy-Info, in order.
type echoes struct {
	sid             []byte
	seenSID, hasSID bool     // the first Session-Id counts, and is echoed
	proxy           [][]byte // allocated only for a request that has one
	proxyLen        int      // octets of the Proxy-Info AVPs, headers and padding included
}

// visit reads one top-level AVP of the request.
func (e *echoes) visit(a wire.AVP) {
	if a.Vendor != 0 {
		return
	}
	switch a.Code {
	case SessionID:
		if !e.seenSID {
			e.seenSID = true
			e.sid, e.hasSID = a.Data, len(a.Data) <= MaxEchoedSessionID
		}
	case ProxyInfo:
		e.proxy = append(e.proxy, a.Data)
		e.proxyLen += avpLen(0, len(a.Data))
	}
}

// settle drops the Proxy-Info AVPs when they do not fit with the
// Session-Id within MaxEchoedSessionID: all or none, a chain of proxies
// cut short would route the answer wrong.
func (e *echoes) settle() {
	n := e.proxyLen
	if e.hasSID {
		n += len(e.sid)
	}
	if n > MaxEchoedSessionID {
		e.proxy, e.proxyLen = nil, 0
	}
}

// AVPID names an AVP: its code and vendor (0 for the base protocol's).
type AVPID struct{ Code, Vendor uint32 }

// SuccessAnswer is the DIAMETER_SUCCESS answer to req, the fast path of a
// server that answers every request: the bytes
//
//	ErrorAnswer(req, from, Success, "") then, for each of echo in order,
//	Uint32(id.Code, id.Vendor, true, v) where Uint32Of(req, id.Code, id.Vendor) has v
//
// would produce, made in one walk over req and one allocation of the
// answer's exact size. The first AVP of a code counts, as with
// wire.FindAVP; an echoed AVP that does not hold 4 octets is left out, as
// Uint32Of finds none, and the Session-Id and Proxy-Info AVPs are echoed
// or left out as ErrorAnswer echoes them. Like Bytes, it panics
// rather than write a wrong length if from's names make the answer longer
// than wire.MaxMessageLen.
func SuccessAnswer(req []byte, from Identity, echo ...AVPID) []byte {
	var (
		e     echoes
		valsA [4]uint32
		seenA [4]byte // 1 seen, 2 seen and 4 octets
		vals  = valsA[:]
		seen  = seenA[:]
	)
	if len(echo) > len(valsA) {
		vals, seen = make([]uint32, len(echo)), make([]byte, len(echo))
	}
	// The whole request is walked: a Proxy-Info may come last. A malformed
	// AVP ends the walk, as it ends FindAVP's.
	_ = wire.WalkAVPs(req, func(a wire.AVP) bool {
		e.visit(a)
		if a.Code == SessionID && a.Vendor == 0 {
			return true
		}
		for i, id := range echo {
			if a.Code == id.Code && a.Vendor == id.Vendor && seen[i] == 0 {
				seen[i] = 1
				if len(a.Data) == 4 {
					vals[i], seen[i] = binary.BigEndian.Uint32(a.Data), 2
				}
			}
		}
		return true
	})
	e.settle()
	n := wire.HeaderLen + 12 + e.proxyLen
	if e.hasSID {
		n += avpLen(0, len(e.sid))
	}
	if from.Host != "" {
		n += avpLen(0, len(from.Host))
	}
	if from.Realm != "" {
		n += avpLen(0, len(from.Realm))
	}
	for i, id := range echo {
		if seen[i] == 2 {
			n += avpLen(id.Vendor, 4)
		}
	}
	if n > wire.MaxMessageLen {
		panic(fmt.Errorf("%w: %d octets, at most %d", ErrTooLong, n, wire.MaxMessageLen))
	}
	b := make([]byte, 0, n)
	b = append(b, wire.Version, byte(n>>16), byte(n>>8), byte(n), wire.Flags(req)&wire.FlagProxiable)
	b = append(b, req[5:8]...) // the command code
	b = binary.BigEndian.AppendUint32(b, wire.AppID(req))
	b = binary.BigEndian.AppendUint32(b, wire.HopByHop(req))
	b = binary.BigEndian.AppendUint32(b, wire.EndToEnd(req))
	if e.hasSID {
		b = pad(append(appendHeader(b, SessionID, 0, true, len(e.sid)), e.sid...))
	}
	b = binary.BigEndian.AppendUint32(appendHeader(b, ResultCode, 0, true, 4), Success)
	if from.Host != "" {
		b = pad(append(appendHeader(b, OriginHost, 0, true, len(from.Host)), from.Host...))
	}
	if from.Realm != "" {
		b = pad(append(appendHeader(b, OriginRealm, 0, true, len(from.Realm)), from.Realm...))
	}
	for _, pi := range e.proxy {
		b = pad(append(appendHeader(b, ProxyInfo, 0, true, len(pi)), pi...))
	}
	for i, id := range echo {
		if seen[i] == 2 {
			b = binary.BigEndian.AppendUint32(appendHeader(b, id.Code, id.Vendor, true, 4), vals[i])
		}
	}
	return b
}
