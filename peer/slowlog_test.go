package peer

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Logger that does not return holds no lock of the Peer: its lines wait
// on the notice queue while requests are answered and the watchdog goes
// on.
func TestSlowLoggerHoldsNoLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		var h testhelp.HeldLog
		h.Hold()
		defer h.Release()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Logger = slog.New(&h)
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		require.NotZero(t, h.Waiting(), "the INITIAL > OKAY line is held")
		// A goroutine waiting on a mutex would keep the bubble from ever
		// being idle: look at the lock itself.
		if !p.mu.TryLock() {
			t.Fatal("the Peer's lock is held while the Logger holds a line")
		}
		p.mu.Unlock()
		answered := false
		go func() {
			_, err := p.Request(context.Background(), acr())
			answered = err == nil
		}()
		synctest.Wait()
		assert.True(t, answered, "a request was not answered while the Logger held a line")
		time.Sleep(cfg.Watchdog.Twinit + time.Millisecond)
		synctest.Wait()
		assert.Len(t, f.dwrTimes(), 1, "no DWR at Tw while the Logger held a line")
		h.Release()
		require.NoError(t, p.Close(context.Background()))
		assert.Contains(t, h.Msgs(), "watchdog")
	})
}
