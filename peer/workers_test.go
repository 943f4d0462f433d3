package peer

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// A blocked Handler holds one goroutine only: the reading moves off it to
// a new reader, the requests behind it on the same connection are
// answered meanwhile, by workers that end once no request waits, so the
// idle connection is left with its reader alone.
func TestSlowHandlerDoesNotBlockTheConnection(t *testing.T) {
	release := make(chan struct{})
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) {
		c.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			if wire.HopByHop(req) == 0 {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return message.NewAnswer(req).ResultCode(message.Success).Bytes()
		}
	})
	tc := rawPeer(t, s.Addr().String(), "raw.example.net")
	require.Eventually(t, func() bool { return len(s.Peers()) == 1 }, 10*time.Second, time.Millisecond)
	sp := s.Peers()[0]
	require.Eventually(t, func() bool { return sp.cur.Load() != nil }, 10*time.Second, time.Millisecond)
	// A request read before the server's side is OKAY goes to a worker
	// (the Peer is OKAY a moment after writing the CEA): request 0 must
	// run on the reader.
	require.Eventually(t, func() bool { return sp.State() == watchdog.Okay }, 10*time.Second, time.Millisecond)
	c := sp.cur.Load()
	idle := runtime.NumGoroutine()
	assert.Zero(t, c.p.cfg.lanes.workers(), "no worker before any request")

	req := withAVPs(bareACR(0), goodAVPs("raw.example.net")...)
	const fast = 200
	for i := range fast + 1 {
		m := append([]byte(nil), req...)
		wire.SetHopByHop(m, uint32(i)) // 0 blocks
		require.NoError(t, tc.WriteMessages(m))
	}
	for range fast {
		ans, err := tc.ReadMessage()
		require.NoError(t, err)
		require.NotZero(t, wire.HopByHop(ans), "the blocked request was answered before its release")
	}
	assert.Equal(t, uint64(1), c.handovers.Load(), "the blocked Handler's reading moved to a new reader")
	close(release)
	ans, err := tc.ReadMessage()
	require.NoError(t, err)
	assert.Zero(t, wire.HopByHop(ans))

	require.Eventually(t, func() bool { return c.p.cfg.lanes.workers() == 0 }, 10*time.Second, time.Millisecond,
		"workers end once no request waits")
	// The old reader ends a moment after writing the blocked request's
	// answer, the writer after its last batch: wait for them (counting
	// here, not in a condition that Eventually runs on a goroutine of
	// its own). The count judged is the one the loop read: a timer's
	// goroutine that comes and goes between two reads (a DWR due, a
	// closing peer of an earlier test) made a second read fail the test
	// after the first had passed.
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(10 * time.Second); n > idle && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(time.Millisecond)
	}
	if !assert.LessOrEqual(t, n, idle, "the idle connection keeps no extra goroutine") {
		buf := make([]byte, 1<<20)
		t.Logf("%s", buf[:runtime.Stack(buf, true)])
	}
	assert.Less(t, c.p.cfg.lanes.started(), uint64(fast+1), "workers ran several requests each")
	t.Logf("%d workers started for %d requests", c.p.cfg.lanes.started(), fast+1)
}

// workers returns the worker goroutines of both lanes now.
func (l *handlerLanes) workers() int { return l.acct.Workers() + l.other.Workers() }

// started returns how many worker goroutines both lanes started so far.
func (l *handlerLanes) started() uint64 { return l.acct.Started() + l.other.Started() }
