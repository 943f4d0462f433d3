package call

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// tpeer is a test peer: peers of the same name are equal.
type tpeer struct{ name string }

func (p tpeer) Name() string                                 { return p.name }
func (tpeer) InService() bool                                { return true }
func (tpeer) Submit(*Call) error                             { return nil }
func (tpeer) SubmitAll([]*Call) (refused []*Call, err error) { return nil, nil }
func (tpeer) Avoids(*Call) bool                              { return false }
func (tpeer) HandOver(string, func(*Call) bool, func())      {}

// conn is a test connection that records what it is told.
type conn struct {
	Conn
	name     string
	retired  atomic.Int32
	timedOut atomic.Int32
}

// newConn returns a connection of peer "p"+name.
func newConn(name string) *conn {
	c := &conn{name: name}
	c.Init(tpeer{"p" + name}, func(_ *Call, timedOut bool) {
		c.retired.Add(1)
		if timedOut {
			c.timedOut.Add(1)
		}
	})
	return c
}

// boarded boards c on cn.
func boarded(t *testing.T, c *Call, cn *conn) Boarding {
	t.Helper()
	c.Lock()
	b, err := c.BoardLocked(&cn.Conn)
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
		boarded(t, c, cn)
	}
	switch s {
	case Queued:
	case InFlight:
		board(a)
	case Moved:
		board(a)
		require.True(t, c.Leave(&a.Conn, nil))
	case Parked:
		require.True(t, c.Park())
	case Answered:
		board(a)
		ok, _ := c.Finish([]byte("x"), 0, nil, &a.Conn, nil)
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
	bo, err := c.BoardLocked(&a.Conn)
	c.Unlock()
	require.NoError(t, err)
	assert.Equal(t, Boarding{Prev: Queued}, bo)
	assert.Equal(t, Carrier(tpeer{"pa"}), c.First())
	c.Lock()
	_, err = c.BoardLocked(&b.Conn)
	c.Unlock()
	assert.ErrorIs(t, err, ErrInFlight)
	require.True(t, c.Refuse(&a.Conn, []byte("busy"), 0, nil))
	assert.True(t, c.RefusedBy(tpeer{"pa"}))
	assert.False(t, c.RefusedBy(tpeer{"pb"}))
	c.Lock()
	_, err = c.BoardLocked(&a.Conn)
	c.Unlock()
	assert.ErrorIs(t, err, ErrAlreadySent)
	c.Lock()
	bo, err = c.BoardLocked(&b.Conn)
	c.Unlock()
	require.NoError(t, err)
	assert.Equal(t, Boarding{Prev: Moved, Sends: 1, AfterRefusal: true}, bo)
	c.Unboard(&b.Conn, bo)
	assert.Equal(t, Moved, c.State())
	assert.Equal(t, 1, c.Sends())
	assert.False(t, c.SentOn(&b.Conn), "an undone boarding leaves no trace")
	assert.True(t, c.SentOn(&a.Conn))
	assert.Equal(t, Carrier(tpeer{"pa"}), c.First())
	require.True(t, c.Fail(errors.New("gone")))
	c.Lock()
	_, err = c.BoardLocked(&b.Conn)
	c.Unlock()
	assert.ErrorIs(t, err, ErrComplete)
}

// Avoids: nothing before the first send; then the connection it was sent
// on and the peers that refused it.
func TestAvoids(t *testing.T) {
	c := newCall()
	a, b := newConn("a"), newConn("b")
	assert.False(t, c.Avoids(&a.Conn, tpeer{"pa"}))
	boarded(t, c, a)
	assert.True(t, c.Avoids(&a.Conn, tpeer{"pa"}))
	assert.False(t, c.Avoids(&b.Conn, tpeer{"pa"}), "a new connection of the same peer may take it")
	assert.False(t, c.Avoids(nil, tpeer{"pa"}))
	require.True(t, c.Refuse(&a.Conn, []byte("busy"), 0, nil))
	assert.True(t, c.Avoids(&b.Conn, tpeer{"pa"}), "a peer that refused it is not asked again")
	assert.False(t, c.Avoids(&b.Conn, tpeer{"pb"}))
	assert.Equal(t, []*Conn{&a.Conn}, c.AppendSentOn(nil, func(*Conn) bool { return true }))
	assert.True(t, c.SentOnAny(func(cn *Conn) bool { return cn.Peer() == Carrier(tpeer{"pa"}) }))
}

