package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
)

// RADIUS over UDP through Client, against real loopback sockets (a
// socket inside a synctest bubble would hang): short timeouts, bounded
// tests.

var udpSecret = []byte("udp-secret")

// silentUDP reads datagrams and never replies, recording them.
type silentUDP struct {
	pc  net.PacketConn
	mu  sync.Mutex
	got [][]byte
	wg  sync.WaitGroup
}

func newSilentUDP(t *testing.T) *silentUDP {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &silentUDP{pc: pc}
	s.wg.Go(func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.got = append(s.got, bytes.Clone(buf[:n]))
			s.mu.Unlock()
		}
	})
	t.Cleanup(func() { pc.Close(); s.wg.Wait() })
	return s
}

func (s *silentUDP) url() string { return "radius://" + s.pc.LocalAddr().String() }

func (s *silentUDP) datagrams() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slicesClone(s.got)
}

func slicesClone(b [][]byte) [][]byte { return append([][]byte(nil), b...) }

// answeringUDP is a radpeer.UDPServer that accepts everything and counts
// what its handler ran, by code.
type answeringUDP struct {
	srv     *radpeer.UDPServer
	handled atomic.Int32
	acct    atomic.Int32
}

func newAnsweringUDP(t *testing.T) *answeringUDP {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	a := &answeringUDP{}
	srv, err := radpeer.NewUDPServer(pc, radpeer.ServerConfig{Secret: udpSecret, Logger: quiet,
		Handler: func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
			a.handled.Add(1)
			if req.Code == lradius.CodeAccountingRequest {
				a.acct.Add(1)
				return lradius.CodeAccountingResponse, nil
			}
			return lradius.CodeAccessAccept, nil
		}})
	require.NoError(t, err)
	a.srv = srv
	go srv.Serve()
	t.Cleanup(func() { srv.Close(context.Background()) })
	return a
}

func (a *answeringUDP) url() string { return "radius://" + a.srv.Addr().String() }

func udpClient(t *testing.T, mode Mode, specs []PeerSpec, tune func(*Config)) *Client {
	t.Helper()
	cfg := Config{Peers: specs, Mode: mode, RADIUS: radpeer.Config{Secret: udpSecret, Logger: quiet},
		UDP: radpeer.UDPConfig{Timeout: 100 * time.Millisecond, Retries: 2}}
	if tune != nil {
		tune(&cfg)
	}
	c, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

func udpAccess(user string) *radius.Request {
	r := &radius.Request{Code: lradius.CodeAccessRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute(user))
	r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("pw"))
	return r
}

// A radius:// server that does not reply gets the request Retries times,
// byte for byte; then the request goes to the next server, which answers;
// a failover record names both.
func TestUDPRetransmitThenNextServer(t *testing.T) {
	a, b := newSilentUDP(t), newAnsweringUDP(t)
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: a.url()}, {URL: b.url()}}, nil)
	start := time.Now()
	resp, err := c.Exchange(context.Background(), udpAccess("alice"))
	require.NoError(t, err)
	assert.Equal(t, lradius.CodeAccessAccept, resp.Packet.Code)
	assert.Equal(t, b.url(), resp.Server)
	assert.Equal(t, 1, resp.Attempts)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "two attempts of 100ms at the first server")
	got := a.datagrams()
	require.Len(t, got, 2, "Retries attempts at the silent server")
	assert.Equal(t, got[0], got[1], "a retransmission is byte-identical")
	assert.Equal(t, int32(1), b.handled.Load())
	st := c.UDPPeers()[0].Stats()
	assert.Equal(t, uint64(1), st.Sent)
	assert.Equal(t, uint64(1), st.Retransmissions)
	assert.Equal(t, uint64(1), st.TimedOut)
	// The record is written once the hand-over is done, which may be just
	// after the answer reached the caller.
	var recs []FailoverRecord
	require.Eventually(t, func() bool { recs, _ = c.FailoverLog(); return len(recs) > 0 }, 2*time.Second, 5*time.Millisecond)
	last := recs[len(recs)-1]
	assert.Equal(t, a.url(), last.From)
	assert.Equal(t, b.url(), last.To)
	assert.Equal(t, Moved, last.Outcome)
	assert.Contains(t, last.Reason, "no reply to 2 attempt(s)")
}

