//go:build repro

package client

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
)

// Reproduction (go test -tags repro ./client -run TestReproLateRefusal):
// a request moved off a SUSPECT connection with no alternate waits
// (parked); the server comes back on the same connection and refuses the
// request late (3004, read while frozen); the late refusal is dropped
// (peer/conn.go, "late refusal of a request that has moved on"), so the
// call never learns that the connection no longer holds it: it avoids
// that connection, the only one, for good, and waits for its deadline
// while the server is in service and no longer busy. Found by TestSim's
// reconfigure fault, seed 1680 of 3000 (a server removed, the other one
// flapping); reachable without SetPeers with one server.
func TestReproLateRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net")}
		defer n.close()
		var busy atomic.Bool
		n["tcp://a:1"].handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			if busy.Load() {
				return message.NewAnswer(req).ResultCode(message.TooBusy).
					String(message.OriginHost, 0, true, "a.example.net").
					String(message.OriginRealm, 0, true, "example.net").Bytes()
			}
			return n["tcp://a:1"].handler(ctx, p, req)
		}
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)

		n["tcp://a:1"].freeze()
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			_, err := c.Send(ctx, acr(1, "u1"))
			done <- err
		}()
		time.Sleep(70 * time.Second) // SUSPECT at 2 Tw: moved, no alternate: parked
		busy.Store(true)
		n["tcp://a:1"].unfreeze() // the buffered request is refused, late
		time.Sleep(time.Second)
		busy.Store(false) // the server takes requests again
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Fatalf("the request still waits %v after it was sent, its server in service (%s) for a minute", time.Since(start), c.Peers()[0].State())
		}
	})
}
