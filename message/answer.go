package message

import "github.com/aaatp/aaatp/wire"

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
func ErrorAnswer(req []byte, from Identity, result uint32, errMsg string) *Builder {
	b := NewAnswer(req)
	if sid, ok := wire.FindAVP(req, SessionID, 0); ok {
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
