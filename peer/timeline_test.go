package peer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/watchdog"
)

// The exact timeline of a peer that stops answering, with Tw = 30 s and no
// jitter: DWR at Tw, SUSPECT at 2Tw, DOWN at 3Tw, a reconnect attempt at
// 4Tw, REOPEN, and OKAY only after the third DWA (RFC 3539 3.4.1, App. A).
func TestTimelinePeerStopsAnswering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		f.dwaDelay = 100 * time.Millisecond // a round trip, so receipts differ from sends
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Events = NewBus()
		rec, cancel := record(cfg.Events)
		defer cancel()
		start := time.Now()
		p, err := Dial("tcp://server.example.net:3868", cfg)
		require.NoError(t, err)
		at := func(e Event) string { return fmt.Sprintf("%v %s->%s", e.Time.Sub(start), e.From, e.To) }

		synctest.Wait()
		require.Equal(t, watchdog.Okay, p.State(), "a first connection is in service at once")
		f.answerDWR.Store(false)

		time.Sleep(3*30*time.Second + time.Second) // to 91 s
		synctest.Wait()
		assert.Equal(t, watchdog.Down, p.State())
		f.answerDWR.Store(true)

		time.Sleep(200 * time.Second)
		synctest.Wait()
		var got []string
		for _, e := range rec.watchdog() {
			got = append(got, at(e))
		}
		assert.Equal(t, []string{
			"0s INITIAL->OKAY",
			"1m0s OKAY->SUSPECT",
			"1m30s SUSPECT->DOWN",
			"2m0s DOWN->REOPEN",
			"3m0.1s REOPEN->OKAY",
		}, got)
		var dwrs []time.Duration
		for _, d := range f.dwrTimes() {
			dwrs = append(dwrs, d.Sub(start))
		}
		// DWR at 30 s (unanswered); after the reopen at 2m0s one each Tw
		// until three DWAs; then the idle link's DWRs every Tw.
		// The DWAs received in REOPEN do not reset Tw (Appendix A), so the
		// first DWR in OKAY is exactly Tw after the third.
		require.GreaterOrEqual(t, len(dwrs), 5)
		assert.Equal(t, []time.Duration{30 * time.Second, 120 * time.Second, 150 * time.Second, 180 * time.Second, 210 * time.Second}, dwrs[:5])
		st := p.Stats()
		assert.Equal(t, uint64(5), st.Transitions)
		// The events say what happened in their fields.
		wd := rec.watchdog()
		assert.Equal(t, watchdog.TimerExpired, wd[1].Trigger, "OKAY -> SUSPECT on a timer")
		assert.Equal(t, watchdog.ConnectionUp, wd[3].Trigger)
		assert.Equal(t, 0, wd[3].NumDWA, "DOWN -> REOPEN counts from zero")
		assert.Equal(t, watchdog.ReceiveDWA, wd[4].Trigger)
		assert.Equal(t, watchdog.DefaultOkayDWAs, wd[4].NumDWA, "REOPEN -> OKAY after the third DWA")
		fb := rec.ofKind(EventFailback)
		require.Len(t, fb, 1, "back in service once")
		assert.Equal(t, wd[4].Time, fb[0].Time)
		require.Len(t, rec.ofKind(EventFailover), 1, "OKAY -> SUSPECT with no OnFailover")
		assert.Zero(t, rec.ofKind(EventFailover)[0].Pending)
		down := rec.ofKind(EventConnDown)
		require.Len(t, down, 1, "closed by the watchdog in SUSPECT")
		assert.False(t, down[0].DPR)
		assert.Len(t, rec.ofKind(EventConnUp), 2)
		assert.Equal(t, uint64(2), cfg.Events.Count(EventConnUp))
		assert.Equal(t, uint64(5), cfg.Events.Count(EventWatchdog))
		require.NoError(t, p.Close(context.Background()))
	})
}

// Steady traffic resets Tw: no DWR is sent while answers keep arriving
// (RFC 3539 3.4.1 [2]; W3).
func TestSteadyTrafficSendsNoDWR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		p, err := Dial("tcp://server.example.net:3868", cfg)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, watchdog.Okay, p.State())
		for range 300 { // one request a second for 5 minutes: 10 Tw
			_, err := p.Request(context.Background(), acr())
			require.NoError(t, err)
			time.Sleep(time.Second)
		}
		assert.Empty(t, f.dwrTimes(), "a DWR was sent although traffic reset Tw")
		assert.Equal(t, uint64(300), p.Stats().Answered)

		// Then silence: the first DWR goes out Tw after the last answer.
		last := time.Now().Add(-time.Second)
		time.Sleep(40 * time.Second)
		synctest.Wait()
		dwrs := f.dwrTimes()
		require.Len(t, dwrs, 1)
		assert.Equal(t, 30*time.Second, dwrs[0].Sub(last))
		require.NoError(t, p.Close(context.Background()))
	})
}

