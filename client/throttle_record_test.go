package client

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/throttle"
)

// A failover's requests that go out through the throttle's queue are one
// failover record, as they are without a throttle, not one record each:
// the failover log (and the events) say "20 moved from a to b", and a
// big failover does not push every earlier record out of the log.
func TestThrottledFailoverIsOneRecord(t *testing.T) {
	for _, throttled := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "throttle"}[throttled], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
				defer n.close()
				cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
				if throttled {
					cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 100}}
				}
				c, err := New(cfg)
				require.NoError(t, err)
				defer c.Close(context.Background())
				waitOkay(t, c)

				n["tcp://a:1"].freeze()
				const N = 20
				errs := make(chan error, N)
				for i := range N {
					go func() {
						_, err := c.Send(context.Background(), acr(i, "user@example.net"))
						errs <- err
					}()
					time.Sleep(time.Millisecond)
				}
				for range N {
					require.NoError(t, <-errs)
				}
				// The throttle's release records its moves once it placed
				// them all: an answer may come back to its caller first.
				synctest.Wait()
				recs, total := c.FailoverLog()
				moved, records := 0, 0
				for _, r := range recs {
					if r.Outcome == Moved && r.From == "a.example.net" && r.To == "b.example.net" {
						moved += r.Moved
						records++
						assert.Len(t, r.EndToEnd, r.Moved, "one End-to-End id a request moved")
					}
				}
				assert.Equal(t, N, moved, "requests moved from a to b: %+v", recs)
				assert.Equal(t, 1, records, "records of the move: %+v", recs)
				assert.Equal(t, uint64(len(recs)), total)
				n["tcp://a:1"].unfreeze()
			})
		})
	}
}
