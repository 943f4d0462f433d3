package message

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxIdentityLen is the longest DiameterIdentity accepted from a peer, in
// bytes: a DNS name of 253 characters (RFC 1035 3.1: 255 octets on the
// wire, its length octets included) and its final '.'.
const MaxIdentityLen = 254

// Limits of a DNS name written as text, without its final '.' (RFC 1035
// 2.3.4 and 3.1).
const (
	maxNameLen  = MaxIdentityLen - 1
	maxLabelLen = 63
)

// ErrBadIdentity is what CheckIdentity's errors wrap.
var ErrBadIdentity = errors.New("invalid DiameterIdentity")

// CheckIdentity reports whether s is a DiameterIdentity (RFC 6733 4.3.1)
// that is safe to use as a peer's name: an FQDN or realm made of ASCII
// letters, digits, '-', '_' and '.', structured as a DNS name is (RFC 1035
// 2.3.4, 3.1): labels of 1 to 63 bytes separated by single dots, so no
// leading or doubled '.', and at most 253 bytes. One final '.' (the
// absolute form of a name, "aaa.example.net.") is accepted, making at
// most MaxIdentityLen bytes; "." alone is not.
//
// No more than that structure is asked of a name: upper case, labels of
// digits only (an IPv4 literal), '_' anywhere and '-' anywhere in a label
// (RFC 1123's letter-digit-hyphen rule is not enforced) are accepted, as
// peers in service use them.
//
// Internationalised names travel in their ASCII (A-label) form, so a byte
// outside ASCII, a control byte, a space or invalid UTF-8 is refused: such
// a name would otherwise reach metric labels, logs and the status page.
// The error says what is wrong and quotes s truncated, so it is safe to
// print.
func CheckIdentity(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrBadIdentity)
	}
	if len(s) > MaxIdentityLen {
		return fmt.Errorf("%w: %d bytes (at most %d, %d with a final '.'): %s", ErrBadIdentity, len(s), maxNameLen, MaxIdentityLen, Printable(s, 64))
	}
	label := 0 // where the current label starts
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.':
			if i == label {
				return fmt.Errorf("%w: an empty label at offset %d (a leading or doubled '.'): %s", ErrBadIdentity, i, Printable(s, 64))
			}
			if i-label > maxLabelLen {
				return fmt.Errorf("%w: a label of %d bytes at offset %d (at most %d): %s", ErrBadIdentity, i-label, label, maxLabelLen, Printable(s, 64))
			}
			label = i + 1
		default:
			return fmt.Errorf("%w: byte 0x%02x at offset %d: %s", ErrBadIdentity, c, i, Printable(s, 64))
		}
	}
	if label == len(s) {
		return nil // a final '.' after a label: the name before it is at most maxNameLen bytes
	}
	if len(s)-label > maxLabelLen {
		return fmt.Errorf("%w: a label of %d bytes at offset %d (at most %d): %s", ErrBadIdentity, len(s)-label, label, maxLabelLen, Printable(s, 64))
	}
	if len(s) > maxNameLen {
		return fmt.Errorf("%w: %d bytes (at most %d, %d with a final '.'): %s", ErrBadIdentity, len(s), maxNameLen, MaxIdentityLen, Printable(s, 64))
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
