package peer

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/watchdog"
)

// After a DPR with BUSY or DO_NOT_WANT_TO_TALK_TO_YOU the client does not
// redial before DPRHoldOff (RFC 6733 5.4.3), then redials at the next Tw.
func TestDPRHoldOff(t *testing.T) {
	for _, cause := range []uint32{message.DisconnectBusy, message.DisconnectDoNotWantToTalkToU} {
		t.Run(message.DisconnectCauseName(cause), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakePeer("server.example.net")
				defer f.close()
				cfg := clientConfig("client.example.net")
				cfg.Dialer = f.dialer()
				cfg.DPRHoldOff = 2 * time.Minute
				cfg.Events = NewBus()
				rec, cancel := record(cfg.Events)
				defer cancel()
				p, err := Dial("tcp://x:1", cfg)
				require.NoError(t, err)
				synctest.Wait()
				require.Equal(t, watchdog.Okay, p.State())

				require.NoError(t, f.sendDPR(cause))
				synctest.Wait()
				t0 := time.Now()
				assert.Equal(t, watchdog.Down, p.State())
				conns := rec.ofKind(EventConnDown)
				require.NotEmpty(t, conns)
				assert.Contains(t, conns[len(conns)-1].Reason, message.DisconnectCauseName(cause)+"): no reconnection for 2m0s")
				time.Sleep(2*time.Minute - time.Second)
				synctest.Wait()
				assert.Equal(t, 1, f.dials(), "redialled during the hold-off")
				// The first Tw expiry after the hold-off dials.
				time.Sleep(31 * time.Second)
				synctest.Wait()
				assert.Equal(t, 2, f.dials(), "not redialled after the hold-off")
				assert.Less(t, time.Since(t0), 2*time.Minute+31*time.Second)
				require.NoError(t, p.Close(context.Background()))
			})
		})
	}
}

// A negative DPRHoldOff disables the hold-off: BUSY is then treated as
// REBOOTING.
func TestDPRHoldOffDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.DPRHoldOff = -1
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		require.NoError(t, f.sendDPR(message.DisconnectBusy))
		synctest.Wait()
		time.Sleep(31 * time.Second)
		synctest.Wait()
		assert.Equal(t, 2, f.dials())
		require.NoError(t, p.Close(context.Background()))
	})
}

// Our DPRs carry the true cause: Close says DO_NOT_WANT_TO_TALK_TO_YOU,
// as does the idle bring-down; Disconnect sends the cause asked for. None
// of them, with nothing pending, counts as a failover.
func TestOwnDPRCauses(t *testing.T) {
	for name, tc := range map[string]struct {
		close func(p *Peer)
		idle  bool
		want  uint32
	}{
		"Close":                 {close: func(p *Peer) { p.Close(context.Background()) }, want: message.DisconnectDoNotWantToTalkToU},
		"Disconnect(REBOOTING)": {close: func(p *Peer) { p.Disconnect(context.Background(), message.DisconnectRebooting) }, want: message.DisconnectRebooting},
		"Disconnect(BUSY)":      {close: func(p *Peer) { p.Disconnect(context.Background(), message.DisconnectBusy) }, want: message.DisconnectBusy},
		"idle":                  {idle: true, want: message.DisconnectDoNotWantToTalkToU},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakePeer("server.example.net")
				defer f.close()
				cfg := clientConfig("client.example.net")
				cfg.Dialer = f.dialer()
				if tc.idle {
					cfg.IdleTimeout = BringDownInterval
				}
				p, err := Dial("tcp://x:1", cfg)
				require.NoError(t, err)
				synctest.Wait()
				if tc.idle {
					<-p.Done()
				} else {
					tc.close(p)
				}
				require.NoError(t, p.Close(context.Background()))
				f.mu.Lock()
				defer f.mu.Unlock()
				assert.Equal(t, []uint32{tc.want}, f.causes)
				assert.Zero(t, p.Stats().Failovers, "our own disconnect, nothing pending, counted as a failover")
			})
		})
	}
}

