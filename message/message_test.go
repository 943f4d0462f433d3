package message

import (
	"net"
	"net/netip"
	"testing"

	"github.com/fiorix/go-diameter/v4/diam"
	"github.com/fiorix/go-diameter/v4/diam/avp"
	"github.com/fiorix/go-diameter/v4/diam/datatype"
	"github.com/fiorix/go-diameter/v4/diam/dict"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/wire"
)

// Messages built here decode with go-diameter's own dictionary: the bytes
// are what any Diameter peer expects.
func TestBuilderDecodesWithGoDiameter(t *testing.T) {
	b := NewRequest(wire.CmdCapabilitiesExchange, AppCommon, 0).
		String(OriginHost, 0, true, "client.example.net").
		String(OriginRealm, 0, true, "example.net").
		Address(HostIPAddress, 0, true, netip.MustParseAddr("127.0.0.1")).
		Address(HostIPAddress, 0, true, netip.MustParseAddr("::1")).
		Uint32(VendorID, 0, true, 0).
		String(ProductName, 0, false, "aaatp").
		Group(VendorSpecificApplicationID, 0, true).
		Uint32(VendorID, 0, true, VendorTest).
		Uint32(AuthApplicationID, 0, true, AppTest).
		End().
		Uint32(AcctApplicationID, 0, true, AppAccounting)
	msg := b.Bytes()
	h, err := wire.ParseHeader(msg)
	require.NoError(t, err)
	require.NoError(t, wire.Validate(h, wire.DefaultMaxMessageLen))
	assert.Equal(t, int(h.Length), len(msg))

	m, err := wire.Decode(msg, dict.Default)
	require.NoError(t, err)
	assert.True(t, m.Header.CommandFlags&0x80 != 0)
	oh, err := m.FindAVP(avp.OriginHost, 0)
	require.NoError(t, err)
	assert.Equal(t, datatype.DiameterIdentity("client.example.net"), oh.Data)
	ips, err := m.FindAVPs(avp.HostIPAddress, 0)
	require.NoError(t, err)
	require.Len(t, ips, 2)
	assert.Equal(t, "127.0.0.1", net.IP(ips[0].Data.(datatype.Address)).String())
	vsa, err := m.FindAVP(avp.VendorSpecificApplicationID, 0)
	require.NoError(t, err)
	g := vsa.Data.(*diam.GroupedAVP)
	require.Len(t, g.AVP, 2)
}

func TestAnswerCopiesIdsAndClearsT(t *testing.T) {
	req := NewRequest(CmdAccounting, AppAccounting, wire.FlagProxiable|wire.FlagRetransmit).Bytes()
	wire.SetHopByHop(req, 0x01020304)
	wire.SetEndToEnd(req, 0x0a0b0c0d)
	ans := NewAnswer(req).Uint32(ResultCode, 0, true, Success).Bytes()
	assert.Equal(t, uint32(0x01020304), wire.HopByHop(ans))
	assert.Equal(t, uint32(0x0a0b0c0d), wire.EndToEnd(ans))
	assert.Equal(t, uint8(wire.FlagProxiable), wire.Flags(ans), "R and T cleared, P kept")
	rc, ok := ResultCodeOf(ans)
	assert.True(t, ok)
	assert.Equal(t, uint32(Success), rc)
	assert.Equal(t, "ACR", CommandName(req))
	assert.Equal(t, "ACA", CommandName(ans))
}

func TestVendorAVPAndPadding(t *testing.T) {
	msg := NewRequest(CmdTest, AppTest, 0).
		String(SessionID, 0, true, "abc"). // 3 bytes: padded to 4
		Uint32(AVPTestValue, VendorTest, true, 7).Bytes()
	assert.Zero(t, len(msg)%4)
	v, ok := Uint32Of(msg, AVPTestValue, VendorTest)
	assert.True(t, ok)
	assert.Equal(t, uint32(7), v)
	s, ok := StringOf(msg, SessionID, 0)
	assert.True(t, ok)
	assert.Equal(t, "abc", s)
	_, ok = Uint32Of(msg, AVPTestValue, 0)
	assert.False(t, ok, "vendor id is part of the key")
}

func TestAddressOf(t *testing.T) {
	for _, s := range []string{"192.0.2.1", "2001:db8::1"} {
		a := netip.MustParseAddr(s)
		msg := NewRequest(1, 0, 0).Address(HostIPAddress, 0, true, a).Bytes()
		d, ok := wire.FindAVP(msg, HostIPAddress, 0)
		require.True(t, ok)
		got, ok := AddressOf(d)
		require.True(t, ok)
		assert.Equal(t, a, got)
	}
	_, ok := AddressOf([]byte{0, 3, 1})
	assert.False(t, ok)
}

func TestResultCodeSetsEBitOnProtocolErrors(t *testing.T) {
	req := NewRequest(CmdAccounting, AppAccounting, 0).Bytes()
	for rc, e := range map[uint32]bool{Success: false, UnableToDeliver: true, TooBusy: true, UnknownPeer: true, NoCommonApplication: false} {
		ans := NewAnswer(req).ResultCode(rc).Bytes()
		assert.Equal(t, e, wire.Flags(ans)&wire.FlagError != 0, "result %d", rc)
		got, _ := ResultCodeOf(ans)
		assert.Equal(t, rc, got)
	}
}
