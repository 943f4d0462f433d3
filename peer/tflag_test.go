package peer

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// next is the message the far end read next (after the bubble settled).
func next(t *testing.T, ch <-chan []byte) []byte {
	t.Helper()
	synctest.Wait()
	select {
	case m := <-ch:
		return m
	default:
		t.Fatal("the far end read nothing")
		return nil
	}
}

// A request sent to A, lost there (A's requests handed over: A may have
// applied it), replayed to B with the T flag, refused by B (too busy) and
// sent on to C: C gets the T flag too. Its send is a possible duplicate
// of A's, which was never answered (RFC 6733 3); B's refusal says only
// that B did not apply it. Without the flag a server keying its duplicate
// check on T would apply it a second time.
func TestReplayAfterLossThenRefusalKeepsTFlag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		handed := make(chan []*call.Call, 4)
		cfg := clientConfig("client.example.net")
		cfg.AcctApps = []uint32{message.AppAccounting}
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) { handed <- calls }
		pA, farA := dialPipeTo(t, cfg, "a.example.net")
		pB, farB := dialPipeTo(t, cfg, "b.example.net")
		pC, farC := dialPipeTo(t, cfg, "c.example.net")
		inA, inB, inC := readAll(farA), readAll(farB), readAll(farC)
		tflag := func(m []byte) bool { return wire.Flags(m)&wire.FlagRetransmit != 0 }

		cl, err := NewCall(acr(), false)
		require.NoError(t, err)
		require.NoError(t, pA.Submit(cl))
		require.False(t, tflag(next(t, inA)), "first send")

		pA.HandOver("no answer", nil, nil) // lost at A
		synctest.Wait()
		require.Len(t, <-handed, 1)

		require.NoError(t, pB.Submit(cl))
		atB := next(t, inB)
		require.True(t, tflag(atB), "replay after a loss")
		busy := message.ErrorAnswer(atB, message.Identity{Host: "b.example.net", Realm: "example.net"}, message.TooBusy, "busy").Bytes()
		require.NoError(t, farB.WriteMessages(busy))
		synctest.Wait()
		require.Len(t, <-handed, 1, "B's refusal hands it on")

		require.NoError(t, pC.Submit(cl))
		require.True(t, tflag(next(t, inC)), "the send to C after B's refusal: A may have applied it")

		cl.Fail(ErrClosed)
		for _, p := range []*Peer{pA, pB, pC} {
			require.NoError(t, p.Close(context.Background()))
		}
	})
}

// Refused without a loss before, a request goes on without the T flag
// (a premature failover: no server applied it).
func TestReplayAfterRefusalOnlyHasNoTFlag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		handed := make(chan []*call.Call, 4)
		cfg := clientConfig("client.example.net")
		cfg.AcctApps = []uint32{message.AppAccounting}
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) { handed <- calls }
		pB, farB := dialPipeTo(t, cfg, "b.example.net")
		pC, farC := dialPipeTo(t, cfg, "c.example.net")
		inB, inC := readAll(farB), readAll(farC)

		cl, err := NewCall(acr(), false)
		require.NoError(t, err)
		require.NoError(t, pB.Submit(cl))
		atB := next(t, inB)
		busy := message.ErrorAnswer(atB, message.Identity{Host: "b.example.net", Realm: "example.net"}, message.TooBusy, "busy").Bytes()
		require.NoError(t, farB.WriteMessages(busy))
		synctest.Wait()
		require.Len(t, <-handed, 1)
		require.NoError(t, pC.Submit(cl))
		require.Zero(t, wire.Flags(next(t, inC))&wire.FlagRetransmit)

		cl.Fail(ErrClosed)
		for _, p := range []*Peer{pB, pC} {
			require.NoError(t, p.Close(context.Background()))
		}
	})
}

// A submit that chose the connection while the peer was OKAY and boards
// after a watchdog failover (OKAY to SUSPECT) is refused as not in
// service: the failover moved the connection's calls out and leaves it
// open, and a call boarded there would wait, out of service, until it
// closes a Tw later. The interleaving is made exact by running the
// connection's half of Peer.submit after the failover, with the
// connection the peer's half read before it.
func TestSubmitAfterFailoverNotBoarded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		handed := make(chan []*call.Call, 4)
		cfg := clientConfig("client.example.net")
		cfg.AcctApps = []uint32{message.AppAccounting}
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) { handed <- calls }
		p, far := dialPipeTo(t, cfg, "a.example.net")
		in := readAll(far)

		c := p.cur.Load() // what Peer.submit read while OKAY

		// The far end answers nothing: a DWR at Tw, SUSPECT at 2 Tw.
		time.Sleep(30*time.Second + 10*time.Millisecond)
		require.Equal(t, uint32(wire.CmdDeviceWatchdog), wire.CommandCode(next(t, in)))
		time.Sleep(30 * time.Second)
		synctest.Wait()
		require.Equal(t, watchdog.Suspect, p.State())

		cl, err := NewCall(acr(), false)
		require.NoError(t, err)
		err = c.submit(dcallOf(cl))
		var nis *NotInServiceError
		require.True(t, errors.As(err, &nis), "boarded a connection out of service: %v (state %s, pending %d)", err, cl.State(), c.pendingLen())
		require.True(t, errors.Is(err, ErrNotInService))
		require.Zero(t, c.pendingLen())
		_, err = c.submitAll([]*call.Call{cl})
		require.True(t, errors.Is(err, ErrNotInService), "a batch boarded a connection out of service: %v", err)
		require.Zero(t, c.pendingLen())

		cl.Fail(ErrClosed)
		require.NoError(t, p.Close(context.Background()))
	})
}