// Many goroutines race to complete one call: exactly one wins, the
// waiter gets the winner's result, and the connection it was in flight
// on is told at most once.
func TestCompletesExactlyOnce(t *testing.T) {
	for range 50 {
		c := newCall()
		a := newConn("a")
		boarded(t, c, a)
		var wins atomic.Int32
		var winner atomic.Value
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				var ok bool
				if i%2 == 0 {
					ok, _ = c.Finish([]byte{byte(i)}, 0, nil, &a.Conn, nil)
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
		ans, err := c.Wait(context.Background(), time.Second)
		if i := winner.Load().(int); i%2 == 0 {
			require.NoError(t, err)
			assert.Equal(t, []byte{byte(i)}, ans)
			assert.Equal(t, Carrier(tpeer{"pa"}), c.AnsweredBy())
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
		a := newConn("a")
		boarded(t, c, a)
		start := time.Now()
		_, err := c.Wait(context.Background(), 3*time.Second)
		assert.ErrorIs(t, err, ErrTimeout)
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Equal(t, int32(1), a.timedOut.Load())
		assert.Equal(t, Failed, c.State())
		ok, _ := c.Finish([]byte("late"), 0, nil, &a.Conn, nil)
		assert.False(t, ok, "complete once")

		c2 := newCall()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		_, err = c2.Wait(ctx, time.Hour)
		assert.ErrorIs(t, err, ErrTimeout)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start), "ctx's deadline wins over timeout")

		c3 := newCall()
		start = time.Now()
		_, err = c3.Wait(context.Background(), 0)
		assert.ErrorIs(t, err, ErrTimeout)
		assert.Equal(t, DefaultTimeout, time.Since(start))
	})
}

// An answer that arrives while the caller waits is what Wait returns;
// the counter is counted before the caller sees it.
func TestWaitAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCall()
		b := newConn("b")
		boarded(t, c, b)
		var cnt atomic.Uint64
		go func() {
			time.Sleep(time.Second)
			c.Finish([]byte("ans"), 0, nil, &b.Conn, &cnt)
		}()
		ans, err := c.Wait(context.Background(), time.Minute)
		require.NoError(t, err)
		assert.Equal(t, []byte("ans"), ans)
		assert.Equal(t, uint64(1), cnt.Load())
		assert.Equal(t, Carrier(tpeer{"pb"}), c.AnsweredBy())
	})
}

// Conclude delivers the last refusal, as an answer from the peer that
// refused it, with its code; without a refusal it does nothing. Park only from Queued
// or Moved.
func TestConcludeAndPark(t *testing.T) {
	c := newCall()
	assert.False(t, c.Conclude())
	a, b := newConn("a"), newConn("b")
	for i, cn := range []*conn{a, b} {
		boarded(t, c, cn)
		assert.False(t, c.Park(), "in flight: not parked")
		require.True(t, c.Refuse(&cn.Conn, []byte{byte(i)}, uint32(3000+i), nil))
	}
	require.True(t, c.Park())
	assert.True(t, c.Park(), "parked already")
	require.True(t, c.Conclude())
	r := c.Await(context.Background(), time.Second)
	require.NoError(t, r.Err)
	assert.Equal(t, []byte{1}, r.Ans, "the last refusal")
	assert.Equal(t, uint32(3001), r.Code, "with its code")
	assert.Equal(t, Carrier(tpeer{"pb"}), c.AnsweredBy())
	assert.False(t, c.Park(), "complete")
	assert.False(t, c.Conclude(), "complete once")
}

type record struct{ c *Call }

func (r *record) Held() *Call { return r.c }

func TestHolder(t *testing.T) {
	c := newCall()
	assert.Nil(t, c.Holder())
	r := &record{c}
	c.SetHolder(r)
	assert.Same(t, r, c.Holder())
	assert.Same(t, c, c.Holder().Held())
}

