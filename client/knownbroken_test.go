package client

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// knownBroken ends a test of a defect not fixed yet: failure says how
// the code fails the requirement ("" when it meets it). The test is
// skipped, saying why, while the defect is there, and fails once it is
// gone, so that it is turned into an ordinary test.
func knownBroken(t *testing.T, why, failure string) {
	t.Helper()
	if failure == "" {
		t.Errorf("passes now: make it an ordinary test (known broken: %s)", why)
		return
	}
	t.Skipf("known broken (%s): %s", why, failure)
}

// TestAppliedRequestNotConcludedWithRefusal: a request applied by a
// server whose answer was then lost (its connection reset), and refused
// too busy by the only alternate, must not be answered with that
// refusal: 3004 tells the caller the request was not applied, which is
// false (RFC 6733 7.1.3), and a caller that sends it again under a new
// End-to-End id applies it twice. It should wait for a server (the
// first one reconnects) until its deadline. TestSim finds the same in
// its schedules (seed 175 of 1..300 at the time of writing; counted as
// KnownRefusal, failed with -sim.strict).
func TestAppliedRequestNotConcludedWithRefusal(t *testing.T) {
	var failure string
	synctest.Test(t, func(t *testing.T) {
		store := dedup.NewMemory()
		defer store.Close()
		a, b := newFakeServer("a.example.net"), newFakeServer("b.example.net")
		var applied atomic.Int32
		a.handle = dedup.WrapCommit(store, func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			time.Sleep(2 * time.Second)
			return a.handler(ctx, p, req)
		}, func(req, ans []byte) { applied.Add(1) }, nil)
		b.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte { // overloaded: refuses before applying
			return message.NewAnswer(req).ResultCode(message.TooBusy).
				String(message.OriginHost, 0, true, "b.example.net").
				String(message.OriginRealm, 0, true, "example.net").Bytes()
		}
		n := network{"tcp://a:3868": a, "tcp://b:3868": b}
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868", "tcp://b:3868"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		synctest.Wait()

		req := acr(1, "user@example.net")
		wire.SetEndToEnd(req, 1)
		var ans []byte
		var sendErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			ans, sendErr = c.Send(ctx, req)
		}()
		time.Sleep(time.Second)
		a.freeze() // a applies the request at 2 s; its answer cannot leave
		time.Sleep(2 * time.Second)
		a.dropConnections() // the answer is lost with the connection
		time.Sleep(time.Second)
		a.unfreeze()
		<-done
		rc, _ := message.ResultCodeOf(ans)
		if applied.Load() == 1 && (sendErr != nil || rc != message.Success) {
			failure = "applied once, yet Send returned result " + itoa(int(rc))
			if sendErr != nil {
				failure += " and error " + sendErr.Error()
			}
		}
	})
	knownBroken(t, "an applied request is concluded with another server's refusal", failure)
}
