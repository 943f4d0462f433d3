package client

import (
	"testing"
	"testing/synctest"
	"time"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/radius"
)

// An accounting record that server a applied but whose answers were lost
// is retransmitted to a (its duplicate cache answers, lost again), then
// fails over to b, which shares a's store (radpeer.Dedup): b answers from
// the store, and the record is applied once, re-signed with each server's
// secret. The failover is recorded once.
func TestUDPAccountingFailoverAppliedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		store := dedup.NewMemory()
		defer store.Close()
		a := startMemServer(t, n, "a:1813", []byte("secret-a"), store)
		b := startMemServer(t, n, "b:1813", []byte("secret-b"), store)
		n.loseAnswersFrom("a:1813")
		c := memClient(t, n, []PeerSpec{
			{Name: "a", URL: "radius://a:1813", Secret: []byte("secret-a")},
			{Name: "b", URL: "radius://b:1813", Secret: []byte("secret-b")},
		}, func(cfg *Config) { cfg.Algorithm = loadbalance.Direct })
		rec := udpAcctStop("sess-42")
		rec.Attributes.Add(radius.AttrEventTimestamp, lradius.Attribute([]byte{0x66, 1, 2, 3}))
		start := time.Now()
		resp, err := c.Exchange(t.Context(), rec)
		if err != nil || resp.Server != "radius://b:1813" || resp.Packet.Code != lradius.CodeAccountingResponse {
			t.Fatalf("resp %+v err %v; want b's Accounting-Response", resp, err)
		}
		if took := time.Since(start); took != 9*time.Second {
			t.Errorf("answered after %v, want 9 s: a's 3 attempts, then b at once", took)
		}
		if a.applied.Load() != 1 || b.applied.Load() != 0 {
			t.Errorf("applied by a %d, by b %d; want once, by a", a.applied.Load(), b.applied.Load())
		}
		if st := a.Stats(); st.Resent != 2 {
			t.Errorf("a's cache answered %d copies, want the 2 retransmissions", st.Resent)
		}
		if st := b.Stats(); st.Received != 1 || st.Answered != 1 {
			t.Errorf("b received %d, answered %d; want the one failed-over copy", st.Received, st.Answered)
		}
		synctest.Wait() // the failover record follows the hand-over
		recs, total := c.FailoverLog()
		if total != 1 || recs[0].From != "a" || recs[0].To != "b" || recs[0].Outcome != Moved || recs[0].Moved != 1 {
			t.Errorf("failover records %+v, want one move from a to b", recs)
		}
		if st := c.ServerStats(); st[0].FailedOver != 1 || st[0].Answered != 1 || st[1].Sent != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}
