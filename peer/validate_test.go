package peer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// The checks read a request's AVPs in one walk, yet refuse in a fixed
// order: a malformed AVP anywhere (even after an AVP the contents check
// refuses), then the application, then the contents.
func TestRefusalPrecedence(t *testing.T) {
	const remote = "client.example.net"
	cfg, err := Config{OriginHost: "server.example.net", OriginRealm: "example.net", AcctApps: []uint32{message.AppAccounting}, Logger: quiet}.validate()
	require.NoError(t, err)
	host := rawAVP(message.OriginHost, 0x40, 8+len(remote), []byte(remote))
	realm := rawAVP(message.OriginRealm, 0x40, 8+11, []byte("example.net"))
	sid := rawAVP(message.SessionID, 0x40, 8+8, []byte("s;1;2;34"))
	truncated := rawAVP(message.UserName, 0x40, 0xFFF, []byte("x"))
	badHost := rawAVP(message.OriginHost, 0x40, 8+4, []byte("a b!"))
	authApp := func(avps ...[]byte) []byte {
		return withAVPs(message.NewRequest(272, 4, wire.FlagProxiable).Bytes(), avps...)
	}
	for _, tc := range []struct {
		name string
		req  []byte
		rc   uint32
	}{
		{"well formed", withAVPs(bareACR(wire.FlagRequest), sid, host, realm), 0},
		{"duplicate Origin-Host, then a malformed AVP", withAVPs(bareACR(wire.FlagRequest), sid, host, host, realm, truncated), message.InvalidAVPLength},
		{"bad identity, then a malformed AVP", withAVPs(bareACR(wire.FlagRequest), sid, badHost, realm, truncated), message.InvalidAVPLength},
		{"malformed AVP only", withAVPs(bareACR(wire.FlagRequest), sid, host, realm, truncated), message.InvalidAVPLength},
		{"unadvertised application with a duplicate AVP", authApp(sid, host, host, realm), message.ApplicationNoSupport},
		{"unadvertised application, malformed AVP", authApp(sid, host, realm, truncated), message.InvalidAVPLength},
		{"duplicate Origin-Host", withAVPs(bareACR(wire.FlagRequest), sid, host, host, realm), message.AVPOccursTooManyTimes},
		{"bad identity", withAVPs(bareACR(wire.FlagRequest), sid, badHost, realm), message.InvalidAVPValue},
		{"no Origin-Realm", withAVPs(bareACR(wire.FlagRequest), sid, host), message.MissingAVP},
		{"another peer's Origin-Host", withAVPs(bareACR(wire.FlagRequest), sid, rawAVP(message.OriginHost, 0x40, 8+5, []byte("other")), realm), message.InvalidAVPValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cfg.checkRequest(tc.req, remote)
			if tc.rc == 0 {
				assert.Nil(t, r)
				return
			}
			require.NotNil(t, r)
			assert.Equal(t, tc.rc, r.rc, r.why)
		})
	}
}

// The checks of a well-formed request allocate nothing.
func TestCheckRequestAllocatesNothing(t *testing.T) {
	cfg, err := Config{OriginHost: "server.example.net", OriginRealm: "example.net", AcctApps: []uint32{message.AppAccounting}, Logger: quiet}.validate()
	require.NoError(t, err)
	req := acr()
	require.Nil(t, cfg.checkRequest(req, "client.example.net"))
	assert.Zero(t, testing.AllocsPerRun(100, func() { cfg.checkRequest(req, "client.example.net") }))
}
