package loadbalance

import (
	"testing"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// FuzzPickFromRequest: the User-Name and Session-Id a client reads from a
// request (any bytes) always pick a server in service, the same one for
// the same request, with every algorithm.
func FuzzPickFromRequest(f *testing.F) {
	f.Add(message.NewRequest(message.CmdAccounting, message.AppAccounting, 0).
		String(message.SessionID, 0, true, "c;1;1").
		String(message.UserName, 0, true, "alice@example.net").Bytes())
	f.Add(message.NewRequest(message.CmdAccounting, message.AppAccounting, 0).
		String(message.UserName, 0, true, "@\x00\xff@@").Bytes())
	f.Add([]byte{})
	algs := []Algorithm{Pearson, Hash, Direct, RoundRobin}
	var bals []*Balancer
	for _, alg := range algs {
		b, err := New(alg, servers(3), Options{})
		if err != nil {
			f.Fatal(err)
		}
		bals = append(bals, b)
	}
	f.Fuzz(func(t *testing.T, req []byte) {
		nai, _ := wire.FindAVP(req, message.UserName, 0)
		sid, _ := wire.FindAVP(req, message.SessionID, 0)
		r := Request{NAI: string(nai), SessionID: string(sid)}
		for i, b := range bals {
			s, err := b.Pick(r)
			if err != nil || s.Index < 0 || s.Index >= 3 {
				t.Fatalf("%v: Pick(%q) = %+v, %v", algs[i], r, s, err)
			}
			if algs[i] == RoundRobin {
				continue
			}
			if again, _ := b.Pick(r); again != s {
				t.Fatalf("%v: Pick(%q) = %s then %s", algs[i], r, s.Name, again.Name)
			}
		}
	})
}
