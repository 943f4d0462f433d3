package peer

import (
	"testing"
	"testing/synctest"

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
			cerRefused(t, s, func(cer []byte) []byte { return withAVPs(cer, c.extra) }, message.AVPOccursTooManyTimes, c.code)
		})
	}
	_, err := good.Request(bounded(t), acr())
	require.NoError(t, err)
	for _, p := range s.Peers() {
		assert.NotEqual(t, "other.example.net", p.Name())
	}
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
			cerRefused(t, s, func(cer []byte) []byte { return withoutAVP(t, cer, code) }, message.MissingAVP, code)
		})
	}
	_, err := good.Request(bounded(t), acr())
	require.NoError(t, err)
	for _, p := range s.Peers() {
		assert.NotEqual(t, "raw.example.net", p.Name(), "no peer admitted for the refused CERs")
	}
}

// cerRefused sends raw.example.net's CER, changed by edit, to s and
// checks the CEA: Result-Code rc, a Failed-AVP whose AVP has code failed,
// and the connection closed after it.
func cerRefused(t *testing.T, s *Server, edit func(cer []byte) []byte, rc, failed uint32) {
	t.Helper()
	tc, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
	require.NoError(t, err)
	defer tc.Close()
	cfg := clientConfig("raw.example.net")
	cfg.AcctApps = []uint32{message.AppAccounting}
	require.NoError(t, tc.WriteMessages(edit(cfg.newCER(tc.LocalAddr()))))
	cea, err := tc.ReadMessage()
	require.NoError(t, err)
	got, _ := message.ResultCodeOf(cea)
	assert.Equal(t, rc, got)
	f, ok := wire.FindAVP(cea, message.FailedAVP, 0)
	require.True(t, ok, "Failed-AVP present")
	var inner uint32
	require.NoError(t, wire.WalkGrouped(f, func(a wire.AVP) bool { inner = a.Code; return false }))
	assert.Equal(t, failed, inner, "Failed-AVP names the AVP")
	_, err = tc.ReadMessage()
	assert.Error(t, err, "the server closes the refused connection")
}

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

// A CER or CEA whose Origin-Host or Origin-Realm is not a valid
// DiameterIdentity is refused as such (DIAMETER_INVALID_AVP_VALUE, the
// AVP in a Failed-AVP) also when a Vendor-Specific-Application-Id follows
// it. Before, the walk of that grouped AVP overwrote the error: a bad
// Origin-Realm was accepted with DIAMETER_SUCCESS (and an empty realm),
// a bad Origin-Host refused with DIAMETER_UNABLE_TO_COMPLY.
func TestInvalidIdentityBeforeVendorAppRefused(t *testing.T) {
	const bad = "a b.example.net"
	cases := map[string]struct {
		set  func(c *Config)
		code uint32
	}{
		"Origin-Host":  {func(c *Config) { c.OriginHost = bad }, message.OriginHost},
		"Origin-Realm": {func(c *Config) { c.OriginRealm = bad }, message.OriginRealm},
	}
	for name, tc := range cases {
		t.Run("CER/"+name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ours, far := pipePair()
				defer far.Close()
				p, err := Accept(ours, clientConfig("server.example.net"))
				require.NoError(t, err)
				cli := clientConfig("raw.example.net")
				cli.VendorApps = []VendorApp{{VendorID: 10415, AuthAppID: 16777251}}
				tc.set(&cli)
				require.NoError(t, far.WriteMessages(cli.newCER(nil)))
				cea, err := far.ReadMessage()
				require.NoError(t, err)
				rc, _ := message.ResultCodeOf(cea)
				assert.Equal(t, uint32(message.InvalidAVPValue), rc)
				f, ok := wire.FindAVP(cea, message.FailedAVP, 0)
				require.True(t, ok, "Failed-AVP present")
				var inner uint32
				require.NoError(t, wire.WalkGrouped(f, func(a wire.AVP) bool { inner = a.Code; return false }))
				assert.Equal(t, tc.code, inner, "Failed-AVP names the AVP")
				<-p.Done()
			})
		})
		t.Run("CEA/"+name, func(t *testing.T) {
			a, b := pipePair()
			defer a.Close()
			defer b.Close()
			go func() {
				cer, err := b.ReadMessage()
				if err != nil {
					return
				}
				srv := clientConfig("server.example.net")
				srv.VendorApps = []VendorApp{{VendorID: 10415, AuthAppID: 16777251}}
				tc.set(&srv)
				b.WriteMessages(srv.newCEA(cer, nil, message.Success, "", nil))
			}()
			p, err := newPeer(clientConfig("client.example.net"), RoleClient, "x", "x")
			require.NoError(t, err)
			_, err = p.exchangeClient(a)
			assert.ErrorIs(t, err, message.ErrBadIdentity)
			assert.Contains(t, err.Error(), name)
		})
	}
}

// A CEA that refuses our CER keeps its Result-Code even when its
// Origin-Host is missing or invalid: the exchange fails with a
// *CapabilitiesError carrying it (and the event with its ResultCode),
// not with a bare "bad CEA". Before, the identity's failure hid the
// refusal.
func TestRefusingCEAWithoutValidOriginHostKeepsResultCode(t *testing.T) {
	cases := map[string]func(t *testing.T, cea []byte) []byte{
		"no Origin-Host": func(t *testing.T, cea []byte) []byte { return withoutAVP(t, cea, message.OriginHost) },
		"invalid Origin-Host": func(t *testing.T, cea []byte) []byte {
			h := "a b.example.net"
			return withAVPs(withoutAVP(t, cea, message.OriginHost), rawAVP(message.OriginHost, 0x40, 8+len(h), []byte(h)))
		},
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			a, b := pipePair()
			defer a.Close()
			defer b.Close()
			go func() {
				cer, err := b.ReadMessage()
				if err != nil {
					return
				}
				srv := clientConfig("server.example.net")
				cea := edit(t, srv.newCEA(cer, nil, message.UnknownPeer, "who are you", nil))
				wire.SetFlags(cea, wire.Flags(cea)|wire.FlagError)
				b.WriteMessages(cea)
			}()
			p, err := newPeer(clientConfig("client.example.net"), RoleClient, "x", "x")
			require.NoError(t, err)
			_, err = p.exchangeClient(a)
			var ce *CapabilitiesError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, uint32(message.UnknownPeer), ce.ResultCode)
			assert.Contains(t, err.Error(), "who are you")
			assert.Contains(t, err.Error(), "Origin-Host")
		})
	}
}
