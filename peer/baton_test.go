package peer

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// The reading baton (conn.go) over real loopback TCP, outside synctest
// bubbles: only a socket's read can be interrupted by its deadline. Every
// wait is bounded; none asserts a duration.

// keepBatonFree makes the connections dialed from now on leave the
// baton free for a minute, not batonIdle, before the reader takes it
// back: a test can then see it free however loaded the machine.
func keepBatonFree(t *testing.T) {
	testBatonIdle.Store(int64(time.Minute))
	t.Cleanup(func() { testBatonIdle.Store(0) })
}

// dialTCP opens a client Peer over loopback TCP to a far end the test
// drives: it has answered the CER, and the Peer is OKAY. Its baton stays
// free once the reader parked (keepBatonFree) unless the test set
// testBatonIdle.
func dialTCP(t *testing.T, mutate func(*Config)) (*Peer, *conn, transport.Conn) {
	t.Helper()
	if testBatonIdle.Load() == 0 {
		keepBatonFree(t)
	}
	ln, err := transport.Listen("tcp://127.0.0.1:0", transport.Options{})
	require.NoError(t, err)
	defer ln.Close()
	cfg := clientConfig("client.example.net")
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := Dial("tcp://"+ln.Addr().String(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Close(ctx)
	})
	far, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { far.Close() })
	answerCER(t, far, "server.example.net", message.Success)
	require.NoError(t, p.WaitState(bounded(t), watchdog.Okay))
	c := p.cur.Load()
	require.NotNil(t, c.bt.rd, "a plain TCP connection has a baton")
	// One round trip: the reader reads its answer, and parks.
	a := requestAsync(p, bounded(t))
	req := readRequest(t, far)
	require.NoError(t, far.WriteMessages(successAnswer(req)))
	require.NoError(t, await(t, a).err)
	eventually(t, "the reader parks", func() bool { return c.bt.parks.Load() > 0 })
	return p, c, far
}

// eventually waits, bounded, until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(end) {
			t.Fatalf("never: %s", what)
		}
	}
}

// readRequest reads the next message on far, which must be a request
// (DWRs and all).
func readRequest(t *testing.T, far transport.Conn) []byte {
	t.Helper()
	m, err := far.ReadMessage()
	require.NoError(t, err)
	require.True(t, wire.IsRequest(m))
	return m
}

// result is one request's outcome, from a goroutine.
type result struct {
	ans []byte
	err error
}

func requestAsync(p *Peer, ctx context.Context) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ans, err := p.Request(ctx, acr())
		ch <- result{ans, err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the request never returned")
		return result{}
	}
}

// holding waits until a caller holds c's baton and waits in a read.
func holding(t *testing.T, c *conn) *dcall {
	t.Helper()
	eventually(t, "a caller reads", func() bool { return c.bt.inRead.Load() != nil })
	require.Equal(t, batonCaller, c.bt.state.Load())
	return c.bt.inRead.Load()
}

// One caller at a time reads its own answer: after the first round trip
// the reader leaves the socket, and each caller's answer completes it on
// the caller's goroutine, not the reader's (bt.self counts those). With
// the baton off (batonOff) none does.
func TestCallerReadsItsOwnAnswer(t *testing.T) {
	keepBatonFree(t)
	s := startServer(t, "tcp://127.0.0.1:0", nil)
	p := dialOkay(t, "tcp://"+s.Addr().String(), nil)
	c := p.cur.Load()
	const n = 200
	for range n {
		ans, err := p.Request(bounded(t), acr())
		require.NoError(t, err)
		rc, _ := message.ResultCodeOf(ans)
		require.EqualValues(t, message.Success, rc)
	}
	assert.GreaterOrEqual(t, c.bt.self.Load(), uint64(n-5), "answers read by their own caller")
	assert.Equal(t, batonFree, c.bt.state.Load(), "the reader stays parked between callers")
	assert.Equal(t, uint64(1), c.bt.parks.Load(), "the reader parked once, after the first answer, and read none after")
	c.out.Mu.Lock()
	defer c.out.Mu.Unlock()
	assert.Zero(t, c.out.Writers, "every request went out inline")
}

