package message

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxIdentityLen is the longest DiameterIdentity accepted from a peer, in
// bytes: the length of the longest FQDN a DNS name can spell.
const MaxIdentityLen = 255

// ErrBadIdentity is what CheckIdentity's errors wrap.
var ErrBadIdentity = errors.New("invalid DiameterIdentity")

// CheckIdentity reports whether s is a DiameterIdentity (RFC 6733 4.3.1)
// that is safe to use as a peer's name: an FQDN or realm of 1 to
// MaxIdentityLen bytes made of ASCII letters, digits, '-', '_' and '.'.
// Internationalised names travel in their ASCII (A-label) form, so a byte
// outside ASCII, a control byte, a space or invalid UTF-8 is refused: such
// a name would otherwise reach metric labels, logs and the status page.
// The error quotes s truncated, so it is safe to print.
func CheckIdentity(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrBadIdentity)
	}
	if len(s) > MaxIdentityLen {
		return fmt.Errorf("%w: %d bytes (at most %d): %s", ErrBadIdentity, len(s), MaxIdentityLen, Printable(s, 64))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return fmt.Errorf("%w: byte 0x%02x at offset %d: %s", ErrBadIdentity, c, i, Printable(s, 64))
		}
	}
	return nil
}

// EqualIdentity compares two DiameterIdentities as RFC 6733 does: ignoring
// ASCII case. Peers almost always send an identity as it was configured,
// so the exact comparison, a memory compare, is tried before the folding
// one, which goes rune by rune.
func EqualIdentity(a, b string) bool { return a == b || strings.EqualFold(a, b) }

// Printable returns s quoted with Go escapes for every byte that is not
// printable ASCII (strconv.QuoteToASCII: control bytes, NUL and invalid
// UTF-8 cannot reach a terminal or a log line raw), cut to at most max
// bytes of s with "..." marking the cut. Use it wherever a string a peer
// sent is printed.
func Printable(s string, max int) string {
	if max > 0 && len(s) > max {
		return strconv.QuoteToASCII(s[:max]) + "..."
	}
	return strconv.QuoteToASCII(s)
}
