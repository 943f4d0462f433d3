package dedup

import (
	"testing"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// FuzzKeysOf: any request a connection hands on (its header passed
// wire.Validate) yields its request key, plus one accounting key at most,
// the same for the same bytes, and never a zero key.
func FuzzKeysOf(f *testing.F) {
	acr := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "client.example.net;1;1").
		String(message.OriginHost, 0, true, "client.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, 1).
		String(message.NASIdentifier, 0, true, "nas1").Bytes()
	f.Add(acr)
	f.Add(acr[:len(acr)-6])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, req []byte) {
		if h, err := wire.ParseHeader(req); err != nil || wire.Validate(h, wire.DefaultMaxMessageLen) != nil || int(h.Length) != len(req) {
			return // the frame reader refuses it before
		}
		keys := KeysOf(req)
		if len(keys) < 1 || len(keys) > 2 {
			t.Fatalf("%d keys", len(keys))
		}
		again := KeysOf(append([]byte(nil), req...))
		for i, k := range keys {
			if k.IsZero() || again[i] != k {
				t.Fatalf("key %d: %v, again %v", i, k, again[i])
			}
		}
	})
}

// keysOfReference is KeysOf as written with one wire.FindAVP per AVP and
// the exported key constructors: the oracle of the one-walk KeysOf.
func keysOfReference(req []byte) []Key {
	oh, _ := wire.FindAVP(req, message.OriginHost, 0)
	keys := []Key{RequestKey(string(oh), wire.EndToEnd(req))}
	if wire.AppID(req) != message.AppAccounting || wire.CommandCode(req) != message.CmdAccounting {
		return keys
	}
	sid, ok := wire.FindAVP(req, message.SessionID, 0)
	if !ok {
		return keys
	}
	typ, okType := message.Uint32Of(req, message.AccountingRecordType, 0)
	num, okNum := message.Uint32Of(req, message.AccountingRecordNumber, 0)
	if !okType || !okNum {
		return keys
	}
	ts, _ := wire.FindAVP(req, message.EventTimestamp, 0)
	nas, found := wire.FindAVP(req, message.NASIdentifier, 0)
	if !found {
		nas, _ = wire.FindAVP(req, message.NASIPAddress, 0)
	}
	r := AccountingRecord{SessionID: string(sid), RecordType: typ, RecordNumber: num,
		EventTimestamp: ts, OriginHost: string(oh), NASIdentity: string(nas)}
	return append(keys, r.Key())
}

// FuzzKeysOfReference: KeysOf gives exactly the keys of keysOfReference for
// any bytes (so a Redis store shared with servers of earlier versions keeps
// recognising their requests), including repeated, vendor-specific,
// ill-sized and truncated AVPs.
func FuzzKeysOfReference(f *testing.F) {
	base := func() *message.Builder {
		return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable)
	}
	acr := base().String(message.SessionID, 0, true, "c;1;1").String(message.OriginHost, 0, true, "NAS1.Example.NET").
		Uint32(message.AccountingRecordType, 0, true, 2).Uint32(message.AccountingRecordNumber, 0, true, 1).
		Octets(message.EventTimestamp, 0, true, []byte{0xe9, 0, 0, 1}).String(message.NASIdentifier, 0, true, "nas1").Bytes()
	f.Add(acr)
	f.Add(acr[:len(acr)-6])
	f.Add(base().String(message.OriginHost, 0, true, "a").String(message.SessionID, 0, true, "s").
		Uint32(message.AccountingRecordType, 0, true, 1).Uint32(message.AccountingRecordNumber, 0, true, 7).
		Octets(message.NASIPAddress, 0, true, []byte{0, 1, 127, 0, 0, 1}).String(message.OriginHost, 0, true, "b").
		String(message.SessionID, 0, true, "t").Uint32(message.AccountingRecordNumber, 0, true, 8).Bytes())
	f.Add(base().String(message.SessionID, 0, true, "s").Octets(message.AccountingRecordType, 0, true, []byte{1, 2}).
		Uint32(message.AccountingRecordType, 0, true, 1).Uint32(message.AccountingRecordNumber, 0, true, 7).Bytes())
	f.Add(base().String(message.SessionID, 0, true, "s").Uint32(message.AccountingRecordType, 0, true, 1).
		Octets(message.AccountingRecordNumber, 0, true, []byte{0, 0, 0, 7, 0, 0, 0, 8}).Bytes())
	f.Add(base().String(message.SessionID, 99, true, "vendor").String(message.SessionID, 0, true, "s").
		Uint32(message.AccountingRecordType, 0, true, 1).Uint32(message.AccountingRecordNumber, 0, true, 7).
		String(message.NASIdentifier, 0, true, "").Octets(message.NASIPAddress, 0, true, []byte{0, 1, 10, 0, 0, 1}).Bytes())
	f.Add(message.NewRequest(message.CmdTest, message.AppTest, 0).String(message.OriginHost, 0, true, "h").
		String(message.SessionID, 0, true, "s").Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, req []byte) {
		if h, err := wire.ParseHeader(req); err != nil || wire.Validate(h, wire.DefaultMaxMessageLen) != nil || int(h.Length) != len(req) {
			return // the frame reader refuses it before
		}
		got, want := KeysOf(req), keysOfReference(req)
		if len(got) != len(want) {
			t.Fatalf("%d keys, reference %d", len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("key %d: %v, reference %v", i, got[i], want[i])
			}
		}
	})
}

// FuzzKeysOfRecords: accounting requests built from two sets of fields get
// the same record key when the fields are equal (Origin-Host in any
// ASCII case) and different ones when any field differs.
func FuzzKeysOfRecords(f *testing.F) {
	f.Add("s;1", "nas1.example.net", uint32(2), uint32(1), "nas1", "s;1", "NAS1.example.net", uint32(2), uint32(1), "nas1")
	f.Add("s;1", "h", uint32(2), uint32(1), "n", "s;1", "h", uint32(3), uint32(1), "n")
	f.Add("ab", "h", uint32(2), uint32(1), "c", "a", "h", uint32(2), uint32(1), "bc")
	f.Fuzz(func(t *testing.T, sid1, oh1 string, typ1, num1 uint32, nas1 string, sid2, oh2 string, typ2, num2 uint32, nas2 string) {
		build := func(sid, oh string, typ, num uint32, nas string) []byte {
			return message.NewRequest(message.CmdAccounting, message.AppAccounting, 0).
				String(message.SessionID, 0, true, sid).String(message.OriginHost, 0, true, oh).
				Uint32(message.AccountingRecordType, 0, true, typ).Uint32(message.AccountingRecordNumber, 0, true, num).
				String(message.NASIdentifier, 0, true, nas).Bytes()
		}
		if len(sid1)+len(oh1)+len(nas1) > 1000 || len(sid2)+len(oh2)+len(nas2) > 1000 {
			return
		}
		k1, k2 := KeysOf(build(sid1, oh1, typ1, num1, nas1)), KeysOf(build(sid2, oh2, typ2, num2, nas2))
		if len(k1) != 2 || len(k2) != 2 {
			t.Fatalf("%d and %d keys, want 2 each", len(k1), len(k2))
		}
		same := sid1 == sid2 && FoldCase(oh1) == FoldCase(oh2) && typ1 == typ2 && num1 == num2 && nas1 == nas2
		if (k1[1] == k2[1]) != same {
			t.Fatalf("equal fields %v, equal record keys %v", same, k1[1] == k2[1])
		}
	})
}
