package client

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/throttle"
)

// A request queued behind the throttle when Close runs is failed by
// Close with ErrClosed, as the requests waiting for a peer are: it does
// not wait for its deadline after Close has returned.
func TestThrottleQueuedFailsAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net")}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 20}, Slot: 50 * time.Millisecond} // 1 a slot
		c, err := New(cfg)
		require.NoError(t, err)
		waitOkay(t, c)
		const N = 50
		type res struct {
			err error
			at  time.Time
		}
		out := make(chan res, N)
		for i := range N {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := c.Send(ctx, acr(i, "u@example.net"))
				out <- res{err, time.Now()}
			}()
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		require.NoError(t, c.Close(context.Background()))
		closedAt := time.Now()
		<-c.Done()
		var closed, ok, other int
		var late time.Duration
		for range N {
			r := <-out
			switch {
			case r.err == nil:
				ok++
			case errors.Is(r.err, ErrClosed):
				closed++
			default:
				other++
				t.Logf("error: %v", r.err)
			}
			late = max(late, r.at.Sub(closedAt))
		}
		t.Logf("ok %d closed %d other %d, last returned %v after Close", ok, closed, other, late)
		assert.Zero(t, other, "every request queued at Close fails with ErrClosed")
		assert.LessOrEqual(t, late, time.Duration(0), "a request returned after Close had returned")
	})
}

// Send after Close fails at once with ErrClosed, also with a throttle.
func TestSendAfterCloseThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net")}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 20}, Slot: 50 * time.Millisecond}
		c, err := New(cfg)
		require.NoError(t, err)
		waitOkay(t, c)
		require.NoError(t, c.Close(context.Background()))
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err = c.Send(ctx, acr(1, "u"))
		assert.ErrorIs(t, err, ErrClosed)
		assert.Less(t, time.Since(start), time.Second, "Send after Close waited")
	})
}
