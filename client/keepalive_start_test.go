package client

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The first keep-alive waits for a connection to carry it: due at New,
// before the peer is in service, it goes once the peer is, and the server
// comes into service without traffic. Before, it was dropped for want of
// a connection while the policy counted it as sent: nothing came back
// within the down-timeout, and an idle, healthy server went out of
// service.
func TestFirstKeepAliveWaitsForTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newFakeServer("a.example.net")
		count, _ := testUserCount(a)
		n := network{"tcp://a:1": a}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:1")
		cfg.Policy = &policy.Config{RequestTimeout: time.Second, Retries: 1, TestUser: true, KeepAlive: time.Minute}
		cfg.TestRequest = func(string) []byte { return acr(0, testUser) }
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		synctest.Wait()
		assert.Equal(t, int64(1), count.Load(), "the first keep-alive, once the peer is in service")
		time.Sleep(5 * time.Second) // past the down-timeout (1 s)
		synctest.Wait()
		assert.Equal(t, "in-service", c.PolicyStates()[0], "the keep-alive's answer put the server in service")
		assert.Equal(t, int64(1), count.Load(), "the next keep-alive is a minute later")
	})
}
