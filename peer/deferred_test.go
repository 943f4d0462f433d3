package peer

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/wire"
)

// An answer the reader queued for the writer because the next request was
// buffered already goes out even when that next request's Handler is
// slow: once the reading moves off the slow Handler, the queued answer
// is written, rather than waiting for the slow Handler to return (it
// may wait for exactly that answer to reach the peer).
func TestQueuedAnswerSentWhileNextHandlerIsSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		p, far := dialPipe(t, func(ctx context.Context, p *Peer, req []byte) []byte {
			if wire.HopByHop(req) == 1 {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return successAnswer(req)
		})
		got := make(chan uint32, 2)
		go func() {
			for {
				m, err := far.ReadMessage()
				if err != nil {
					return
				}
				if wire.IsRequest(m) {
					continue // the DWRs and the DPR of Close: closeAnswering's
				}
				got <- wire.HopByHop(m)
			}
		}()
		// One write: request 1 is buffered whole when request 0 is answered.
		require.NoError(t, far.WriteMessages(serverACR(0), serverACR(1)))
		time.Sleep(20 * DefaultInlineHandlerTime)
		select {
		case id := <-got:
			assert.Equal(t, uint32(0), id)
		default:
			t.Errorf("request 0's answer not sent while request 1's Handler runs (%d hand-overs)", p.cur.Load().handovers.Load())
		}
		close(release)
		assert.Equal(t, uint32(1), <-got)
		far.Close() // the reading goroutine above ends; Close below does not wait for a DPA
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Close(ctx)
	})
}
