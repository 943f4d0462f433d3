package radius

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"sync"

	lradius "layeh.com/radius"
)

// ErrAuthenticator is matched by every failed check of a Request
// Authenticator, a Response Authenticator or a Message-Authenticator.
// Over TCP and TLS the connection must then be closed (RFC 6613 2.6.4).
var ErrAuthenticator = errors.New("radius: authenticator check failed")

// ErrNoMessageAuthenticator is matched when a packet that the caller
// requires to carry a Message-Authenticator has none (BlastRADIUS:
// see package radpeer). Drop the packet; the connection may stay up.
var ErrNoMessageAuthenticator = errors.New("radius: Message-Authenticator required but absent")

// maAttrLen is the length of a Message-Authenticator attribute.
const maAttrLen = 2 + md5.Size

// randomAuthenticator reports whether code's Request Authenticator is a
// random nonce (RFC 2865 3, RFC 5997 3) rather than an MD5 over the
// packet (RFC 2866 3, RFC 5176 3.5).
func randomAuthenticator(code lradius.Code) bool {
	return code == lradius.CodeAccessRequest || code == lradius.CodeStatusServer
}

// needsMessageAuthenticator reports whether code must carry a
// Message-Authenticator: Access-Request (RFC 3579 3.2, BlastRADIUS) and
// Status-Server (RFC 5997 3).
func needsMessageAuthenticator(code lradius.Code) bool { return randomAuthenticator(code) }

// findMA returns the offset of the value of the first
// Message-Authenticator in the validated packet b, or -1.
func findMA(b []byte) (int, error) {
	a := b[HeaderLen:]
	for off := 0; off+2 <= len(a); off += int(a[off+1]) {
		if a[off+1] < 2 {
			return -1, badFrame("attribute length %d", a[off+1])
		}
		if lradius.Type(a[off]) == AttrMessageAuthenticator {
			if a[off+1] != maAttrLen {
				return -1, fmt.Errorf("%w: Message-Authenticator of length %d", ErrAuthenticator, a[off+1])
			}
			return HeaderLen + off + 2, nil
		}
	}
	return -1, nil
}

// messageAuthenticator computes HMAC-MD5 over b with auth in the
// Authenticator field and zeros in the Message-Authenticator value at ma.
func messageAuthenticator(b []byte, ma int, auth *[AuthenticatorLen]byte, secret []byte) [md5.Size]byte {
	h := hmac.New(md5.New, secret)
	h.Write(b[:4])
	h.Write(auth[:])
	h.Write(b[HeaderLen:ma])
	var zero [md5.Size]byte
	h.Write(zero[:])
	h.Write(b[ma+md5.Size:])
	var out [md5.Size]byte
	h.Sum(out[:0])
	return out
}

// packetHash is MD5(Code+Identifier+Length+auth+Attributes+secret), the
// Response Authenticator (auth = the request's) and the Request
// Authenticator of accounting and CoA (auth = zeros).
func packetHash(b []byte, auth *[AuthenticatorLen]byte, secret []byte) [md5.Size]byte {
	// One md5.Sum over a pooled copy: md5.New would allocate a digest
	// for every packet.
	bp := scratch.Get().(*[]byte)
	buf := append((*bp)[:0], b[:4]...)
	buf = append(buf, auth[:]...)
	buf = append(buf, b[HeaderLen:]...)
	buf = append(buf, secret...)
	out := md5.Sum(buf)
	*bp = buf
	scratch.Put(bp)
	return out
}

// scratch holds buffers for packetHash.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, MaxLength+64); return &b }}