// A caller that wrote its request inline while another holds the baton
// (whose own call is done, about to hand on) registers, and the holder
// hands it the baton: its answer is read, by itself.
func TestSecondInlineCallerIsHandedTheBaton(t *testing.T) {
	p, c, far := dialTCP(t, nil)
	a := requestAsync(p, bounded(t))
	reqA := readRequest(t, far)
	da := holding(t, c)

	stop := make(chan struct{})
	stopped := make(chan struct{})
	holderHook = func(d *dcall) {
		if d == da && d.IsDone() {
			close(stopped)
			<-stop // A's call is done; it still holds the baton
		}
	}
	t.Cleanup(func() { holderHook = nil })
	require.NoError(t, far.WriteMessages(successAnswer(reqA)))
	<-stopped

	b := requestAsync(p, bounded(t))
	reqB := readRequest(t, far) // written inline: nothing was pending
	eventually(t, "B waits for the baton", func() bool { return c.bt.waiter.Load() != nil })
	db := c.bt.waiter.Load()
	assert.NotNil(t, db.via.Load(), "B wrote inline")
	close(stop)
	eventually(t, "B holds the baton", func() bool { return c.bt.inRead.Load() == db })
	require.NoError(t, far.WriteMessages(successAnswer(reqB)))
	rA, rB := await(t, a), await(t, b)
	require.NoError(t, rA.err)
	require.NoError(t, rB.err)
	assert.Equal(t, wire.HopByHop(reqB), wire.HopByHop(rB.ans))
	assert.Equal(t, uint64(2), c.bt.self.Load(), "A and B each read their own answer")
	eventually(t, "the baton left free", func() bool { return c.bt.state.Load() == batonFree })
}

