package dedup

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
)

// TestKeyEncodingPinned pins the key encoding: servers sharing a Redis store
// must compute the same keys, so a change here is a breaking change.
// Reference: sha256("R" | len32 | lower(origin-host) | e2e32)[:16];
// sha256("B" | len32 | session-id | type32 | number32 | len32 | ts |
// len32 | lower(origin-host) | len32 | nas)[:16]; sha256("A" | len32 |
// session-id | len32 | ts | len32 | lower(origin-host) | len32 | nas)[:16];
// sha256("X" | len32 | namespace | (len32 | field)...)[:16]; lengths and
// integers big-endian.
func TestKeyEncodingPinned(t *testing.T) {
	if got, want := RequestKey("client.example.net", 0x1234).String(), "41fff5886e9aa879754bef569d026362"; got != want {
		t.Errorf("RequestKey = %s, want %s", got, want)
	}
	ts := []byte{0xe9, 0, 0, 1}
	if got, want := AccountingKey("nas1;1;42", ts, "nas1.example.net", "nas1").String(), "27aabf5065c65079a383eb1328c4ba69"; got != want {
		t.Errorf("AccountingKey = %s, want %s", got, want)
	}
	r := AccountingRecord{SessionID: "nas1;1;42", RecordType: 4, RecordNumber: 1, EventTimestamp: ts, OriginHost: "nas1.example.net", NASIdentity: "nas1"}
	if got, want := r.Key(), reference('B', "nas1;1;42", u32(4), u32(1), string(ts), "nas1.example.net", "nas1"); got != want {
		t.Errorf("AccountingRecord.Key = %s, want %s", got, want)
	}
	var kb KeyBuilder
	kb.Reset("radius-acct").Bytes([]byte{10, 0, 0, 1}).String("sess").Uint32(2)
	if got, want := kb.Key(), reference('X', "radius-acct", "\x0a\x00\x00\x01", "sess", u32(2)); got != want {
		t.Errorf("KeyBuilder.Key = %s, want %s", got, want)
	}
}

func u32(v uint32) string { return string(binary.BigEndian.AppendUint32(nil, v)) }

