package client

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/throttle"
)

// shiftWall returns t with its wall clock reading moved by d (whole
// seconds) and its monotonic reading unchanged: what time.Now() read
// before a step of the system clock by -d looks like after it.
func shiftWall(t time.Time, d time.Duration) time.Time {
	type tm struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	p := (*tm)(unsafe.Pointer(&t))
	if p.wall&(1<<63) == 0 {
		panic("no monotonic reading")
	}
	p.wall = uint64(int64(p.wall) + int64(d/time.Second)<<30)
	return t
}

// The throttle's readings and deadlines are of one clock that does not
// step: after the system clock was set forward or back by an hour since
// the Client started, throttled requests (with and without a deadline of
// their own, with a rate limit) are sent and answered as before.
func TestThrottleAcrossAClockStep(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			testHookEpoch = func(e time.Time) time.Time { return shiftWall(e, -step) }
			defer func() { testHookEpoch = nil }()
			b := newAnsweringUDP(t)
			c := udpClient(t, Balance, []PeerSpec{{URL: b.url()}}, func(cfg *Config) {
				cfg.Throttle = &Throttle{Auth: throttle.Limits{MaxRate: 100}}
				cfg.RequestTimeout = 10 * time.Second
			})
			stepped := time.Now().UnixNano() - c.epoch.UnixNano() - int64(time.Since(c.epoch))
			require.InDelta(t, float64(step), float64(stepped), float64(time.Second), "the wall clock stepped since the Client started")
			for i := range 20 {
				t0 := time.Now()
				_, err := c.Exchange(context.Background(), udpAccess("no deadline"))
				require.NoError(t, err, "request %d without a deadline, failed after %v", i, time.Since(t0))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err = c.Exchange(ctx, udpAccess("deadline"))
				cancel()
				require.NoError(t, err, "request %d with a deadline, failed after %v", i, time.Since(t0))
				// Milliseconds at 100 per second; the slack is for a
				// loaded machine (CI took 2.1 s once). A throttle that
				// read the stepped clock would wait an hour, or fail.
				require.Less(t, time.Since(t0), 5*time.Second, "request %d: two requests at 100 per second", i)
			}
		})
	}
}