// Await returns the result with the peers and the send count of the
// call: the answer's, or none for a call that timed out unsent.
func TestAwaitResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCall()
		a, b := newConn("a"), newConn("b")
		boarded(t, c, a)
		require.True(t, c.Leave(&a.Conn, nil))
		boarded(t, c, b)
		go c.Finish([]byte("ans"), 0, nil, &b.Conn, nil)
		r := c.Await(context.Background(), time.Minute)
		assert.Equal(t, Result{Ans: []byte("ans"), First: tpeer{"pa"}, By: tpeer{"pb"}, Sends: 2}, r)

		unsent := newCall()
		r = unsent.Await(context.Background(), time.Second)
		assert.ErrorIs(t, r.Err, ErrTimeout)
		assert.Equal(t, 0, r.Sends)
		assert.Nil(t, r.First)
		assert.Nil(t, r.By)
	})
}

// A refusal without an answer (no reply to any attempt) concludes the
// call with its error, and is not a refusal the next send may clear the
// T flag after: that request may have been received.
func TestRefuseWithError(t *testing.T) {
	c := newCall()
	a, b := newConn("a"), newConn("b")
	boarded(t, c, a)
	errNoReply := errors.New("no reply")
	require.True(t, c.Refuse(&a.Conn, nil, 0, errNoReply))
	assert.True(t, c.RefusedBy(tpeer{"pa"}))
	bo := boarded(t, c, b)
	assert.False(t, bo.AfterRefusal, "no answer: the request may have been received")
	require.True(t, c.Refuse(&b.Conn, nil, 0, errNoReply))
	require.True(t, c.Conclude())
	_, err := c.Wait(context.Background(), time.Second)
	assert.ErrorIs(t, err, errNoReply)
	assert.Nil(t, c.AnsweredBy())
}

// A call lost on a connection (a failover) and then refused with an
// answer is not concluded with that refusal: the first server may have
// applied it. A refusal without an answer (an error) still concludes.
func TestConcludeNotAfterLoss(t *testing.T) {
	c := newCall()
	a, b, d := newConn("a"), newConn("b"), newConn("d")
	boarded(t, c, a)
	require.True(t, c.Leave(&a.Conn, nil), "lost with a's connection")
	boarded(t, c, b)
	require.True(t, c.Refuse(&b.Conn, []byte("busy"), 0, nil))
	assert.False(t, c.Conclude(), "b's refusal does not conclude a call a may have applied")
	assert.False(t, c.IsDone())
	errNoReply := errors.New("no reply")
	boarded(t, c, d)
	require.True(t, c.Refuse(&d.Conn, nil, 0, errNoReply))
	require.True(t, c.Conclude(), "an error claims nothing")
	_, err := c.Wait(context.Background(), time.Second)
	assert.ErrorIs(t, err, errNoReply)
}

// A connection whose send ended in a refusal carries the call again only
// once the refusal is forgotten; a connection it was lost on never does.
func TestRefusedConnectionReusableAfterForget(t *testing.T) {
	c := newCall()
	a, b := newConn("a"), newConn("b")
	boarded(t, c, a)
	require.True(t, c.Leave(&a.Conn, nil))
	boarded(t, c, b)
	require.True(t, c.Refuse(&b.Conn, []byte("busy"), 0, nil))
	assert.True(t, c.RefusedAfterLoss())
	assert.True(t, c.Avoids(&b.Conn, tpeer{"pb"}))
	c.Lock()
	_, err := c.BoardLocked(&b.Conn)
	c.Unlock()
	assert.ErrorIs(t, err, ErrAlreadySent, "b still stands by its refusal")
	c.ForgetRefusals()
	assert.False(t, c.RefusedAfterLoss())
	assert.False(t, c.Avoids(&b.Conn, tpeer{"pb"}))
	assert.True(t, c.Avoids(&a.Conn, tpeer{"pa"}), "lost there: never again on that connection")
	boarded(t, c, b)
}

