package peer

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// A peer whose answers carry Hop-by-Hop ids we never sent is broken: after
// MaxUnmatched of them in a row its connection closes and the requests
// still pending there go to the failover hook. A matching answer resets the count.
func TestUnmatchedAnswersCloseTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		var mu sync.Mutex
		var moved []*call.Call
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.MaxUnmatched = 4
		cfg.Events = NewBus()
		rec, cancel := record(cfg.Events)
		defer cancel()
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			mu.Lock()
			moved = append(moved, calls...)
			mu.Unlock()
			for _, cl := range calls {
				cl.Fail(ErrConnectionLost)
			}
		}
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()
		require.Equal(t, watchdog.Okay, p.State())

		submit := func(wrong bool, n int) {
			f.wrongHbH.Store(wrong)
			for range n {
				cl, err := newCall(acr(), false)
				require.NoError(t, err)
				require.NoError(t, p.submit(cl))
				synctest.Wait()
			}
		}
		submit(true, 3)
		submit(false, 1) // a match: the run starts again
		submit(true, 3)
		assert.Equal(t, watchdog.Okay, p.State(), "closed before MaxUnmatched answers in a row")
		assert.Empty(t, rec.ofKind(EventConnDown))
		submit(true, 1)
		assert.Equal(t, uint64(7), p.Stats().Unmatched)
		assert.NotEqual(t, watchdog.Okay, p.State(), "still in service after MaxUnmatched unmatched answers in a row")
		mu.Lock()
		assert.Len(t, moved, 7, "the requests whose answers never matched leave the connection")
		mu.Unlock()
		var found bool
		for _, e := range rec.ofKind(EventError) {
			found = found || strings.Contains(e.Reason, "4 answers in a row matched no pending request")
		}
		assert.True(t, found, "no event says why: %v", rec.ofKind(EventError))
		time.Sleep(time.Minute) // it reconnects as after any loss
		assert.Equal(t, 2, f.dials())
	})
}

// An answer whose AVPs do not fit the message fails its request with
// ErrMalformedAnswer, naming the AVP, and is counted; the connection
// stays in service and the next answer is taken.
func TestMalformedAnswerFailsItsRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()
		send := func() call.Result {
			cl, err := newCall(acr(), false)
			require.NoError(t, err)
			require.NoError(t, p.submit(cl))
			return cl.Await(context.Background(), time.Second)
		}
		f.badAVP.Store(true)
		r := send()
		require.ErrorIs(t, r.Err, ErrMalformedAnswer)
		assert.Nil(t, r.Ans)
		assert.Contains(t, r.Err.Error(), "AVP 1 at offset")
		assert.Equal(t, uint64(1), p.Stats().BadAnswers)
		assert.Zero(t, p.Stats().Answered)
		f.badAVP.Store(false)
		r = send()
		require.NoError(t, r.Err)
		assert.Equal(t, watchdog.Okay, p.State())
		assert.Equal(t, 1, f.dials(), "the connection stays")
	})
}

// A slow server that recovers answers, oldest first, more requests than
// a connection remembers once they have timed out (goneMax): the answers
// to the forgotten ones carry ids this connection issued, so they count
// as late, not as unmatched, and the healthy connection stays in
// service. Before, the first MaxUnmatched of them closed it as broken.
func TestForgottenAnswersOfASlowServerAreLateNotUnmatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()
		c := p.cur.Load()
		f.answerReqs.Store(false)
		const n = goneMax + 20
		var wg sync.WaitGroup
		for i := range n {
			// They time out one after the other, the oldest first: the
			// connection forgets the oldest 20.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second+time.Duration(i)*time.Millisecond)
			wg.Go(func() {
				defer cancel()
				_, err := p.Request(ctx, acr())
				assert.ErrorIs(t, err, ErrTimeout)
			})
			synctest.Wait() // sent in this order
		}
		wg.Wait()
		synctest.Wait()
		f.mu.Lock()
		require.Len(t, f.held, n)
		f.mu.Unlock()

		require.NoError(t, f.answerHeld(false)) // oldest first
		synctest.Wait()
		assert.Equal(t, watchdog.Okay, p.State())
		assert.Same(t, c, p.cur.Load(), "the connection stays")
		st := p.Stats()
		assert.Zero(t, st.Unmatched)
		assert.Equal(t, uint64(n), st.Late)
		f.answerReqs.Store(true)
		_, err = p.Request(context.Background(), acr())
		require.NoError(t, err)
	})
}