// sign fills in b's Message-Authenticator (if it has one) and its
// Authenticator. auth is the value the Authenticator field holds while
// the Message-Authenticator is computed (RFC 3579 3.2, RFC 5176 3.3): the
// packet's own random authenticator, zeros for accounting and CoA
// requests, the request's authenticator for a response. hashed says
// whether the Authenticator is then the packet's MD5.
func sign(b []byte, auth [AuthenticatorLen]byte, hashed bool, secret []byte) error {
	ma, err := findMA(b)
	if err != nil {
		return err
	}
	if ma >= 0 {
		v := messageAuthenticator(b, ma, &auth, secret)
		copy(b[ma:], v[:])
	}
	if hashed {
		v := packetHash(b, &auth, secret)
		copy(b[4:HeaderLen], v[:])
	} else {
		copy(b[4:HeaderLen], auth[:])
	}
	return nil
}

// checkMA verifies the Message-Authenticator of b, if any, computed with
// auth in the Authenticator field; required makes its absence an error.
func checkMA(b []byte, auth [AuthenticatorLen]byte, required bool, secret []byte) error {
	ma, err := findMA(b)
	if err != nil {
		return err
	}
	if ma < 0 {
		if required {
			return fmt.Errorf("%s: %w", Code(b), ErrNoMessageAuthenticator)
		}
		return nil
	}
	want := messageAuthenticator(b, ma, &auth, secret)
	if subtle.ConstantTimeCompare(want[:], b[ma:ma+md5.Size]) != 1 {
		return fmt.Errorf("%w: Message-Authenticator of %s (ID %d)", ErrAuthenticator, Code(b), Identifier(b))
	}
	return nil
}

// VerifyRequest checks a request received by a server: b must be a
// validated packet. The Request Authenticator of Accounting-Request,
// CoA-Request and Disconnect-Request is checked (RFC 2866 3, RFC 5176
// 3.5), and the Message-Authenticator of any request that carries one.
// Status-Server must carry one (RFC 5997 3); requireMA requires one on
// Access-Request too (BlastRADIUS).
func VerifyRequest(b, secret []byte, requireMA bool) error {
	code := Code(b)
	if !IsRequest(code) {
		return fmt.Errorf("radius: %s is not a request", code)
	}
	var zero [AuthenticatorLen]byte
	if randomAuthenticator(code) {
		required := code == lradius.CodeStatusServer || requireMA
		return checkMA(b, Authenticator(b), required, secret)
	}
	if err := checkMA(b, zero, false, secret); err != nil {
		return err
	}
	want := packetHash(b, &zero, secret)
	if subtle.ConstantTimeCompare(want[:], b[4:HeaderLen]) != 1 {
		return fmt.Errorf("%w: Request Authenticator of %s (ID %d)", ErrAuthenticator, code, Identifier(b))
	}
	return nil
}

// VerifyResponse checks a response b (a validated packet) against the
// Request Authenticator reqAuth of the request it answers: the Response
// Authenticator always, the Message-Authenticator when present, and its
// presence when requireMA is set.
func VerifyResponse(b []byte, reqAuth [AuthenticatorLen]byte, secret []byte, requireMA bool) error {
	want := packetHash(b, &reqAuth, secret)
	if subtle.ConstantTimeCompare(want[:], b[4:HeaderLen]) != 1 {
		return fmt.Errorf("%w: Response Authenticator of %s (ID %d)", ErrAuthenticator, Code(b), Identifier(b))
	}
	return checkMA(b, reqAuth, requireMA, secret)
}

// Request is a request to encode, with hidden attributes in the clear: a
// User-Password attribute holds the password itself and a Tunnel-Password
// holds its tag byte followed by the password. EncodeRequest hides them
// for each send, with that send's secret and Request Authenticator, so a
// request can be re-sent to a server with another secret.
//
// A Request is not modified by EncodeRequest and may be encoded by
// several goroutines at once.
type Request struct {
	Code       lradius.Code
	Attributes lradius.Attributes
}

