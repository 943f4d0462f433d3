package hostileclient

import (
	"crypto/hmac"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"io"
)

// The RADIUS wire format the raw servers write, from RFC 2865, 2866,
// 3579 and 5997 rather than from package radius: they send what its
// encoder would refuse to.
const (
	codeAccessAccept = 2
	codeAcctRequest  = 4
	codeAcctResponse = 5
	codeStatusServer = 12
	attrMessageAuth  = 80
	radHeaderLen     = 20
	radMaxLen        = 4096
	radiusSecret     = "hostile-suite-secret"
)

// radResponse answers req with code, signed with secret, with a
// Message-Authenticator when ma.
func radResponse(req []byte, code byte, secret string, ma bool) []byte {
	b := make([]byte, radHeaderLen, 64)
	b[0], b[1] = code, req[1]
	copy(b[4:], req[4:radHeaderLen])
	if ma {
		b = append(b, attrMessageAuth, 18)
		b = append(b, make([]byte, 16)...)
	}
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	if ma {
		h := hmac.New(md5.New, []byte(secret))
		h.Write(b)
		copy(b[radHeaderLen+2:], h.Sum(nil))
	}
	s := md5.Sum(append(append([]byte(nil), b...), secret...))
	copy(b[4:radHeaderLen], s[:])
	return b
}

// readRadiusFrame reads one RADIUS frame from a stream (RFC 6613).
func readRadiusFrame(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	l := int(binary.BigEndian.Uint16(h[2:4]))
	if l < radHeaderLen || l > radMaxLen {
		return nil, fmt.Errorf("bad RADIUS frame length %d", l)
	}
	b := make([]byte, l)
	copy(b, h[:])
	_, err := io.ReadFull(r, b[4:])
	return b, err
}
