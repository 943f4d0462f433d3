package call

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// conn is a test connection that records what it is told.
type conn struct {
	Conn
	name     string
	retired  atomic.Int32
	timedOut atomic.Int32
}

func newConn(name string) *conn {
	c := &conn{name: name}
	c.Init(c, func(_ *Call, timedOut bool) {
		c.retired.Add(1)
		if timedOut {
			c.timedOut.Add(1)
		}
	})
	return c
}

// boarded boards c on cn for peer by.
func boarded(t *testing.T, c *Call, cn *conn, by any) Boarding {
	t.Helper()
	c.Lock()
	b, err := c.BoardLocked(&cn.Conn, by)
	c.Unlock()
	require.NoError(t, err)
	return b
}

func newCall() *Call {
	c := new(Call)
	c.Init()
	c.Ref = 7
	return c
}

// into drives c into state s along legal transitions.
func into(t *testing.T, c *Call, s State) {
	t.Helper()
	a := newConn("a")
	board := func(cn *conn) {
		boarded(t, c, cn, cn.name)
	}
	switch s {
	case Queued:
	case InFlight:
		board(a)
	case Moved:
		board(a)
		require.True(t, c.Leave(&a.Conn, nil, nil))
	case Parked:
		require.True(t, c.Park())
	case Answered:
		board(a)
		ok, _ := c.Finish([]byte("x"), nil, nil, "a", nil, nil)
		require.True(t, ok)
	case Failed:
		require.True(t, c.Fail(errors.New("x")))
	}
	require.Equal(t, s, c.State())
}

// Every (from, to) pair: a legal transition changes the state, an
// illegal one panics (a bug, never a lost or duplicated request).
func TestTransitions(t *testing.T) {
	for from := Queued; from <= Failed; from++ {
		for to := Queued; to <= Failed; to++ {
			c := newCall()
			into(t, c, from)
			step := func() { c.mu.Lock(); defer c.mu.Unlock(); c.to(to) }
			if legal[from][to] {
				assert.NotPanics(t, step, "%s -> %s", from, to)
				assert.Equal(t, to, c.State())
				assert.Equal(t, to >= Answered, c.IsDone())
			} else {
				assert.Panics(t, step, "%s -> %s", from, to)
			}
		}
	}
	assert.False(t, legal[InFlight][Parked], "an in-flight call is never parked")
	assert.False(t, legal[InFlight][InFlight], "in flight on one connection at a time")
}

// Board refuses a complete call, one in flight elsewhere and a connection
// it was sent on, without changing anything; Unboard steps back.
func TestBoardRules(t *testing.T) {
	c := newCall()
	a, b := newConn("a"), newConn("b")
	c.Lock()
	bo, err := c.BoardLocked(&a.Conn, "pa")
	c.Unlock()
	require.NoError(t, err)
	assert.Equal(t, Boarding{Prev: Queued}, bo)
	assert.Equal(t, "pa", c.First())
	c.Lock()
	_, err = c.BoardLocked(&b.Conn, "pb")
	c.Unlock()
	assert.ErrorIs(t, err, ErrInFlight)
	require.True(t, c.Leave(&a.Conn, "pa", []byte("busy")))
	assert.True(t, c.RefusedBy("pa"))
	assert.False(t, c.RefusedBy("pb"))
	c.Lock()
	_, err = c.BoardLocked(&a.Conn, "pa")
	c.Unlock()
	assert.ErrorIs(t, err, ErrAlreadySent)
	c.Lock()
	bo, err = c.BoardLocked(&b.Conn, "pb")
	c.Unlock()
	require.NoError(t, err)
	assert.Equal(t, Boarding{Prev: Moved, Sends: 1, AfterRefusal: true}, bo)
	c.Unboard(&b.Conn, bo)
	assert.Equal(t, Moved, c.State())
	assert.Equal(t, 1, c.Sends())
	assert.False(t, c.SentOn(&b.Conn), "an undone boarding leaves no trace")
	assert.True(t, c.SentOn(&a.Conn))
	assert.Equal(t, "pa", c.First())
	require.True(t, c.Fail(errors.New("gone")))
	c.Lock()
	_, err = c.BoardLocked(&b.Conn, "pb")
	c.Unlock()
	assert.ErrorIs(t, err, ErrComplete)
}

// Avoids: nothing before the first send; then the connection it was sent
// on and the peers that refused it.
func TestAvoids(t *testing.T) {
	c := newCall()
	a, b := newConn("a"), newConn("b")
	assert.False(t, c.Avoids(&a.Conn, "pa"))
	boarded(t, c, a, "pa")
	assert.True(t, c.Avoids(&a.Conn, "pa"))
	assert.False(t, c.Avoids(&b.Conn, "pa"), "a new connection of the same peer may take it")
	assert.False(t, c.Avoids(nil, "pa"))
	require.True(t, c.Leave(&a.Conn, "pa", []byte("busy")))
	assert.True(t, c.Avoids(&b.Conn, "pa"), "a peer that refused it is not asked again")
	assert.False(t, c.Avoids(&b.Conn, "pb"))
	assert.Equal(t, []*Conn{&a.Conn}, c.AppendSentOn(nil, func(*Conn) bool { return true }))
	assert.True(t, c.SentOnAny(func(cn *Conn) bool { return cn.Owner.(*conn).name == "a" }))
}