// A caller's deadline reaches it while it waits in a read (Interrupt:
// the read deadline); the answer it was reading, cut in the middle of
// its body, is whole for the next holder, and the connection stays up.
func TestDeadlineReachesACallerReading(t *testing.T) {
	p, c, far := dialTCP(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	a := requestAsync(p, ctx)
	reqA := readRequest(t, far)
	holding(t, c)
	ansA := successAnswer(reqA)
	require.NoError(t, far.WriteMessages(ansA[:wire.HeaderLen+5])) // a header and a few bytes
	rA := await(t, a)
	require.ErrorIs(t, rA.err, ErrTimeout)

	require.NoError(t, far.WriteMessages(ansA[wire.HeaderLen+5:])) // the rest, late
	b := requestAsync(p, bounded(t))
	reqB := readRequest(t, far)
	require.NoError(t, far.WriteMessages(successAnswer(reqB)))
	rB := await(t, b)
	require.NoError(t, rB.err)
	assert.Equal(t, wire.HopByHop(reqB), wire.HopByHop(rB.ans))
	assert.Equal(t, watchdog.Okay, p.State())
	st := p.Stats()
	assert.Zero(t, st.BadFrames)
	assert.Equal(t, uint64(1), st.Late, "A's answer, whole, after its deadline")
}

// A caller reads the connection its request was written on (A) when a
// failover sends the request on to another peer (B), which changes the
// call's inline connection: its deadline still reaches its read on A.
func TestDeadlineReachesACallerReadingAConnectionItsCallLeft(t *testing.T) {
	pA, cA, farA := dialTCP(t, nil)
	pB, _, farB := dialTCP(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	a := requestAsync(pA, ctx)
	readRequest(t, farA)
	holding(t, cA)
	moved, _ := cA.moveOut(nil, nil)
	require.Len(t, moved, 1)
	require.NoError(t, pB.Submit(moved[0]))
	readRequest(t, farB) // sent again on B; neither server answers
	rA := await(t, a)
	require.ErrorIs(t, rA.err, ErrTimeout)
	eventually(t, "A's baton left free", func() bool { return cA.bt.state.Load() == batonFree })
}

// A caller's context cancelled while it reads ends its wait too.
func TestCancelReachesACallerReading(t *testing.T) {
	p, c, far := dialTCP(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	a := requestAsync(p, ctx)
	readRequest(t, far)
	holding(t, c)
	cancel()
	rA := await(t, a)
	require.ErrorIs(t, rA.err, context.Canceled)
	eventually(t, "the baton left free", func() bool { return c.bt.state.Load() == batonFree })
}

// The connection lost while a caller reads: the reader reports it as
// always, and every call pending there fails over, the holder's and one
// the writer sent beside it.
func TestLossWhileACallerReadsFailsOverEveryCall(t *testing.T) {
	errMoved := errors.New("moved")
	var mu sync.Mutex
	var moved []uint32
	p, c, far := dialTCP(t, func(cfg *Config) {
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			mu.Lock()
			defer mu.Unlock()
			for _, cl := range calls {
				moved = append(moved, cl.Ref)
				cl.Fail(errMoved)
			}
		}
	})
	a := requestAsync(p, bounded(t))
	reqA := readRequest(t, far)
	holding(t, c)
	x := requestAsync(p, bounded(t)) // pending beside A: the writer's
	reqX := readRequest(t, far)
	far.Close()
	require.ErrorIs(t, await(t, a).err, errMoved)
	require.ErrorIs(t, await(t, x).err, errMoved)
	mu.Lock()
	defer mu.Unlock()
	assert.ElementsMatch(t, []uint32{wire.EndToEnd(reqA), wire.EndToEnd(reqX)}, moved)
}

// Requests from the peer met by a caller that reads (a DWR, an
// application request) go to the reader, which answers them as always,
// while the caller's own call is still pending.
func TestRequestsFromThePeerWhileACallerReads(t *testing.T) {
	p, c, far := dialTCP(t, func(cfg *Config) {
		cfg.Handler = func(_ context.Context, _ *Peer, req []byte) []byte { return successAnswer(req) }
	})
	a := requestAsync(p, bounded(t))
	reqA := readRequest(t, far)
	holding(t, c)
	require.NoError(t, far.WriteMessages(farDWR(7), serverACR(8)))
	got := map[uint32]bool{}
	for range 2 {
		m, err := far.ReadMessage()
		require.NoError(t, err)
		require.False(t, wire.IsRequest(m))
		got[wire.HopByHop(m)] = true
	}
	assert.Equal(t, map[uint32]bool{7: true, 8: true}, got, "the DWA and the answer")
	select {
	case <-a:
		t.Fatal("A completed without its answer")
	default:
	}
	require.NoError(t, far.WriteMessages(successAnswer(reqA)))
	require.NoError(t, await(t, a).err)
	assert.Equal(t, uint64(1), p.Stats().DWRReceived)
}

// With the reader parked (the baton free, no caller), a request from the
// peer and the loss of the connection are still noticed: the reader
// takes the baton back within 2*batonIdle.
func TestParkedReaderNotices(t *testing.T) {
	testBatonIdle.Store(int64(batonIdle))
	t.Cleanup(func() { testBatonIdle.Store(0) })
	p, c, far := dialTCP(t, func(cfg *Config) {
		cfg.Handler = func(_ context.Context, _ *Peer, req []byte) []byte { return successAnswer(req) }
	})
	require.NoError(t, far.WriteMessages(farDWR(9)))
	m, err := far.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, uint32(9), wire.HopByHop(m), "the DWA")

	// The reader parks again after an inline caller's call (a request
	// sent while the reader still wrote the DWA goes to the writer, and
	// is no such call: a few round trips).
	parks := c.bt.parks.Load()
	for i := 0; c.bt.parks.Load() == parks; i++ {
		require.Less(t, i, 20, "the reader never parked again")
		b := requestAsync(p, bounded(t))
		reqB := readRequest(t, far)
		require.NoError(t, far.WriteMessages(successAnswer(reqB)))
		require.NoError(t, await(t, b).err)
		time.Sleep(time.Millisecond) // the reader's look after the answer
	}
	far.Close()
	eventually(t, "the loss is noticed", func() bool { return p.State() != watchdog.Okay })
}

// A DWR the watchdog sends while the reader is parked takes the reader
// back at once (wakeReader), so its DWA is read.
func TestDWRWakesTheParkedReader(t *testing.T) {
	p, c, far := dialTCP(t, nil)
	require.NoError(t, c.enqueueLone(p.cfg.newDWR()))
	assert.Equal(t, batonReader, c.bt.state.Load(), "taken back at once")
	dwr := readRequest(t, far)
	srv := Config{OriginHost: "server.example.net", OriginRealm: "example.net", OriginStateID: 1}
	require.NoError(t, far.WriteMessages(srv.newDWA(dwr)))
	eventually(t, "the DWA is read", func() bool { return p.Stats().DWAReceived == 1 })
}

// Many callers at once against a real server, some with deadlines that
// pass while they read: every request ends with its answer or its
// deadline, and the connection goes on serving.
func TestBatonManyCallersAndDeadlines(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", func(cfg *Config) {
		cfg.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			if wire.EndToEnd(req)%7 == 0 {
				time.Sleep(time.Millisecond)
			}
			return acctHandler(ctx, p, req)
		}
	})
	p := dialOkay(t, "tcp://"+s.Addr().String(), nil)
	c := p.cur.Load()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var answered, timedOut int
	for g := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				d := 10 * time.Second
				if r.IntN(8) == 0 {
					d = time.Duration(r.IntN(1500)) * time.Microsecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), d)
				_, err := p.Request(ctx, acr())
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					answered++
				case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
					timedOut++
				default:
					t.Errorf("unexpected: %v", err)
				}
				mu.Unlock()
				if g%2 == 0 {
					time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond) // callers alone now and then
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 6*300, answered+timedOut)
	assert.Positive(t, answered)
	assert.Positive(t, c.bt.self.Load(), "callers read")
	for range 20 {
		_, err := p.Request(bounded(t), acr())
		require.NoError(t, err)
	}
	assert.Equal(t, watchdog.Okay, p.State())
	assert.Zero(t, p.Stats().BadFrames)
}