// With no server replying, each is tried once, and the error says no
// reply came, matching the errors of every protocol.
func TestUDPEveryServerOnceThenError(t *testing.T) {
	a, b := newSilentUDP(t), newSilentUDP(t)
	c := udpClient(t, Balance, []PeerSpec{{URL: a.url()}, {URL: b.url()}}, nil)
	start := time.Now()
	_, err := c.Exchange(context.Background(), udpAccess("bob"))
	require.Error(t, err)
	assert.ErrorIs(t, err, radpeer.ErrNoReply)
	assert.ErrorIs(t, err, peer.ErrTimeout, "one error vocabulary: the timeout of every protocol")
	assert.ErrorIs(t, err, call.ErrTimeout)
	var te *radpeer.TimeoutError
	require.True(t, errors.As(err, &te))
	assert.Equal(t, 2, te.Attempts)
	assert.Contains(t, err.Error(), "no answer from ", "the servers tried")
	assert.Contains(t, err.Error(), a.url())
	assert.Contains(t, err.Error(), b.url())
	assert.Less(t, time.Since(start), 2*time.Second, "fails once both were tried, not at the deadline")
	assert.Len(t, a.datagrams(), 2, "each server tried once, Retries attempts")
	assert.Len(t, b.datagrams(), 2)
}

// Accounting-Requests go to a server's AccountingURL; the others to its
// URL.
func TestUDPAccountingURL(t *testing.T) {
	auth, acct := newAnsweringUDP(t), newAnsweringUDP(t)
	c := udpClient(t, Balance, []PeerSpec{{URL: auth.url(), AccountingURL: acct.url()}}, nil)
	_, err := c.Exchange(context.Background(), udpAccess("carol"))
	require.NoError(t, err)
	r := &radius.Request{Code: lradius.CodeAccountingRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute("carol"))
	r.Attributes.Add(radius.AttrAcctSessionID, lradius.Attribute("s1"))
	r.Attributes.Add(radius.AttrAcctStatusType, lradius.Attribute([]byte{0, 0, 0, 2}))
	_, err = c.Exchange(context.Background(), r)
	require.NoError(t, err)
	assert.Equal(t, int32(1), auth.handled.Load())
	assert.Equal(t, int32(0), auth.acct.Load())
	assert.Equal(t, int32(1), acct.acct.Load())
}

// A radius:// server that stops replying goes out of service (the
// policy's down-timeout): the requests that follow go straight to the
// other server, and the silent one gets nothing during its hold-down.
func TestUDPOutOfServiceHeldDown(t *testing.T) {
	a, b := newSilentUDP(t), newAnsweringUDP(t)
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: a.url()}, {URL: b.url()}}, func(cfg *Config) {
		cfg.Policy = &policy.Config{RequestTimeout: 100 * time.Millisecond, Retries: 2, HoldDown: time.Minute}
	})
	_, err := c.Exchange(context.Background(), udpAccess("u0"))
	require.NoError(t, err)
	deadline := time.Now().Add(2 * time.Second)
	for c.group.State(0) != policy.OutOfService && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, policy.OutOfService, c.group.State(0))
	before := len(a.datagrams())
	for i := range 5 {
		start := time.Now()
		_, err := c.Exchange(context.Background(), udpAccess(fmt.Sprint("u", i+1)))
		require.NoError(t, err)
		assert.Less(t, time.Since(start), 100*time.Millisecond, "no wait for the held-down server")
	}
	assert.Equal(t, before, len(a.datagrams()), "nothing to a server held down")
	assert.Equal(t, int32(6), b.handled.Load())
}

