package peer

import (
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// badIdentities are Origin-Host values a hostile peer sends: invalid
// UTF-8 (which once panicked the Prometheus registry), NUL, a control byte,
// a space, 60 KB (the most a 64 KB message can carry beside the rest of a CER),
// and names that are not DNS names: an empty label, a label of 64 bytes.
var badIdentities = map[string]string{
	"invalid UTF-8": "attacker.e\x87ample.net",
	"NUL":           "a\x00.example.net",
	"newline":       "a\n.example.net",
	"space":         "a b.example.net",
	"60 KB":         strings.Repeat("a", 60<<10) + ".example.net",
	"empty label":   "a..example.net",
	"long label":    strings.Repeat("a", 64) + ".example.net",
}

// A CER whose Origin-Host or Origin-Realm is not a valid DiameterIdentity
// is refused with DIAMETER_INVALID_AVP_VALUE and a Failed-AVP naming it,
// also when a glob in the allow-list would match it; the server goes on
// serving its good peers.
func TestCERWithInvalidIdentityRefused(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) { c.AllowHosts = []string{"*.example.net"} })
	good := dialOkay(t, "tcp://"+s.Addr().String(), nil)
	cases := map[string]func(c *Config, bad string){
		"Origin-Host":  func(c *Config, bad string) { c.OriginHost = bad },
		"Origin-Realm": func(c *Config, bad string) { c.OriginRealm = bad },
	}
	for avp, set := range cases {
		for name, bad := range badIdentities {
			t.Run(avp+"/"+name, func(t *testing.T) {
				tc, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
				require.NoError(t, err)
				defer tc.Close()
				cfg := clientConfig("raw.example.net")
				set(&cfg, bad)
				require.NoError(t, tc.WriteMessages(cfg.newCER(tc.LocalAddr())))
				cea, err := tc.ReadMessage()
				require.NoError(t, err)
				rc, _ := message.ResultCodeOf(cea)
				assert.Equal(t, uint32(message.InvalidAVPValue), rc)
				failed, ok := wire.FindAVP(cea, message.FailedAVP, 0)
				require.True(t, ok, "Failed-AVP present")
				code := uint32(message.OriginHost)
				if avp == "Origin-Realm" {
					code = message.OriginRealm
				}
				var inner uint32
				require.NoError(t, wire.WalkGrouped(failed, func(a wire.AVP) bool { inner = a.Code; return false }))
				assert.Equal(t, code, inner)
				assert.LessOrEqual(t, len(cea), 2048, "the refusal does not echo a huge value")
				_, err = tc.ReadMessage()
				assert.Error(t, err, "the server closes the refused connection")
			})
		}
	}
	_, err := good.Request(bounded(t), acr())
	require.NoError(t, err)
	// A refused connection may still be listed for a moment, named by its
	// address; none is ever named by the refused identity.
	for _, p := range s.Peers() {
		for _, bad := range badIdentities {
			assert.NotEqual(t, bad, p.Name())
		}
		for _, r := range p.Name() {
			assert.True(t, r > 0x20 && r < 0x7f, "peer name %q is printable ASCII", p.Name())
		}
	}
}

// A CEA with an invalid Origin-Host fails the exchange with a clear error;
// the name never becomes the peer's.
func TestCEAWithInvalidIdentityFails(t *testing.T) {
	for name, bad := range badIdentities {
		t.Run(name, func(t *testing.T) {
			a, b := pipePair()
			defer a.Close()
			defer b.Close()
			go func() {
				cer, err := b.ReadMessage()
				if err != nil {
					return
				}
				cfg := clientConfig(bad)
				b.WriteMessages(cfg.newCEA(cer, nil, message.Success, "", nil))
			}()
			p, err := newPeer(clientConfig("client.example.net"), RoleClient, "x", "x")
			require.NoError(t, err)
			_, err = p.exchangeClient(a)
			require.Error(t, err)
			assert.ErrorIs(t, err, message.ErrBadIdentity)
			assert.Contains(t, err.Error(), "Origin-Host")
			for _, r := range err.Error() {
				assert.True(t, r >= 0x20 && r < 0x7f, "error text is printable ASCII: %q", err.Error())
			}
			assert.Less(t, len(err.Error()), 300)
		})
	}
}

// FuzzParseCapabilities: any bytes as a CER or CEA either fail to parse or
// yield identities that are safe names; the Origin-Realm is empty only
// when the message has none (missing says so: a CER is then refused).
func FuzzParseCapabilities(f *testing.F) {
	cfg := clientConfig("client.example.net")
	f.Add(cfg.newCER(nil))
	bad := clientConfig("attacker.e\x87ample.net")
	f.Add(bad.newCER(nil))
	f.Add(bad.newCEA(cfg.newCER(nil), nil, message.Success, "", nil))
	// A bad identity followed by a Vendor-Specific-Application-Id.
	vsai := []VendorApp{{VendorID: 10415, AuthAppID: 16777251}}
	badRealm := clientConfig("client.example.net")
	badRealm.OriginRealm, badRealm.VendorApps = "a b.example.net", vsai
	f.Add(badRealm.newCER(nil))
	bad.VendorApps = vsai
	f.Add(bad.newCEA(cfg.newCER(nil), nil, message.Success, "", nil))
	// An Application-Id of 2 octets, and one inside a
	// Vendor-Specific-Application-Id of 3.
	f.Add(withAVPs(cfg.newCER(nil), rawAVP(message.AuthApplicationID, 0x40, 10, []byte{0, 3})))
	short := append(rawAVP(message.VendorID, 0x40, 12, []byte{0, 0, 0, 1}), rawAVP(message.AuthApplicationID, 0x40, 11, []byte{0, 0, 3})...)
	f.Add(withAVPs(cfg.newCER(nil), rawAVP(message.VendorSpecificApplicationID, 0x40, 8+len(short), short)))
	f.Fuzz(func(t *testing.T, msg []byte) {
		cp, err := parseCapabilities(msg)
		if err != nil {
			return
		}
		if b := wire.CheckAVPs(msg); b != nil {
			t.Fatalf("accepted with a malformed AVP %d: %s", b.Code, b.Reason)
		}
		_ = wire.WalkAVPs(msg, func(a wire.AVP) bool {
			if a.Vendor == 0 && badLength(a) != "" {
				t.Fatalf("accepted AVP %d of %d octets", a.Code, len(a.Data))
			}
			return true
		})
		if err := message.CheckIdentity(cp.OriginHost); err != nil {
			t.Fatalf("accepted Origin-Host %q: %v", cp.OriginHost, err)
		}
		if cp.OriginRealm == "" && cp.missing != message.OriginRealm {
			t.Fatalf("accepted an empty Origin-Realm, the message having one")
		}
		if cp.OriginRealm != "" {
			if err := message.CheckIdentity(cp.OriginRealm); err != nil {
				t.Fatalf("accepted Origin-Realm %q: %v", cp.OriginRealm, err)
			}
		}
	})
}

func pipePair() (transport.Conn, transport.Conn) {
	a, b := net.Pipe()
	return transport.NewStreamConn(a, "pipe", transport.Options{}), transport.NewStreamConn(b, "pipe", transport.Options{})
}
