package peer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// A Handler that panics does not end the process: its request is answered
// DIAMETER_UNABLE_TO_COMPLY (no E bit: not a protocol error, RFC 6733
// 7.1.5), with an Error-Message and the request's ids; the panic is counted
// and published; the connection stays up and serves the next request.
// Checked on the reader and on a Handler the reading was handed over from.
func TestHandlerPanicAnsweredConnectionKept(t *testing.T) {
	release := make(chan struct{})
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) {
		c.InlineHandlerTime = 5 * time.Millisecond
		c.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
			switch rn, _ := message.Uint32Of(req, message.AccountingRecordNumber, 0); rn {
			case 1:
				var m map[string]int
				m["x"] = 1 // a bug one odd request reaches
			case 2:
				<-release // handed over, then panics
				panic("late")
			}
			return acctHandler(ctx, p, req)
		}
	})
	tc := rawPeer(t, s.Addr().String(), "client.example.net")
	req := func(rn uint32, hbh uint32) []byte {
		r := withAVPs(bareACR(wire.FlagProxiable), append(goodAVPs("client.example.net"),
			rawAVP(message.AccountingRecordNumber, 0x40, 12, []byte{0, 0, 0, byte(rn)}))...)
		wire.SetHopByHop(r, hbh)
		wire.SetEndToEnd(r, hbh+100)
		return r
	}
	read := func(hbh uint32) uint32 {
		t.Helper()
		ans, err := tc.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, hbh, wire.HopByHop(ans))
		require.Equal(t, hbh+100, wire.EndToEnd(ans))
		rc, _ := message.ResultCodeOf(ans)
		if rc == message.UnableToComply {
			assert.Zero(t, wire.Flags(ans)&wire.FlagError, "no E bit on 5012")
			_, ok := wire.FindAVP(ans, message.ErrorMessage, 0)
			assert.True(t, ok, "Error-Message")
		}
		return rc
	}
	require.NoError(t, tc.WriteMessages(req(1, 11)))
	assert.Equal(t, uint32(message.UnableToComply), read(11))
	require.NoError(t, tc.WriteMessages(req(3, 12)))
	assert.Equal(t, uint32(message.Success), read(12), "the connection serves the next request")

	require.NoError(t, tc.WriteMessages(req(2, 13)))
	require.NoError(t, tc.WriteMessages(req(3, 14)))
	assert.Equal(t, uint32(message.Success), read(14), "read past the blocked Handler")
	close(release)
	assert.Equal(t, uint32(message.UnableToComply), read(13))
	require.NoError(t, tc.WriteMessages(req(3, 15)))
	assert.Equal(t, uint32(message.Success), read(15))

	ps := s.Peers()
	require.Len(t, ps, 1)
	assert.Equal(t, uint64(2), ps[0].Stats().HandlerPanics)
}
