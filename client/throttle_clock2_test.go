package client

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/throttle"
)

// A context deadline without a monotonic reading (context.WithDeadline
// given a time from time.Unix, a wire timestamp, t.Round(0)) is the wall
// clock's: after the system clock was set back an hour since the Client
// started, a request whose deadline is 5 s away is sent and answered.
func TestThrottleWallOnlyDeadlineAcrossAClockStep(t *testing.T) {
	step := -time.Hour
	testHookEpoch = func(e time.Time) time.Time { return shiftWall(e, -step) }
	defer func() { testHookEpoch = nil }()
	b := newAnsweringUDP(t)
	c := udpClient(t, Balance, []PeerSpec{{URL: b.url()}}, func(cfg *Config) {
		cfg.Throttle = &Throttle{Auth: throttle.Limits{MaxRate: 100}}
		cfg.RequestTimeout = 10 * time.Second
	})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(5*time.Second).Round(0))
	defer cancel()
	t0 := time.Now()
	_, err := c.Exchange(ctx, udpAccess("wall-only deadline"))
	require.NoError(t, err, "a request whose deadline is 5 s away, failed after %v", time.Since(t0))
}

// The policy's events from the dispatcher (a hold-down's end, a probe)
// carry the wall clock's time, as the others do, also after the system
// clock was set back an hour since the Client started.
func TestPolicyEventTimeIsWallClockAcrossAClockStep(t *testing.T) {
	testHookEpoch = func(e time.Time) time.Time { return shiftWall(e, time.Hour) } // the wall clock set back an hour since
	defer func() { testHookEpoch = nil }()
	a, b := newSilentUDP(t), newAnsweringUDP(t)
	var mu sync.Mutex
	var got []Event
	bus := NewBus()
	bus.Subscribe(func(_ context.Context, e Event) {
		if e.Kind == EventPolicy {
			mu.Lock()
			got = append(got, e)
			mu.Unlock()
		}
	})
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: a.url()}, {URL: b.url()}}, func(cfg *Config) {
		cfg.Events = bus
		cfg.Policy = &policy.Config{RequestTimeout: 100 * time.Millisecond, Retries: 1, HoldDown: 300 * time.Millisecond}
		cfg.RequestTimeout = 5 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, _ = c.Exchange(ctx, udpAccess("x"))
	time.Sleep(800 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, got)
	for _, e := range got {
		t.Logf("%s: %s->%s (%s), stamped %v from now", e.Server, e.Policy.From, e.Policy.To, e.Reason, e.Time.Round(0).Sub(time.Now().Round(0)).Round(time.Millisecond))
	}
	for _, e := range got {
		require.InDelta(t, 0, float64(time.Now().Round(0).Sub(e.Time.Round(0))), float64(time.Minute), "event %s->%s stamped off the wall clock", e.Policy.From, e.Policy.To)
	}
}
