package peer

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
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

// heldClose is a connection whose Close, once held, waits until let
// closes: a TLS socket's close_notify to a peer that does not read.
type heldClose struct {
	transport.Conn
	hold    atomic.Bool
	started chan struct{} // closed by the first held Close
	once    sync.Once
	let     chan struct{}
}

func (c *heldClose) Close() error {
	if c.hold.Load() {
		c.once.Do(func() { close(c.started) })
		<-c.let
	}
	return c.Conn.Close()
}

// The watchdog closes a hung peer's connection after the Peer's lock: a
// socket slow to close holds no lock, and the Peer's state is read and
// changed meanwhile.
func TestSlowSocketCloseHoldsNoLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		hc := &heldClose{started: make(chan struct{}), let: make(chan struct{})}
		defer func() {
			select {
			case <-hc.let:
			default:
				close(hc.let)
			}
		}()
		cfg := clientConfig("client.example.net")
		dial := f.dialer()
		cfg.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			tc, err := dial(ctx, url)
			if err != nil || hc.Conn != nil {
				return tc, err
			}
			hc.Conn = tc
			return hc, nil
		}
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, watchdog.Okay, p.State())
		f.answerDWR.Store(false)
		hc.hold.Store(true)
		time.Sleep(3*cfg.Watchdog.Twinit + time.Millisecond) // DWR, SUSPECT, DOWN: the watchdog closes the connection
		<-hc.started
		synctest.Wait()
		if !p.mu.TryLock() {
			t.Fatal("the Peer's lock is held while its socket closes")
		}
		p.mu.Unlock()
		assert.Equal(t, watchdog.Down, p.State())
		close(hc.let)
		require.NoError(t, p.Close(context.Background()))
	})
}
