package radpeer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/radius"
)

// panicky panics for the user "boom" and accepts the others.
func panicky(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
	if string(req.Get(radius.AttrUserName)) == "boom" {
		panic("boom")
	}
	return AcceptAll(ctx, req, raw)
}

// A Handler that panics does not end the process: over UDP its request
// is left unanswered, counted and logged, and the next one is answered.
func TestUDPServerHandlerPanic(t *testing.T) {
	srv, c := startUDP(t, ServerConfig{Handler: panicky})
	boom, _, _ := radius.EncodeRequest(accessReq("boom"), 1, testSecret)
	c.Write(boom)
	waitFor(t, "the panic counted", func() bool { return srv.Stats().HandlerPanics == 1 })
	_, err := readAnswer(c, 50*time.Millisecond)
	assert.Error(t, err, "the request whose handler panicked is not answered")
	ok, _, _ := radius.EncodeRequest(accessReq("alice"), 2, testSecret)
	c.Write(ok)
	_, err = readAnswer(c, 5*time.Second)
	require.NoError(t, err, "the next request is answered")
	assert.Equal(t, uint64(1), srv.Stats().Dropped)
}

// Over a stream, the connection stays open and its next request is
// answered.
func TestServerHandlerPanic(t *testing.T) {
	s, ln := startServer(t, ServerConfig{Handler: panicky})
	defer mustClose(t, s)
	c := connect(t, ln)
	c.send(accessReq("boom"), 1)
	waitFor(t, "the panic counted", func() bool { return s.Stats().HandlerPanics == 1 })
	c.send(accessReq("alice"), 2)
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	ans, err := c.tc.ReadMessage()
	require.NoError(t, err, "the next request is answered on the same connection")
	assert.Equal(t, byte(2), ans[1], "the answer is the second request's")
}