// Mixing protocols or a bad AccountingURL is refused by New.
func TestUDPConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []PeerSpec
		want  string
	}{
		{"diameter and radius", []PeerSpec{{URL: "tcp://127.0.0.1:3868"}, {URL: "radius://127.0.0.1:1812"}}, "one Client per protocol"},
		{"accounting URL on a stream", []PeerSpec{{URL: "radius+tcp://127.0.0.1:1812", AccountingURL: "radius://127.0.0.1:1813"}}, "AccountingURL is for radius://"},
		{"bad accounting URL", []PeerSpec{{URL: "radius://127.0.0.1:1812", AccountingURL: "tcp://x:1"}}, "AccountingURL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{Peers: tc.specs, RADIUS: radpeer.Config{Secret: udpSecret}})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// With a throttle, a request moved off a server that did not reply waits
// in the throttle's queue; its failover record names the server it went
// to once the throttle sends it on.
func TestUDPThrottledFailoverRecordNamesDestination(t *testing.T) {
	a, b := newSilentUDP(t), newAnsweringUDP(t)
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: a.url()}, {URL: b.url()}}, func(cfg *Config) {
		cfg.Throttle = &Throttle{}
	})
	_, err := c.Exchange(context.Background(), udpAccess("dora"))
	require.NoError(t, err)
	var recs []FailoverRecord
	require.Eventually(t, func() bool { recs, _ = c.FailoverLog(); return len(recs) > 0 }, 2*time.Second, 5*time.Millisecond)
	last := recs[len(recs)-1]
	assert.Equal(t, a.url(), last.From)
	assert.Equal(t, b.url(), last.To, "the real destination, not the throttle's queue")
	assert.Equal(t, 1, last.Moved)
}

// A radius:// request that no server answers leaves a record of each
// hand-over: moved from the first server, then refused at the last, no
// other being left.
func TestUDPFailoverRecordsOfTheLastRefusal(t *testing.T) {
	a, b := newSilentUDP(t), newSilentUDP(t)
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: a.url()}, {URL: b.url()}}, nil)
	_, err := c.Exchange(context.Background(), udpAccess("carol"))
	require.ErrorIs(t, err, radpeer.ErrNoReply)
	var recs []FailoverRecord
	require.Eventually(t, func() bool { recs, _ = c.FailoverLog(); return len(recs) >= 2 }, 2*time.Second, 5*time.Millisecond)
	require.Len(t, recs, 2)
	assert.Equal(t, a.url(), recs[0].From)
	assert.Equal(t, Moved, recs[0].Outcome)
	assert.Equal(t, 1, recs[0].Moved)
	assert.Equal(t, b.url(), recs[1].From)
	assert.Equal(t, Refused, recs[1].Outcome)
	assert.Contains(t, recs[1].Reason, "no other peer left")
}

// A radius:// server SetPeers removes hands its requests waiting for an
// Identifier to the others at once; they are never sent to it.
func TestUDPRemovedServerHandsOverItsWaitingRequests(t *testing.T) {
	a, b := newSilentUDP(t), newAnsweringUDP(t)
	specs := []PeerSpec{{URL: a.url()}, {URL: b.url()}}
	c := udpClient(t, PrimarySecondary, specs, func(cfg *Config) {
		cfg.UDP.MaxSockets, cfg.UDP.Timeout, cfg.UDP.Retries = 1, 2*time.Second, 2
		cfg.RequestTimeout = 10 * time.Second
	})
	const n = radpeer.IDsPerSocket + 4 // 4 wait for an Identifier at a
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.Exchange(context.Background(), udpAccess(fmt.Sprint("w", i)))
			errs <- err
		}()
	}
	require.Eventually(t, func() bool { return len(a.datagrams()) == radpeer.IDsPerSocket }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // the last 4 queue behind them
	_, err := c.SetPeers(context.Background(), specs[1:])
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.handled.Load() >= 4 }, time.Second, time.Millisecond,
		"the waiting requests reach b at once, not after a's retransmissions")
	for range n {
		require.NoError(t, <-errs)
	}
	assert.Len(t, a.datagrams(), 2*radpeer.IDsPerSocket, "only the requests in flight at a, each sent twice")
}

