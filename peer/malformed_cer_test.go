package peer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// A CER with an AVP whose length does not fit is refused
// DIAMETER_INVALID_AVP_LENGTH with the AVP in a Failed-AVP (RFC 6733
// 7.1.5), as any other request is: an Application-Id of 2 octets is not
// read as application 0 and accepted, nor an AVP running past its
// Vendor-Specific-Application-Id refused 5012 without naming it.
func TestMalformedCERAnswered5014(t *testing.T) {
	s := startServer(t, "tcp://127.0.0.1:0", nil)
	cfg, err := clientConfig("raw.example.net").validate()
	require.NoError(t, err)
	past := append(rawAVP(message.VendorID, 0x40, 12, []byte{0, 0, 0, 1}), rawAVP(message.AcctApplicationID, 0x40, 40, []byte{0, 0, 0, 3})...)
	short := append(rawAVP(message.VendorID, 0x40, 12, []byte{0, 0, 0, 1}), rawAVP(message.AuthApplicationID, 0x40, 11, []byte{0, 0, 3})...)
	cases := []struct {
		name   string
		bad    []byte
		failed uint32
	}{
		{"Auth-Application-Id of 2 octets", rawAVP(message.AuthApplicationID, 0x40, 10, []byte{0, 3}), message.AuthApplicationID},
		{"Acct-Application-Id of 5 octets", rawAVP(message.AcctApplicationID, 0x40, 13, []byte{0, 0, 0, 3, 0}), message.AcctApplicationID},
		{"Inband-Security-Id of 0 octets", rawAVP(message.InbandSecurityID, 0x40, 8, nil), message.InbandSecurityID},
		{"Host-IP-Address of 3 octets", rawAVP(message.HostIPAddress, 0x40, 11, []byte{0, 1, 10}), message.HostIPAddress},
		{"AVP running past its Vendor-Specific-Application-Id", rawAVP(message.VendorSpecificApplicationID, 0x40, 8+len(past), past), message.AcctApplicationID},
		{"Auth-Application-Id of 3 octets in a Vendor-Specific-Application-Id", rawAVP(message.VendorSpecificApplicationID, 0x40, 8+len(short), short), message.AuthApplicationID},
		{"AVP running past the message", rawAVP(message.ProductName, 0x40, 64, []byte("x")), message.ProductName},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
			require.NoError(t, err)
			defer c.Close()
			cer := withAVPs(withIDs(cfg.newCER(c.LocalAddr()), wire.NewHopByHopGenRandom()), tc.bad)
			require.NoError(t, c.WriteMessages(cer))
			cea, err := c.ReadMessage()
			require.NoError(t, err)
			rc, _ := message.ResultCodeOf(cea)
			assert.Equal(t, uint32(message.InvalidAVPLength), rc)
			f, ok := wire.FindAVP(cea, message.FailedAVP, 0)
			require.True(t, ok, "Failed-AVP")
			var inner uint32
			require.NoError(t, wire.WalkGrouped(f, func(a wire.AVP) bool { inner = a.Code; return false }))
			assert.Equal(t, tc.failed, inner, "the Failed-AVP names the AVP")
		})
	}
}
