package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
)

// Requests that found no Identifier free wait in the server's peer; the
// requests holding the Identifiers then reach their deadlines, and no
// further request comes: the connection, its Identifiers now held by
// requests that ended, is recycled then (radpeer's recycleStale), and
// the waiting requests go on its replacement at once. Before, the rule
// was looked at only when a request came or an Identifier freed, and
// these waited until their own deadlines while the server, in service,
// answered everything (seeds 3849, 4636 and 7019 of TestSimRADIUSStream:
// 200 requests queued behind a connection with 0 in flight and 206 of
// its 255 Identifiers held by requests that had ended).
func TestRADIUSWaitingRequestsGoOnceTheReservationsGoStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, c, stop := radOne(t) // one connection
		defer stop()
		// The backend hangs; Status-Server is answered: OKAY throughout.
		a.silent.Store(true)
		var fill sync.WaitGroup
		for i := range radpeer.IDsPerConn {
			fill.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := c.Exchange(ctx, accessRequest(fmt.Sprintf("x%d", i)))
				assert.Error(t, err)
			})
		}
		synctest.Wait()
		time.Sleep(time.Second)

		// Patient requests: no Identifier free, none held by a request
		// that ended yet: they wait in the peer.
		a.silent.Store(false)
		start := time.Now()
		const n = 10
		var wg sync.WaitGroup
		errs, took := make([]error, n), make([]time.Duration, n)
		for i := range n {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, errs[i] = c.Exchange(ctx, accessRequest(fmt.Sprintf("y%d", i)))
				took[i] = time.Since(start)
			})
		}
		synctest.Wait()
		assert.Equal(t, n, c.RADIUSPeers()[0].Stats().Waiting, "waiting for an Identifier")
		fill.Wait() // the 255 end at their deadlines, 4 s from start
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i], "y%d", i)
			// At 4 s the connection is recycled and its replacement
			// dialed at once (virtual time).
			assert.LessOrEqual(t, took[i], 5*time.Second, "y%d waited for an Identifier", i)
		}
		assert.Equal(t, uint64(1), c.RADIUSPeers()[0].Stats().RecycledConns)
	})
}

// A request whose deadline passes while it waits in a server's queue for
// an Identifier, the server in service throughout, timed out: it did not
// find "no peer in service", and is counted as a timeout, not no_peer.
func TestRADIUSTimeoutWaitingForAnIdentifierIsNotNoPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, c, stop := radOne(t) // one connection
		defer stop()
		a.silent.Store(true) // the backend hangs; Status-Server is answered
		var fill sync.WaitGroup
		for i := range radpeer.IDsPerConn {
			fill.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := c.Exchange(ctx, accessRequest(fmt.Sprintf("x%d", i)))
				assert.Error(t, err)
			})
		}
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.Exchange(ctx, accessRequest("y"))
		require.Error(t, err)
		assert.ErrorIs(t, err, peer.ErrTimeout)
		assert.NotErrorIs(t, err, ErrNoPeer)
		assert.NotContains(t, err.Error(), "no peer")
		unsent := c.UnsentErrors()
		assert.Equal(t, uint64(0), unsent["no_peer"], "%v", unsent)
		fill.Wait()
	})
}
