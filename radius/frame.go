package radius

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	lradius "layeh.com/radius"
)

// Sizes of RFC 2865 section 3.
const (
	// HeaderLen is the length of Code, Identifier, Length and
	// Authenticator.
	HeaderLen = 20
	// MaxLength is the largest packet (RFC 2865 3, RFC 6613 2.6.4).
	MaxLength = 4096
	// AuthenticatorLen is the length of the Authenticator field.
	AuthenticatorLen = 16
)

// Attribute types this package handles itself.
const (
	AttrUserName             lradius.Type = 1
	AttrUserPassword         lradius.Type = 2
	AttrNASIPAddress         lradius.Type = 4
	AttrProxyState           lradius.Type = 33
	AttrNASIdentifier        lradius.Type = 32
	AttrAcctStatusType       lradius.Type = 40
	AttrAcctDelayTime        lradius.Type = 41
	AttrAcctSessionID        lradius.Type = 44
	AttrEventTimestamp       lradius.Type = 55
	AttrTunnelPassword       lradius.Type = 69
	AttrMessageAuthenticator lradius.Type = 80
)

// ErrBadFrame is matched (errors.Is) by every framing error: the stream
// cannot be resynchronised and the connection must be closed.
var ErrBadFrame = errors.New("radius: bad frame")

// FrameError says what was wrong with a frame. It matches ErrBadFrame.
type FrameError struct{ Reason string }

func (e *FrameError) Error() string     { return "radius: bad frame: " + e.Reason }
func (e *FrameError) Is(err error) bool { return err == ErrBadFrame }

func badFrame(format string, args ...any) error {
	return &FrameError{Reason: fmt.Sprintf(format, args...)}
}

// Validate checks that b is exactly one well-formed packet: at least
// HeaderLen bytes, a Length field equal to len(b) and within 20..4096, and
// attributes of at least 2 bytes each that fill the packet exactly. It
// does not look at the code or the authenticators.
func Validate(b []byte) error {
	if len(b) < HeaderLen {
		return badFrame("%d bytes, shorter than the %d-byte header", len(b), HeaderLen)
	}
	n := int(binary.BigEndian.Uint16(b[2:4]))
	if n < HeaderLen || n > MaxLength {
		return badFrame("Length %d outside %d..%d", n, HeaderLen, MaxLength)
	}
	if n != len(b) {
		return badFrame("Length %d but %d bytes", n, len(b))
	}
	return validateAttributes(b[HeaderLen:])
}

func validateAttributes(a []byte) error {
	for off := 0; off < len(a); {
		if len(a)-off < 2 {
			return badFrame("attribute at offset %d truncated", HeaderLen+off)
		}
		l := int(a[off+1])
		if l < 2 {
			return badFrame("attribute %d at offset %d has length %d", a[off], HeaderLen+off, l)
		}
		if off+l > len(a) {
			return badFrame("attribute %d at offset %d (length %d) runs past the packet", a[off], HeaderLen+off, l)
		}
		off += l
	}
	return nil
}

// ReadFrame reads exactly one packet from r into a new slice the caller
// owns. It returns io.EOF when the stream ended between packets,
// io.ErrUnexpectedEOF when it ended inside one, and an error matching
// ErrBadFrame when the Length field or the attributes are wrong; nothing
// is allocated for a length outside 20..4096.
func ReadFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[2:4]))
	if n < HeaderLen || n > MaxLength {
		return nil, badFrame("Length %d outside %d..%d", n, HeaderLen, MaxLength)
	}
	b := make([]byte, n)
	copy(b, hdr[:])
	if _, err := io.ReadFull(r, b[4:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if err := validateAttributes(b[HeaderLen:]); err != nil {
		return nil, err
	}
	return b, nil
}

// Code returns the packet's Code. b must be at least 1 byte.
func Code(b []byte) lradius.Code { return lradius.Code(b[0]) }

// Identifier returns the packet's Identifier. b must be at least 2 bytes.
func Identifier(b []byte) byte { return b[1] }

// Authenticator returns the packet's Authenticator field. b must be at
// least HeaderLen bytes.
func Authenticator(b []byte) (a [AuthenticatorLen]byte) {
	copy(a[:], b[4:HeaderLen])
	return a
}

// Decode validates b and parses its attributes with layeh.com/radius. The
// packet's Secret is set to secret (for decrypting hidden attributes); its
// authenticators are not checked (see VerifyRequest, VerifyResponse).
func Decode(b, secret []byte) (*lradius.Packet, error) {
	if err := Validate(b); err != nil {
		return nil, err
	}
	p, err := lradius.Parse(b, secret)
	if err != nil { // cannot happen after Validate; kept as a guard
		return nil, badFrame("%v", err)
	}
	return p, nil
}

// Attr returns the value of the first attribute of type t in b, a
// validated packet.
func Attr(b []byte, t lradius.Type) ([]byte, bool) {
	a := b[HeaderLen:]
	for off := 0; off+2 <= len(a); {
		l := int(a[off+1])
		if l < 2 || off+l > len(a) {
			return nil, false
		}
		if lradius.Type(a[off]) == t {
			return a[off+2 : off+l], true
		}
		off += l
	}
	return nil, false
}

// IsRequest reports whether code is a request a client sends.
func IsRequest(code lradius.Code) bool {
	switch code {
	case lradius.CodeAccessRequest, lradius.CodeAccountingRequest, lradius.CodeStatusServer,
		lradius.CodeDisconnectRequest, lradius.CodeCoARequest:
		return true
	}
	return false
}

// Answers reports whether a response with code resp may answer a request
// with code req (RFC 2865, 2866, 5176, 5997: Status-Server is answered
// with Access-Accept on an authentication port and Accounting-Response on
// an accounting port).
func Answers(req, resp lradius.Code) bool {
	switch req {
	case lradius.CodeAccessRequest:
		return resp == lradius.CodeAccessAccept || resp == lradius.CodeAccessReject || resp == lradius.CodeAccessChallenge
	case lradius.CodeAccountingRequest:
		return resp == lradius.CodeAccountingResponse
	case lradius.CodeStatusServer:
		return resp == lradius.CodeAccessAccept || resp == lradius.CodeAccountingResponse
	case lradius.CodeDisconnectRequest:
		return resp == lradius.CodeDisconnectACK || resp == lradius.CodeDisconnectNAK
	case lradius.CodeCoARequest:
		return resp == lradius.CodeCoAACK || resp == lradius.CodeCoANAK
	}
	return false
}
