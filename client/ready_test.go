package client

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// WaitReady returns once n servers are in service, not before; it fails
// with the context, saying how many were; n beyond the servers is an error.
func TestWaitReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, Balance, "tcp://a:1", "tcp://b:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		assert.Error(t, c.WaitReady(context.Background(), 3), "only two servers")
		require.NoError(t, c.WaitReady(context.Background(), 2))
		assert.Equal(t, 2, c.inService())

		n["tcp://b:1"].freeze() // SUSPECT after 2 Tw: out of the table
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		time.Sleep(61 * time.Second)
		synctest.Wait()
		require.Equal(t, 1, c.inService())
		t0 := time.Now()
		err = c.WaitReady(ctx, 2)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "1 of the 2 servers")
		assert.Equal(t, 59*time.Second, time.Since(t0), "waited for the deadline")
		require.NoError(t, c.WaitReady(context.Background(), 1), "one is enough at once")

		n["tcp://b:1"].unfreeze()
		done := make(chan error, 1)
		go func() { done <- c.WaitReady(context.Background(), 2) }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("returned with b not back in service")
		default:
		}
		time.Sleep(3 * time.Minute) // b reopens: three DWAs
		synctest.Wait()
		select {
		case err := <-done:
			require.NoError(t, err, "b came back")
			assert.Equal(t, 2, c.inService())
		default:
			t.Fatalf("WaitReady still waiting with %d in service", c.inService())
		}
	})
}

// inService counts the servers that take new requests now.
func (c *Client) inService() int { return c.view().nopen }
