package dedup

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Key identifies a request for duplicate detection. It is a 128-bit
// truncated SHA-256 digest of the key's fields, so every Key costs 16 bytes
// whatever the length of the Origin-Host or Session-Id, and a peer cannot
// craft colliding keys. The zero Key is invalid; build keys with
// [RequestKey] and [AccountingKey].
type Key [16]byte

// String returns the key in hexadecimal.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// IsZero reports whether k is the zero (invalid) Key.
func (k Key) IsZero() bool { return k == Key{} }

const (
	kindRequest    = 'R'
	kindAccounting = 'A'
)

// RequestKey returns the key of any request (requirement D1): the
// Origin-Host AVP value, exactly as received, and the End-to-End Identifier
// from the Diameter header.
func RequestKey(originHost string, endToEnd uint32) Key {
	var buf [128]byte
	b := append(buf[:0], kindRequest)
	b = appendField(b, originHost)
	b = binary.BigEndian.AppendUint32(b, endToEnd)
	return sum(b)
}

// AccountingKey returns the second key of an accounting request (requirement
// D2, RFC 3539 2.5): Session-Id, the raw data of the Event-Timestamp AVP (its
// 4 octets, nil if absent), Origin-Host, and the NAS identity: the
// NAS-Identifier AVP value if present, else the raw data of the
// NAS-IP-Address AVP, else "". Pass it to Begin together with the
// RequestKey; either key matching makes the request a duplicate.
func AccountingKey(sessionID string, eventTimestamp []byte, originHost, nasIdentity string) Key {
	var buf [256]byte
	b := append(buf[:0], kindAccounting)
	b = appendField(b, sessionID)
	b = appendField(b, string(eventTimestamp))
	b = appendField(b, originHost)
	b = appendField(b, nasIdentity)
	return sum(b)
}

// appendField appends a length-prefixed field so that field boundaries are
// unambiguous ("ab"+"c" differs from "a"+"bc").
func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func sum(b []byte) Key {
	d := sha256.Sum256(b)
	var k Key
	copy(k[:], d[:len(k)])
	return k
}
