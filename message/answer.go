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
// Result-Code, from's Origin-Host and Origin-Realm, and Error-Message
// when errMsg is not empty. A protocol error (3xxx) gets the E bit.
//
// Append anything else the refusal needs (a Failed-AVP group) to the
// Builder, then call Bytes. A zero field of from is left out: only a test
// that runs a handler without a Peer has no identity to sign with.
//
// A Session-Id too long to echo (more than MaxEchoedSessionID octets, which
// only a request near wire.MaxMessageLen can hold) is left out, so that the
// answer, with room for what a refusal appends, stays short enough for its
// header: Bytes never fails on an answer to a peer's request.
func ErrorAnswer(req []byte, from Identity, result uint32, errMsg string) *Builder {
	b := NewAnswer(req)
	if sid, ok := wire.FindAVP(req, SessionID, 0); ok && len(sid) <= MaxEchoedSessionID {
		b.Octets(SessionID, 0, true, sid)
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
	return b
}

// MaxEchoedSessionID is the longest Session-Id ErrorAnswer and
// SuccessAnswer echo: wire.MaxMessageLen less 64 KiB, the room an answer's
// other AVPs may take. Real Session-Ids are a few dozen octets.
const MaxEchoedSessionID = wire.MaxMessageLen - 64<<10

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
// Uint32Of finds none, and so is a Session-Id longer than
// MaxEchoedSessionID, as ErrorAnswer leaves it out. Like Bytes, it panics
// rather than write a wrong length if from's names make the answer longer
// than wire.MaxMessageLen.
func SuccessAnswer(req []byte, from Identity, echo ...AVPID) []byte {
	var (
		sid     []byte
		seenSID bool // the first Session-Id counts
		hasSID  bool // and is echoed
		valsA   [4]uint32
		seenA   [4]byte // 1 seen, 2 seen and 4 octets
		vals    = valsA[:]
		seen    = seenA[:]
		left    = 1 + len(echo)
	)
	if len(echo) > len(valsA) {
		vals, seen = make([]uint32, len(echo)), make([]byte, len(echo))
	}
	_ = wire.WalkAVPs(req, func(a wire.AVP) bool { // a malformed AVP ends the walk, as it ends FindAVP's
		if a.Code == SessionID && a.Vendor == 0 {
			if !seenSID {
				seenSID = true
				sid, hasSID = a.Data, len(a.Data) <= MaxEchoedSessionID
				left--
			}
			return left > 0
		}
		for i, id := range echo {
			if a.Code == id.Code && a.Vendor == id.Vendor && seen[i] == 0 {
				seen[i] = 1
				left--
				if len(a.Data) == 4 {
					vals[i], seen[i] = binary.BigEndian.Uint32(a.Data), 2
				}
			}
		}
		return left > 0
	})
	n := wire.HeaderLen + 12
	if hasSID {
		n += avpLen(0, len(sid))
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
	if hasSID {
		b = pad(append(appendHeader(b, SessionID, 0, true, len(sid)), sid...))
	}
	b = binary.BigEndian.AppendUint32(appendHeader(b, ResultCode, 0, true, 4), Success)
	if from.Host != "" {
		b = pad(append(appendHeader(b, OriginHost, 0, true, len(from.Host)), from.Host...))
	}
	if from.Realm != "" {
		b = pad(append(appendHeader(b, OriginRealm, 0, true, len(from.Realm)), from.Realm...))
	}
	for i, id := range echo {
		if seen[i] == 2 {
			b = binary.BigEndian.AppendUint32(appendHeader(b, id.Code, id.Vendor, true, 4), vals[i])
		}
	}
	return b
}
