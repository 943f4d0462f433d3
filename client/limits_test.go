package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
)

// Q1: a burst of requests against 100/s in 50 ms slots goes out at most 5
// per slot, evenly, oldest first, none lost (counted where the server
// reads them).
func TestThrottleRateSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer("a.example.net")
		n := network{"tcp://a:1": srv}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 100}, Slot: 50 * time.Millisecond}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()

		const N = 300
		var wg sync.WaitGroup
		var failed atomic.Int32
		for i := range N {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Send(context.Background(), acr(i, "u@example.net")); err != nil {
					failed.Add(1)
				}
			}()
			time.Sleep(time.Microsecond) // a definite order
		}
		wg.Wait()
		assert.Zero(t, failed.Load(), "none lost")
		got := srv.received()
		require.Len(t, got, N)
		perSlot := map[int64]int{}
		for _, s := range got {
			perSlot[s.at.UnixNano()/int64(50*time.Millisecond)]++
		}
		for slot, k := range perSlot {
			assert.LessOrEqual(t, k, 5, "slot %d", slot)
		}
		assert.GreaterOrEqual(t, len(perSlot), N/5, "spread over at least N/5 slots")
		span := got[N-1].at.Sub(got[0].at)
		assert.InDelta(t, float64(3*time.Second), float64(span), float64(150*time.Millisecond), "300 at 100/s take 3 s")
		for i := 1; i < N; i++ {
			assert.Less(t, got[i-1].e2e, got[i].e2e, "oldest first")
		}
	})
}

// Q2: the outstanding limit is never exceeded, checked at the server.
func TestThrottleMaxOutstanding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer("a.example.net")
		var inFlight, peak atomic.Int32
		base := srv.handler
		srv.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			now := inFlight.Add(1)
			for {
				old := peak.Load()
				if now <= old || peak.CompareAndSwap(old, now) {
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
			inFlight.Add(-1)
			return base(ctx, p, req)
		}
		n := network{"tcp://a:1": srv}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 8}}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Send(context.Background(), acr(i, "u@example.net"))
				assert.NoError(t, err)
			}()
		}
		wg.Wait()
		assert.Equal(t, int32(8), peak.Load(), "the server saw exactly the limit in flight, never more")
	})
}

// Q4: the queue alarm is raised at its high mark and cleared at its low.
func TestThrottleQueueAlarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer("a.example.net")
		n := network{"tcp://a:1": srv}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 20}, AlarmHigh: 10, AlarmLow: 2}
		cfg.Events = NewBus()
		var mu sync.Mutex
		var alarms []Event
		cfg.Events.Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventQueueAlarm {
				mu.Lock()
				alarms = append(alarms, e)
				mu.Unlock()
			}
		})
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.Send(context.Background(), acr(i, "u@example.net"))
			}()
		}
		synctest.Wait()
		q := c.QueueDepths()
		require.Len(t, q, 1)
		assert.True(t, q[0].Alarm, "raised while the queue is deep")
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, alarms, 2)
		assert.True(t, alarms[0].Raised)
		assert.Equal(t, 10, alarms[0].Depth)
		assert.False(t, alarms[1].Raised)
		assert.Equal(t, 2, alarms[1].Depth)
		assert.Equal(t, "a.example.net", alarms[0].Server)
		assert.Contains(t, alarms[0].Reason, "raised at depth 10")
		assert.Equal(t, uint64(2), cfg.Events.Count(EventQueueAlarm))
		assert.False(t, c.QueueDepths()[0].Alarm)
	})
}

// A subscriber may call the Client's read-only methods from a queue
// alarm, QueueDepths included: the alarm is published once the throttle's
// lock is let go. Before, it was published under that lock and
// QueueDepths, which takes it, deadlocked. Real time, outside a bubble: a
// goroutine blocked on a mutex is not durably blocked, and a bubble would
// hang instead of failing.
func TestQueueAlarmSubscriberReadsDepths(t *testing.T) {
	srv := newFakeServer("a.example.net")
	n := network{"tcp://a:1": srv}
	defer n.close()
	cfg := clientConfig(n, Balance, "tcp://a:1")
	// One request outstanding at a time, the server frozen: the other
	// nine queue (one raise), and drain once it thaws (one clear), however
	// slowly the machine starts the callers.
	cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 1}, AlarmHigh: 3, AlarmLow: 1}
	cfg.Events = NewBus()
	var cp atomic.Pointer[Client]
	var mu sync.Mutex
	var depths []QueueDepth // what the subscriber read, alarm by alarm
	cfg.Events.Subscribe(func(_ context.Context, e Event) {
		if e.Kind != EventQueueAlarm {
			return
		}
		q := cp.Load().QueueDepths()
		mu.Lock()
		depths = append(depths, q[0])
		mu.Unlock()
	})
	c, err := New(cfg)
	require.NoError(t, err)
	cp.Store(c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.WaitReady(ctx, 1))
	srv.freeze()
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() { c.Send(ctx, acr(i, "u@example.net")) })
	}
	queued := make(chan struct{})
	go func() {
		for ctx.Err() == nil && c.QueueDepths()[0].Depth < 9 {
			time.Sleep(time.Millisecond)
		}
		close(queued)
	}()
	select {
	case <-queued:
	case <-time.After(5 * time.Second):
		t.Fatal("nine requests not queued behind the outstanding one: a subscriber calling QueueDepths from an alarm deadlocked")
	}
	srv.unfreeze()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("requests stuck: a subscriber calling QueueDepths from an alarm deadlocked") // and so would Close
	}
	c.Close(context.Background())
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, depths, 2, "raised, then cleared")
	assert.True(t, depths[0].Alarm, "the depths read after the raise show it")
	assert.False(t, depths[1].Alarm, "and after the clear")
}

// muted makes f answer nothing while the returned flag is set.
func muted(f *fakeServer) *atomic.Bool {
	var mute atomic.Bool
	base := f.handler
	f.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		if mute.Load() {
			return nil
		}
		return base(ctx, p, req)
	}
	return &mute
}

