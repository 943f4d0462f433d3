package peer

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// A client that sent a DPR while a Handler still runs for it, and then
// sends more DPRs: the held DPA has one timer (DPATimeout), not one per
// DPR. Before, each DPR armed a timer of its own, so a client could pile
// up timers (and, when they fired together, goroutines) at the rate it
// sent DPRs, for DPATimeout.
func TestDPRStormHoldsOneDPATimer(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) {
		c.DPATimeout = 30 * time.Second
		c.InlineHandlerTime = -1 // every request on a worker: the reader goes on
		c.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return acctHandler(ctx, p, req)
		}
	})
	defer close(release)
	tc, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
	require.NoError(t, err)
	defer tc.Close()
	cfg := clientConfig("client.example.net")
	cfg.AcctApps = []uint32{message.AppAccounting}
	require.NoError(t, tc.WriteMessages(cfg.newCER(tc.LocalAddr())))
	cea, err := tc.ReadMessage()
	require.NoError(t, err)
	rc, _ := message.ResultCodeOf(cea)
	require.Equal(t, uint32(message.Success), rc)
	req := acr()
	wire.SetHopByHop(req, 1)
	require.NoError(t, tc.WriteMessages(req))
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not start")
	}
	var c *conn
	for _, p := range s.Peers() {
		if cur := p.cur.Load(); cur != nil {
			c = cur
		}
	}
	require.NotNil(t, c)
	before := liveHeap()
	const n = 100_000
	batch := make([][]byte, 0, 1000)
	for i := 0; i < n; i += cap(batch) {
		batch = batch[:0]
		for j := range cap(batch) {
			m := cfg.newDPR(message.DisconnectRebooting)
			wire.SetHopByHop(m, uint32(2+i+j))
			batch = append(batch, m)
		}
		require.NoError(t, tc.WriteMessages(batch...))
	}
	// Every DPR read: the server's received count.
	deadline := time.Now().Add(20 * time.Second)
	for s.Peers()[0].Stats().Received < n+1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.GreaterOrEqual(t, s.Peers()[0].Stats().Received, uint64(n+1), "the server read every DPR")
	grew := liveHeap() - before
	t.Logf("heap grew %.1f MB over %d DPRs held", float64(grew)/(1<<20), n)
	assert.Less(t, grew, int64(4<<20), "the DPRs of one connection hold a bounded amount of memory until the DPA")
}

// liveHeap collects garbage and returns the bytes of heap still in use.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