// hopIDs knows the ids it issued, across the wrap of the counter, which
// skips 0.
func TestHopIDsIssued(t *testing.T) {
	const first = 0xFFFFFFFE
	h := &hopIDs{first: first}
	assert.False(t, h.issued(first), "nothing issued yet")
	assert.Equal(t, []uint32{first, first + 1, 1}, []uint32{h.Next(), h.Next(), h.Next()})
	for id, want := range map[uint32]bool{first - 1: false, first: true, first + 1: true, 0: false, 1: true, 2: false} {
		assert.Equal(t, want, h.issued(id), "id %#x", id)
	}
}

// Only the last issuedWindow ids count as issued, however many the
// connection has issued: after 2^31 of them, 2^32-1 (every id once) or
// more, an arbitrary id is not one of them, while the ids sent lately
// are. Before, after 2^31 ids half of all ids counted as issued, and
// after 2^32-1 every one did.
func TestHopIDsIssuedIsBounded(t *testing.T) {
	for _, n := range []uint64{issuedWindow + 10, 1 << 31, 1<<32 - 1, 1 << 32, 1 << 40} {
		const first = 0x80000000
		h := &hopIDs{first: first}
		h.n.Store(n)
		last := h.Next() // place n
		assert.True(t, h.issued(last), "n=%d: the last id", n)
		assert.True(t, h.issued(last-issuedWindow+1), "n=%d: the oldest id of the window", n)
		assert.False(t, h.issued(last-issuedWindow), "n=%d: the id just before the window", n)
		assert.False(t, h.issued(last+1), "n=%d: the next id", n)
		assert.False(t, h.issued(last+1<<31), "n=%d: an id far from the window", n)
		issued := 0
		for id := uint32(1); id < 1<<32-1<<20; id += 1<<20 + 7 { // ids spread over the whole range
			if h.issued(id) {
				issued++
			}
		}
		assert.LessOrEqual(t, issued, 2, "n=%d: ids of 4096 spread over the range count as issued", n)
	}
}

// A peer that rewrites Hop-by-Hop ids is closed as broken however many
// requests its connection has carried: only ids among the most recent
// issued count as late. The reviewer's two cases: after 2^31 requests
// (before, half of all ids counted as issued, here every id the peer
// writes) and after 2^32-1 (before, every id did), the connection never
// closed for MaxUnmatched.
func TestRewrittenIDsCloseALongConnection(t *testing.T) {
	for _, n := range []uint64{1 << 31, 1<<32 - 1, 1 << 40} {
		t.Run(strconv.FormatUint(n, 10), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, far := dialPipe(t, nil)
				defer p.Close(context.Background())
				c := p.cur.Load()
				c.hbh.n.Store(n) // as after n requests
				max := p.cfg.MaxUnmatched
				for i := range max {
					res := requestAsync(p, context.Background())
					req := readRequest(t, far)
					ans := successAnswer(req)
					wire.SetHopByHop(ans, wire.HopByHop(req)+1<<31) // far from any id sent lately
					require.NoError(t, far.WriteMessages(ans))
					if i < max-1 {
						synctest.Wait()
						require.True(t, c == p.cur.Load(), "closed after %d answers", i+1)
						go func() { <-res }() // fails when the connection closes
					} else {
						assert.ErrorIs(t, (<-res).err, ErrConnectionLost, "the connection stays")
					}
				}
				synctest.Wait()
				assert.Equal(t, uint64(max), p.Stats().Unmatched)
				assert.Zero(t, p.Stats().Late)
				assert.True(t, c != p.cur.Load(), "a broken peer's connection stays")
			})
		})
	}
}
