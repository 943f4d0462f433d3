package dedup

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Key identifies a request for duplicate detection. It is a 128-bit
// truncated SHA-256 digest of the key's fields, so every Key costs 16 bytes
// whatever the length of the Origin-Host or Session-Id, and a peer cannot
// craft colliding keys. The zero Key is invalid. Build keys with
// [RequestKey] and [AccountingRecord.Key] for Diameter, and with a
// [KeyBuilder] for any other protocol (a RADIUS server, say): keys of
// different namespaces never collide.
type Key [16]byte

// String returns the key in hexadecimal.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// IsZero reports whether k is the zero (invalid) Key.
func (k Key) IsZero() bool { return k == Key{} }

// The first byte of the hashed text says which kind of key it is, so that
// keys of different kinds never collide.
const (
	kindRequest    = 'R'
	kindAccounting = 'A' // the older accounting key, without the record's type and number
	kindRecord     = 'B' // an accounting record, see AccountingRecord
	kindCustom     = 'X' // a KeyBuilder key: 'X' | namespace | fields
)

// RequestKey returns the key of any request: the Origin-Host AVP value and
// the End-to-End Identifier from the Diameter header. Origin-Host is a
// DiameterIdentity, which compares case-insensitively (it is an FQDN), so
// "NAS1.Example.NET" and "nas1.example.net" give the same key; ASCII
// letters are folded, other bytes are kept as received.
func RequestKey(originHost string, endToEnd uint32) Key {
	return requestKey(originHost, endToEnd)
}

// requestKey is RequestKey for an Origin-Host in a string or in the
// request's bytes (no copy).
func requestKey[T string | []byte](originHost T, endToEnd uint32) Key {
	var buf [128]byte
	b := append(buf[:0], kindRequest)
	b = appendFoldedField(b, originHost)
	b = binary.BigEndian.AppendUint32(b, endToEnd)
	return sum(b)
}

// AccountingRecord is what identifies one accounting record, for
// recognising a record re-sent under a new End-to-End Identifier (a
// client that failed over and lost its identifiers, a RADIUS-to-Diameter
// gateway...). Session-Id with Accounting-Record-Number is unique per
// record (RFC 6733 9.8.3), and the record type tells a START from a STOP
// carrying the same number, so that two records sent in the same second
// are never taken for one.
type AccountingRecord struct {
	SessionID    string // Session-Id AVP value
	RecordType   uint32 // Accounting-Record-Type (1 EVENT, 2 START, 3 INTERIM, 4 STOP)
	RecordNumber uint32 // Accounting-Record-Number
	// EventTimestamp is the raw data of the Event-Timestamp AVP (its 4
	// octets), nil if absent.
	EventTimestamp []byte
	// OriginHost compares case-insensitively, as in RequestKey.
	OriginHost string
	// NASIdentity is the NAS-Identifier AVP value if present, else the
	// raw data of the NAS-IP-Address AVP, else "".
	NASIdentity string
}

// Key returns the record's key. Pass it to Begin together with the
// request's RequestKey; either key matching makes the request a duplicate.
func (r AccountingRecord) Key() Key {
	return recordKey(r.SessionID, r.RecordType, r.RecordNumber, r.EventTimestamp, r.OriginHost, r.NASIdentity)
}

// recordKey is AccountingRecord.Key over fields in strings or in the
// request's bytes (no copy).
func recordKey[T string | []byte](sessionID T, recordType, recordNumber uint32, eventTimestamp []byte, originHost, nasIdentity T) Key {
	var buf [256]byte
	b := append(buf[:0], kindRecord)
	b = appendField(b, sessionID)
	b = binary.BigEndian.AppendUint32(b, recordType)
	b = binary.BigEndian.AppendUint32(b, recordNumber)
	b = appendField(b, eventTimestamp)
	b = appendFoldedField(b, originHost)
	b = appendField(b, nasIdentity)
	return sum(b)
}

