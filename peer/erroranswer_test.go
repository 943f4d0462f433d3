package peer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// checkErrorAnswer asserts the shape every error answer has (RFC 6733 7.2,
// 8.8): the request's ids, Result-Code, the sender's Origin-Host and
// Origin-Realm, the Session-Id first when the request had one, E for 3xxx.
func checkErrorAnswer(t *testing.T, req, ans []byte, rc uint32, host string) {
	t.Helper()
	got, _ := message.ResultCodeOf(ans)
	assert.Equal(t, rc, got, "Result-Code")
	assert.Equal(t, wire.EndToEnd(req), wire.EndToEnd(ans), "End-to-End")
	assert.Equal(t, rc >= 3000 && rc < 4000, wire.Flags(ans)&wire.FlagError != 0, "E bit")
	assert.Zero(t, wire.Flags(ans)&(wire.FlagRequest|wire.FlagRetransmit))
	oh, _ := message.StringOf(ans, message.OriginHost, 0)
	assert.Equal(t, host, oh, "Origin-Host")
	_, ok := message.StringOf(ans, message.OriginRealm, 0)
	assert.True(t, ok, "Origin-Realm")
	if sid, ok := message.StringOf(req, message.SessionID, 0); ok {
		var first uint32
		require.NoError(t, wire.WalkAVPs(ans, func(a wire.AVP) bool { first = a.Code; return false }))
		assert.Equal(t, uint32(message.SessionID), first, "Session-Id first")
		got, _ := message.StringOf(ans, message.SessionID, 0)
		assert.Equal(t, sid, got)
	}
}

// A server without a Handler refuses requests with a whole error answer.
func TestNoHandlerErrorAnswerOverTCP(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) { c.Handler = nil })
	p := dialOkay(t, "tcp://"+s.Addr().String(), nil)
	req := acr()
	sent := append([]byte(nil), req...)
	ans, err := p.Request(bounded(t), req)
	require.NoError(t, err)
	wire.SetEndToEnd(sent, wire.EndToEnd(req))
	checkErrorAnswer(t, sent, ans, message.CommandUnsupported, "server.example.net")
}