// policyPair returns the configuration of a primary/secondary Client of
// a.example.net and b.example.net with a policy (request timeout 1 s, 2
// retries, hold-down 20 s) and a bus, server a, and the switch that
// mutes a.
func policyPair(t *testing.T) (Config, *fakeServer, *atomic.Bool) {
	a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
	n := network{"tcp://a:1": a, "tcp://b:1": b}
	t.Cleanup(n.close)
	cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
	cfg.Policy = &policy.Config{RequestTimeout: time.Second, Retries: 2, HoldDown: 20 * time.Second}
	cfg.Events = NewBus()
	return cfg, a, muted(a)
}

// throttledPair returns the configuration of a primary/secondary Client
// of a.example.net and b.example.net whose throttle lets maxOut
// accounting requests be outstanding at each, and the two servers, closed
// with the test.
func throttledPair(t *testing.T, maxOut int) (Config, *fakeServer, *fakeServer) {
	a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
	n := network{"tcp://a:1": a, "tcp://b:1": b}
	t.Cleanup(n.close)
	cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
	cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: maxOut}}
	return cfg, a, b
}

// started starts a Client on cfg, closed with the test, and lets it
// dial its peers (synctest).
func started(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	synctest.Wait()
	return c
}

// heldDown starts a Client on cfg (from policyPair), mutes a, and sends a
// request that a's down-timeout hands over to b: a is out of service, held
// down for 20 s from then. The Client closes with the test.
func heldDown(t *testing.T, cfg Config, mute *atomic.Bool) *Client {
	t.Helper()
	c := started(t, cfg)
	mute.Store(true)
	h, err := sendWithin(c, 1, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "b.example.net", h, "handed over at a's down-timeout")
	synctest.Wait()
	require.Equal(t, "out-of-service", c.PolicyStates()[0])
	return c
}

// policyTransitions subscribes to server's policy events on bus and
// returns a function giving those seen so far, "from->to" each.
func policyTransitions(bus *Bus, server string) func() []string {
	var mu sync.Mutex
	var seen []string
	bus.Subscribe(func(_ context.Context, e Event) {
		if e.Kind == EventPolicy && e.Server == server {
			mu.Lock()
			seen = append(seen, e.Policy.From.String()+"->"+e.Policy.To.String())
			mu.Unlock()
		}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// sendWithin sends ACR i within timeout and returns the Origin-Host of
// its answer.
func sendWithin(c *Client, i int, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ans, err := c.Send(ctx, acr(i, "u@example.net"))
	if err != nil {
		return "", err
	}
	h, _ := message.StringOf(ans, message.OriginHost, 0)
	return h, nil
}

// S1-S4 through the client: a server whose transport is fine (DWRs
// answered) but which stops replying to requests is taken out of service
// after the down-timeout, gets nothing during the hold-down, then exactly
// one probe; its reply puts it back in service.
func TestPolicyHoldDownAndProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, a, mute := policyPair(t)
		states := policyTransitions(cfg.Events, "a.example.net")
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		send := func(i int, timeout time.Duration) (string, error) { return sendWithin(c, i, timeout) }
		h, err := send(1, time.Second)
		require.NoError(t, err)
		require.Equal(t, "a.example.net", h)

		mute.Store(true)
		// No reply: the down-timeout (2 s) expires, and the request
		// pending on a, whose watchdog still says OKAY, goes to b then.
		start := time.Now()
		h, err = send(2, 3*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "b.example.net", h)
		took := time.Since(start)
		assert.GreaterOrEqual(t, took, 2*time.Second)
		assert.Less(t, took, 2*time.Second+2*policyTick)
		synctest.Wait()
		assert.Equal(t, "out-of-service", c.PolicyStates()[0])
		recs, _ := c.FailoverLog()
		require.Len(t, recs, 1)
		assert.Equal(t, FailoverRecord{Time: recs[0].Time, From: "a.example.net", To: "b.example.net", Outcome: Moved,
			Reason: "out of service: " + policy.ReasonDownTimeout, Moved: 1, EndToEnd: recs[0].EndToEnd}, recs[0])
		before := len(a.received())
		for i := range 5 { // hold-down: everything goes to the secondary
			h, err := send(10+i, time.Second)
			require.NoError(t, err)
			assert.Equal(t, "b.example.net", h)
		}
		assert.Equal(t, before, len(a.received()), "nothing during hold-down")

		mute.Store(false)
		time.Sleep(20 * time.Second) // hold-down over: probing
		synctest.Wait()
		assert.Equal(t, "probing", c.PolicyStates()[0])
		h, err = send(20, time.Second) // the probe: one real request
		require.NoError(t, err)
		assert.Equal(t, "a.example.net", h)
		synctest.Wait()
		assert.Equal(t, "in-service", c.PolicyStates()[0])
		assert.Equal(t, []string{"unknown->in-service", "in-service->out-of-service", "out-of-service->probing", "probing->in-service"}, states())
	})
}

// A server that never replied is taken out of service when its first
// request gets no reply within the down-timeout, and that request goes to
// the other server then.
func TestPolicyNoFirstReplyHandsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _, mute := policyPair(t)
		mute.Store(true)
		c := started(t, cfg)
		start := time.Now()
		h, err := sendWithin(c, 1, 3*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "b.example.net", h)
		assert.GreaterOrEqual(t, time.Since(start), 2*time.Second)
		synctest.Wait()
		assert.Equal(t, "out-of-service", c.PolicyStates()[0])
		recs, _ := c.FailoverLog()
		require.Len(t, recs, 1)
		assert.Equal(t, "out of service: "+policy.ReasonNoFirstReply, recs[0].Reason)
	})
}

// A request whose Destination-Host names the server the down-timeout
// takes out of service stays pending there: it may go nowhere else, and
// the connection is up. It ends at its deadline (a timeout), not at the
// down-timeout as unable to deliver.
func TestPolicyDownTimeoutKeepsPinnedRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _, mute := policyPair(t)
		c := started(t, cfg)
		mute.Store(true)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Send(ctx, acrTo(1, "u@example.net", "a.example.net"))
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrTimeout)
		assert.NotErrorIs(t, err, ErrUnableToDeliver)
		assert.GreaterOrEqual(t, time.Since(start), 5*time.Second, "waited for its answer until its deadline")
		synctest.Wait()
		assert.Equal(t, "out-of-service", c.PolicyStates()[0])
	})
}