// AccountingKey returns a key of (Session-Id, Event-Timestamp data,
// Origin-Host, NAS identity) alone. It cannot tell apart two records of
// one session stamped in the same second (a START and a STOP), so prefer
// [AccountingRecord.Key], which [KeysOf] uses; AccountingKey is kept for
// callers that have no record type and number.
func AccountingKey(sessionID string, eventTimestamp []byte, originHost, nasIdentity string) Key {
	var buf [256]byte
	b := append(buf[:0], kindAccounting)
	b = appendField(b, sessionID)
	b = appendField(b, string(eventTimestamp))
	b = appendFoldedField(b, originHost)
	b = appendField(b, nasIdentity)
	return sum(b)
}

// KeyBuilder builds a Key from fields of a protocol of the caller's own,
// for example a RADIUS server keying Accounting-Requests by (NAS address,
// Acct-Session-Id, Acct-Status-Type, Event-Timestamp):
//
//	var kb dedup.KeyBuilder
//	kb.Reset("radius-acct")
//	kb.Bytes(nasAddr).String(acctSessionID).Uint32(statusType).Bytes(eventTimestamp)
//	key := kb.Key()
//
// Each field is length-prefixed, so field boundaries are unambiguous
// ("ab"+"c" differs from "a"+"bc"), and the namespace is hashed first, so
// keys of different namespaces, and KeyBuilder keys and the Diameter keys
// of RequestKey and AccountingRecord, never collide. Fields are compared
// exactly: fold case first where the protocol says so (see FoldCase). The
// zero KeyBuilder, without Reset, uses the namespace "". A KeyBuilder is
// not safe for concurrent use; its Key method does not allocate for keys
// of up to about 200 bytes of fields.
type KeyBuilder struct {
	buf [256]byte
	b   []byte
}

// Reset starts a new key in namespace.
func (kb *KeyBuilder) Reset(namespace string) *KeyBuilder {
	kb.b = append(kb.buf[:0], kindCustom)
	kb.b = appendField(kb.b, namespace)
	return kb
}

func (kb *KeyBuilder) start() {
	if kb.b == nil {
		kb.Reset("")
	}
}

// Bytes adds a field of raw bytes.
func (kb *KeyBuilder) Bytes(field []byte) *KeyBuilder {
	kb.start()
	kb.b = binary.BigEndian.AppendUint32(kb.b, uint32(len(field)))
	kb.b = append(kb.b, field...)
	return kb
}

// String adds a field of text, compared exactly.
func (kb *KeyBuilder) String(field string) *KeyBuilder {
	kb.start()
	kb.b = appendField(kb.b, field)
	return kb
}

// Uint32 adds a 4-octet field.
func (kb *KeyBuilder) Uint32(field uint32) *KeyBuilder {
	kb.start()
	kb.b = binary.BigEndian.AppendUint32(kb.b, 4)
	kb.b = binary.BigEndian.AppendUint32(kb.b, field)
	return kb
}

// Key returns the key of the namespace and fields added since Reset. It
// never returns the zero Key.
func (kb *KeyBuilder) Key() Key {
	kb.start()
	return sum(kb.b)
}

// FoldCase returns s with ASCII letters in lower case, the comparison of
// DiameterIdentity and other DNS names; other bytes are kept. It returns s
// itself when s has no upper-case letter.
func FoldCase(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return string(appendFolded(make([]byte, 0, len(s)), s))
		}
	}
	return s
}

// appendField appends a length-prefixed field so that field boundaries are
// unambiguous ("ab"+"c" differs from "a"+"bc").
func appendField[T string | []byte](b []byte, s T) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// appendFoldedField is appendField with ASCII letters folded to lower
// case.
func appendFoldedField[T string | []byte](b []byte, s T) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return appendFolded(b, s)
}

// appendFolded appends s with ASCII letters folded to lower case: one copy,
// then the letters folded in place.
func appendFolded[T string | []byte](b []byte, s T) []byte {
	n := len(b)
	b = append(b, s...)
	for i, c := range b[n:] {
		if 'A' <= c && c <= 'Z' {
			b[n+i] = c + 'a' - 'A'
		}
	}
	return b
}

func sum(b []byte) Key {
	d := sha256.Sum256(b)
	var k Key
	copy(k[:], d[:len(k)])
	if k.IsZero() { // 2^-128; the zero Key means "no key"
		k[0] = 1
	}
	return k
}
