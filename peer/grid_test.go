package peer

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/watchdog"
)

// Tw deadlines fall on timerGrid in wall-clock time, so that many peers'
// timers fire together, and never outside Twinit +/- MaxJitter, not even
// for the extreme draws.
func TestTwDeadlinesOnGrid(t *testing.T) {
	for _, twinit := range []time.Duration{0, watchdog.MinTwinit, 30 * time.Second, 45*time.Second + 17*time.Millisecond} {
		cfg := clientConfig("client.example.net")
		cfg.Watchdog.Twinit = twinit
		p, err := newPeer(cfg, RoleClient, "tcp://127.0.0.1:3868", "x")
		require.NoError(t, err)
		// Odd epochs, as peers created at any instant have.
		p.epochWall += rand.Int64N(int64(time.Second))
		if twinit == 0 {
			twinit = watchdog.DefaultTwinit
		}
		g := int64(timerGrid)
		lo, hi := twinit-watchdog.MaxJitter, twinit+watchdog.MaxJitter
		for i := range 10000 {
			base := rand.Int64N(int64(time.Hour))
			d := lo + time.Duration(rand.Int64N(int64(hi-lo)+1))
			switch i {
			case 0:
				d = lo
			case 1:
				d = hi
			}
			at := p.onGrid(base, d)
			require.Zero(t, (p.epochWall+at)%g, "on the grid: Twinit %v base %d d %v", twinit, base, d)
			require.GreaterOrEqual(t, at-base, int64(lo), "Tw below Twinit-MaxJitter: base %d d %v", base, d)
			require.LessOrEqual(t, at-base, int64(hi), "Tw above Twinit+MaxJitter: base %d d %v", base, d)
			require.LessOrEqual(t, max(at-(base+int64(d)), base+int64(d)-at), g, "moved by more than one step: base %d d %v", base, d)
		}
	}
}
