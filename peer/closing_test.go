package peer

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Once our DPR is out, no DWR follows while the DPA is awaited, even when
// Tw expires meanwhile.
func TestNoDWRAfterDPR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		f.dropDPR.Store(true)
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.DPATimeout = 20 * time.Second
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		time.Sleep(25 * time.Second) // Tw is 30 s: it expires during the wait for the DPA
		t0 := time.Now()
		require.NoError(t, p.Close(context.Background()))
		assert.Equal(t, 20*time.Second, time.Since(t0), "waited DPATimeout for the DPA")
		assert.Empty(t, f.dwrTimes(), "DWR sent after the DPR")
		f.mu.Lock()
		defer f.mu.Unlock()
		assert.Equal(t, 1, f.dprs)
	})
}
