package peer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// A CER with its Origin-Host or Origin-Realm more than once (RFC 6733
// 5.3.1: exactly one of each) is refused with
// DIAMETER_AVP_OCCURS_TOO_MANY_TIMES and a Failed-AVP naming the second
// one, as a request with either twice is (checkRequest): the connection is
// closed, and no identity is taken from it. Before, the last Origin-Host
// won silently.
func TestCERWithDuplicateIdentityRefused(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", nil)
	good := dialOkay(t, "tcp://"+s.Addr().String(), nil)
	host := func(h string) []byte { return rawAVP(message.OriginHost, 0x40, 8+len(h), []byte(h)) }
	realm := func(r string) []byte { return rawAVP(message.OriginRealm, 0x40, 8+len(r), []byte(r)) }
	cases := map[string]struct {
		extra []byte
		code  uint32
	}{
		"Origin-Host twice, same value":   {host("raw.example.net"), message.OriginHost},
		"Origin-Host twice, other value":  {host("other.example.net"), message.OriginHost},
		"Origin-Realm twice, other value": {realm("other.net"), message.OriginRealm},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			tc, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
			require.NoError(t, err)
			defer tc.Close()
			cfg := clientConfig("raw.example.net")
			cfg.AcctApps = []uint32{message.AppAccounting}
			require.NoError(t, tc.WriteMessages(withAVPs(cfg.newCER(tc.LocalAddr()), c.extra)))
			cea, err := tc.ReadMessage()
			require.NoError(t, err)
			rc, _ := message.ResultCodeOf(cea)
			assert.Equal(t, uint32(message.AVPOccursTooManyTimes), rc)
			failed, ok := wire.FindAVP(cea, message.FailedAVP, 0)
			require.True(t, ok, "Failed-AVP present")
			var inner uint32
			require.NoError(t, wire.WalkGrouped(failed, func(a wire.AVP) bool { inner = a.Code; return false }))
			assert.Equal(t, c.code, inner)
			_, err = tc.ReadMessage()
			assert.Error(t, err, "the server closes the refused connection")
		})
	}
	_, err := good.Request(bounded(t), acr())
	require.NoError(t, err)
	for _, p := range s.Peers() {
		assert.NotEqual(t, "other.example.net", p.Name())
	}
}
