package peer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/watchdog"
)

// HandOver moves the requests pending on the connection, but those keep
// names, to the failover hook in send order, and keeps the connection
// and its watchdog. An answer that comes later on that connection still
// completes a request that waits for a peer; a malformed one does not
// fail it (it is dropped, counted), and the one kept pending gets its
// answer there.
func TestHandOverKeepsTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		var mu sync.Mutex
		var moved []*call.Call
		var reasons []string
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, reason string) {
			mu.Lock()
			moved = append(moved, calls...)
			reasons = append(reasons, reason)
			mu.Unlock()
		}
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()
		f.answerReqs.Store(false)
		var calls []*dcall
		for range 4 {
			cl, err := newCall(acr(), false)
			require.NoError(t, err)
			require.NoError(t, p.submit(cl))
			calls = append(calls, cl)
			synctest.Wait()
		}
		kept := &calls[2].Call
		p.HandOver("out of service: test", func(cl *call.Call) bool { return cl == kept }, nil)
		synctest.Wait()
		mu.Lock()
		assert.Equal(t, []*call.Call{&calls[0].Call, &calls[1].Call, &calls[3].Call}, moved, "in send order, the kept one left out")
		assert.Equal(t, []string{"out of service: test"}, reasons)
		mu.Unlock()
		assert.Equal(t, watchdog.Okay, p.State())
		assert.Equal(t, 1, f.dials(), "the connection stays")
		assert.Equal(t, 1, p.Stats().Pending)
		assert.True(t, p.Avoids(&calls[0].Call), "never sent again on the connection it left")

		// Late answers on that connection: the first two moved calls wait
		// for a peer (parked by the hook), so a whole answer completes
		// them; the kept one is answered where it is.
		require.NoError(t, f.answerHeld(false))
		synctest.Wait()
		for _, i := range []int{0, 1, 2} {
			r := calls[i].Await(context.Background(), time.Second)
			assert.NoError(t, r.Err, "call %d", i)
		}

		// A malformed answer to a call that left the connection does not
		// fail it: it may be answered where it went.
		cl, err := newCall(acr(), false)
		require.NoError(t, err)
		require.NoError(t, p.submit(cl))
		synctest.Wait()
		p.HandOver("out of service: test", nil, nil)
		synctest.Wait()
		require.NoError(t, f.answerHeld(true))
		synctest.Wait()
		assert.False(t, cl.IsDone(), "failed by a malformed answer on a connection it left")
		assert.Equal(t, uint64(1), p.Stats().BadAnswers)
		cl.Fail(ErrClosed)
	})
}

// Without a failover hook, HandOver leaves the requests where they are.
func TestHandOverWithoutFailoverDoesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()
		f.answerReqs.Store(false)
		cl, err := newCall(acr(), false)
		require.NoError(t, err)
		require.NoError(t, p.submit(cl))
		synctest.Wait()
		p.HandOver("out of service: test", nil, nil)
		synctest.Wait()
		assert.Equal(t, 1, p.Stats().Pending)
		require.NoError(t, f.answerHeld(false))
		r := cl.Await(context.Background(), time.Second)
		assert.NoError(t, r.Err)
	})
}

// While the peer disconnects gracefully, HandOver leaves the requests
// to the drain, which gives them their time to be answered.
func TestHandOverWhileDisconnectingDoesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		var mu sync.Mutex
		var moved int
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			mu.Lock()
			moved += len(calls)
			mu.Unlock()
		}
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		f.answerReqs.Store(false)
		cl, err := newCall(acr(), false)
		require.NoError(t, err)
		require.NoError(t, p.submit(cl))
		synctest.Wait()
		closed := make(chan error, 1)
		go func() { closed <- p.Close(context.Background()) }()
		synctest.Wait() // draining: the answer in flight gets its time
		p.HandOver("out of service: test", nil, nil)
		synctest.Wait()
		mu.Lock()
		assert.Zero(t, moved, "handed over during the drain")
		mu.Unlock()
		require.NoError(t, f.answerHeld(false))
		r := cl.Await(context.Background(), time.Second)
		assert.NoError(t, r.Err)
		<-closed
	})
}

// HandOver's done runs once, after the hand-over's calls reached the
// failover hook; with nothing to hand over, and after the Peer has
// finished, it runs all the same.
func TestHandOverDoneAfterTheHandOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		var mu sync.Mutex
		var order []string
		note := func(s string) {
			mu.Lock()
			order = append(order, s)
			mu.Unlock()
		}
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			time.Sleep(time.Millisecond) // a hook that takes its time
			note(fmt.Sprintf("failover of %d", len(calls)))
		}
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		f.answerReqs.Store(false)
		cl, err := newCall(acr(), false)
		require.NoError(t, err)
		require.NoError(t, p.submit(cl))
		synctest.Wait()
		p.HandOver("out of service: test", nil, func() { note("done") })
		synctest.Wait()
		p.HandOver("out of service: test", nil, func() { note("done, nothing pending") })
		synctest.Wait()
		require.NoError(t, p.Close(context.Background()))
		p.HandOver("out of service: test", nil, func() { note("done, finished") })
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		// The Close hands over too (nothing pending, for the record).
		assert.Equal(t, []string{"failover of 1", "done", "done, nothing pending", "failover of 0", "done, finished"}, order)
		mu.Unlock()
		cl.Fail(ErrClosed)
	})
}
