package client

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/stretchr/testify/require"
)

// A radius:// server busy when a request first came is offered it again
// once the request's next server never replied: being turned away busy is
// no send, and the "each server at most once" rule does not count it (it
// did, when a busy server was recorded as a refuser, and the request
// ended with b's silence, never tried at s, free by then).
func TestBusyUDPServerTriedAgain(t *testing.T) {
	s, b := newSilentUDP(t), newSilentUDP(t)
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: s.url(), Name: "s"}, {URL: b.url(), Name: "b"}}, func(cfg *Config) {
		cfg.UDP.Timeout = 300 * time.Millisecond
		cfg.UDP.Retries = 2
		cfg.UDP.MaxSockets = 1
		cfg.UDP.MaxWaiting = 1
	})
	up := c.UDPPeers()[0]
	var fill []*call.Call
	for i := range radpeer.IDsPerSocket + 1 { // every Identifier, and the one waiting place
		cl := radpeer.NewCall(udpAccess("fill" + itoa(i)))
		cl.Deadline = time.Now().Add(time.Minute)
		require.NoError(t, up.Submit(cl))
		fill = append(fill, cl)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exchange(context.Background(), udpAccess("late-user"))
		errc <- err
	}()
	require.Eventually(t, func() bool {
		for _, d := range b.datagrams() {
			if bytes.Contains(d, []byte("late-user")) {
				return true
			}
		}
		return false
	}, 3*time.Second, 5*time.Millisecond, "s busy: the request goes to b")
	for _, cl := range fill { // s frees its Identifiers (after one Timeout)
		cl.Fail(context.Canceled)
	}
	err := <-errc
	atS := false
	for _, d := range s.datagrams() {
		if bytes.Contains(d, []byte("late-user")) {
			atS = true
		}
	}
	require.True(t, atS, "b never replied and s, busy only when the request first came, was not tried again: %v", err)
}

// Being turned away busy holds until the request's next send: a request
// that a radius+tcp:// server a turned away busy, then sent to b and lost
// there, goes back to a, which has room again by then, and is answered.
// It ended with a's old ErrBusy when a busy server counted as a refuser.
// (That the busy word is forgotten at the next send: call.TestTurnAway.)
func TestBusyForgottenOnceSentElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c, stop := radPair(t, nil, func(cfg *Config) {
			cfg.RADIUS.MaxConns = 1
			cfg.RADIUS.MaxWaiting = 1
		})
		defer stop()
		_, err := c.Exchange(context.Background(), accessRequest("u0"))
		require.NoError(t, err)
		a.silent.Store(true)
		wctx, wcancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range 256 { // 255 Identifiers and the one waiting place
			wg.Go(func() { c.Exchange(wctx, accessRequest(fmt.Sprint("w", i))) })
		}
		synctest.Wait()
		require.Equal(t, 1, c.RADIUSPeers()[0].Stats().Waiting, "a full")
		b.silent.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := c.Exchange(ctx, accessRequest("x"))
			errc <- err
		}()
		synctest.Wait()
		require.Contains(t, b.arrivals(), "x", "a busy: x went to b")
		wcancel() // a has room again
		wg.Wait()
		a.silent.Store(false)
		b.faults.Reset() // b's connection closes: x is lost there
		synctest.Wait()
		require.NoError(t, <-errc, "x, lost on b, goes back to a")
		require.Contains(t, a.arrivals(), "x")
	})
}

// A batch (a failover's replays, a waiter's round) reaching a server that
// turns away the second of three busy: the second and the third, turned
// away with it unsent (the rest of the batch), end with ErrBusy at once;
// the third waited for a view change that does not come.
func TestBusyBatchRestEndsBusy(t *testing.T) {
	s := newSilentUDP(t)
	c := udpClient(t, PrimarySecondary, []PeerSpec{{URL: s.url(), Name: "s"}}, func(cfg *Config) {
		cfg.UDP.Timeout = 5 * time.Second
		cfg.UDP.Retries = 1
		cfg.UDP.MaxSockets = 1
		cfg.UDP.MaxWaiting = 1
	})
	up := c.UDPPeers()[0]
	var fill []*call.Call
	for i := range radpeer.IDsPerSocket { // every Identifier; the waiting place free
		cl := radpeer.NewCall(udpAccess("fill" + itoa(i)))
		cl.Deadline = time.Now().Add(time.Minute)
		require.NoError(t, up.Submit(cl))
		fill = append(fill, cl)
	}
	defer func() {
		for _, cl := range fill {
			cl.Fail(context.Canceled)
		}
	}()
	r1, r2, r3 := radpeer.NewCall(udpAccess("r1")), radpeer.NewCall(udpAccess("r2")), radpeer.NewCall(udpAccess("r3"))
	for _, cl := range []*call.Call{r1, r2, r3} {
		cl.Deadline = time.Now().Add(time.Minute)
	}
	defer r1.Fail(context.Canceled)
	defer r3.Fail(context.Canceled)
	out := c.dispatchAll([]*call.Call{r1, r2, r3})
	require.True(t, out[1].concluded, "r2 ended busy")
	r := r3.Await(context.Background(), 2*time.Second)
	require.ErrorIs(t, r.Err, radpeer.ErrBusy, "r3, turned away with r2 (placement %+v)", out[2])
}

// A waiter's round (dispatchAll) placing a first send on a radius+tcp://
// server with no Identifier free: the request waits in the peer, unboarded,
// and is counted Sent there, as the same request placed alone
// (Client.submit) is.
func TestSentCountsWaitingFirstSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _, c, stop := radPair(t, nil, func(cfg *Config) {
			cfg.RADIUS.MaxConns = 1
		})
		defer stop()
		_, err := c.Exchange(context.Background(), accessRequest("u0"))
		require.NoError(t, err)
		a.silent.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for i := range 255 { // every Identifier of a's one connection
			wg.Go(func() { c.Exchange(ctx, accessRequest(fmt.Sprint("w", i))) })
		}
		synctest.Wait()
		before := c.ServerStats()[0].Sent
		cl := radpeer.NewCall(accessRequest("r1"))
		cl.Deadline = time.Now().Add(time.Minute)
		out := c.dispatchAll([]*call.Call{cl})
		require.NotNil(t, out[0].to)
		require.Equal(t, 1, c.RADIUSPeers()[0].Stats().Waiting, "r1 waits for an Identifier at a")
		after := c.ServerStats()[0].Sent
		cl.Fail(context.Canceled)
		cancel()
		wg.Wait()
		require.Equal(t, before+1, after, "r1 was first sent to a")
	})
}