// A request admitted while its server was in service, and submitted
// after the down-timeout put the server out of service and handed its
// requests over, follows them: it does not wait on the silent server for
// its deadline.
func TestPolicyRequestSentAsTheServerLeavesFollowsTheHandOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _, mute := policyPair(t)
		c := started(t, cfg)
		h, err := sendWithin(c, 1, time.Second)
		require.NoError(t, err)
		require.Equal(t, "a.example.net", h)
		mute.Store(true)
		first := make(chan error, 1)
		go func() { _, err := sendWithin(c, 2, 10*time.Second); first <- err }() // starts a's down-timeout (2 s)
		time.Sleep(1900 * time.Millisecond)
		var once sync.Once
		hook := func(cc *Client, _ *call.Call) {
			if cc == c {
				once.Do(func() { time.Sleep(500 * time.Millisecond) }) // the down-timeout expires meanwhile
			}
		}
		afterAdmit.Store(&hook)
		defer afterAdmit.Store(nil)
		start := time.Now()
		h, err = sendWithin(c, 3, 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "b.example.net", h)
		assert.Less(t, time.Since(start), time.Second, "waited on the silent server")
		require.NoError(t, <-first)
		synctest.Wait() // a record may be written after its request's answer reached the caller
		recs, _ := c.FailoverLog()
		require.Len(t, recs, 2)
		assert.Equal(t, "out of service: sent as the server left service", recs[1].Reason)
	})
}

// A probe is one message, never sent again: a real request used as the
// probe of a server that does not reply is not handed to another server
// when the probe's timeout puts that server out of service again.
func TestPolicyProbeTimeoutHandsNothingOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		n := network{"tcp://a:1": a, "tcp://b:1": b}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
		cfg.Policy = &policy.Config{RequestTimeout: time.Second, Retries: 2, HoldDown: 20 * time.Second}
		mute := muted(a)
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		mute.Store(true)
		h, err := sendWithin(c, 1, 3*time.Second) // the down-timeout: handed to b
		require.NoError(t, err)
		require.Equal(t, "b.example.net", h)
		time.Sleep(20 * time.Second) // the hold-down ends: probing
		synctest.Wait()
		require.Equal(t, "probing", c.PolicyStates()[0])
		before := len(b.received())
		_, err = sendWithin(c, 2, 5*time.Second) // the probe, never answered
		require.Error(t, err)
		synctest.Wait()
		assert.Equal(t, "out-of-service", c.PolicyStates()[0])
		assert.Equal(t, before, len(b.received()), "the probe was sent again to b")
	})
}

// Policy events are published in the order of the changes, whichever
// goroutines make them. The dispatcher publishes the end of server a's
// hold-down (out-of-service -> probing); while a subscriber holds that
// event, a probe goes out and its reply, on the connection's reader, puts
// a in service. That later change must reach every subscriber after the
// first: before, the reader published it at once, so the second
// subscriber saw probing -> in-service before out-of-service -> probing.
func TestPolicyEventsInTheOrderOfTheChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _, mute := policyPair(t)
		release := make(chan struct{})
		var hold sync.Once
		cfg.Events.Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventPolicy && e.Policy.To == policy.Probing {
				hold.Do(func() { <-release })
			}
		})
		seen := policyTransitions(cfg.Events, "a.example.net") // what the second subscriber sees of a
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		send := func(i int, timeout time.Duration) error { _, err := sendWithin(c, i, timeout); return err }
		require.NoError(t, send(1, time.Second))
		mute.Store(true)
		require.NoError(t, send(2, 3*time.Second)) // the down-timeout: out of service, and b answers it
		require.NoError(t, send(3, time.Second))   // b in service: a may be probed
		mute.Store(false)
		time.Sleep(20 * time.Second) // the dispatcher ends the hold-down; the first subscriber holds its event
		synctest.Wait()
		require.Equal(t, "probing", c.PolicyStates()[0])
		require.NoError(t, send(4, time.Second)) // the probe, answered
		synctest.Wait()
		assert.Equal(t, "in-service", c.PolicyStates()[0])
		close(release)
		synctest.Wait()
		assert.Equal(t, []string{"unknown->in-service", "in-service->out-of-service", "out-of-service->probing", "probing->in-service"}, seen())
	})
}

// A peer that comes up before the Client has stored it (its Dial returns
// after the capabilities exchange) must still be available to the
// throttle: its OKAY event saw no peer in its member yet. Forced here by
// holding the store back until the peer is OKAY and its event has been
// handled as far as it can (it then waits for New to return). Real time,
// outside a bubble: the event's handler blocks on a mutex, which a bubble
// would not count as durably blocked.
func TestThrottleSeesPeerUpBeforeStored(t *testing.T) {
	testHookDialed = func(p *peer.Peer) {
		for deadline := time.Now().Add(5 * time.Second); p.State() != watchdog.Okay; {
			if time.Now().After(deadline) {
				t.Error("peer not OKAY after 5 s")
				return
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // let its OKAY event reach the throttle
	}
	defer func() { testHookDialed = nil }()
	srv := newFakeServer("a.example.net")
	n := network{"tcp://a:1": srv}
	defer n.close()
	cfg := clientConfig(n, Balance, "tcp://a:1")
	cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 2}}
	c, err := New(cfg)
	require.NoError(t, err)
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for i := range 5 {
		_, err := c.Send(ctx, acr(i, "u@example.net"))
		require.NoError(t, err, "request %d", i)
	}
}

// Q3: a failover's replay re-enters the throttle's instance queue at its
// head, ahead of newer requests that waited behind it: the alternate gets
// it first.
func TestThrottleReplayAheadOfNewer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, a, b := throttledPair(t, 1)
		c := started(t, cfg)
		a.freeze()
		var wg sync.WaitGroup
		for i := range 5 { // the first goes to a; the others wait for its place
			wg.Go(func() {
				_, err := c.Send(context.Background(), acr(i, "u@example.net"))
				assert.NoError(t, err)
			})
			synctest.Wait()
		}
		wg.Wait() // a goes SUSPECT: all five go to b, one at a time
		got := b.received()
		require.Len(t, got, 5)
		assert.True(t, got[0].tflag, "the replay went first")
		for _, s := range got[1:] {
			assert.False(t, s.tflag, "newer requests after the replay")
		}
	})
}

