package peer

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
)

// A caller that holds a connection's baton while its call leaves that
// connection (refused there too busy, or moved out by a failover) must
// not go on reading it: sent on inline to another connection whose
// baton lies free, its call is offered that connection, and its answer
// there is for it to read at once. Reading the first connection still,
// it would leave that answer lying until the other connection's parked
// reader looks (batonIdle later). TestSim found it (seed 16169): a
// request refused by b, read by its own caller holding b's baton,
// waited in the throttle for c's only place and, released to c by
// another caller's goroutine, had its answer read 5 ms late.

// dialBatonPipe dials host over a batonPipe (in a synctest bubble) and
// makes one round trip, after which the reader has parked: the baton
// lies free.
func dialBatonPipe(t *testing.T, cfg Config, host string) (*Peer, *conn, transport.Conn) {
	t.Helper()
	p, far := dialPipeOver(t, cfg, host, func(a net.Conn) transport.Conn {
		return &batonPipe{Conn: transport.NewStreamConn(a, "pipe", transport.Options{}), raw: a}
	})
	c := p.cur.Load()
	require.NotNil(t, c.bt.rd, "the pipe has a baton")
	r := requestAsync(p, context.Background())
	req := readRequest(t, far)
	go far.WriteMessages(successAnswer(req))
	require.NoError(t, (<-r).err)
	synctest.Wait()
	require.Equal(t, batonFree, c.bt.state.Load(), "the reader parked")
	return p, c, far
}

// answeredInline submits cl to p from another goroutine (as a throttle's
// release or a failover does), alone on p's connection, whose baton lies
// free: it goes out inline and its caller is offered the connection.
// The far end answers at once; the caller's result r must come at that
// same instant, not when p's parked reader looks (batonIdle later).
func answeredInline(t *testing.T, p *Peer, c *conn, far transport.Conn, cl *call.Call, r <-chan result, late string) {
	t.Helper()
	require.Equal(t, batonFree, c.bt.state.Load())
	sub := make(chan error, 1)
	go func() { sub <- p.Submit(cl) }()
	req := readRequest(t, far)
	require.NoError(t, <-sub)
	start := time.Now()
	go far.WriteMessages(successAnswer(req))
	require.NoError(t, (<-r).err)
	assert.Zero(t, time.Since(start), late)
}

// The caller reads its own call's refusal (3004) on A, holding A's
// baton; the failover sends the call on to B.
func TestCallerRefusedWhileReadingReadsWhereItsCallGoesNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		handed := make(chan []*call.Call, 1)
		cfg := clientConfig("client.example.net")
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			if len(calls) > 0 {
				handed <- calls
			}
		}
		pA, cA, farA := dialBatonPipe(t, cfg, "a.example.net")
		defer pA.Close(context.Background())
		pB, cB, farB := dialBatonPipe(t, cfg, "b.example.net")
		defer pB.Close(context.Background())

		r := requestAsync(pA, context.Background())
		reqA := readRequest(t, farA)
		synctest.Wait()
		require.Equal(t, batonCaller, cA.bt.state.Load(), "its caller reads A")
		busy := message.ErrorAnswer(reqA, message.Identity{Host: "a.example.net", Realm: "example.net"}, message.TooBusy, "busy").Bytes()
		go farA.WriteMessages(busy)
		calls := <-handed // read by the caller: a premature failover
		require.Len(t, calls, 1)
		synctest.Wait()
		assert.NotEqual(t, batonCaller, cA.bt.state.Load(), "its caller left A, which its call left")

		answeredInline(t, pB, cB, farB, calls[0], r, "B's answer lay unread until B's parked reader looked: its caller still read A")
	})
}

// The caller reads A when a failover moves its call out of A (A stays
// open: a watchdog's, a hand-over) and sends it on to B.
func TestCallerReadingAConnectionItsCallLeftReadsWhereItGoesNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("client.example.net")
		pA, cA, farA := dialBatonPipe(t, cfg, "a.example.net")
		defer pA.Close(context.Background())
		pB, cB, farB := dialBatonPipe(t, cfg, "b.example.net")
		defer pB.Close(context.Background())

		r := requestAsync(pA, context.Background())
		readRequest(t, farA)
		synctest.Wait()
		require.Equal(t, batonCaller, cA.bt.state.Load(), "its caller reads A")
		moved, _ := cA.moveOut(nil, nil)
		require.Len(t, moved, 1)

		answeredInline(t, pB, cB, farB, moved[0], r, "B's answer lay unread until B's parked reader looked: its caller still read A")
	})
}

// A caller registered waiting for A's baton (its request went out
// inline, alone, while another caller held it) whose call a failover
// then moves out of A is not handed A's baton by the holder: it would
// read A, which has nothing of its own, and not B, where its call goes
// next (TestSim's seed 16169: the holder handed b's baton to the caller
// of a request b had refused, waiting in the throttle for c).
func TestWaiterWhoseCallLeftIsNotHandedTheBaton(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("client.example.net")
		pA, cA, farA := dialBatonPipe(t, cfg, "a.example.net")
		defer pA.Close(context.Background())
		pB, cB, farB := dialBatonPipe(t, cfg, "b.example.net")
		defer pB.Close(context.Background())

		// X reads its own answer on A and holds the baton, done.
		atHook, goOn := make(chan struct{}), make(chan struct{})
		var once sync.Once
		holderHook = func(d *dcall) {
			if d.IsDone() {
				once.Do(func() {
					close(atHook)
					<-goOn
				})
			}
		}
		t.Cleanup(func() { holderHook = nil })
		x := requestAsync(pA, context.Background())
		reqX := readRequest(t, farA)
		go farA.WriteMessages(successAnswer(reqX))
		<-atHook

		// Y goes out inline, alone, and waits for the baton.
		y := requestAsync(pA, context.Background())
		readRequest(t, farA)
		synctest.Wait()
		w := cA.bt.waiter.Load()
		require.NotNil(t, w, "Y waits for A's baton")
		moved, _ := cA.moveOut(nil, nil)
		require.Len(t, moved, 1)

		close(goOn) // X hands the baton on
		require.NoError(t, (<-x).err)
		synctest.Wait()
		assert.Nil(t, cA.bt.handed.Load(), "A's baton handed to Y, whose call left A")
		assert.NotEqual(t, batonCaller, cA.bt.state.Load(), "Y holds A's baton, whose call left A")

		answeredInline(t, pB, cB, farB, moved[0], y, "B's answer lay unread until B's parked reader looked: Y read A")
	})
}
