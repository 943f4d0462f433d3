package peer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// withoutAVP returns msg without its top-level AVPs of code (the others
// copied with the M bit set, vendor 0 only: enough for a CER).
func withoutAVP(t *testing.T, msg []byte, code uint32) []byte {
	var avps [][]byte
	require.NoError(t, wire.WalkAVPs(msg, func(a wire.AVP) bool {
		require.Zero(t, a.Vendor)
		if a.Code != code {
			avps = append(avps, rawAVP(a.Code, 0x40, 8+len(a.Data), a.Data))
		}
		return true
	}))
	return withAVPs(append([]byte(nil), msg[:wire.HeaderLen]...), avps...)
}

// A CER without Origin-Host or without Origin-Realm (RFC 6733 5.3.1: one
// of each is required) is refused DIAMETER_MISSING_AVP with a Failed-AVP
// naming the missing AVP, and its connection closed; a peer on another
// connection is still served.
func TestCERWithoutIdentityRefused(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", nil)
	good := dialOkay(t, "tcp://"+s.Addr().String(), nil)
	for name, code := range map[string]uint32{"no Origin-Host": message.OriginHost, "no Origin-Realm": message.OriginRealm} {
		t.Run(name, func(t *testing.T) {
			tc, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
			require.NoError(t, err)
			defer tc.Close()
			cfg := clientConfig("raw.example.net")
			cfg.AcctApps = []uint32{message.AppAccounting}
			require.NoError(t, tc.WriteMessages(withoutAVP(t, cfg.newCER(tc.LocalAddr()), code)))
			cea, err := tc.ReadMessage()
			require.NoError(t, err)
			rc, _ := message.ResultCodeOf(cea)
			assert.Equal(t, uint32(message.MissingAVP), rc)
			failed, ok := wire.FindAVP(cea, message.FailedAVP, 0)
			require.True(t, ok, "Failed-AVP present")
			var inner uint32
			require.NoError(t, wire.WalkGrouped(failed, func(a wire.AVP) bool { inner = a.Code; return false }))
			assert.Equal(t, code, inner, "Failed-AVP names the missing AVP")
			_, err = tc.ReadMessage()
			assert.Error(t, err, "the server closes the refused connection")
		})
	}
	_, err := good.Request(bounded(t), acr())
	require.NoError(t, err)
	for _, p := range s.Peers() {
		assert.NotEqual(t, "raw.example.net", p.Name(), "no peer admitted for the refused CERs")
	}
}