// Sent again on a connection that had refused it, then moved off it (a
// failover): that connection does not take it a third time.
func TestReusedConnectionNotReusedAfterLoss(t *testing.T) {
	c := newCall()
	a, b := newConn("a"), newConn("b")
	boarded(t, c, a)
	require.True(t, c.Leave(&a.Conn, nil))
	boarded(t, c, b)
	require.True(t, c.Refuse(&b.Conn, []byte("busy"), 0, nil))
	c.ForgetRefusals()
	boarded(t, c, b) // allowed: b's send had been refused
	require.True(t, c.Leave(&b.Conn, nil))
	assert.True(t, c.Avoids(&b.Conn, tpeer{"pb"}), "lost there now: never again on b")
	c.Lock()
	_, err := c.BoardLocked(&b.Conn)
	c.Unlock()
	assert.ErrorIs(t, err, ErrAlreadySent)
}

// A refusal read on a connection after the call left it (a failover)
// says that connection's peer did not apply it: the call avoids the peer
// as after any refusal, and takes the connection again once the refusal
// is forgotten. A call complete, in flight, or never sent there records
// nothing.
func TestRefuseLate(t *testing.T) {
	c := newCall()
	a, b := newConn("a"), newConn("b")
	assert.False(t, c.RefuseLate(&a.Conn, []byte("busy"), 0), "never sent on a")
	boarded(t, c, a)
	assert.False(t, c.RefuseLate(&a.Conn, []byte("busy"), 0), "in flight: its send answers it")
	require.True(t, c.Leave(&a.Conn, nil))
	assert.True(t, c.Avoids(&a.Conn, tpeer{"pa"}), "lost there")
	require.True(t, c.RefuseLate(&a.Conn, []byte("busy"), 0))
	assert.True(t, c.RefuseLate(&a.Conn, []byte("busy"), 0), "a duplicate records the same")
	assert.True(t, c.RefusedAfterLoss(), "its waiter asks again later")
	assert.True(t, c.Avoids(&a.Conn, tpeer{"pa"}), "until the refusal is forgotten")
	assert.False(t, c.Conclude(), "lost there first: the refusal does not end it")
	c.ForgetRefusals()
	assert.False(t, c.Avoids(&a.Conn, tpeer{"pa"}))
	boarded(t, c, a)
	require.True(t, c.Leave(&a.Conn, nil))
	assert.True(t, c.Avoids(&a.Conn, tpeer{"pa"}), "lost there again: never a third time")

	boarded(t, c, b)
	assert.False(t, c.RefuseLate(&b.Conn, []byte("busy"), 0), "in flight on b: its send there answers it")
	assert.True(t, c.RefuseLate(&a.Conn, []byte("busy"), 0), "in flight on b, refused late on a")
	assert.False(t, c.RefusedBy(tpeer{"pa"}), "a failover of b's send must not take it for refused by a")
	assert.False(t, c.Avoids(&a.Conn, tpeer{"pa"}), "pending on a no more: a may carry it again")
	require.True(t, c.Leave(&b.Conn, nil))
	assert.False(t, c.Conclude(), "the late refusal is not the answer")
	boarded(t, c, a)
	ok, _ := c.Finish([]byte("x"), 0, nil, &b.Conn, nil)
	require.True(t, ok)
	assert.False(t, c.RefuseLate(&a.Conn, []byte("busy"), 0), "complete")
}

// LeftRefused tells a call refused off its connection from one lost
// there: a refusal read after the loss does not turn the loss into a
// refusal, so a failover of it is not taken for a premature one.
func TestLeftRefused(t *testing.T) {
	c := newCall()
	a, b := newConn("a"), newConn("b")
	assert.False(t, c.LeftRefused(), "never sent")
	boarded(t, c, a)
	require.True(t, c.Refuse(&a.Conn, []byte("busy"), 0, nil))
	assert.True(t, c.LeftRefused())
	boarded(t, c, b)
	require.True(t, c.Leave(&b.Conn, nil))
	assert.False(t, c.LeftRefused(), "lost on b")
	require.True(t, c.RefuseLate(&b.Conn, []byte("busy"), 0))
	assert.True(t, c.RefusedBy(tpeer{"pb"}), "b refused it, late")
	assert.False(t, c.LeftRefused(), "still lost on b: the refusal came after")
}

