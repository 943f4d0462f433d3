package peer

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// Stress of the reader hand-over with everything a connection carries:
// requests whose Handlers are fast, slow, or wait for a later request
// on the same connection (as a duplicate waits for its original), DWRs
// between them, and a DPR last. Every request is answered once, every
// DWR once, and the DPA comes after every answer.
func TestHandOverWithWatchdogAndDisconnect(t *testing.T) {
	for _, tc := range []struct {
		name          string
		slowRequests  int32
		maxUnanswered int
	}{
		{"every request on a reader", -1, 64},
		{"workers after a slow one, tight backlog", 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) { handOverWithWatchdogAndDisconnect(t, tc.slowRequests, tc.maxUnanswered) })
	}
}

func handOverWithWatchdogAndDisconnect(t *testing.T, slowRequests int32, maxUnanswered int) {
	const limit = 50 * time.Microsecond
	const n = 2000
	var mu sync.Mutex
	started := make(map[uint32]chan struct{})
	startedCh := func(id uint32) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		ch, ok := started[id]
		if !ok {
			ch = make(chan struct{})
			started[id] = ch
		}
		return ch
	}
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) {
		c.InlineHandlerTime = limit
		c.slowRequests = slowRequests
		c.MaxUnanswered = maxUnanswered
		c.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			id := wire.HopByHop(req)
			close(startedCh(id))
			switch {
			case id%13 == 0 && id+1 < n:
				select { // the next request must be read meanwhile
				case <-startedCh(id + 1):
				case <-ctx.Done():
					return nil
				}
			case id%5 == 0:
				time.Sleep(time.Duration(rand.IntN(4)) * limit)
			}
			return successAnswer(req)
		}
	})
	tc := rawPeer(t, s.Addr().String(), "raw.example.net")
	require.Eventually(t, func() bool {
		ps := s.Peers()
		return len(ps) == 1 && ps[0].State() == watchdog.Okay
	}, 10*time.Second, time.Millisecond)
	req := withAVPs(bareACR(0), goodAVPs("raw.example.net")...)
	far := Config{OriginHost: "raw.example.net", OriginRealm: "example.net", OriginStateID: 1}
	const dwrBase = 1 << 30
	dwrs := 0
	go func() {
		for i := range uint32(n) {
			m := append([]byte(nil), req...)
			wire.SetHopByHop(m, i)
			if tc.WriteMessages(m) != nil {
				return
			}
			if i%10 == 0 {
				d := far.newDWR()
				wire.SetHopByHop(d, dwrBase+i)
				if tc.WriteMessages(d) != nil {
					return
				}
			}
		}
		d := far.newDPR(message.DisconnectBusy)
		wire.SetHopByHop(d, 2*dwrBase)
		_ = tc.WriteMessages(d)
	}()
	for i := range uint32(n) {
		if i%10 == 0 {
			dwrs++
		}
	}
	got := make([]int, n)
	gotDWA := 0
	for {
		m, err := tc.ReadMessage()
		require.NoError(t, err)
		id := wire.HopByHop(m)
		switch wire.CommandCode(m) {
		case wire.CmdDisconnectPeer:
			for i, k := range got {
				require.Equal(t, 1, k, "request %d answered %d times before the DPA", i, k)
			}
			require.Equal(t, dwrs, gotDWA, "DWAs before the DPA")
			return
		case wire.CmdDeviceWatchdog:
			gotDWA++
		default:
			require.Less(t, id, uint32(n))
			got[id]++
		}
	}
}