// Many goroutines race to complete one call: exactly one wins, the
// waiter gets the winner's result, and the connection it was in flight
// on is told at most once.
func TestCompletesExactlyOnce(t *testing.T) {
	for range 50 {
		c := newCall()
		a := newConn("")
		boarded(t, c, a, "pa")
		var wins atomic.Int32
		var winner atomic.Value
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				var ok bool
				if i%2 == 0 {
					ok, _ = c.Finish([]byte{byte(i)}, "aux", nil, "pa", &a.Conn, nil)
				} else {
					ok = c.Fail(errors.New("failed"))
				}
				if ok {
					wins.Add(1)
					winner.Store(i)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int32(1), wins.Load())
		ans, aux, err := c.Wait(context.Background(), time.Second)
		if i := winner.Load().(int); i%2 == 0 {
			require.NoError(t, err)
			assert.Equal(t, []byte{byte(i)}, ans)
			assert.Equal(t, "aux", aux)
			assert.Equal(t, "pa", c.AnsweredBy())
		} else {
			assert.Error(t, err)
			assert.Equal(t, int32(1), a.retired.Load(), "failed while in flight: its connection is told")
		}
		assert.LessOrEqual(t, a.retired.Load(), int32(1))
	}
}

// Wait's deadline: the call fails with ErrTimeout at exactly the timeout
// when ctx has none, the connection it was pending on is told it timed
// out, and an answer after that is refused.
func TestWaitTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCall()
		a := newConn("")
		boarded(t, c, a, "pa")
		start := time.Now()
		_, _, err := c.Wait(context.Background(), 3*time.Second)
		assert.ErrorIs(t, err, ErrTimeout)
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Equal(t, int32(1), a.timedOut.Load())
		assert.Equal(t, Failed, c.State())
		ok, _ := c.Finish([]byte("late"), nil, nil, "pa", &a.Conn, nil)
		assert.False(t, ok, "complete once")

		c2 := newCall()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		_, _, err = c2.Wait(ctx, time.Hour)
		assert.ErrorIs(t, err, ErrTimeout)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start), "ctx's deadline wins over timeout")

		c3 := newCall()
		start = time.Now()
		_, _, err = c3.Wait(context.Background(), 0)
		assert.ErrorIs(t, err, ErrTimeout)
		assert.Equal(t, DefaultTimeout, time.Since(start))
	})
}

// An answer that arrives while the caller waits is what Wait returns;
// the counter is counted before the caller sees it.
func TestWaitAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCall()
		boarded(t, c, newConn(""), "pb")
		var cnt atomic.Uint64
		go func() {
			time.Sleep(time.Second)
			c.Finish([]byte("ans"), nil, nil, "pb", nil, &cnt)
		}()
		ans, _, err := c.Wait(context.Background(), time.Minute)
		require.NoError(t, err)
		assert.Equal(t, []byte("ans"), ans)
		assert.Equal(t, uint64(1), cnt.Load())
		assert.Equal(t, "pb", c.AnsweredBy())
	})
}

// Conclude delivers the last refusal, as an answer from the peer that
// refused it; without a refusal it does nothing. Park only from Queued
// or Moved.
func TestConcludeAndPark(t *testing.T) {
	c := newCall()
	assert.False(t, c.Conclude())
	a, b := newConn(""), newConn("")
	for i, cn := range []*conn{a, b} {
		boarded(t, c, cn, i)
		assert.False(t, c.Park(), "in flight: not parked")
		require.True(t, c.Leave(&cn.Conn, i, []byte{byte(i)}))
	}
	require.True(t, c.Park())
	assert.True(t, c.Park(), "parked already")
	require.True(t, c.Conclude())
	ans, _, err := c.Wait(context.Background(), time.Second)
	require.NoError(t, err)
	assert.Equal(t, []byte{1}, ans, "the last refusal")
	assert.Equal(t, 1, c.AnsweredBy())
	assert.False(t, c.Park(), "complete")
	assert.False(t, c.Conclude(), "complete once")
}

func TestTag(t *testing.T) {
	c := newCall()
	assert.Nil(t, c.Tag())
	c.SetTag(42)
	assert.Equal(t, 42, c.Tag())
}

// Await returns the result with the peers and the send count of the
// call: the answer's, or none for a call that timed out unsent.
func TestAwaitResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCall()
		a, b := newConn("a"), newConn("b")
		boarded(t, c, a, "pa")
		require.True(t, c.Leave(&a.Conn, nil, nil))
		boarded(t, c, b, "pb")
		go c.Finish([]byte("ans"), "aux", nil, "pb", &b.Conn, nil)
		r := c.Await(context.Background(), time.Minute)
		assert.Equal(t, Result{Ans: []byte("ans"), Aux: "aux", First: "pa", By: "pb", Sends: 2}, r)

		unsent := newCall()
		r = unsent.Await(context.Background(), time.Second)
		assert.ErrorIs(t, r.Err, ErrTimeout)
		assert.Equal(t, 0, r.Sends)
		assert.Nil(t, r.First)
		assert.Nil(t, r.By)
	})
}