// A call that left a connection for a known cause (Leave) and then
// fails, at its deadline or by any error, fails with the cause wrapped
// too, once; a later loss without a cause forgets it.
func TestFailAfterLossNamesItsCause(t *testing.T) {
	errMismatch := errors.New("shared secret mismatch?")
	cause := fmt.Errorf("server closed the connection: %w", errMismatch)

	c := newCall()
	a := newConn("a")
	boarded(t, c, a)
	require.True(t, c.Leave(&a.Conn, cause))
	_, err := c.Wait(context.Background(), time.Millisecond)
	assert.ErrorIs(t, err, ErrTimeout)
	assert.ErrorIs(t, err, errMismatch)

	c = newCall()
	boarded(t, c, a)
	require.True(t, c.Leave(&a.Conn, cause))
	require.True(t, c.Fail(fmt.Errorf("RADIUS server a: connection lost: %w", cause)))
	_, err = c.Wait(context.Background(), time.Second)
	assert.Equal(t, 1, strings.Count(err.Error(), "shared secret mismatch?"), "the cause once: %v", err)

	c = newCall()
	b := newConn("b")
	boarded(t, c, a)
	require.True(t, c.Leave(&a.Conn, cause))
	boarded(t, c, b)
	require.True(t, c.Leave(&b.Conn, nil))
	_, err = c.Wait(context.Background(), time.Millisecond)
	assert.ErrorIs(t, err, ErrTimeout)
	assert.NotErrorIs(t, err, errMismatch, "lost since for no known cause")
}

// A peer that turns a call away unsent (a RADIUS server out of
// Identifiers) records no refusal: the call may go to that peer again,
// and Conclude ends it with the error, until its next send, which forgets
// it. Nothing is recorded while it is in flight.
func TestTurnAway(t *testing.T) {
	c := newCall()
	a, b := newConn("a"), newConn("b")
	busy := errors.New("busy")
	boarded(t, c, a)
	c.TurnAway(busy)
	require.True(t, c.Leave(&a.Conn, nil))
	assert.False(t, c.Conclude(), "in flight when turned away: nothing recorded")
	c.TurnAway(busy)
	assert.False(t, c.RefusedBy(b.peer), "not a refusal")
	assert.False(t, c.Avoids(nil, b.peer))
	boarded(t, c, b)
	require.True(t, c.Leave(&b.Conn, nil))
	assert.False(t, c.Conclude(), "sent since: the lost call waits for a server")
	c.TurnAway(busy)
	c.TurnAway(nil) // taken into a carrier's queue
	assert.False(t, c.Conclude(), "forgotten when taken")
	c.TurnAway(busy)
	require.True(t, c.Conclude(), "an error claims nothing, even after a loss")
	_, err := c.Wait(context.Background(), time.Second)
	assert.ErrorIs(t, err, busy)
}

// FirstTaken is true once, whoever asks.
func TestFirstTaken(t *testing.T) {
	c := newCall()
	assert.True(t, c.FirstTaken())
	assert.False(t, c.FirstTaken())
	assert.False(t, c.IsDone(), "a flag of its own")
}

// Contexts that ended before their Done was first called share one closed
// channel: a wait under one of them must not join the watch of another and
// fail with its error. A deadline's end is a timeout, a cancellation is
// not, whatever ended at the same moment.
func TestAwaitEndedContextsNotConfused(t *testing.T) {
	var wrong atomic.Int32
	for range 2000 {
		expired, cancel1 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		cancelled, cancel2 := context.WithCancel(context.Background())
		cancel2()
		var wg sync.WaitGroup
		wg.Go(func() {
			if r := newCall().Await(expired, time.Second); !errors.Is(r.Err, ErrTimeout) {
				wrong.Add(1)
			}
		})
		wg.Go(func() {
			if r := newCall().Await(cancelled, time.Second); errors.Is(r.Err, ErrTimeout) || !errors.Is(r.Err, context.Canceled) {
				wrong.Add(1)
			}
		})
		wg.Wait()
		cancel1()
	}
	assert.Zero(t, wrong.Load(), "waits that failed with another context's error")
}