// WithAcctDelay returns r as sent secs seconds after it was made: an
// Accounting-Request's Acct-Delay-Time (RFC 2866 5.2, how many seconds
// the client has been trying to send the record) is increased by secs,
// saturating, and added with the value secs when r has none, since a
// record sent late should say so. r itself is not modified: the result
// shares r's other attributes. r is returned as it is when secs is 0,
// when it is not an Accounting-Request, and when its Acct-Delay-Time is
// not a 4-byte integer.
//
// A client calls it for every send that needs a new encoding anyway (the
// first, and a re-send to another server or on another connection, with
// a new Identifier), never for a retransmission of a packet to the same
// server, which must stay byte-identical (RFC 5080 2.2.1).
func (r *Request) WithAcctDelay(secs uint32) *Request {
	if secs == 0 || r.Code != lradius.CodeAccountingRequest {
		return r
	}
	attrs := make(lradius.Attributes, 0, len(r.Attributes)+1)
	found := false
	for _, a := range r.Attributes {
		if a.Type == AttrAcctDelayTime && !found {
			v, err := lradius.Integer(a.Attribute)
			if err != nil {
				return r
			}
			found = true
			if v > ^uint32(0)-secs {
				v = ^uint32(0)
			} else {
				v += secs
			}
			a = &lradius.AVP{Type: AttrAcctDelayTime, Attribute: lradius.NewInteger(v)}
		}
		attrs = append(attrs, a)
	}
	if !found {
		attrs = append(attrs, &lradius.AVP{Type: AttrAcctDelayTime, Attribute: lradius.NewInteger(secs)})
	}
	return &Request{Code: r.Code, Attributes: attrs}
}

// EncodeRequest encodes r for one send with the given Identifier and
// secret, and returns the packet and its Request Authenticator (what the
// response is verified against). Access-Request and Status-Server get a
// new random authenticator and a Message-Authenticator as their first
// attribute (one the caller put in Attributes is replaced); the other
// requests get the MD5 Request Authenticator, and a Message-Authenticator
// only when r has one.
func EncodeRequest(r *Request, id byte, secret []byte) ([]byte, [AuthenticatorLen]byte, error) {
	var auth [AuthenticatorLen]byte
	if !IsRequest(r.Code) {
		return nil, auth, fmt.Errorf("radius: cannot encode %s as a request", r.Code)
	}
	if len(secret) == 0 {
		return nil, auth, errors.New("radius: empty shared secret")
	}
	random := randomAuthenticator(r.Code)
	if random {
		if _, err := rand.Read(auth[:]); err != nil {
			return nil, auth, err
		}
	}
	attrs := make(lradius.Attributes, 0, len(r.Attributes)+1)
	if needsMessageAuthenticator(r.Code) {
		attrs = append(attrs, &lradius.AVP{Type: AttrMessageAuthenticator, Attribute: make([]byte, md5.Size)})
	}
	for _, a := range r.Attributes {
		switch {
		case a.Type == AttrMessageAuthenticator:
			if needsMessageAuthenticator(r.Code) {
				continue // already first
			}
			attrs = append(attrs, &lradius.AVP{Type: a.Type, Attribute: make([]byte, md5.Size)})
		case a.Type == AttrUserPassword && random:
			v, err := lradius.NewUserPassword(a.Attribute, secret, auth[:])
			if err != nil {
				return nil, auth, fmt.Errorf("radius: User-Password: %w", err)
			}
			attrs = append(attrs, &lradius.AVP{Type: a.Type, Attribute: v})
		case a.Type == AttrTunnelPassword && random:
			if len(a.Attribute) < 1 {
				return nil, auth, errors.New("radius: Tunnel-Password without its tag byte")
			}
			var salt [2]byte
			if _, err := rand.Read(salt[:]); err != nil {
				return nil, auth, err
			}
			salt[0] |= 0x80
			v, err := lradius.NewTunnelPassword(a.Attribute[1:], salt[:], secret, auth[:])
			if err != nil {
				return nil, auth, fmt.Errorf("radius: Tunnel-Password: %w", err)
			}
			attrs = append(attrs, &lradius.AVP{Type: a.Type, Attribute: append([]byte{a.Attribute[0]}, v...)})
		default:
			attrs = append(attrs, a)
		}
	}
	p := &lradius.Packet{Code: r.Code, Identifier: id, Authenticator: auth, Attributes: attrs}
	b, err := p.MarshalBinary()
	if err != nil {
		return nil, auth, err
	}
	if err := sign(b, auth, !random, secret); err != nil {
		return nil, auth, err
	}
	return b, Authenticator(b), nil
}

