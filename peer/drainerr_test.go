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

// A request a Peer without a failover hook fails because Close's drain
// ran out says why, once.
func TestDrainFailureSaysWhyOnce(t *testing.T) {
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
		assert.Equal(t, 1, strings.Count(err.Error(), "no answer within"), "the reason repeated: %v", err)
	})
}