// Requests are refused unless OKAY (W6, W8), with an error the caller can
// act on; requests pending when the connection closes fail, not vanish.
func TestRequestRefusedUnlessOkay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, watchdog.Okay, p.State())

		// The server stops answering everything; one request is pending.
		f.answerDWR.Store(false)
		f.answerReqs.Store(false)
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			_, err := p.Request(ctx, acr())
			res <- err
		}()
		time.Sleep(61 * time.Second)
		synctest.Wait()
		require.Equal(t, watchdog.Suspect, p.State())
		_, err = p.Request(context.Background(), acr())
		var nis *NotInServiceError
		require.ErrorAs(t, err, &nis)
		assert.True(t, errors.Is(err, ErrNotInService))
		assert.Equal(t, watchdog.Suspect, nis.State)
		assert.Equal(t, 1, p.Stats().Pending, "still pending while SUSPECT: a late answer may come")

		time.Sleep(30 * time.Second) // DOWN: the connection closes
		synctest.Wait()
		require.Equal(t, watchdog.Down, p.State())
		err = <-res
		assert.ErrorIs(t, err, ErrConnectionLost)
		assert.EqualError(t, err, "peer server.example.net: "+ErrConnectionLost.Error()+": closed by the watchdog: "+watchdog.ReasonSecondTimeout, "it says why, once, named once")
		assert.Equal(t, uint64(1), p.Stats().Lost)
		require.NoError(t, p.Close(context.Background()))
	})
}

// A request with no context deadline times out after RequestTimeout and
// its entry leaves the pending map.
func TestRequestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.RequestTimeout = 2 * time.Second
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		f.answerReqs.Store(false)
		t0 := time.Now()
		_, err = p.Request(context.Background(), acr())
		assert.ErrorIs(t, err, ErrTimeout)
		assert.Equal(t, 2*time.Second, time.Since(t0))
		assert.Zero(t, p.Stats().Pending)
		assert.Equal(t, uint64(1), p.Stats().TimedOut)
		require.NoError(t, p.Close(context.Background()))
	})
}

// A DPR from the peer is answered with a DPA, the connection closes, and
// after REBOOTING the peer is redialled at Tw, not before.
func TestDPRFromPeerNotRedialledBeforeTw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Events = NewBus()
		rec, cancel := record(cfg.Events)
		defer cancel()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, watchdog.Okay, p.State())
		require.Equal(t, 1, f.dials())

		require.NoError(t, f.sendDPR(0)) // REBOOTING
		synctest.Wait()
		assert.Equal(t, watchdog.Down, p.State())
		conns := rec.ofKind(EventConnDown)
		require.NotEmpty(t, conns)
		assert.Contains(t, conns[len(conns)-1].Reason, "DPR received (Disconnect-Cause 0 REBOOTING)")
		f.mu.Lock()
		assert.Equal(t, 1, f.dpas, "the DPR was answered with a DPA")
		f.mu.Unlock()
		time.Sleep(29 * time.Second)
		synctest.Wait()
		assert.Equal(t, 1, f.dials(), "redialled before Tw")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, 2, f.dials())
		assert.Equal(t, watchdog.Reopen, p.State())
		require.NoError(t, p.Close(context.Background()))
	})
}

// Close sends a DPR and ends after the DPA.
func TestCloseSendsDPR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Events = NewBus()
		rec, cancel := record(cfg.Events)
		defer cancel()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		t0 := time.Now()
		require.NoError(t, p.Close(context.Background()))
		assert.Zero(t, time.Since(t0), "the DPA came at once; no wait for DPATimeout")
		<-p.Done() // Close does not wait for the events to be delivered
		// Closing always ends in DOWN through the machine, reported once.
		assert.Equal(t, watchdog.Down, p.State())
		wd := rec.watchdog()
		require.Len(t, wd, 2)
		assert.Equal(t, watchdog.Okay, wd[1].From)
		assert.Equal(t, watchdog.Down, wd[1].To)
		up := rec.ofKind(EventConnUp)
		require.Len(t, up, 1)
		assert.Equal(t, "pipe", up[0].Network)
		assert.NotEmpty(t, up[0].Addr)
		down := rec.ofKind(EventConnDown)
		require.NotEmpty(t, down)
		assert.True(t, down[0].DPR, "our DPR")
		assert.True(t, down[0].DPA, "its DPA")
		f.mu.Lock()
		defer f.mu.Unlock()
		assert.Equal(t, 1, f.dprs, "one DPR answered by the fake")
	})
}

// T4: an idle connection comes down after IdleTimeout (never below five
// minutes); watchdog traffic does not count as activity.
func TestIdleBringDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.IdleTimeout = BringDownInterval
		cfg.Events = NewBus()
		rec, cancel := record(cfg.Events)
		defer cancel()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		_, err = p.Request(context.Background(), acr())
		require.NoError(t, err)
		last := time.Now()
		time.Sleep(4*time.Minute + 59*time.Second)
		synctest.Wait()
		select {
		case <-p.Done():
			t.Fatal("brought down before BRINGDOWN_INTERVAL")
		default:
		}
		assert.NotEmpty(t, f.dwrTimes(), "DWRs flowed meanwhile")
		<-p.Done()
		idle := time.Since(last)
		assert.GreaterOrEqual(t, idle, BringDownInterval)
		assert.LessOrEqual(t, idle, BringDownInterval+30*time.Second, "checked at each Tw")
		ev := rec.ofKind(EventIdle)
		require.Len(t, ev, 1)
		assert.GreaterOrEqual(t, ev[0].Idle, BringDownInterval)
		require.NoError(t, p.Close(context.Background()))
	})
}
