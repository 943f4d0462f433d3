package dedupcount

import (
	"testing"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// acr is accounting request n of the load generator's run sid ("c1;1;").
func acr(sid string, n uint32) []byte {
	b := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		Octets(message.SessionID, 0, true, []byte(sid)).
		String(message.OriginHost, 0, true, "c1.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, n).
		Bytes()
	wire.SetEndToEnd(b, 1000+n)
	wire.SetHopByHop(b, 7)
	return b
}

// answer is server host's answer to req, as the store keeps it ("a" + bytes).
func answer(req []byte, host string) []byte {
	sid, _ := wire.FindAVP(req, message.SessionID, 0)
	ans := message.NewAnswer(req).Octets(message.SessionID, 0, true, sid).
		ResultCode(message.Success).String(message.OriginHost, 0, true, host).Bytes()
	return append([]byte("a"), ans...)
}

// keysOf are the Redis key names of req's entries.
func keysOf(t *testing.T, req []byte) []string {
	t.Helper()
	var out []string
	for _, k := range dedup.KeysOf(req) {
		out = append(out, KeyPrefix+k.String())
	}
	if len(out) != 2 {
		t.Fatalf("an accounting request has %d keys, this test expects its request and record keys", len(out))
	}
	return out
}

func TestCounter(t *testing.T) {
	c := NewCounter("c1;")
	// Three requests applied once each, every answer under both keys.
	for n, host := range []string{"s1", "s1", "s2"} {
		req := acr("c1;1;"+string(rune('0'+n)), uint32(n))
		for _, k := range keysOf(t, req) {
			c.Add(k, answer(req, host))
		}
	}
	// Not requests: the epoch key (its value may start with 'a'), keys of
	// another prefix, an in-flight mark, an answer too large to keep.
	c.Add(KeyPrefix+"epoch", []byte("abcdef-123"))
	other := acr("c1;1;x", 9)
	c.Add("{realm2:}"+dedup.KeysOf(other)[0].String(), answer(other, "s1"))
	c.Add(KeyPrefix+dedup.KeysOf(acr("c1;1;m", 10))[0].String(), []byte("mowner-1"))
	c.Add(KeyPrefix+dedup.KeysOf(acr("c1;1;t", 11))[0].String(), []byte("t"))
	// Another client's answer.
	foreign := acr("c2;1;0", 0)
	c.Add(keysOf(t, foreign)[0], answer(foreign, "s1"))

	got := c.Counts()
	if got.Requests != 3 || got.Keys != 6 || got.ByHost["s1"] != 2 || got.ByHost["s2"] != 1 || len(got.ByHost) != 2 {
		t.Errorf("three requests under two keys each: %+v", got)
	}
	if got.Marks != 1 || got.Other != 1 || got.Conflicts != 0 {
		t.Errorf("marks %d (want 1), other %d (want 1), conflicts %d (want 0)", got.Marks, got.Other, got.Conflicts)
	}
}

// A request applied twice (by s1, then by s2 after the store lost s1's
// request key, say) is one request with a conflict, not two requests.
func TestCounterAppliedTwice(t *testing.T) {
	c := NewCounter("")
	req := acr("c1;1;0", 0)
	ks := keysOf(t, req)
	c.Add(ks[0], answer(req, "s1"))
	c.Add(ks[1], answer(req, "s2"))
	retry := acr("c1;1;0", 0) // the retransmission, same bytes but for its Hop-by-Hop
	wire.SetHopByHop(retry, 8)
	c.Add(ks[1], answer(retry, "s1"))
	got := c.Counts()
	if got.Requests != 1 || got.Keys != 3 || got.Conflicts != 1 {
		t.Errorf("one request applied three times: %+v, want 1 request, 3 keys, 1 conflicting Session-Id", got)
	}
}
