package client

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/stretchr/testify/require"
)

// A radius:// request the throttle released to a server, waiting there
// for an Identifier when the policy's down-timeout hands the server's
// requests over, gives its place back: once the server is back in
// service, its accounting places are all there and accounting to it
// goes on.
func TestThrottleHandedOverUnsentGivesItsPlaceBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		specs := memSpecs("a", "b")
		for i := range specs {
			startMemServer(t, n, specs[i].Name+":1812", nil, nil)
		}
		c := memClient(t, n, specs, func(cfg *Config) {
			cfg.Algorithm = loadbalance.Direct
			cfg.UDP.MaxSockets = 1
			cfg.Policy = udpPolicy(func(p *policy.Config) { p.TestUser = true })
			cfg.RADIUSTestRequest = func(string) *radius.Request { return udpAccess("probe") }
			cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 4}}
		})
		exchangeAt(t, c, udpAccess("warmup"))
		n.setHung(addrA, true)
		done := make(chan error, radpeer.IDsPerSocket+4)
		for i := range radpeer.IDsPerSocket {
			go func() { _, err := c.Exchange(context.Background(), udpAccess(fmt.Sprint("u", i))); done <- err }()
		}
		synctest.Wait()
		for i := range 4 {
			go func() { _, err := c.Exchange(context.Background(), udpAcctStop(fmt.Sprint("s", i))); done <- err }()
		}
		synctest.Wait()
		for range radpeer.IDsPerSocket + 4 {
			if err := <-done; err != nil {
				t.Fatalf("%v", err)
			}
		}
		synctest.Wait()
		c.tmu.Lock()
		leaked := c.sched.Outstanding(0, throttle.Accounting)
		c.unlockThrottle()
		if leaked != 0 {
			t.Errorf("every request ended, yet a holds %d accounting places", leaked)
		}
		n.setHung(addrA, false)
		time.Sleep(45 * time.Second) // the hold-down, its probe answered
		synctest.Wait()
		if st := c.group.State(0); st != policy.InService {
			t.Fatalf("a is %v, want in-service", st)
		}
		t0 := time.Now()
		resp, err := c.Exchange(context.Background(), udpAcctStop("after"))
		if err != nil {
			t.Fatalf("accounting to a, back in service, failed after %v: %v", time.Since(t0), err)
		}
		if resp.Server != urlA {
			t.Errorf("answered by %s", resp.Server)
		}
	})
}

// The same through SetPeers: the removed server's waiting requests give
// their places back as they move.
func TestThrottleRemovedServersUnsentGiveTheirPlacesBack(t *testing.T) {
	a, b := newSilentUDP(t), newAnsweringUDP(t)
	specs := []PeerSpec{{URL: a.url()}, {URL: b.url()}}
	c := udpClient(t, PrimarySecondary, specs, func(cfg *Config) {
		cfg.UDP.MaxSockets, cfg.UDP.Timeout, cfg.UDP.Retries = 1, 2*time.Second, 2
		cfg.RequestTimeout = 10 * time.Second
		cfg.Throttle = &Throttle{}
	})
	// Every Identifier of a's one socket taken by Access-Requests...
	errs := make(chan error, radpeer.IDsPerSocket+4)
	for i := range radpeer.IDsPerSocket {
		go func() {
			_, err := c.Exchange(context.Background(), udpAccess(fmt.Sprint("w", i)))
			errs <- err
		}()
	}
	require.Eventually(t, func() bool { return len(a.datagrams()) == radpeer.IDsPerSocket }, 5*time.Second, time.Millisecond)
	// ...4 Accounting-Requests get a throttle place at a (its accounting
	// places are free) and wait there for an Identifier.
	for i := range 4 {
		go func() {
			_, err := c.Exchange(context.Background(), udpAcctStop(fmt.Sprint("s", i)))
			errs <- err
		}()
	}
	time.Sleep(100 * time.Millisecond)
	c.tmu.Lock()
	before := c.sched.Outstanding(0, throttle.Accounting)
	c.unlockThrottle()
	require.Equal(t, 4, before, "4 accounting places held at a")
	// a is removed: its waiting requests are handed over at once.
	_, err := c.SetPeers(context.Background(), specs[1:])
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.acct.Load() >= 4 }, 2*time.Second, time.Millisecond)
	for range radpeer.IDsPerSocket + 4 {
		require.NoError(t, <-errs)
	}
	// Every request has ended: no place is held anywhere.
	c.tmu.Lock()
	leakedA := c.sched.Outstanding(0, throttle.Accounting)
	atB := c.sched.Outstanding(1, throttle.Accounting)
	c.unlockThrottle()
	require.Equal(t, 0, atB)
	require.Equal(t, 0, leakedA, "the accounting places of the 4 handed-back requests are still held at a")
}