// reference hashes kind and fields the documented way: each field
// length-prefixed, except the record type and number of kind 'B' (fields
// 1 and 2), which are raw 4-octet integers.
func reference(kind byte, fields ...string) Key {
	b := []byte{kind}
	for i, f := range fields {
		if kind == 'B' && (i == 1 || i == 2) { // record type and number: raw
			b = append(b, f...)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	d := sha256.Sum256(b)
	var k Key
	copy(k[:], d[:16])
	return k
}

func TestKeysDistinct(t *testing.T) {
	ts := []byte{0, 0, 0, 1}
	rec := AccountingRecord{SessionID: "s", RecordType: 2, RecordNumber: 0, EventTimestamp: ts, OriginHost: "h", NASIdentity: "n"}
	with := func(f func(*AccountingRecord)) Key { r := rec; f(&r); return r.Key() }
	var kb KeyBuilder
	custom := func(ns string, fields ...string) Key {
		kb.Reset(ns)
		for _, f := range fields {
			kb.String(f)
		}
		return kb.Key()
	}
	keys := map[string]Key{
		"req":             RequestKey("h", 1),
		"req e2e":         RequestKey("h", 2),
		"req host":        RequestKey("g", 1),
		"acct":            AccountingKey("s", ts, "h", "n"),
		"acct session":    AccountingKey("s2", ts, "h", "n"),
		"acct ts":         AccountingKey("s", []byte{0, 0, 0, 2}, "h", "n"),
		"acct no ts":      AccountingKey("s", nil, "h", "n"),
		"acct host":       AccountingKey("s", ts, "h2", "n"),
		"acct nas":        AccountingKey("s", ts, "h", "n2"),
		"acct no nas":     AccountingKey("s", ts, "h", ""),
		"boundary ab|c":   AccountingKey("ab", nil, "c", ""),
		"boundary a|bc":   AccountingKey("a", nil, "bc", ""),
		"acct like req":   AccountingKey("h", nil, "", ""),
		"req empty host":  RequestKey("", 0),
		"acct all empty":  AccountingKey("", nil, "", ""),
		"req long host":   RequestKey(string(make([]byte, 300)), 1),
		"acct long field": AccountingKey(string(make([]byte, 300)), nil, "h", ""),
		"rec":             rec.Key(),
		"rec STOP":        with(func(r *AccountingRecord) { r.RecordType = 4 }),
		"rec number":      with(func(r *AccountingRecord) { r.RecordNumber = 1 }),
		"rec session":     with(func(r *AccountingRecord) { r.SessionID = "s2" }),
		"rec ts":          with(func(r *AccountingRecord) { r.EventTimestamp = []byte{0, 0, 0, 2} }),
		"rec no ts":       with(func(r *AccountingRecord) { r.EventTimestamp = nil }),
		"rec host":        with(func(r *AccountingRecord) { r.OriginHost = "h2" }),
		"rec nas":         with(func(r *AccountingRecord) { r.NASIdentity = "n2" }),
		"rec long":        with(func(r *AccountingRecord) { r.SessionID = string(make([]byte, 300)) }),
		"custom":          custom("radius", "a", "b"),
		"custom ns":       custom("radius2", "a", "b"),
		"custom ab|":      custom("radius", "ab", ""),
		"custom fields":   custom("radius", "a", "b", ""),
		"custom none":     custom("radius"),
		"custom like R":   custom("", "h"),
		"zero builder":    (&KeyBuilder{}).Key(),
	}
	seen := map[Key]string{}
	for name, k := range keys {
		if k.IsZero() {
			t.Errorf("%s: zero key", name)
		}
		if other, dup := seen[k]; dup {
			t.Errorf("%s and %s collide", name, other)
		}
		seen[k] = name
	}
	if RequestKey("h", 1) != RequestKey("h", 1) {
		t.Error("RequestKey not deterministic")
	}
}

// TestKeysFoldOriginHost: Origin-Host, a DiameterIdentity, compares
// case-insensitively in every Diameter key; the other fields exactly.
func TestKeysFoldOriginHost(t *testing.T) {
	if RequestKey("Client.EXAMPLE.net", 9) != RequestKey("client.example.net", 9) {
		t.Error("RequestKey is case-sensitive in Origin-Host")
	}
	r := AccountingRecord{SessionID: "S;1", RecordType: 2, OriginHost: "NAS.example.NET", NASIdentity: "NAS"}
	lower := r
	lower.OriginHost = "nas.example.net"
	if r.Key() != lower.Key() {
		t.Error("AccountingRecord.Key is case-sensitive in Origin-Host")
	}
	if AccountingKey("s", nil, "H", "n") != AccountingKey("s", nil, "h", "n") {
		t.Error("AccountingKey is case-sensitive in Origin-Host")
	}
	other := r
	other.SessionID, other.NASIdentity = "s;1", "nas"
	if r.Key() == other.Key() {
		t.Error("Session-Id and NAS-Identifier must compare exactly")
	}
	// Only ASCII letters fold: bytes >= 0x80 stay as received.
	if RequestKey("\xc3\x89x", 1) == RequestKey("\xc3\xa9x", 1) {
		t.Error("non-ASCII bytes folded")
	}
}

func TestFoldCase(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "abc.example.net": "abc.example.net", "ABC.Example.NET": "abc.example.net",
		"A-Z@[`{": "a-z@[`{", "\xc3\x89X": "\xc3\x89x",
	} {
		if got := FoldCase(in); got != want {
			t.Errorf("FoldCase(%q) = %q, want %q", in, got, want)
		}
	}
	if n := testing.AllocsPerRun(10, func() { _ = FoldCase("already.lower") }); n != 0 {
		t.Errorf("FoldCase of a lower-case string allocates %v times", n)
	}
}

func TestKeyBuilderNoAlloc(t *testing.T) {
	nas := []byte{192, 0, 2, 1}
	var kb KeyBuilder
	n := testing.AllocsPerRun(100, func() {
		kb.Reset("radius-acct").Bytes(nas).String("0123456789abcdef").Uint32(2)
		_ = kb.Key()
	})
	if n != 0 {
		t.Errorf("KeyBuilder allocates %v times per key", n)
	}
}

func TestKindString(t *testing.T) {
	if First.String() != "First" || Duplicate.String() != "Duplicate" || Kind(0).String() != "Kind(0)" {
		t.Error(First, Duplicate, Kind(0))
	}
}