// A keep-alive is one message to one server, never retried: when the
// server's watchdog fails over with keep-alives unanswered, they end
// there; they are not replayed to the alternate, and the failover table
// does not count them as requests moved or queued for one.
func TestKeepAliveNotReplayedOnFailover(t *testing.T) {
	for _, throttled := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "throttle"}[throttled], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
				a.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
					if u, _ := message.StringOf(req, message.UserName, 0); u == "test-user@example.net" {
						return nil // never answered
					}
					return a.handler(ctx, p, req)
				}
				n := network{"tcp://a:1": a, "tcp://b:1": b}
				defer n.close()
				cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
				cfg.Policy = &policy.Config{TestUser: true, KeepAlive: 10 * time.Second, ProbeTimeout: 5 * time.Minute}
				cfg.TestRequest = func(server string) []byte { return acr(0, "test-user@example.net") }
				if throttled {
					cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 100}}
				}
				c, err := New(cfg)
				require.NoError(t, err)
				defer c.Close(context.Background())
				time.Sleep(time.Second) // a keep-alive to each server
				synctest.Wait()
				a.freeze()
				time.Sleep(2 * time.Minute) // a SUSPECT at 60 s: its keep-alives fail over
				synctest.Wait()
				require.NotEqual(t, watchdog.Okay, c.Peers()[0].State())
				for _, s := range b.received() {
					assert.False(t, s.tflag, "a keep-alive meant for a was replayed to b")
				}
				recs, _ := c.FailoverLog()
				moved := 0
				for _, r := range recs {
					if r.From == "a.example.net" && (r.Outcome == Moved || r.Outcome == Parked) {
						moved += r.Moved
					}
				}
				assert.Zero(t, moved, "keep-alives counted as requests failed over: %+v", recs)
				a.unfreeze()
			})
		})
	}
}

// A request that waits while the only server is held down (nothing else
// to send it to) is sent when the hold-down ends, not left waiting until
// its deadline.
func TestPolicyHoldDownEndReleasesWaitingRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newFakeServer("a.example.net")
		mute := muted(a)
		n := network{"tcp://a:1": a}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1")
		cfg.Policy = &policy.Config{RequestTimeout: time.Second, Retries: 2, HoldDown: 20 * time.Second}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		mute.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = c.Send(ctx, acr(1, "u@example.net")) // the down-timeout (2 s) expires
		cancel()
		require.Error(t, err)
		synctest.Wait()
		require.Equal(t, "out-of-service", c.PolicyStates()[0])
		mute.Store(false)
		start := time.Now()
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err = c.Send(ctx, acr(2, "u@example.net"))
		require.NoError(t, err)
		assert.Less(t, time.Since(start), 20*time.Second, "sent when the hold-down ended")
	})
}

// Two servers under one name (given, or the URL by default) are refused
// before anything is dialed.
func TestPeerNamedTwiceRefused(t *testing.T) {
	for _, peers := range [][]PeerSpec{
		{{URL: "tcp://127.0.0.1:1", Name: "a"}, {URL: "tcp://127.0.0.1:2", Name: "a"}},
		{{URL: "tcp://127.0.0.1:1"}, {URL: "tcp://127.0.0.1:1"}},
	} {
		c, err := New(Config{Peers: peers})
		if err == nil {
			c.Close(context.Background())
			t.Fatalf("%v: no error", peers)
		}
		if !strings.Contains(err.Error(), "configured twice") {
			t.Errorf("%v: %v, want \"configured twice\"", peers, err)
		}
	}
}

// A Diameter server's late answer (its caller gave up first) shows it
// alive: told only through the answers callers got, the policy kept the
// down-timeout the send had started, and held a healthy server down.
func TestLateAnswerKeepsServerInService(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, a, _ := policyPair(t)
		gate := make(chan struct{})
		base := a.handler
		a.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			<-gate
			return base(ctx, p, req)
		}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		_, err = sendWithin(c, 1, 500*time.Millisecond)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		time.Sleep(200 * time.Millisecond)
		close(gate) // a answers, late, well within its down-timeout
		synctest.Wait()
		require.Equal(t, uint64(1), c.Peers()[0].Stats().Late, "a's late answers")
		time.Sleep(10 * time.Second) // past the down-timeout, no request
		synctest.Wait()
		assert.Equal(t, policy.InService, c.group.State(0), "a after its late answer")
	})
}

// A Replied hook in the peers' template is kept when the Client has a
// policy, which needs one of its own: both are told of every answer.
func TestTemplateRepliedKeptWithPolicy(t *testing.T) {
	for _, withPolicy := range []bool{false, true} {
		t.Run(fmt.Sprint(withPolicy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg, _, _ := policyPair(t)
				if !withPolicy {
					cfg.Policy = nil
				}
				var told atomic.Int64
				cfg.Peer.Replied = func(call.Carrier) { told.Add(1) }
				c, err := New(cfg)
				require.NoError(t, err)
				defer c.Close(context.Background())
				synctest.Wait()
				for i := range 3 {
					_, err := sendWithin(c, i, time.Second)
					require.NoError(t, err)
				}
				assert.Equal(t, int64(3), told.Load())
			})
		})
	}
}

// A request whose Destination-Host names a server out of service waits
// for it, and is that server's probe once its hold-down ends: before, it
// waited for its deadline, unless some other request happened to probe
// the server (the end of the hold-down did not wake it, and a pinned
// request never probed).
func TestPolicyPinnedRequestProbesItsServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _, mute := policyPair(t)
		states := policyTransitions(cfg.Events, "a.example.net")
		c := heldDown(t, cfg, mute)
		mute.Store(false)

		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ans, err := c.Send(ctx, acrTo(2, "u@example.net", "a.example.net"))
		require.NoError(t, err)
		h, _ := message.StringOf(ans, message.OriginHost, 0)
		assert.Equal(t, "a.example.net", h)
		assert.LessOrEqual(t, time.Since(start), 20*time.Second, "answered when a's hold-down (20 s) ended")
		synctest.Wait()
		assert.Equal(t, []string{"unknown->out-of-service", "out-of-service->probing", "probing->in-service"}, states())
	})
}

