package client

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testUser = "test-user@example.net"

// testUserCount makes f count the test user's requests it receives, and
// answer only while mute is false.
func testUserCount(f *fakeServer) (count *atomic.Int64, mute *atomic.Bool) {
	count, mute = new(atomic.Int64), new(atomic.Bool)
	f.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		if u, _ := message.StringOf(req, message.UserName, 0); u == testUser {
			count.Add(1)
		}
		if mute.Load() {
			return nil
		}
		return f.handler(ctx, p, req)
	}
	return count, mute
}

// With a test user and KeepAlive, an idle server gets the test user's
// request every KeepAlive (the 7750 SR's keep-alive), and it reaches the
// server.
func TestKeepAliveReachesTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newFakeServer("a.example.net")
		count, _ := testUserCount(a)
		n := network{"tcp://a:1": a}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1")
		cfg.Policy = &policy.Config{TestUser: true, KeepAlive: 10 * time.Second}
		cfg.TestRequest = func(string) []byte { return acr(0, testUser) }
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		time.Sleep(35 * time.Second)
		synctest.Wait()
		got := count.Load()
		assert.GreaterOrEqual(t, got, int64(3), "a keep-alive every 10 s for 35 s")
		assert.LessOrEqual(t, got, int64(4))
		assert.Equal(t, "in-service", c.PolicyStates()[0])
	})
}

// A server held down is probed with the test user's request once the
// hold-down ends, without waiting for a real request, and comes back in
// service when the probe is answered.
func TestTestUserProbeBringsTheServerBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, a, _ := policyPair(t)
		count, mute := testUserCount(a)
		cfg.Policy.TestUser = true
		cfg.TestRequest = func(string) []byte { return acr(0, testUser) }
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		mute.Store(true)
		h, err := sendWithin(c, 1, 3*time.Second) // no reply: the down-timeout (2 s) expires, then b answers
		require.NoError(t, err)
		require.Equal(t, "b.example.net", h)
		synctest.Wait()
		require.Equal(t, "out-of-service", c.PolicyStates()[0])
		h, err = sendWithin(c, 2, time.Second) // b in service: a may be probed
		require.NoError(t, err)
		require.Equal(t, "b.example.net", h)
		mute.Store(false)
		before := count.Load()
		time.Sleep(20 * time.Second) // the hold-down ends: the probe
		synctest.Wait()
		assert.Equal(t, before+1, count.Load(), "one probe, the test user's request")
		assert.Equal(t, "in-service", c.PolicyStates()[0], "back in service on the probe's answer, no real request needed")
	})
}
