package wire

import (
	"encoding/binary"
	"testing"

	"github.com/fiorix/go-diameter/v4/diam/avp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWalkAVPsAndGrouped(t *testing.T) {
	msg := newCER(t, "client.example.net")
	var codes []uint32
	var group []byte
	require.NoError(t, WalkAVPs(msg, func(a AVP) bool {
		codes = append(codes, a.Code)
		if a.Code == avp.VendorSpecificApplicationID {
			group = a.Data
		}
		return true
	}))
	assert.Equal(t, []uint32{264, 296, 257, 266, 269, 260, 1032}, codes)

	var inner []uint32
	require.NoError(t, WalkGrouped(group, func(a AVP) bool { inner = append(inner, a.Code); return true }))
	assert.Equal(t, []uint32{266, 258}, inner)

	n := 0
	require.NoError(t, WalkAVPs(msg, func(AVP) bool { n++; return n < 2 }), "early stop is not an error")
	assert.Equal(t, 2, n)

	bad := rawMsg(0, 280, 0, rawAVP(1, 0x80, 0, 8, nil))
	assert.ErrorIs(t, WalkAVPs(bad, func(AVP) bool { return true }), ErrBadFrame)
	assert.ErrorIs(t, WalkAVPs(msg[:10], func(AVP) bool { return true }), ErrBadFrame)
	assert.ErrorIs(t, WalkAVPs(msg[:len(msg)-4], func(AVP) bool { return true }), ErrBadFrame)
	assert.ErrorIs(t, WalkGrouped([]byte{0, 0, 1}, func(AVP) bool { return true }), ErrBadFrame)
}

func TestCheckAVPs(t *testing.T) {
	avp := func(code uint32, flags byte, length int, data ...byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, code)
		b = append(b, flags, byte(length>>16), byte(length>>8), byte(length))
		return append(b, data...)
	}
	msg := func(avps ...[]byte) []byte {
		m := make([]byte, HeaderLen)
		m[0], m[4] = Version, FlagRequest
		for _, a := range avps {
			m = append(m, a...)
			for len(m)%4 != 0 {
				m = append(m, 0)
			}
		}
		m[1], m[2], m[3] = byte(len(m)>>16), byte(len(m)>>8), byte(len(m))
		return m
	}
	good := avp(263, 0x40, 12, 'a', 'b', 'c', 'd')
	tests := []struct {
		name   string
		msg    []byte
		off    int
		code   uint32
		reason string
	}{
		{"no AVPs", msg(), 0, 0, ""},
		{"well formed", msg(good, good), 0, 0, ""},
		{"length 0", msg(good, avp(264, 0x40, 0, 1, 2, 3, 4)), 32, 264, "AVP length below its header"},
		{"length 7", msg(avp(264, 0x40, 7, 1, 2, 3, 4)), 20, 264, "AVP length below its header"},
		{"V flag with length 8", msg(avp(264, 0xc0, 8, 0, 0, 0, 9)), 20, 264, "AVP length below its header"},
		{"length 0xFFFFFF", msg(avp(264, 0x40, 0xffffff, 1, 2, 3, 4)), 20, 264, "AVP length runs past the end of the message"},
		{"overruns the message", msg(good, avp(264, 0x40, 16, 1, 2, 3, 4)), 32, 264, "AVP length runs past the end of the message"},
		{"header cut", msg(good, []byte{0, 0, 1, 8}), 32, 264, "AVP header truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := CheckAVPs(tt.msg)
			if tt.reason == "" {
				require.Nil(t, b)
				return
			}
			require.NotNil(t, b)
			assert.Equal(t, tt.off, b.Offset)
			assert.Equal(t, tt.code, b.Code)
			assert.Equal(t, tt.reason, b.Reason)
		})
	}
	// A header claiming more than is there is cut to the bytes present.
	m := msg(good)
	assert.NotNil(t, CheckAVPs(m[:len(m)-4]), "the AVP runs past the bytes present")
	assert.NotNil(t, CheckAVPs(m[:10]))
}

// CheckGrouped finds the first malformed AVP inside a Grouped AVP's data,
// at its offset there, as CheckAVPs does in a message.
func TestCheckGrouped(t *testing.T) {
	avp := func(code uint32, flags byte, length int, data ...byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, code)
		b = append(b, flags, byte(length>>16), byte(length>>8), byte(length))
		return append(b, data...)
	}
	good := avp(266, 0x40, 12, 0, 0, 0, 1)
	assert.Nil(t, CheckGrouped(nil))
	assert.Nil(t, CheckGrouped(append(append([]byte(nil), good...), good...)))
	b := CheckGrouped(append(append([]byte(nil), good...), avp(259, 0x40, 40, 0, 0, 0, 3)...))
	require.NotNil(t, b)
	assert.Equal(t, BadAVP{Offset: 12, Code: 259, Flags: 0x40, Length: 40, Reason: "AVP length runs past the end of the message", Data: []byte{0, 0, 0, 3}}, *b)
	b = CheckGrouped(avp(258, 0xc0, 10, 0, 0))
	require.NotNil(t, b)
	assert.Equal(t, 0, b.Offset)
	assert.Equal(t, "AVP length below its header", b.Reason)
}
