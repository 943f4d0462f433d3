package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/throttle"
)

// The ASR5K throttle in front of radius:// servers, through Client, in
// virtual time (carried over from radudp.Client's tests).

// The ASR5K throttle on RADIUS accounting: 10,000 Accounting-Stop
// records released at once, at a max rate of 1,000/s in 50 ms slots,
// reach the server 50 per slot, none dropped; an Access-Request sent in
// the middle of the burst is not held behind it (separate limits per
// class).
func TestUDPAccountingBurstThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		srv := startMemServer(t, n, addrA, nil, nil)
		c := memClient(t, n, memSpecs("a"), func(cfg *Config) {
			cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 1000}}
		})
		var mu sync.Mutex
		slots := map[int64]int{} // 50 ms slot -> records that reached a
		n.setHook(func(_, to string, b []byte) {
			if to == addrA && radius.Code(b) == lradius.CodeAccountingRequest {
				mu.Lock()
				slots[time.Now().UnixNano()/int64(50*time.Millisecond)]++
				mu.Unlock()
			}
		})
		const burst = 10_000
		start := time.Now()
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := range burst {
			wg.Go(func() {
				if _, err := c.Exchange(context.Background(), udpAcctStop(fmt.Sprintf("s%d", i))); err != nil {
					failed.Add(1)
				}
			})
		}
		time.Sleep(time.Second)
		t0 := time.Now()
		if _, err := c.Exchange(context.Background(), udpAccess("alice")); err != nil || time.Since(t0) != 0 {
			t.Errorf("Access-Request during the burst: %v after %v", err, time.Since(t0))
		}
		wg.Wait()
		took := time.Since(start)
		if failed.Load() != 0 || srv.applied.Load() != burst+1 {
			t.Fatalf("%d failed, %d applied; want none failed and all applied", failed.Load(), srv.applied.Load())
		}
		if took < 9950*time.Millisecond || took > 10*time.Second {
			t.Errorf("the burst took %v, want 10 s at 1,000/s", took)
		}
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for k, v := range slots {
			total += v
			if v != 50 {
				t.Errorf("slot +%v carried %d records, want 50", time.Duration(k)*50*time.Millisecond-time.Duration(start.UnixNano()), v)
			}
		}
		if total != burst || len(slots) != 200 {
			t.Errorf("%d records in %d slots, want 10,000 in 200", total, len(slots))
		}
		if st := c.ServerStats()[0]; st.Throttle == nil || st.Throttle.Sent[throttle.Accounting] != burst || st.Throttle.Sent[throttle.Auth] != 1 {
			t.Errorf("throttle stats %+v", st.Throttle)
		}
	})
}

// At most 256 requests of a class are outstanding at a server (one
// socket's Identifier space by default); the rest wait in the throttle's
// queues and go as answers come.
func TestUDPMaxOutstanding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		srv := startMemServer(t, n, addrA, nil, nil)
		srv.gate = make(chan struct{})
		c := memClient(t, n, memSpecs("a"), func(cfg *Config) {
			cfg.UDP.Timeout = time.Minute // no retransmission while the server holds them
			cfg.Throttle = &Throttle{}
		})
		var wg sync.WaitGroup
		for i := range 600 {
			wg.Go(func() {
				if _, err := c.Exchange(context.Background(), udpAcctStop(fmt.Sprintf("s%d", i))); err != nil {
					t.Errorf("request %d: %v", i, err)
				}
			})
		}
		synctest.Wait()
		st := c.ServerStats()[0]
		if got := st.Throttle.Outstanding[throttle.Accounting]; got != 256 || srv.applied.Load() != 256 || c.UDPPeers()[0].Stats().InFlight != 256 {
			t.Errorf("outstanding %d, at the server %d, Identifiers in use %d; want 256 each",
				got, srv.applied.Load(), c.UDPPeers()[0].Stats().InFlight)
		}
		if q := throttleLen(c); q != 600-256 {
			t.Errorf("%d queued in the throttle, want 344", q)
		}
		close(srv.gate)
		wg.Wait()
		if st := c.ServerStats()[0]; st.Answered != 600 || srv.applied.Load() != 600 {
			t.Errorf("answered %d, applied %d, want 600", st.Answered, srv.applied.Load())
		}
	})
}

