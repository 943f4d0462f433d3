package peer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func isDPR(m []byte) bool {
	return len(m) > 7 && m[4]&0x80 != 0 && m[5] == 0 && m[6] == 1 && m[7] == 26
}

// Server.Close returns when its ctx ends, whatever a Handler does: one
// that ignores its ctx (stuck on a store without a deadline) does not hold
// a shutdown past it, and its connection, closed, gives its place back
// without waiting for it.
func TestCloseBoundedByCtxWithStuckHandler(t *testing.T) {
	release := make(chan struct{})
	in := make(chan struct{}, 1)
	cfg := clientConfig("server.example.net")
	cfg.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
		in <- struct{}{}
		<-release // ignores ctx
		return nil
	}
	s, err := Listen("tcp://127.0.0.1:0", cfg)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	defer func() { require.NoError(t, <-served) }()
	defer close(release)

	tc := rawPeer(t, s.Addr().String(), "client.example.net")
	require.NoError(t, tc.WriteMessages(withAVPs(bareACR(0), goodAVPs("client.example.net")...)))
	<-in
	go func() { // answers the DPR, so that only the Handler can hold Close
		cli, _ := clientConfig("client.example.net").validate()
		for {
			m, err := tc.ReadMessage()
			if err != nil {
				return
			}
			if isDPR(m) {
				tc.WriteMessages(cli.newDPA(m))
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	closed := make(chan struct{})
	go func() {
		s.Close(ctx)
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(time.Minute): // a bound for a hang, not a timing
		t.Fatal("Server.Close has not returned a minute after its ctx ended: a Handler that ignores ctx holds it")
	}
	// The place is given back by the connection's goroutine, which does
	// not wait for the Handler; Close does not wait for that goroutine.
	assert.Eventually(t, func() bool { return s.Stats().Open == 0 }, 10*time.Second, time.Millisecond,
		"the closed connection still holds its place")
}