// With the throttle, a server probing after its hold-down gets its probe,
// a real request, and is back in service when it answers: the scheduler
// counted only the servers taking requests as available and never sent
// it one, so it stayed probing for good (and the requests whose
// Destination-Host named it waited in its queue for their deadlines).
func TestPolicyProbeThroughTheThrottle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, _, mute := policyPair(t)
		cfg.Throttle = &Throttle{}
		states := policyTransitions(cfg.Events, "a.example.net")
		c := heldDown(t, cfg, mute)
		mute.Store(false)
		time.Sleep(20 * time.Second) // the hold-down
		synctest.Wait()
		require.Equal(t, "probing", c.PolicyStates()[0])
		h, err := sendWithin(c, 2, time.Second) // the probe
		require.NoError(t, err)
		assert.Equal(t, "a.example.net", h)
		synctest.Wait()
		assert.Equal(t, "in-service", c.PolicyStates()[0])
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ans, err := c.Send(ctx, acrTo(3, "u@example.net", "a.example.net"))
		require.NoError(t, err, "a request for a, in service again")
		h, _ = message.StringOf(ans, message.OriginHost, 0)
		assert.Equal(t, "a.example.net", h)
		assert.Equal(t, []string{"unknown->out-of-service", "out-of-service->probing", "probing->in-service"}, states())
	})
}

// While a probe is in flight through the throttle, the server takes
// nothing more (the throttle may release a request to it, as it still
// waited for its probe when the view was built; the policy refuses it and
// it is queued again): a request whose Destination-Host names it waits.
// Here the probe goes unanswered: the server is held down again and the
// request ends at its deadline.
func TestPolicyProbeInFlightThroughTheThrottle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, a, mute := policyPair(t)
		cfg.Throttle = &Throttle{}
		c := heldDown(t, cfg, mute)
		time.Sleep(20 * time.Second) // the hold-down; a still mute
		synctest.Wait()
		require.Equal(t, "probing", c.PolicyStates()[0])
		before := len(a.received())
		go sendWithin(c, 2, 10*time.Second) // the probe, never answered
		synctest.Wait()
		require.Equal(t, before+1, len(a.received()), "the probe reached a")
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := c.Send(ctx, acrTo(3, "u@example.net", "a.example.net"))
		assert.ErrorIs(t, err, ErrTimeout)
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Equal(t, before+1, len(a.received()), "nothing but the probe reached a")
		synctest.Wait()
		assert.Equal(t, "out-of-service", c.PolicyStates()[0], "the probe timed out")
	})
}

// A replay that no peer can take (moved off its server's connection,
// which came back: it must not go there again, and there is no other)
// waits out of the throttle's scheduler until its deadline: it is not
// released to that server, to be refused there and queued again.
func TestThrottleHoldsARequestNoPeerCanTake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net")}
		defer n.close()
		n["tcp://a:1"].handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			<-ctx.Done() // the request is lost in the server: never answered
			return nil
		}
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1")
		cfg.Throttle = &Throttle{}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)

		n["tcp://a:1"].freeze()
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			_, err := c.Send(ctx, acr(1, "u1"))
			done <- err
		}()
		time.Sleep(70 * time.Second) // SUSPECT at 2 Tw: moved, no alternate
		n["tcp://a:1"].unfreeze()    // OKAY again, on the connection it was sent on
		time.Sleep(30 * time.Second)
		sent := c.ServerStats()[0].Throttle.Sent[throttle.Accounting]
		assert.Equal(t, uint64(1), sent, "released once, its first send: not to the connection it must avoid")
		select {
		case err := <-done:
			t.Fatalf("returned before its deadline: %v", err)
		default:
		}
		err = <-done
		require.ErrorIs(t, err, ErrTimeout, "it waited for a peer until its deadline")
	})
}

// A request of a batch the throttle released that is refused as it is
// placed (its server left service between the release and the place)
// goes back to the scheduler with every request released after it: those
// were chosen from the same stale picture, and placed now they would
// leave ahead of it. The next pass sends them all to the server left, in
// the order they came.
func TestThrottleRefusalInABatchKeepsItsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 200}, Slot: 50 * time.Millisecond} // 10 a slot each
		c := started(t, cfg)
		waitOkay(t, c)
		synctest.Wait()
		time.Sleep(time.Until(time.Now().Truncate(50 * time.Millisecond).Add(50*time.Millisecond + time.Millisecond)))

		// 60 in one slot: 20 leave now, the rest wait in their servers'
		// queues for the next slots, released there in batches.
		const N = 60
		errs := make(chan error, N)
		for i := range N {
			go func() {
				_, err := c.Send(context.Background(), acr(i, fmt.Sprintf("u%d@example.net", i)))
				errs <- err
			}()
			synctest.Wait() // queued in order: End-to-End ids in age order
		}
		var once sync.Once
		var dropped time.Time
		hook := func(cc *Client, _ *call.Call) {
			if cc == c {
				once.Do(func() {
					dropped = time.Now()
					n["tcp://a:1"].dropConnections()
					time.Sleep(time.Millisecond) // the peer sees it: a refuses what comes now
				})
			}
		}
		afterAdmit.Store(&hook)
		defer afterAdmit.Store(nil)
		for range N {
			require.NoError(t, <-errs)
		}
		require.False(t, dropped.IsZero(), "a batch was placed")
		var ids []uint32 // b's since a left
		for _, s := range n["tcp://b:1"].received() {
			if !s.at.Before(dropped) {
				ids = append(ids, s.e2e)
			}
		}
		assert.NotEmpty(t, n["tcp://a:1"].received(), "a took some before it left")
		assert.Greater(t, len(ids), 20, "b took what was left")
		assert.True(t, slices.IsSorted(ids), "b took them in the order they came: %v", ids)
	})
}

// Places freed together, more than the current slot's quota: what waits
// in the server's queue leaves at the next slot, not at its deadline (the
// dispatcher's timer was set while the server had no free place).
func TestThrottleFreedPlacesPastTheSlotQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFakeServer("a.example.net")
		gate := make(chan struct{})
		base := srv.handler
		srv.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			<-gate // hung until every place is taken, then answers all at once
			return base(ctx, p, req)
		}
		n := network{"tcp://a:1": srv}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1")
		// 5 a slot, 10 places: two slots fill the places.
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 100, MaxOutstanding: 10}, Slot: 50 * time.Millisecond}
		c := started(t, cfg)
		waitOkay(t, c)
		start := time.Now()
		const N = 20
		done := make(chan time.Duration, N)
		for i := range N {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := c.Send(ctx, acr(i, fmt.Sprintf("u%d@example.net", i)))
				assert.NoError(t, err)
				done <- time.Since(start)
			}()
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.Len(t, srv.received(), 10, "the places are taken")
		close(gate) // 10 places free in one slot, 5 of its quota left
		var last time.Duration
		for range N {
			last = max(last, <-done)
		}
		assert.Less(t, last, 3*time.Second, "the last answered at the slots after the places were freed, not at the deadline")
	})
}

