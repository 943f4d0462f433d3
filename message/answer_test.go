package message

import (
	"testing"

	"github.com/fiorix/go-diameter/v4/diam/dict"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/wire"
)

func TestErrorAnswerShape(t *testing.T) {
	req := NewRequest(CmdAccounting, AppAccounting, wire.FlagProxiable|wire.FlagRetransmit).
		String(OriginHost, 0, true, "client.example.net").
		String(OriginRealm, 0, true, "example.net").
		String(SessionID, 0, true, "client.example.net;1;2").
		Uint32(AccountingRecordType, 0, true, 2).
		Bytes()
	wire.SetHopByHop(req, 0x11223344)
	wire.SetEndToEnd(req, 0x55667788)
	me := Identity{Host: "server.example.net", Realm: "example.net"}

	for _, tc := range []struct {
		rc     uint32
		eBit   bool
		errMsg string
	}{
		{TooBusy, true, "store down"},
		{InvalidHdrBits, true, ""},
		{ElectionLost, false, ""},
		{UnableToComply, false, "x"},
	} {
		ans := ErrorAnswer(req, me, tc.rc, tc.errMsg).Bytes()
		assert.Equal(t, uint32(0x11223344), wire.HopByHop(ans))
		assert.Equal(t, uint32(0x55667788), wire.EndToEnd(ans))
		assert.Equal(t, uint32(CmdAccounting), wire.CommandCode(ans))
		assert.Equal(t, uint32(AppAccounting), wire.AppID(ans))
		f := wire.Flags(ans)
		assert.Zero(t, f&(wire.FlagRequest|wire.FlagRetransmit), "R and T cleared")
		assert.NotZero(t, f&wire.FlagProxiable, "P copied")
		assert.Equal(t, tc.eBit, f&wire.FlagError != 0, "E bit for %d", tc.rc)

		var codes []uint32
		require.NoError(t, wire.WalkAVPs(ans, func(a wire.AVP) bool { codes = append(codes, a.Code); return true }))
		want := []uint32{SessionID, ResultCode, OriginHost, OriginRealm}
		if tc.errMsg != "" {
			want = append(want, ErrorMessage)
		}
		assert.Equal(t, want, codes, "AVPs and their order for %d", tc.rc)
		rc, _ := ResultCodeOf(ans)
		assert.Equal(t, tc.rc, rc)
		sid, _ := StringOf(ans, SessionID, 0)
		assert.Equal(t, "client.example.net;1;2", sid)
		oh, _ := StringOf(ans, OriginHost, 0)
		assert.Equal(t, me.Host, oh)
		or, _ := StringOf(ans, OriginRealm, 0)
		assert.Equal(t, me.Realm, or)
		_, err := wire.Decode(ans, dict.Default)
		require.NoError(t, err)
	}
}

// A request without a Session-Id gets an answer without one; extra AVPs go
// after the fixed ones.
func TestErrorAnswerWithoutSessionID(t *testing.T) {
	req := NewRequest(wire.CmdDeviceWatchdog, AppCommon, 0).
		String(OriginHost, 0, true, "client.example.net").Bytes()
	ans := ErrorAnswer(req, Identity{"s.example.net", "example.net"}, InvalidAVPValue, "").
		Group(FailedAVP, 0, true).String(OriginHost, 0, true, "bad").End().Bytes()
	var codes []uint32
	require.NoError(t, wire.WalkAVPs(ans, func(a wire.AVP) bool { codes = append(codes, a.Code); return true }))
	assert.Equal(t, []uint32{ResultCode, OriginHost, OriginRealm, FailedAVP}, codes)
	assert.Zero(t, wire.Flags(ans)&wire.FlagError)
}