// A radius:// server that never replies ends the request with its
// *radpeer.TimeoutError, which matches ErrTimeout too: it is counted
// no_reply, the reason ErrorReasons gives a server's silence, not timeout.
func TestNoReplyCountedAsNoReply(t *testing.T) {
	a := newSilentUDP(t)
	c := udpClient(t, Balance, []PeerSpec{{URL: a.url()}}, nil)
	_, err := c.Exchange(context.Background(), udpAccess("bob"))
	require.ErrorIs(t, err, radpeer.ErrNoReply)
	st := c.ServerStats()[0]
	assert.Equal(t, uint64(1), st.Errors["no_reply"], "errors: %v", st.Errors)
	assert.Zero(t, st.Errors["timeout"], "errors: %v", st.Errors)
}

// A run of first sends (requests that waited for a peer, placed together
// as a waiter's round places them) picked for one radius:// server that
// takes the first and refuses the second (ErrBusy: no Identifier free, its
// waiting place taken): the second goes to the next server. Each request
// is counted Sent once, for the server it was first sent to; the refused
// one was counted on both.
func TestSentCountedOnceWhenRunRefused(t *testing.T) {
	s, b := newSilentUDP(t), newAnsweringUDP(t)
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: s.url(), Name: "s"}, {URL: b.url(), Name: "b"}}, func(cfg *Config) {
		cfg.UDP.Timeout = 5 * time.Second
		cfg.UDP.Retries = 1
		cfg.UDP.MaxSockets = 1
		cfg.UDP.MaxWaiting = 1
	})
	up := c.UDPPeers()[0]
	fillUDP(t, up, radpeer.IDsPerSocket) // every Identifier of s's one socket in use, around the Client
	require.Eventually(t, func() bool { return len(s.datagrams()) >= radpeer.IDsPerSocket }, 3*time.Second, 10*time.Millisecond)

	r1, r2 := radpeer.NewCall(udpAccess("r1")), radpeer.NewCall(udpAccess("r2"))
	for _, cl := range []*call.Call{r1, r2} {
		cl.Deadline = time.Now().Add(time.Minute)
	}
	to := c.dispatchAll([]*call.Call{r1, r2})
	require.NotNil(t, to[0].to)
	require.NotNil(t, to[1].to)
	require.Equal(t, "s", to[0].to.spec.Name, "r1 waits for an Identifier at s")
	require.Equal(t, "b", to[1].to.spec.Name, "r2, refused busy by s, goes to b")
	r := r2.Await(context.Background(), 5*time.Second)
	require.NoError(t, r.Err)
	r1.Fail(context.Canceled)

	st := c.ServerStats()
	assert.Equal(t, uint64(1), st[0].Sent, "s: only r1 was sent there")
	assert.Equal(t, uint64(1), st[1].Sent, "b: r2")
}

// A radius:// server out of Identifiers with its waiting places taken
// turns a request away (ErrBusy): with no other server to take it, the
// request ends at once with that error, counted busy. It waited for a
// change of the view that freeing Identifiers does not make, and failed
// at its deadline as "no peer in service", the server in service all
// along.
func TestBusyServerEndsRequestWithBusy(t *testing.T) {
	s := newSilentUDP(t)
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: s.url(), Name: "s"}}, func(cfg *Config) {
		cfg.UDP.Timeout = 5 * time.Second
		cfg.UDP.Retries = 1
		cfg.UDP.MaxSockets = 1
		cfg.UDP.MaxWaiting = 1
	})
	up := c.UDPPeers()[0]
	fillUDP(t, up, radpeer.IDsPerSocket+1) // every Identifier, and the one waiting place
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Exchange(ctx, udpAccess("late-user"))
	took := time.Since(start)
	require.ErrorIs(t, err, radpeer.ErrBusy)
	require.NotErrorIs(t, err, ErrNoPeer, "the server is in service")
	assert.Less(t, took, 5*time.Second, "it waited for the deadline")
	assert.Equal(t, uint64(1), c.UnsentErrors()["busy"], "unsent %v", c.UnsentErrors())
}
