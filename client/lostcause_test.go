package client

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request whose connection was lost and that finds no server in
// service before its deadline fails as a timeout that says what became
// of the connection, not only that time ran out.
func TestFailAfterLostConnectionNamesTheLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:3868": newFakeServer("a.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		n["tcp://a:3868"].freeze()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go func() {
			time.Sleep(time.Second)
			n["tcp://a:3868"].dropConnections()
		}()
		_, err = c.Send(ctx, acr(1, "u"))
		require.ErrorIs(t, err, ErrTimeout)
		assert.Contains(t, err.Error(), "after a lost connection: connection down", err.Error())
	})
}