// A server taken out while requests wait in its throttle queue (for a
// place its hung requests hold): they go back to the instance queue and
// leave for the other server at once, not at their deadlines.
func TestThrottleQueueOfARemovedServerMovesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		defer holdAnswers(a)()
		n := network{"tcp://a:1": a, "tcp://b:1": b}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 2}}
		c := started(t, cfg)
		waitOkay(t, c)
		const N = 5
		done := make(chan time.Time, N)
		for i := range N {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				c.Send(ctx, acr(i, fmt.Sprintf("u%d@example.net", i)))
				done <- time.Now()
			}()
		}
		time.Sleep(time.Second)
		synctest.Wait()
		require.Len(t, a.received(), 2, "a's places are taken")
		require.Equal(t, N-2, c.QueueDepths()[0].Depth, "the rest wait in a's queue")
		_, err := c.SetPeers(context.Background(), []PeerSpec{spec(n, "tcp://b:1")})
		require.NoError(t, err)
		removed := time.Now()
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Len(t, b.received(), N-2, "what waited in a's queue went to b")
		for range N - 2 {
			select {
			case at := <-done:
				assert.Less(t, at.Sub(removed), time.Second)
			default:
				t.Fatal("a request that waited in a's queue is still waiting")
			}
		}
	})
}

// A request refused as it was placed goes back into the scheduler and is
// released again soon, though nothing else wakes the dispatcher: here the
// server it was released to left the view before the refusal gave it
// back, so that change came and went while it was out of the scheduler,
// and the dispatcher's timer was set while its queue was empty. Without
// the retry it waited in the queue until its deadline, b in service all
// along.
func TestThrottleGivenBackRequestIsReleasedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		gate := make(chan struct{})
		var first atomic.Bool
		base := a.handler
		a.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			if first.CompareAndSwap(false, true) {
				<-gate
			}
			return base(ctx, p, req)
		}
		n := network{"tcp://a:1": a, "tcp://b:1": b}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1")
		var aDown atomic.Bool
		cfg.Peer.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			if url == "tcp://a:1" && aDown.Load() {
				return nil, errors.New("refused")
			}
			return n.dialer(ctx, url)
		}
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 1}}
		c := started(t, cfg)
		waitOkay(t, c)

		xdone := make(chan error, 1)
		go func() { _, err := c.Send(context.Background(), acr(1, "u1")); xdone <- err }()
		synctest.Wait()
		rdone := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.Send(ctx, acr(2, "u2"))
			rdone <- err
		}()
		synctest.Wait()
		require.Equal(t, 1, c.QueueDepths()[0].Depth, "the second request waits for a's one place")
		// X's answer frees the place and X's caller places R on a; a's
		// connection drops between R's admission and its submit.
		var fired atomic.Bool
		hook := func(cc *Client, _ *call.Call) {
			if cc == c && fired.CompareAndSwap(false, true) {
				aDown.Store(true)
				a.dropConnections()
				time.Sleep(time.Millisecond)
			}
		}
		afterAdmit.Store(&hook)
		defer afterAdmit.Store(nil)
		close(gate)
		require.NoError(t, <-xdone)
		start := time.Now()
		require.NoError(t, <-rdone, "b was in service all along")
		require.True(t, fired.Load())
		assert.LessOrEqual(t, time.Since(start), time.Second, "released again within the retry, not at its deadline")
		assert.Len(t, b.received(), 1)
	})
}

// A failover's replay whose Send returned between throttled's first look
// (not done yet) and its lock: release gave its place back already, so
// throttled neither frees it again (which freed another request's place)
// nor queues or holds it.
func TestThrottleReplayEndedBeforeItsLockKeepsTheCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newFakeServer("a.example.net")
		answer := holdAnswers(a)
		n := network{"tcp://a:1": a}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 5}}
		var mu sync.Mutex
		var calls []*call.Call
		hook := func(_ *Client, cl *call.Call) {
			mu.Lock()
			calls = append(calls, cl)
			mu.Unlock()
		}
		afterAdmit.Store(&hook)
		defer afterAdmit.Store(nil)
		c := started(t, cfg)
		waitOkay(t, c)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				c.Send(ctx, acr(i, fmt.Sprintf("u%d", i)))
			}()
		}
		synctest.Wait()
		mu.Lock()
		require.Len(t, calls, 2)
		it := calls[0].Holder().(*item)
		mu.Unlock()
		outstanding := func() (int, int, int) {
			c.tmu.Lock()
			defer c.unlockThrottle()
			return c.sched.Outstanding(0, throttle.Accounting), len(c.held), c.sched.Len()
		}
		o, _, _ := outstanding()
		require.Equal(t, 2, o)
		// The interleaving: the replay passed throttled's IsDone check,
		// then its caller's release ran to the end.
		c.release(it)
		c.throttled(it)
		o, held, queued := outstanding()
		assert.Equal(t, 1, o, "the other request's place is still counted")
		assert.Zero(t, held, "an ended request is not held")
		assert.Zero(t, queued, "nor queued")
		answer()
		wg.Wait()
	})
}

// A request whose caller gives up while it waits in the throttle leaves
// the queue at once: it no longer counts against MaxQueued, and the rate
// slot it would have taken goes to the request behind it. It stayed
// until its own deadline (an hour here), refusing newer requests as the
// queue's one place.
func TestThrottleAbandonedRequestLeavesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newFakeServer("a.example.net")
		gate := make(chan struct{})
		base := a.handler
		a.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			<-gate
			return base(ctx, p, req)
		}
		n := network{"tcp://a:1": a}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1")
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 1}, MaxQueued: 1}
		c := started(t, cfg)
		waitOkay(t, c)
		x := make(chan error, 1)
		go func() { _, err := c.Send(context.Background(), acr(1, "x")); x <- err }() // holds a's one place
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		r1 := make(chan error, 1)
		go func() { _, err := c.Send(ctx, acr(2, "r1")); r1 <- err }()
		synctest.Wait()
		require.Equal(t, 1, throttleLen(c), "r1 waits for a's place")
		cancel()
		require.ErrorIs(t, <-r1, context.Canceled)
		assert.Zero(t, throttleLen(c), "r1 left the queue with its caller")
		r2 := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := c.Send(ctx, acr(3, "r2"))
			r2 <- err
		}()
		synctest.Wait()
		close(gate)
		require.NoError(t, <-x)
		require.NoError(t, <-r2, "r2 took the queue's place r1 left")
		assert.Len(t, a.received(), 2, "r1 never went")
	})
}

