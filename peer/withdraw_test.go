package peer

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
)

// Requests still in a connection's write queue when they are handed over
// are taken out of it: they never reach that peer after their copies went
// elsewhere, and, never sent there, they may go on that connection again
// (a first send, without the T flag). The request on the wire and the one
// the peer read stay sent there: a late answer still completes them.
func TestHandedOverRequestsNotWrittenLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		var mu sync.Mutex
		var moved []*call.Call
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			mu.Lock()
			moved = append(moved, calls...)
			mu.Unlock()
		}
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()
		f.answerReqs.Store(false)
		stalled := make(chan struct{})
		f.pause.Store(&stalled) // the fake reads r1, then stops reading
		var calls []*dcall
		for i := range 5 {
			cl, err := newCall(acr(), false)
			require.NoError(t, err)
			require.NoError(t, p.submit(cl))
			calls = append(calls, cl)
			if i < 2 {
				synctest.Wait() // r1 read; r2 taken by the writer, blocked
			}
		}
		p.HandOver("out of service: test", nil, nil)
		synctest.Wait()
		mu.Lock()
		require.Len(t, moved, 5, "every request handed over")
		for i, cl := range calls {
			assert.Same(t, &cl.Call, moved[i], "in send order")
		}
		mu.Unlock()
		for i, cl := range calls {
			taken := i >= 2
			assert.Equal(t, !taken, p.Avoids(&cl.Call), "r%d avoids the connection", i+1)
			assert.Equal(t, !taken, cl.Sends() == 1, "r%d counted sent (%d)", i+1, cl.Sends())
		}

		if st := p.Stats(); st.Sent != 2 || st.Retransmitted != 0 {
			t.Errorf("Sent %d, Retransmitted %d: want r1 and r2 alone counted sent", st.Sent, st.Retransmitted)
		}

		f.pause.Store(nil)
		close(stalled)
		synctest.Wait()
		got := f.requests()
		require.Len(t, got, 2, "the peer read r3 to r5, taken back before they were written: %v", got)
		assert.Equal(t, calls[0].Ref, got[0].e2e)
		assert.Equal(t, calls[1].Ref, got[1].e2e)

		// Taken back, r3 may go there again, as a first send; r1 may not.
		assert.ErrorIs(t, p.submit(calls[0]), ErrAlreadySent)
		require.NoError(t, p.submit(calls[2]))
		synctest.Wait()
		got = f.requests()
		require.Len(t, got, 3)
		assert.Equal(t, seenReq{calls[2].Ref, false}, got[2])
		assert.Equal(t, uint64(3), p.Stats().Sent)

		// The late answers: r1 and r2 complete where they were read.
		require.NoError(t, f.answerHeld(false))
		synctest.Wait()
		for i := range 3 {
			r := calls[i].Await(context.Background(), 0)
			assert.NoError(t, r.Err, "r%d", i+1)
		}
		for _, cl := range calls[3:] {
			cl.Fail(ErrClosed)
		}
	})
}