// A send taken back before it reached the wire (Unsend) leaves no trace
// of it: the call is Moved, pending nowhere, the connection may carry it
// again, the sends before it are all that count, and it was not lost
// there (its next send is not a possible duplicate because of it).
func TestUnsend(t *testing.T) {
	cause := errors.New("no DWA")
	c := newCall()
	a, b := newConn("a"), newConn("b")
	boarded(t, c, a)
	assert.False(t, c.Unsend(&b.Conn, false, cause), "not in flight on b")
	require.True(t, c.Unsend(&a.Conn, false, cause))
	assert.Equal(t, Moved, c.State())
	assert.Zero(t, c.Sends())
	assert.Nil(t, c.First())
	assert.False(t, c.SentOn(&a.Conn))
	assert.False(t, c.Avoids(&a.Conn, tpeer{"pa"}))
	assert.False(t, c.Unsend(&a.Conn, false, cause), "taken back once")
	bo := boarded(t, c, a)
	assert.Equal(t, Boarding{Prev: Moved}, bo, "a first send again, not lost")

	// Sent on a and lost there, then taken back from b after a refusal
	// of a: the sends before count, the loss stays.
	require.True(t, c.Leave(&a.Conn, cause))
	bo = boarded(t, c, b)
	assert.Equal(t, Boarding{Prev: Moved, Sends: 1, Lost: true}, bo)
	require.True(t, c.Unsend(&b.Conn, bo.AfterRefusal, cause))
	assert.Equal(t, 1, c.Sends())
	assert.True(t, c.SentOn(&a.Conn))
	assert.False(t, c.SentOn(&b.Conn))
	assert.Equal(t, Carrier(tpeer{"pa"}), c.First())
	assert.Equal(t, Boarding{Prev: Moved, Sends: 1, Lost: true}, boarded(t, c, b))

	// After a refusal (not lost), the refusal holds for the next send.
	c = newCall()
	boarded(t, c, a)
	require.True(t, c.Refuse(&a.Conn, []byte("busy"), 0, nil))
	bo = boarded(t, c, b)
	require.True(t, bo.AfterRefusal)
	require.True(t, c.Unsend(&b.Conn, bo.AfterRefusal, nil))
	assert.Equal(t, Boarding{Prev: Moved, Sends: 1, AfterRefusal: true}, boarded(t, c, b))

	// Its cause is named should it fail later.
	c = newCall()
	boarded(t, c, a)
	require.True(t, c.Unsend(&a.Conn, false, cause))
	_, err := c.Wait(context.Background(), time.Millisecond)
	assert.ErrorIs(t, err, ErrTimeout)
	assert.ErrorIs(t, err, cause)
}

// helper123: a send taken back (Unsend) from a connection the call went
// back to after its refusal there was forgotten leaves it as before that
// send: that connection may carry it again (the refusal is still
// forgotten). Unsend does not restore the rf.on entry BoardLocked took.
func TestUnsendAfterReuseOfARefusingConnection(t *testing.T) {
	cause := errors.New("no DWA")
	c := newCall()
	a, b := newConn("a"), newConn("b")
	boarded(t, c, a)
	require.True(t, c.Leave(&a.Conn, cause)) // lost on a
	boarded(t, c, b)
	require.True(t, c.Refuse(&b.Conn, []byte("busy"), 3004, nil))
	require.True(t, c.RefusedAfterLoss())
	c.ForgetRefusals() // the retry tick
	require.False(t, c.Avoids(&b.Conn, tpeer{"pb"}), "b may carry it again")
	boarded(t, c, b) // sent on b again, then taken back out of b's queue
	require.True(t, c.Unsend(&b.Conn, false, cause))
	assert.Equal(t, 2, c.Sends())
	assert.False(t, c.Avoids(&b.Conn, tpeer{"pb"}), "as before the send taken back, b may carry it again")
}