// holdAnswers makes s hold every request's answer until the returned
// function is called (or the request's connection ends).
func holdAnswers(s *fakeServer) (release func()) {
	hang := make(chan struct{})
	base := s.handler
	s.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		select {
		case <-hang:
		case <-ctx.Done():
		}
		return base(ctx, p, req)
	}
	return sync.OnceFunc(func() { close(hang) })
}

// Requests pinned by Destination-Host to a server that is down wait in
// its throttle queue; once SetPeers removes it, they name none of the
// Client's peers and go to the one in service, though the down server's
// availability did not change.
func TestThrottlePinnedQueueOfARemovedDownServerMovesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		n := network{"tcp://a:1": a, "tcp://b:1": b}
		defer n.close()
		var aDown atomic.Bool
		cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
		cfg.Peer.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			if url == "tcp://a:1" && aDown.Load() {
				return nil, errors.New("refused")
			}
			return n.dialer(ctx, url)
		}
		cfg.Throttle = &Throttle{}
		c := started(t, cfg)
		waitOkay(t, c)
		aDown.Store(true)
		a.dropConnections()
		time.Sleep(time.Second)
		synctest.Wait()
		const N = 3
		done := make(chan error, N)
		for i := range N {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				_, err := c.Send(ctx, acrTo(i, fmt.Sprintf("u%d@example.net", i), "a.example.net"))
				done <- err
			}()
		}
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, N, c.QueueDepths()[0].Depth, "the pinned requests wait in a's queue")
		_, err := c.SetPeers(context.Background(), []PeerSpec{spec(n, "tcp://b:1")})
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		for range N {
			select {
			case err := <-done:
				assert.NoError(t, err)
			default:
				t.Fatal("a request pinned to the removed server still waits in its queue")
			}
		}
		assert.Len(t, b.received(), N, "they went to b")
	})
}

// A request sent as a failover is handed over, after the view has
// dropped the failed server and before its replays are queued, waits
// behind them, and so do the requests that server's queue sends back:
// the alternate gets the replay first, then the rest in send order.
// Before, a poll in that moment (the new request's) released the
// returned queue to the alternate ahead of the replay.
func TestThrottleReplayAheadOfASendDuringTheHandOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, a, b := throttledPair(t, 1)
		c := started(t, cfg)
		a.freeze()
		var wg sync.WaitGroup
		send := sendOn(t, c, &wg)
		var once sync.Once
		beforeFailover = func() {
			once.Do(func() {
				send(5)
				synctest.Wait() // the new request has been polled for
			})
		}
		defer func() { beforeFailover = nil }()
		for i := range 5 { // the first goes to a; the others wait for its place
			send(i)
			synctest.Wait()
		}
		wg.Wait() // a goes SUSPECT: all six go to b, one at a time
		got := b.received()
		require.Len(t, got, 6)
		assertReplayThenInOrder(t, got)
	})
}

// countPolls counts the polls of c's throttle's dispatcher until the
// test ends.
func countPolls(t *testing.T, c *Client) *atomic.Int64 {
	var polls atomic.Int64
	onDispatcherPoll = func(cc *Client, _ bool) {
		if cc == c {
			polls.Add(1)
		}
	}
	t.Cleanup(func() { onDispatcherPoll = nil })
	return &polls
}

// Neither a request queued behind a full server nor a hand-over the
// throttle did not wait for (a request refused too busy, handed on) wakes
// the throttle's dispatcher: each polls the scheduler itself, and what
// is left waits for the scheduler's next wake-up, for which the
// dispatcher's timer is set. Before, each woke it: a dispatcher poll per
// request queued and per refusal.
func TestThrottleQueuedRequestsDoNotWakeTheDispatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, a, _ := throttledPair(t, 1)
		c := started(t, cfg)
		polls := countPolls(t, c)
		a.freeze() // the first request keeps a's one place
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() { sendWithin(c, i, time.Minute) })
			synctest.Wait()
		}
		assert.LessOrEqual(t, polls.Load(), int64(2), "dispatcher polls while 49 requests queued")
		before := polls.Load()
		for range 50 {
			c.handedOver(c.Peers()[1]) // nothing handed over, no wait
			synctest.Wait()
		}
		assert.Equal(t, before, polls.Load(), "dispatcher polls for hand-overs nobody waited for")
		a.unfreeze()
		wg.Wait()
	})
}

// A peer's change that another change's view showed first (a view reads
// each peer's state as it is then) still has the throttle wait for the
// peer's hand-over: a request sent before it reaches the alternate after
// the replay. Before, the peer's own view, like the last, was not
// published, and the throttle did not wait.
func TestThrottleReplayAheadOfASendWhenAnotherViewShowedTheChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, a, b := throttledPair(t, 1)
		c := started(t, cfg)
		a.freeze()
		var wg sync.WaitGroup
		send := sendOn(t, c, &wg)
		var viewFirst, sendDuring sync.Once
		beforeRefresh = func() { viewFirst.Do(c.refresh) } // a's SUSPECT in a view before its own
		beforeFailover = func() {
			sendDuring.Do(func() {
				send(1)
				synctest.Wait() // the new request has been polled for
			})
		}
		defer func() { beforeRefresh, beforeFailover = nil, nil }()
		send(0) // to a, which answers nothing: SUSPECT at Tw
		synctest.Wait()
		wg.Wait()
		got := b.received()
		require.Len(t, got, 2)
		assertReplayThenInOrder(t, got)
	})
}

// sendOn returns a function that sends request i through c on a
// goroutine of wg's, which must get an answer.
func sendOn(t *testing.T, c *Client, wg *sync.WaitGroup) func(i int) {
	return func(i int) {
		wg.Go(func() {
			_, err := c.Send(context.Background(), acr(i, "u@example.net"))
			assert.NoError(t, err)
		})
	}
}

