package radpeer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/radius"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"
)

// releasedHandler answers Accounting-Requests once release is closed, and
// the others at once.
func releasedHandler(release chan struct{}) Handler {
	return func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		if req.Code == lradius.CodeAccountingRequest {
			select {
			case <-release:
			case <-ctx.Done():
				return 0, nil
			}
		}
		return AcceptAll(ctx, req, raw)
	}
}

// A stream server's connections take turns on its handler lanes: one
// that pipelines more records than the lane holds gets the drops, and
// another connection's record is answered. Before, the lanes were one
// queue in arrival order and the second connection's record was dropped.
func TestServerConnectionsTakeTurnsOnTheLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		s, ln := startServer(t, ServerConfig{Handler: releasedHandler(release), MaxUnanswered: 64, MaxInFlight: 1, MaxQueued: 4,
			Logger: slog.New(slog.DiscardHandler)})
		read := func(c *rawClient) chan byte {
			ids := make(chan byte, 100)
			go func() {
				for {
					b, err := c.tc.ReadMessage()
					if err != nil {
						return
					}
					ids <- radius.Identifier(b)
				}
			}()
			return ids
		}
		greedy, good := connect(t, ln), connect(t, ln)
		greedyIDs, goodIDs := read(greedy), read(good)
		for i := range 8 { // 0 runs, 1-4 wait, 5-7 dropped
			greedy.send(acctReq(fmt.Sprint("g", i)), byte(i))
		}
		synctest.Wait()
		assert.Equal(t, uint64(3), s.Stats().Overload)
		good.send(acctReq("good"), 100)
		synctest.Wait()
		assert.Equal(t, uint64(4), s.Stats().Overload, "the greedy connection's newest waiting record made room")
		close(release)
		synctest.Wait()
		require.Len(t, goodIDs, 1, "the other connection's record is answered")
		assert.Equal(t, byte(100), <-goodIDs)
		var got []byte
		for len(greedyIDs) > 0 {
			got = append(got, <-greedyIDs)
		}
		assert.Equal(t, []byte{0, 1, 2, 3}, got)
		greedy.conn.Close()
		good.conn.Close()
		mustClose(t, s)
	})
}

// A UDP server's clients (by address) take turns on its handler lanes:
// one that sends more records than the lane holds gets the drops, and
// another client's record is answered.
func TestUDPServerClientsTakeTurnsOnTheLanes(t *testing.T) {
	release := make(chan struct{})
	srv, greedy := startUDP(t, ServerConfig{Handler: releasedHandler(release), MaxInFlight: 1, MaxQueued: 4,
		Logger: slog.New(slog.DiscardHandler)})
	good, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)}, srv.Addr().(*net.UDPAddr))
	if err != nil {
		t.Skipf("no second loopback address to send from: %v", err)
	}
	defer good.Close()
	for i := range 8 { // 0 runs, 1-4 wait, 5-7 dropped
		b, _, _ := radius.EncodeRequest(acctReq(fmt.Sprint("g", i)), byte(i), testSecret)
		greedy.Write(b)
	}
	waitFor(t, "three records dropped", func() bool { return srv.Stats().Overload == 3 })
	b, _, _ := radius.EncodeRequest(acctReq("good"), 100, testSecret)
	good.Write(b)
	waitFor(t, "the greedy client's newest waiting record dropped", func() bool { return srv.Stats().Overload == 4 })
	close(release)
	ans, err := readAnswer(good, 5*time.Second)
	require.NoError(t, err, "the other client's record is answered")
	assert.Equal(t, byte(100), radius.Identifier(ans))
	var got []byte
	for range 4 {
		ans, err := readAnswer(greedy, 5*time.Second)
		require.NoError(t, err)
		got = append(got, radius.Identifier(ans))
	}
	assert.Equal(t, []byte{0, 1, 2, 3}, got)
}
