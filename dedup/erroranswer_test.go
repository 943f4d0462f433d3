package dedup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// Over real loopback TCP: the TOO_BUSY a server answers while its store is
// down is a whole error answer (RFC 6733 7.2, 8.8), signed by the server,
// with the request's Session-Id and ids.
func TestWrapStoreDownAnswerOnTheWire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost: "server.example.net", OriginRealm: "example.net",
		Handler: Wrap(brokenStore{}, func(context.Context, *peer.Peer, []byte) []byte {
			t.Error("handler ran without the store")
			return nil
		}, nil),
	})
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	defer func() { s.Close(ctx); require.NoError(t, <-served) }()

	c, err := peer.Dial("tcp://"+s.Addr().String(), peer.Config{OriginHost: "nas1.example.net", OriginRealm: "example.net"})
	require.NoError(t, err)
	defer c.Close(ctx)
	require.NoError(t, c.WaitState(ctx, watchdog.Okay))

	req := acrFor(0x0a0b0c0d, 1)
	ans, err := c.Request(ctx, req)
	require.NoError(t, err)
	rc, _ := message.ResultCodeOf(ans)
	assert.Equal(t, uint32(message.TooBusy), rc)
	assert.NotZero(t, wire.Flags(ans)&wire.FlagError, "E bit on a 3xxx answer")
	assert.Equal(t, uint32(0x0a0b0c0d), wire.EndToEnd(ans))
	sid, ok := message.StringOf(ans, message.SessionID, 0)
	assert.True(t, ok, "Session-Id copied")
	assert.Equal(t, "nas1;1;7", sid)
	oh, _ := message.StringOf(ans, message.OriginHost, 0)
	assert.Equal(t, "server.example.net", oh)
	or, _ := message.StringOf(ans, message.OriginRealm, 0)
	assert.Equal(t, "example.net", or)
	first := true
	require.NoError(t, wire.WalkAVPs(ans, func(a wire.AVP) bool {
		assert.True(t, !first || a.Code == message.SessionID, "Session-Id comes first")
		first = false
		return true
	}))
}