// A server that the policy's down-timeout takes out of service hands its
// pending request over as a watchdog failover does: its replay reaches
// the alternate ahead of the requests that server's queue sent back.
// Before, the view change woke the dispatcher, which released them while
// the hand-over was still on its way.
func TestThrottleDownTimeoutReplayAheadOfNewer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, a, b := throttledPair(t, 1)
		cfg.Policy = &policy.Config{RequestTimeout: time.Second, Retries: 2, HoldDown: 20 * time.Second}
		mute := muted(a)
		c := started(t, cfg)
		mute.Store(true)
		beforeFailover = func() { synctest.Wait() } // what else would go does
		defer func() { beforeFailover = nil }()
		var wg sync.WaitGroup
		for i := range 5 { // the first goes to a; the others wait for its place
			wg.Go(func() {
				_, err := sendWithin(c, i, 10*time.Second)
				assert.NoError(t, err)
			})
			synctest.Wait()
		}
		wg.Wait() // a's down-timeout: all five go to b, one at a time
		require.Len(t, a.received(), 1)
		got := b.received()
		require.Len(t, got, 5)
		assertReplayThenInOrder(t, got)
	})
}

// The throttle's wait for a peer's hand-over ends at the peer's next
// watchdog change even if the hand-over never came (a wait it should
// never have: every change that starts one is followed by its
// hand-over), rather than hold every request until the peer is gone.
func TestThrottleWaitForAMissedHandOverEnds(t *testing.T) {
	defer func(d time.Duration) { handOverWaitMax = d }(handOverWaitMax)
	handOverWaitMax = time.Hour // the peer's next change ends it, not the bound
	synctest.Test(t, func(t *testing.T) {
		cfg, a, b := throttledPair(t, 10)
		c := started(t, cfg)
		pa := c.Peers()[0]
		c.tmu.Lock()
		c.handing = append(c.handing, handOverWait{k: pa, since: c.monoNow()}) // a hand-over that will not come
		c.tmu.Unlock()
		done := make(chan error, 1)
		go func() {
			_, err := sendWithin(c, 1, 10*time.Minute)
			done <- err
		}()
		synctest.Wait()
		require.Empty(t, a.received(), "released while waiting for a hand-over")
		require.Empty(t, b.received(), "released while waiting for a hand-over")
		a.freeze() // SUSPECT: a wait of its own, ended by its hand-over
		for pa.State() != watchdog.Suspect {
			time.Sleep(time.Second)
			synctest.Wait()
		}
		require.Empty(t, b.received(), "released while still waiting for the missed hand-over")
		a.unfreeze() // SUSPECT -> OKAY: the missed wait ends
		require.NoError(t, <-done)
		assert.Equal(t, 1, len(a.received())+len(b.received()), "the request went once the wait ended")
		c.tmu.Lock()
		assert.Equal(t, uint64(1), c.missedHandOvers, "the missed hand-over counted")
		c.tmu.Unlock()
	})
}

// TestThrottleWaitForAHandOverLapses: a wait for a hand-over that never
// comes (a server policy's, which only its HandOver's done ends) ends at
// handOverWaitMax, counted and logged, and the request waiting behind it
// goes then, not at its deadline.
func TestThrottleWaitForAHandOverLapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, a, b := throttledPair(t, 10)
		var mu sync.Mutex
		var logs bytes.Buffer
		cfg.Peer.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		c := started(t, cfg)
		c.tmu.Lock()
		c.handing = append(c.handing, handOverWait{k: c.Peers()[0], policy: true, since: c.monoNow()}) // its done will not come
		c.tmu.Unlock()
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := sendWithin(c, 1, 10*time.Minute)
			done <- err
		}()
		time.Sleep(handOverWaitMax - time.Millisecond)
		synctest.Wait()
		require.Empty(t, a.received(), "released while waiting for a hand-over")
		require.Empty(t, b.received(), "released while waiting for a hand-over")
		require.NoError(t, <-done)
		assert.Equal(t, handOverWaitMax, time.Since(start), "the request went at the wait's bound")
		assert.Equal(t, 1, len(a.received())+len(b.received()), "the request went once the wait ended")
		c.tmu.Lock()
		assert.Empty(t, c.handing, "the wait ended")
		assert.Equal(t, uint64(1), c.missedHandOvers, "the lapsed wait counted as missed")
		c.tmu.Unlock()
		mu.Lock()
		assert.Contains(t, logs.String(), "hand-over of its requests did not come", "the lapsed wait logged")
		assert.Contains(t, logs.String(), "a.example.net", "the log names the peer")
		mu.Unlock()
	})
}

// TestThrottleWaitForAHandOverDoesNotSpin: while the throttle waits for a
// hand-over, a request due in its scheduler does not have the dispatcher
// poll again and again (nothing can be released until the wait ends):
// it sleeps until the hand-over wakes it, or the wait's bound.
func TestThrottleWaitForAHandOverDoesNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, a, b := throttledPair(t, 10)
		c := started(t, cfg)
		polls := countPolls(t, c)
		c.tmu.Lock()
		c.handing = append(c.handing, handOverWait{k: c.Peers()[0], policy: true, since: c.monoNow()})
		c.tmu.Unlock()
		done := make(chan error, 1)
		go func() {
			_, err := sendWithin(c, 1, time.Minute)
			done <- err
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		require.Empty(t, a.received(), "released while waiting for a hand-over")
		require.Empty(t, b.received(), "released while waiting for a hand-over")
		assert.LessOrEqual(t, polls.Load(), int64(3), "the dispatcher's polls in a second of the wait")
		c.endWait(c.Peers()[0], true)
		require.NoError(t, <-done, "the hand-over's end released the request")
	})
}

// assertReplayThenInOrder checks what a server received after another's
// failover: the one replay first, then the newer requests in send order.
func assertReplayThenInOrder(t *testing.T, got []seen) {
	t.Helper()
	assert.True(t, got[0].tflag, "the replay went first")
	for i, s := range got[1:] {
		assert.False(t, s.tflag, "newer requests after the replay")
		if i > 0 {
			assert.Greater(t, s.e2e, got[i].e2e, "the newer requests in send order")
		}
	}
}
