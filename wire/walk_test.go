package wire

import (
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
