package peer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// OnPeerEnd may call Close, whatever the ctx it gives: the Close
// disconnects the other peers and waits for their ends, but not for the
// call it is made from (which waited for itself before, for ever). The
// other peer's OnPeerEnd, calling Close too, returns as well.
func TestCloseFromOnPeerEnd(t *testing.T) {
	cfg := clientConfig("server.example.net")
	cfg.Handler = acctHandler
	s, err := Listen("tcp://127.0.0.1:0", cfg)
	require.NoError(t, err)
	returned := make(chan string, 2)
	s.OnPeerEnd = func(p *Peer) {
		s.Close(context.Background()) // no deadline: only the design bounds it
		returned <- p.Name()
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	first := rawPeer(t, s.Addr().String(), "first.example.net")
	second := dialOkay(t, "tcp://"+s.Addr().String(), nil)
	defer second.Close(context.Background())
	require.Eventually(t, func() bool { return len(s.Peers()) == 2 }, 10*time.Second, time.Millisecond)
	first.Close() // the first peer ends: its OnPeerEnd closes the Server
	for range 2 {
		select {
		case name := <-returned:
			t.Logf("Close from OnPeerEnd(%s) returned", name)
		case <-time.After(time.Minute): // a bound for a hang, not a timing
			t.Fatal("Close called from OnPeerEnd has not returned")
		}
	}
	assert.NoError(t, <-served)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assert.NoError(t, s.Close(ctx), "a later Close returns")
}
