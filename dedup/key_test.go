package dedup

import (
	"testing"
)

// TestKeyEncodingPinned pins the key encoding: servers sharing a Redis store
// must compute the same keys, so a change here is a breaking change.
// Reference: sha256("R" | len32 | origin-host | e2e32)[:16] and
// sha256("A" | len32 | session-id | len32 | ts | len32 | origin-host |
// len32 | nas)[:16], lengths and integers big-endian.
func TestKeyEncodingPinned(t *testing.T) {
	if got, want := RequestKey("client.example.net", 0x1234).String(), "41fff5886e9aa879754bef569d026362"; got != want {
		t.Errorf("RequestKey = %s, want %s", got, want)
	}
	ts := []byte{0xe9, 0, 0, 1}
	if got, want := AccountingKey("nas1;1;42", ts, "nas1.example.net", "nas1").String(), "27aabf5065c65079a383eb1328c4ba69"; got != want {
		t.Errorf("AccountingKey = %s, want %s", got, want)
	}
}

func TestKeysDistinct(t *testing.T) {
	ts := []byte{0, 0, 0, 1}
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

func TestKindString(t *testing.T) {
	if First.String() != "First" || Duplicate.String() != "Duplicate" || Kind(0).String() != "Kind(0)" {
		t.Error(First, Duplicate, Kind(0))
	}
}