// A caller that gives up gets its context's error, once; requests whose
// deadline passes while the throttle holds them fail with an error
// matching ErrTimeout and throttle.ErrExpired, each with one error, none
// silently dropped.
func TestUDPCallerDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		srv := startMemServer(t, n, addrA, nil, nil)
		c := memClient(t, n, memSpecs("a"), func(cfg *Config) {
			cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 1}, Slot: time.Second}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
		defer cancel()
		errs := make(chan error, 5)
		for i := range 5 {
			go func() {
				_, err := c.Exchange(ctx, udpAcctStop(fmt.Sprintf("s%d", i)))
				errs <- err
			}()
		}
		var ok, expired, gaveUp int
		for range 5 {
			switch err := <-errs; {
			case err == nil:
				ok++
			case errors.Is(err, throttle.ErrExpired):
				if !errors.Is(err, ErrTimeout) {
					t.Errorf("expired in the queue, yet not a timeout: %v", err)
				}
				expired++
			case errors.Is(err, context.DeadlineExceeded):
				gaveUp++
			default:
				t.Errorf("unexpected error %v", err)
			}
		}
		// One per 1 s slot: the slots at 0, 1 and 2 s carry one each.
		if ok != 3 || ok+expired+gaveUp != 5 || srv.applied.Load() != 3 {
			t.Errorf("%d answered, %d expired in the queue, %d gave up, %d applied; want 3 answered, 2 failed", ok, expired, gaveUp, srv.applied.Load())
		}
		synctest.Wait()
		st := c.ServerStats()[0]
		if st.Answered != 3 || st.Throttle.Depth != 0 || throttleLen(c) != 0 {
			t.Errorf("stats %+v, throttle %+v, %d queued", st, st.Throttle, throttleLen(c))
		}
		c.tmu.Lock()
		counted := c.sched.Expired()
		c.unlockThrottle()
		// Both deadlines pass in the queue; the callers see the throttle's
		// expiry or their context's end, whichever comes first. A caller
		// whose context ended at the same instant may take its request
		// out before the throttle's sweep counts it.
		if counted < uint64(expired) || counted > uint64(expired+gaveUp) {
			t.Errorf("the throttle counted %d expired; the callers got %d expiries and %d ends of their context", counted, expired, gaveUp)
		}
	})
}

// A queue alarm's clearing is published after its raising: a subscriber
// holds the raised alarm while the requests the throttle released go on;
// a second subscriber sees raised, then cleared. A subscriber may read
// the Client's statistics and queue depths from an alarm.
func TestUDPQueueAlarmsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		startMemServer(t, n, addrA, nil, nil)
		bus := NewBus()
		release := make(chan struct{})
		var held atomic.Bool
		var cp atomic.Pointer[Client]
		bus.Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventQueueAlarm {
				_ = cp.Load().ServerStats() // take the throttle's lock: none is held here
				_ = cp.Load().QueueDepths()
				if held.CompareAndSwap(false, true) {
					<-release
				}
			}
		})
		var mu sync.Mutex
		var seen []bool
		bus.Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventQueueAlarm {
				mu.Lock()
				seen = append(seen, e.Raised)
				mu.Unlock()
			}
		})
		c := memClient(t, n, memSpecs("a"), func(cfg *Config) {
			cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 10}, Slot: 100 * time.Millisecond, AlarmHigh: 3, AlarmLow: 1}
			cfg.Events = bus
		})
		cp.Store(c)
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				if _, err := c.Exchange(context.Background(), udpAcctStop(fmt.Sprintf("s%d", i))); err != nil {
					t.Error(err)
				}
			})
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		mu.Lock()
		if len(seen) != 0 {
			t.Errorf("alarms seen raised=%v while the first subscriber holds the raise", seen)
		}
		mu.Unlock()
		if !held.Load() {
			t.Fatal("no alarm raised")
		}
		close(release)
		wg.Wait()
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if want := []bool{true, false}; !slices.Equal(seen, want) {
			t.Errorf("alarms seen raised=%v, want %v", seen, want)
		}
	})
}

// The throttle's queues hold at most MaxQueued requests: past it Exchange
// fails at once with ErrQueueFull, and the requests queued before go on.
func TestUDPMaxQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		srv := startMemServer(t, n, addrA, nil, nil)
		c := memClient(t, n, memSpecs("a"), func(cfg *Config) {
			cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 1}, Slot: time.Second, MaxQueued: 3}
		})
		errs := make(chan error, 4)
		for i := range 4 { // one goes in this slot, three wait
			go func() {
				_, err := c.Exchange(context.Background(), udpAcctStop(fmt.Sprintf("s%d", i)))
				errs <- err
			}()
			synctest.Wait()
		}
		if q := throttleLen(c); q != 3 {
			t.Fatalf("%d queued, want 3", q)
		}
		start := time.Now()
		if _, err := c.Exchange(context.Background(), udpAcctStop("one-too-many")); !errors.Is(err, ErrQueueFull) || time.Since(start) != 0 {
			t.Fatalf("err %v after %v, want ErrQueueFull at once", err, time.Since(start))
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		if st := c.ServerStats()[0]; st.Answered != 4 || srv.applied.Load() != 4 {
			t.Errorf("answered %d, applied %d; want the 4 queued ones", st.Answered, srv.applied.Load())
		}
		if _, err := New(Config{Peers: memSpecs("a"), RADIUS: c.cfg.RADIUS, Throttle: &Throttle{MaxQueued: -1}}); err == nil {
			t.Error("a negative MaxQueued accepted")
		}
	})
}

// throttleLen returns how many requests wait in c's throttle.
func throttleLen(c *Client) int {
	c.tmu.Lock()
	defer c.unlockThrottle()
	return c.sched.Len()
}
