package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/throttle"
)

func probeUDPStress(t *testing.T, seed uint64, throttled bool) {
	rng := rand.New(rand.NewPCG(seed, 5))
	n := newMemNet()
	names := []string{"a", "b", "c", "d"}
	for _, name := range names {
		startMemServer(t, n, name+":1812", nil, nil)
	}
	all := memSpecs(names...)
	c := memClient(t, n, all[:2], func(cfg *Config) {
		cfg.RequestTimeout = 30 * time.Second
		if throttled {
			cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 100, MaxOutstanding: 10}, AlarmHigh: 10, AlarmLow: 2}
		}
	})
	synctest.Wait()
	var lateEvents atomic.Int64
	c.Events().Subscribe(func(_ context.Context, e Event) {
		select {
		case <-c.Done():
			lateEvents.Add(1)
			t.Logf("late event at %v: %s %v %s", time.Now().Format("15:04:05.000"), e.Server, e.Kind, e.Reason)
		default:
		}
	})
	stop := make(chan struct{})
	waitCallers := stressCallers(seed, stop, func(ctx context.Context, id int, r *rand.Rand) error {
		_, err := c.Exchange(ctx, udpAcctStop("s"+strconv.Itoa(id)))
		return err
	})
	hung := map[string]bool{}
	end := time.Now().Add(time.Duration(20+rng.IntN(40)) * time.Second)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Millisecond)
		switch rng.IntN(3) {
		case 0, 1:
			k := 1 + rng.IntN(len(all))
			var specs []PeerSpec
			for _, i := range rng.Perm(len(all))[:k] {
				s := all[i]
				s.Weight = 1 + rng.IntN(3)
				if rng.IntN(6) == 0 {
					s.Secret = []byte("other") // replaced (and wrong: no reply)
				}
				specs = append(specs, s)
			}
			if _, err := c.SetPeers(context.Background(), specs); err != nil {
				t.Errorf("seed %d: SetPeers: %v", seed, err)
			}
		case 2:
			a := names[rng.IntN(len(names))] + ":1812"
			hung[a] = !hung[a]
			n.setHung(a, hung[a])
		}
	}
	closeStart := time.Now()
	c.Close(context.Background())
	closedAt := time.Now()
	go func() { <-c.Done(); t.Logf("Done at %v", time.Now().Format("15:04:05.000")) }()
	t.Logf("Close from %v to %v", closeStart.Format("15:04:05.000"), closedAt.Format("15:04:05.000"))
	close(stop)
	results := waitCallers()
	select {
	case <-c.Done():
	case <-time.After(time.Minute):
		t.Errorf("seed %d: Done not closed", seed)
	}
	if _, err := c.Exchange(context.Background(), udpAcctStop("after")); !errors.Is(err, ErrClosed) {
		t.Errorf("seed %d: Exchange after Close: %v", seed, err)
	}
	time.Sleep(time.Minute)
	synctest.Wait()
	if k := lateEvents.Load(); k > 0 {
		t.Errorf("seed %d: %d events after Done", seed, k)
	}
	kinds := map[string]int{}
	const slack = 10 * time.Millisecond
	for _, r := range results {
		kind := "ok"
		switch {
		case r.err == nil:
		case errors.Is(r.err, ErrClosed):
			kind = "closed"
		case errors.Is(r.err, context.Canceled):
			kind = "canceled"
		case errors.Is(r.err, ErrNoPeer):
			kind = "nopeer"
		case errors.Is(r.err, ErrTimeout):
			kind = "timeout"
		case errors.Is(r.err, throttle.ErrExpired):
			kind = "expired"
		default:
			kind = "other: " + r.err.Error()
			if len(kind) > 90 {
				kind = kind[:90]
			}
		}
		kinds[kind]++
		if r.at.After(r.deadline.Add(slack)) {
			t.Errorf("seed %d: request %d returned %v after its deadline (err %v)", seed, r.id, r.at.Sub(r.deadline), r.err)
		}
		if r.start.Before(closeStart) && r.at.After(closedAt.Add(slack)) {
			t.Errorf("seed %d: request %d returned %v after Close returned (err %v)", seed, r.id, r.at.Sub(closedAt), r.err)
		}
		if kind == "canceled" && !r.canceled {
			t.Errorf("seed %d: request %d canceled but not by its caller", seed, r.id)
		}
	}
	keys := slices.Sorted(func(y func(string) bool) {
		for k := range kinds {
			if !y(k) {
				return
			}
		}
	})
	for _, k := range keys {
		t.Logf("seed %d: %5d %s", seed, kinds[k], k)
	}
	t.Logf("seed %d: Close took %v", seed, closedAt.Sub(closeStart))
}

// TestLifecycleStressUDP is TestLifecycleStress for radius:// servers,
// with and without a throttle.
func TestLifecycleStressUDP(t *testing.T) {
	for _, throttled := range []bool{false, true} {
		for _, seed := range stressSeeds() {
			t.Run(fmt.Sprintf("%v/%d", throttled, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { probeUDPStress(t, seed, throttled) })
			})
		}
	}
}
