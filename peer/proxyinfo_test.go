package peer

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// The answers the engine writes itself, refusing a request before its
// Handler, carry the request's Proxy-Info AVPs in order (RFC 6733 6.2): a
// relay or proxy in front of the server keeps its routing state there.
func TestErrorAnswersKeepProxyInfo(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", nil)
	const host = "raw.example.net"
	tc := rawPeer(t, s.Addr().String(), host)
	proxyInfo := func(phost, state string) []byte {
		in := append(rawAVP(message.ProxyHost, 0x40, 8+len(phost), []byte(phost)), rawAVP(message.ProxyState, 0x40, 8+len(state), []byte(state))...)
		return rawAVP(message.ProxyInfo, 0x40, 8+len(in), in)
	}
	pi1, pi2 := proxyInfo("dra.example.net", "proxy-state-1234"), proxyInfo("edge.example.net", "st")
	good := append(goodAVPs(host), pi1, pi2)
	acr := func() []byte {
		return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).Bytes()
	}
	cases := []struct {
		name string
		rc   uint32
		req  []byte
	}{
		{"3007 unadvertised application", message.ApplicationNoSupport, withAVPs(message.NewRequest(1000, 4, wire.FlagProxiable).Bytes(), good...)},
		{"3003 realm not served", message.RealmNotServed, withAVPs(acr(), append(good, rawAVP(message.DestinationRealm, 0x40, 8+11, []byte("other.org.x")))...)},
		{"3002 another host", message.UnableToDeliver, withAVPs(acr(), append(good, rawAVP(message.DestinationHost, 0x40, 8+15, []byte("other.example.x")))...)},
		{"3008 E bit", message.InvalidHdrBits, withAVPs(message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable|wire.FlagError).Bytes(), good...)},
		{"5005 no Origin-Realm", message.MissingAVP, withAVPs(acr(), good[0], good[1], pi1, pi2)},
		{"5009 two Origin-Hosts", message.AVPOccursTooManyTimes, withAVPs(acr(), pi1, good[0], good[1], good[1], good[2], pi2)},
		{"5014 AVP too short", message.InvalidAVPLength, withAVPs(acr(), append(good, rawAVP(message.UserName, 0x40, 4, nil))...)},
	}
	for _, tc2 := range cases {
		t.Run(tc2.name, func(t *testing.T) {
			require.NoError(t, tc.WriteMessages(tc2.req))
			ans, err := tc.ReadMessage()
			require.NoError(t, err)
			rc, _ := message.ResultCodeOf(ans)
			require.Equal(t, tc2.rc, rc)
			var got [][]byte
			_ = wire.WalkAVPs(ans, func(a wire.AVP) bool {
				if a.Code == message.ProxyInfo && a.Vendor == 0 {
					got = append(got, append(rawAVP(a.Code, 0x40, 8+len(a.Data), nil)[:8], a.Data...))
				}
				return true
			})
			require.Len(t, got, 2, "the request's Proxy-Info AVPs are not in its answer")
			assert.True(t, bytes.Equal(pi1, got[0]) && bytes.Equal(pi2, got[1]), "Proxy-Info AVPs copied as they were, in order")
		})
	}
}