// Resign re-signs an encoded request b in place for a new Identifier with
// the same secret: accounting and CoA requests get their Request
// Authenticator recomputed; Access-Request and Status-Server keep theirs
// (their hidden attributes depend on it) and get their
// Message-Authenticator recomputed. It returns the new Request
// Authenticator.
func Resign(b []byte, id byte, secret []byte) ([AuthenticatorLen]byte, error) {
	if err := Validate(b); err != nil {
		return [AuthenticatorLen]byte{}, err
	}
	b[1] = id
	var auth [AuthenticatorLen]byte
	random := randomAuthenticator(Code(b))
	if random {
		auth = Authenticator(b)
	}
	if err := sign(b, auth, !random, secret); err != nil {
		return auth, err
	}
	return Authenticator(b), nil
}

// EncodeResponse encodes a response with the given code and attributes to
// the request req (a validated packet): the request's Identifier, the
// request's Proxy-State attributes appended in their order (RFC 2865 5.33),
// and the Response Authenticator.
//
// Every answer to an Access-Request or a Status-Server (Access-Accept,
// Access-Reject, Access-Challenge, and Accounting-Response to a
// Status-Server) carries a Message-Authenticator as its first attribute,
// whether the request had one or not: a client that requires one
// (BlastRADIUS) then accepts it, and first, before any attribute the
// request's sender chose (Proxy-State), it leaves nothing an attacker
// could place ahead of it. Answers to Accounting-Request, CoA-Request and
// Disconnect-Request carry one (first too) only when the request did
// (RFC 3579 3.2, RFC 5176 3.3): their Request Authenticator is an MD5
// over the whole request with the secret, so nobody without it can add
// the attributes a forgery needs, and clients that never expect one are
// not surprised. A Message-Authenticator or Proxy-State in attrs is
// ignored.
func EncodeResponse(req []byte, code lradius.Code, attrs lradius.Attributes, secret []byte) ([]byte, error) {
	if len(secret) == 0 {
		return nil, errors.New("radius: empty shared secret")
	}
	ma, err := findMA(req)
	if err != nil {
		return nil, err
	}
	out := make(lradius.Attributes, 0, len(attrs)+2)
	if ma >= 0 || needsMessageAuthenticator(Code(req)) {
		out = append(out, &lradius.AVP{Type: AttrMessageAuthenticator, Attribute: make([]byte, md5.Size)})
	}
	for _, a := range attrs {
		if a.Type != AttrMessageAuthenticator && a.Type != AttrProxyState {
			out = append(out, a)
		}
	}
	out = appendProxyState(out, req)
	p := &lradius.Packet{Code: code, Identifier: Identifier(req), Attributes: out}
	b, err := p.MarshalBinary()
	if err != nil {
		return nil, err
	}
	if err := sign(b, Authenticator(req), true, secret); err != nil {
		return nil, err
	}
	return b, nil
}

// appendProxyState appends every Proxy-State of the validated packet req
// to attrs, in order.
func appendProxyState(attrs lradius.Attributes, req []byte) lradius.Attributes {
	a := req[HeaderLen:]
	for off := 0; off+2 <= len(a) && a[off+1] >= 2; off += int(a[off+1]) {
		if lradius.Type(a[off]) == AttrProxyState {
			attrs = append(attrs, &lradius.AVP{Type: AttrProxyState, Attribute: append([]byte(nil), a[off+2:off+int(a[off+1])]...)})
		}
	}
	return attrs
}
