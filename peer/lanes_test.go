package peer

import (
	"context"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Accounting Handlers stuck on a slow store hold only the accounting
// lane: other requests on the same connection are still answered, and
// accounting past the lane's bound is answered DIAMETER_TOO_BUSY at once
// (so that the client tries another server) instead of waiting without
// bound. Before, the connection's workers took any request, so the stuck
// accounting filled its backlog and the reader stopped for every kind.
func TestAccountingStuckOtherRequestsAnswered(t *testing.T) {
	release := make(chan struct{})
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) {
		c.AcctApps = []uint32{message.AppAccounting}
		c.AuthApps = []uint32{4}
		c.InlineHandlerTime = -1 // every Handler on a worker
		c.MaxHandlers, c.MaxQueuedHandlers = 2, 2
		c.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			if wire.CommandCode(req) == message.CmdAccounting {
				select {
				case <-release:
				case <-ctx.Done():
					return nil
				}
			}
			return message.NewAnswer(req).ResultCode(message.Success).Bytes()
		}
	})
	tc := rawPeer(t, s.Addr().String(), "raw.example.net")
	tc.(transport.ReadDeadliner).SetReadDeadline(time.Now().Add(10 * time.Second))
	acr := withAVPs(bareACR(wire.FlagProxiable), goodAVPs("raw.example.net")...)
	for i := range 5 {
		m := append([]byte(nil), acr...)
		wire.SetHopByHop(m, uint32(100+i))
		require.NoError(t, tc.WriteMessages(m))
	}
	ans, err := tc.ReadMessage()
	require.NoError(t, err)
	rc, _ := message.ResultCodeOf(ans)
	assert.Equal(t, uint32(104), wire.HopByHop(ans), "the fifth ACR is answered first: 2 run, 2 wait, it is refused")
	assert.Equal(t, uint32(message.TooBusy), rc)
	ccr := withAVPs(message.NewRequest(272, 4, wire.FlagProxiable).Bytes(), goodAVPs("raw.example.net")...)
	for i := range 10 {
		m := append([]byte(nil), ccr...)
		wire.SetHopByHop(m, uint32(200+i))
		require.NoError(t, tc.WriteMessages(m))
		ans, err := tc.ReadMessage()
		require.NoError(t, err)
		rc, _ := message.ResultCodeOf(ans)
		assert.Equal(t, uint32(200+i), wire.HopByHop(ans))
		assert.Equal(t, uint32(message.Success), rc, "request %d of another kind answered while accounting is stuck", i)
	}
	assert.Equal(t, uint64(1), s.Peers()[0].Stats().Overload)
	close(release)
	for range 4 {
		ans, err := tc.ReadMessage()
		require.NoError(t, err)
		rc, _ := message.ResultCodeOf(ans)
		assert.Equal(t, uint32(message.Success), rc, "ACR %d answered once released", wire.HopByHop(ans))
	}
}

// The Server's connections take turns on its handler lanes: one that
// pipelines more than the lane holds gets the refusals, and another
// connection's request is answered, not refused, nor kept waiting behind
// the first one's backlog. Before, the lanes were one queue in arrival
// order: the second connection's request found the queue full of the
// first one's and was answered DIAMETER_TOO_BUSY.
func TestHandlerLanesConnectionsTakeTurns(t *testing.T) {
	release := make(chan struct{})
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) {
		c.AcctApps = []uint32{message.AppAccounting}
		c.InlineHandlerTime = -1 // every Handler on a worker
		c.MaxHandlers, c.MaxQueuedHandlers = 1, 4
		c.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			select {
			case <-release:
			case <-ctx.Done():
				return nil
			}
			return message.NewAnswer(req).ResultCode(message.Success).Bytes()
		}
	})
	greedy := rawPeer(t, s.Addr().String(), "greedy.example.net")
	good := rawPeer(t, s.Addr().String(), "good.example.net")
	for _, tc := range []transport.Conn{greedy, good} {
		tc.(transport.ReadDeadliner).SetReadDeadline(time.Now().Add(10 * time.Second))
	}
	answer := func(tc transport.Conn) (hbh, rc uint32) {
		t.Helper()
		ans, err := tc.ReadMessage()
		require.NoError(t, err)
		rc, _ = message.ResultCodeOf(ans)
		return wire.HopByHop(ans), rc
	}
	send := func(tc transport.Conn, host string, hbh uint32) {
		t.Helper()
		m := withAVPs(bareACR(wire.FlagProxiable), goodAVPs(host)...)
		wire.SetHopByHop(m, hbh)
		wire.SetEndToEnd(m, hbh)
		require.NoError(t, tc.WriteMessages(m))
	}
	for i := range 8 { // 100 runs, 101-104 wait, 105-107 refused
		send(greedy, "greedy.example.net", uint32(100+i))
	}
	busy := map[uint32]bool{}
	for range 3 {
		hbh, rc := answer(greedy)
		require.Equal(t, uint32(message.TooBusy), rc)
		busy[hbh] = true
	}
	assert.Equal(t, map[uint32]bool{105: true, 106: true, 107: true}, busy)
	send(good, "good.example.net", 200)
	hbh, rc := answer(greedy)
	assert.Equal(t, uint32(104), hbh, "the greedy connection's newest waiting request made room")
	assert.Equal(t, uint32(message.TooBusy), rc)
	close(release)
	hbh, rc = answer(good)
	assert.Equal(t, uint32(200), hbh)
	assert.Equal(t, uint32(message.Success), rc, "the other connection's request is answered")
	for _, want := range []uint32{100, 101, 102, 103} {
		hbh, rc := answer(greedy)
		assert.Equal(t, want, hbh, "the greedy connection's requests answered in order")
		assert.Equal(t, uint32(message.Success), rc)
	}
	var overload uint64
	for _, p := range s.Peers() {
		overload += p.Stats().Overload
	}
	assert.Equal(t, uint64(4), overload, "each refusal counted")
}
