package peer

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review s21: a request a Peer without a failover hook fails because
// Close's drain ran out says why once. Since cabef16 the calls are moved
// off with the drain's reason as their lost cause (LeaveLost) and failed
// with an error that formats the same reason as text (not wrapped), so
// Finish appends it again: "peer closed (disconnecting: no answer within
// 2s), after a lost connection: disconnecting: no answer within 2s".
func TestReviewDrainFailureSaysWhyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.DrainTimeout = 2 * time.Second
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		f.answerReqs.Store(false)
		errc := make(chan error, 1)
		go func() {
			_, err := p.Request(context.Background(), acr())
			errc <- err
		}()
		synctest.Wait()
		require.NoError(t, p.Close(context.Background()))
		err = <-errc
		require.ErrorIs(t, err, ErrClosed)
		t.Logf("error: %v", err)
		assert.Equal(t, 1, strings.Count(err.Error(), "no answer within"), "the reason repeated: %v", err)
		assert.NotContains(t, err.Error(), "after a lost connection", "Close's drain is no lost connection: %v", err)
	})
}
