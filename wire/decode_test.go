package wire

import (
	"encoding/binary"
	"testing"

	"github.com/fiorix/go-diameter/v4/diam"
	"github.com/fiorix/go-diameter/v4/diam/datatype"
	"github.com/fiorix/go-diameter/v4/diam/dict"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every AVP whose Length does not fit is refused with ErrAVPLength (RFC
// 6733 7.1.5: DIAMETER_INVALID_AVP_LENGTH), at the top level and inside
// Grouped AVPs, including the lengths that pad to a fixed type's size.
func TestDecodeRefusesWrongAVPLengths(t *testing.T) {
	oh := rawAVP(264, 0x40, 0, 12, []byte("host"))
	or := rawAVP(296, 0x40, 0, 13, []byte("realm"))
	// Vendor-Specific-Application-Id (260) holding Vendor-Id (266) of 8
	// octets then 8 more bytes: read by the re-computed length, the rest
	// looks like an Auth-Application-Id (258) the wire does not hold.
	vendor8 := rawAVP(266, 0x40, 0, 16, []byte{0, 0, 0, 10, 0, 0, 1, 2})
	misread := append(append([]byte{}, vendor8...), 0x40, 0, 0, 12, 0, 0, 0, 5)
	// A group whose child runs past the group's end (but not the message's).
	pastGroup := append(rawAVP(260, 0x40, 0, 8+12, rawAVP(266, 0x40, 0, 16, []byte{0, 0, 0, 10})), oh...)
	tests := []struct {
		name   string
		msg    []byte
		reason string
	}{
		{"Result-Code of 1 octet", rawMsg(0, 280, 0, rawAVP(268, 0x40, 0, 9, []byte{1}), oh, or), "AVP 268 (vendor 0) at offset 20: Unsigned32 of 1 octets, not 4"},
		{"Result-Code of 2 octets", rawMsg(0, 280, 0, rawAVP(268, 0x40, 0, 10, []byte{0x07, 0xd1}), oh, or), "Unsigned32 of 2 octets, not 4"},
		{"Result-Code of 3 octets", rawMsg(0, 280, 0, rawAVP(268, 0x40, 0, 11, []byte{0, 0x07, 0xd1}), oh, or), "Unsigned32 of 3 octets, not 4"},
		{"Unsigned64 of 5 octets", rawMsg(FlagRequest, 280, 0, oh, rawAVP(287, 0x40, 0, 13, []byte{1, 2, 3, 4, 5})), "AVP 287 (vendor 0) at offset 32: Unsigned64 of 5 octets, not 8"},
		{"Unsigned64 of 7 octets", rawMsg(FlagRequest, 280, 0, oh, rawAVP(287, 0x40, 0, 15, make([]byte, 7))), "Unsigned64 of 7 octets, not 8"},
		{"IPv4 Address of 5 octets", rawMsg(FlagRequest, 257, 0, rawAVP(257, 0x40, 0, 13, []byte{0, 1, 10, 0, 0})), "Address of 5 octets, not 6"},
		{"Unsigned32 of 8 octets in a group", rawMsg(FlagRequest, 257, 0, oh, or, rawAVP(260, 0x40, 0, uint32(8+len(misread)), misread)), "AVP 266 (vendor 0) at offset 56: Unsigned32 of 8 octets, not 4"},
		{"AVP past its group's end", rawMsg(FlagRequest, 257, 0, pastGroup), "AVP length runs past the end of the message at offset 28 (inside AVP 260 at offset 20, which ends at 40)"},
		{"AVP below its header in a group", rawMsg(FlagRequest, 257, 0, rawAVP(260, 0x40, 0, 16, rawAVP(266, 0x40, 0, 4, []byte{0, 0, 0, 10}))), "AVP length below its header at offset 28"},
		{"truncated AVP header in a group", rawMsg(FlagRequest, 257, 0, rawAVP(260, 0x40, 0, 12, []byte{0, 0, 1, 10})), "AVP header truncated at offset 28"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode(tt.msg, dict.Default)
			require.Error(t, err, "decoded as %v", m)
			assert.Nil(t, m)
			assert.ErrorIs(t, err, ErrBadFrame)
			assert.ErrorIs(t, err, ErrAVPLength)
			assert.Contains(t, err.Error(), tt.reason)
		})
	}
}

// What the exact length rule must still accept: a go-diameter CER (with a
// Grouped AVP and Addresses), values of odd length, an Address of a family
// other than IP, AVPs the dictionary does not know, and a group whose last
// AVP's padding is left out of the group's Length.
func TestDecodeAcceptsExactLengths(t *testing.T) {
	oh := rawAVP(264, 0x40, 0, 8+5, []byte("host1"))
	vendor := rawAVP(266, 0x40, 0, 12, []byte{0, 0, 0, 10})
	authApp := rawAVP(258, 0x40, 0, 12, []byte{0, 0, 0, 4})
	proxyHost := rawAVP(280, 0x40, 0, 8+5, []byte("proxy"))                 // Proxy-Host, DiameterIdentity of 5
	proxyState := rawAVP(33, 0x40, 0, 8+2, []byte("st"))                    // Proxy-State, OctetString of 2
	proxyInfo := append(append([]byte{}, proxyHost...), proxyState[:10]...) // last child unpadded
	for name, msg := range map[string][]byte{
		"CER":            newCER(t, "client.example.net"),
		"odd lengths":    rawMsg(FlagRequest, 280, 0, oh, rawAVP(296, 0x40, 0, 8+7, []byte("example"))),
		"E.164 Address":  rawMsg(FlagRequest, 257, 0, oh, rawAVP(257, 0x40, 0, 8+7, []byte{0, 8, '1', '2', '3', '4', '5'})),
		"unknown AVP":    rawMsg(FlagRequest, 280, 0, oh, rawAVP(0x00ffff01, 0, 0, 8+3, []byte("abc"))),
		"group":          rawMsg(FlagRequest, 257, 0, oh, rawAVP(260, 0x40, 0, uint32(8+len(vendor)+len(authApp)), append(append([]byte{}, vendor...), authApp...))),
		"group unpadded": rawMsg(FlagRequest, 280, 0, oh, rawAVP(284, 0x40, 0, uint32(8+len(proxyInfo)), proxyInfo)),
	} {
		t.Run(name, func(t *testing.T) {
			m, err := Decode(msg, dict.Default)
			require.NoError(t, err)
			require.NotNil(t, m)
		})
	}
	// The group's children are the wire's, not a re-reading of them.
	msg := rawMsg(FlagRequest, 257, 0, oh, rawAVP(260, 0x40, 0, uint32(8+len(vendor)+len(authApp)), append(append([]byte{}, vendor...), authApp...)))
	m, err := Decode(msg, dict.Default)
	require.NoError(t, err)
	g := m.AVP[1].Data.(*diam.GroupedAVP)
	require.Len(t, g.AVP, 2)
	assert.Equal(t, datatype.Unsigned32(10), g.AVP[0].Data)
	assert.Equal(t, datatype.Unsigned32(4), g.AVP[1].Data)
}

// failedChain is a Failed-AVP (279, Grouped, any AVP inside) holding a
// Failed-AVP holding ..., depth AVPs deep: empty at the bottom, it nests
// one level every 8 bytes.
func failedChain(depth int) []byte {
	b := make([]byte, 8*depth)
	for i := range depth {
		h := b[8*i:]
		l := 8 * (depth - i)
		binary.BigEndian.PutUint32(h, 279)
		h[4], h[5], h[6], h[7] = 0x40, byte(l>>16), byte(l>>8), byte(l)
	}
	return b
}

// Decode lets AVPs nest MaxAVPDepth deep and refuses one level more with
// ErrAVPTooDeep, before go-diameter recurses into it: a 64 KiB request
// nests 8,000 deep, which go-diameter takes time quadratic in the depth to
// decode, and deeper ones overflow the stack.
func TestDecodeNestingDepth(t *testing.T) {
	oh := rawAVP(264, 0x40, 0, 12, []byte("host"))
	or := rawAVP(296, 0x40, 0, 13, []byte("realm"))

	m, err := Decode(rawMsg(FlagRequest, 280, 0, oh, or, failedChain(MaxAVPDepth)), dict.Default)
	require.NoError(t, err)
	deepest := 0
	for a, d := m.AVP[2], 1; a != nil; d++ {
		deepest = d
		g := a.Data.(*diam.GroupedAVP)
		a = nil
		if len(g.AVP) > 0 {
			a = g.AVP[0]
		}
	}
	assert.Equal(t, MaxAVPDepth, deepest)

	for _, depth := range []int{MaxAVPDepth + 1, (DefaultMaxMessageLen - 100) / 8} {
		msg := rawMsg(FlagRequest, 280, 0, oh, or, failedChain(depth))
		m, err := Decode(msg, dict.Default)
		require.Error(t, err, "depth %d", depth)
		assert.Nil(t, m)
		assert.ErrorIs(t, err, ErrBadFrame)
		assert.ErrorIs(t, err, ErrAVPTooDeep)
		assert.NotErrorIs(t, err, ErrAVPLength)
		assert.Contains(t, err.Error(), "AVP 279 (vendor 0) at offset 176, inside AVP 279 at offset 168, is nested 17 deep, more than 16")
	}
}