// Over loopback TCP: a server closing with BUSY makes the client hold off,
// and says so in an event; the client's Close reaches the server as
// DO_NOT_WANT_TO_TALK_TO_YOU.
func TestDisconnectCauseOverTCP(t *testing.T) {
	srvBus := NewBus()
	srvRec, cancel := record(srvBus)
	defer cancel()
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) { c.Events = srvBus })

	cliBus := NewBus()
	cliRec, cancel2 := record(cliBus)
	defer cancel2()
	p := dialOkay(t, "tcp://"+s.Addr().String(), func(c *Config) { c.Events = cliBus })
	// The client is OKAY when the CEA arrives; the server's side of the
	// connection a moment after it wrote it. A DPR goes only on an open
	// connection: one still in its capabilities exchange is just closed.
	require.Eventually(t, func() bool {
		ps := s.Peers()
		return len(ps) == 1 && ps[0].State() == watchdog.Okay
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, s.Disconnect(bounded(t), message.DisconnectBusy))
	require.NoError(t, p.WaitState(bounded(t), watchdog.Down))
	// Events reach subscribers after the step that made them, so the state
	// can be DOWN before the recorder has the event.
	waitReason(t, cliRec, "DPR received (Disconnect-Cause 1 BUSY): no reconnection for 5m0s")

	s2 := startServer(t, "tcp://127.0.0.1:0", func(c *Config) { c.Events = srvBus })
	p2 := dialOkay(t, "tcp://"+s2.Addr().String(), nil)
	require.NoError(t, p2.Close(bounded(t)))
	waitReason(t, srvRec, "DPR received (Disconnect-Cause 2 DO_NOT_WANT_TO_TALK_TO_YOU)")
}

// waitReason is hasReason for events still on their way: it waits up to
// 5 s for one.
func waitReason(t *testing.T, r *recorder, s string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !hasEvent(r, s) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	hasReason(t, r, s)
}

func hasEvent(r *recorder, s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if strings.Contains(e.Reason, s) {
			return true
		}
	}
	return false
}

func hasReason(t *testing.T, r *recorder, s string) {
	t.Helper()
	if !hasEvent(r, s) {
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("no event with %q in %+v", s, r.events)
	}
}

// Close reports its connection's end once: one EventConnDown for one
// connection, whether the DPA came, did not come in time, or the DPR was
// never answered because the connection went first.
func TestCloseReportsOneConnectionDown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer bool
		dpa    bool
	}{{"DPA received", true, true}, {"no DPA", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakePeer("server.example.net")
				defer f.close()
				f.dropDPR.Store(!tc.answer)
				cfg := clientConfig("client.example.net")
				cfg.Dialer = f.dialer()
				cfg.Events = NewBus()
				rec, cancel := record(cfg.Events)
				defer cancel()
				p, err := Dial("tcp://x:1", cfg)
				require.NoError(t, err)
				synctest.Wait()
				require.Equal(t, watchdog.Okay, p.State())

				require.NoError(t, p.Close(context.Background()))
				synctest.Wait()
				down := rec.ofKind(EventConnDown)
				require.Len(t, down, 1, "connection-down events: %+v", down)
				assert.True(t, down[0].DPR)
				assert.Equal(t, tc.dpa, down[0].DPA)
				assert.Len(t, rec.ofKind(EventConnUp), 1)
			})
		})
	}
}

// A Peer without a failover hook that closes gracefully while one of its
// requests is still unanswered when the drain ends fails that request
// with ErrClosed (the hand-over used to call the nil hook, and panic),
// saying why once.
func TestDrainEndsWithoutFailoverHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.DrainTimeout = 2 * time.Second
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		f.answerReqs.Store(false)
		errc := make(chan error, 1)
		go func() {
			_, err := p.Request(context.Background(), acr())
			errc <- err
		}()
		synctest.Wait()
		require.NoError(t, p.Close(context.Background()))
		err = <-errc
		assert.ErrorIs(t, err, ErrClosed)
		assert.Equal(t, 1, strings.Count(err.Error(), "no answer within"), "the reason repeated: %v", err)
	})
}
