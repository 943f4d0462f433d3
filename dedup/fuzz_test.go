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
