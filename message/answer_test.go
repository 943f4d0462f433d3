package message

import (
	"bytes"
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

// successReference is SuccessAnswer's oracle: the answer as ErrorAnswer
// and the Builder write it, one wire.FindAVP per AVP read.
func successReference(req []byte, from Identity, echo ...AVPID) []byte {
	b := ErrorAnswer(req, from, Success, "")
	for _, id := range echo {
		if v, ok := Uint32Of(req, id.Code, id.Vendor); ok {
			b.Uint32(id.Code, id.Vendor, true, v)
		}
	}
	return b.Bytes()
}

// The echo lists FuzzSuccessAnswer picks from: a server's accounting and
// test answers, none, and more than the walk keeps on the stack (one
// named twice).
var fuzzEchoes = [][]AVPID{
	{{AccountingRecordType, 0}, {AccountingRecordNumber, 0}},
	{{AVPTestValue, VendorTest}},
	nil,
	{{AccountingRecordNumber, 0}, {UserName, 0}, {AVPTestValue, VendorTest}, {AccountingRecordType, 5},
		{AccountingRecordType, 0}, {OriginStateID, 0}, {AccountingRecordNumber, 0}},
}

// FuzzSuccessAnswer: SuccessAnswer is byte for byte its reference,
// whatever the request holds: Session-Ids of any length, repeated,
// vendor-specific, ill-sized or truncated AVPs, flags and ids, and
// identities with empty fields.
func FuzzSuccessAnswer(f *testing.F) {
	acr := func() *Builder { return NewRequest(CmdAccounting, AppAccounting, wire.FlagProxiable) }
	f.Add(acr().String(SessionID, 0, true, "client.example.net;1;42").String(OriginHost, 0, true, "c").
		Uint32(AccountingRecordType, 0, true, 2).Uint32(AccountingRecordNumber, 0, true, 42).Bytes(), "server.example.net", "example.net", uint8(0))
	f.Add(acr().Uint32(AccountingRecordNumber, 0, true, 9).String(SessionID, 0, true, "ab").
		String(SessionID, 0, true, "second").Uint32(AccountingRecordNumber, 0, true, 10).
		Octets(AccountingRecordType, 0, true, []byte{1, 2, 3, 4, 5}).Uint32(AccountingRecordType, 0, true, 3).Bytes(), "s", "r1", uint8(0))
	f.Add(acr().String(SessionID, 7, true, "vendor").Uint32(AccountingRecordType, 5, true, 1).
		String(SessionID, 0, true, "").Bytes(), "host", "", uint8(3))
	f.Add(acr().Bytes(), "h", "r", uint8(2))
	f.Add(withRaw(acr().String(SessionID, 0, true, "p;1").Bytes(), proxyInfo("dra.example.net", "s1"),
		NewRequest(0, 0, 0).Uint32(AccountingRecordType, 0, true, 2).Bytes()[wire.HeaderLen:], proxyInfo("x", "")), "h", "r", uint8(0))
	f.Add(NewRequest(CmdTest, AppTest, 0).String(SessionID, 0, true, "t;1").
		Uint32(AVPTestValue, VendorTest, true, 77).Uint32(AVPTestValue, 0, true, 78).Bytes(), "h.example", "realm", uint8(1))
	f.Add(NewRequest(CmdTest, AppTest, 0).Octets(AVPTestValue, VendorTest, true, []byte{1}).
		Uint32(AVPTestValue, VendorTest, true, 5).Bytes(), "h", "r", uint8(1))
	long := acr().String(SessionID, 0, true, string(bytes.Repeat([]byte("x"), 3001))).
		Uint32(AccountingRecordNumber, 0, true, 1).Uint32(UserName, 0, true, 2).Bytes()
	f.Add(long, "h", "r", uint8(3))
	f.Add(long[:len(long)-3], "", "r", uint8(0))
	f.Fuzz(func(t *testing.T, req []byte, host, realm string, pick uint8) {
		if h, err := wire.ParseHeader(req); err != nil || wire.Validate(h, wire.DefaultMaxMessageLen) != nil || int(h.Length) != len(req) {
			return // a frame reader refuses it before
		}
		from, echo := Identity{host, realm}, fuzzEchoes[int(pick)%len(fuzzEchoes)]
		want := successReference(req, from, echo...)
		if got := SuccessAnswer(req, from, echo...); !bytes.Equal(got, want) || cap(got) != len(got) {
			t.Fatalf("answer (cap %d)\n%x\nreference\n%x", cap(got), got, want)
		}
	})
}

// BenchmarkSuccessAnswer: the answer to an ACR, in one walk
// (SuccessAnswer) and with the Builder (successReference), side by side.
func BenchmarkSuccessAnswer(b *testing.B) {
	from := Identity{"server.example.net", "example.net"}
	echo := []AVPID{{AccountingRecordType, 0}, {AccountingRecordNumber, 0}}
	req := NewRequest(CmdAccounting, AppAccounting, wire.FlagProxiable).
		String(SessionID, 0, true, "client.example.net;1764590000123456789;42").
		String(OriginHost, 0, true, "client.example.net").
		String(OriginRealm, 0, true, "example.net").
		String(DestinationRealm, 0, true, "example.net").
		Uint32(AccountingRecordType, 0, true, 1).
		Uint32(AccountingRecordNumber, 0, true, 42).
		String(UserName, 0, true, "user42@example.net").Bytes()
	b.Run("walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = SuccessAnswer(req, from, echo...)
		}
	})
	b.Run("builder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = successReference(req, from, echo...)
		}
	})
}

// proxyInfo is a Proxy-Info AVP holding host and state.
func proxyInfo(host, state string) []byte {
	b := NewRequest(0, 0, 0).Group(ProxyInfo, 0, true).
		String(ProxyHost, 0, true, host).Octets(ProxyState, 0, true, []byte(state)).End().Bytes()
	return b[wire.HeaderLen:]
}

// withRaw appends raw AVPs to msg and fixes its length.
func withRaw(msg []byte, avps ...[]byte) []byte {
	out := append([]byte(nil), msg...)
	for _, a := range avps {
		out = append(out, a...)
	}
	out[1], out[2], out[3] = byte(len(out)>>16), byte(len(out)>>8), byte(len(out))
	return out
}

// Every Proxy-Info of the request is in its answer, in the request's order
// and after the fixed AVPs (RFC 6733 6.2), in error and success answers
// alike; a vendor's AVP of the same code is not one.
func TestAnswersKeepProxyInfo(t *testing.T) {
	pi1, pi2 := proxyInfo("dra1.example.net", "state-1"), proxyInfo("dra2.example.net", "st2")
	vendorPI := NewRequest(0, 0, 0).Octets(ProxyInfo, 77, true, []byte("not it")).Bytes()[wire.HeaderLen:]
	base := NewRequest(CmdAccounting, AppAccounting, wire.FlagProxiable).
		String(SessionID, 0, true, "c;1").Bytes()
	req := withRaw(base, pi1,
		NewRequest(0, 0, 0).String(OriginHost, 0, true, "client.example.net").Bytes()[wire.HeaderLen:],
		vendorPI, pi2,
		NewRequest(0, 0, 0).Uint32(AccountingRecordType, 0, true, 2).Bytes()[wire.HeaderLen:])
	me := Identity{Host: "server.example.net", Realm: "example.net"}
	var proxies [][]byte
	require.NoError(t, wire.WalkAVPs(req, func(a wire.AVP) bool {
		if a.Code == ProxyInfo && a.Vendor == 0 {
			proxies = append(proxies, a.Data)
		}
		return true
	}))
	require.Len(t, proxies, 2)
	for name, ans := range map[string][]byte{
		"3004":    ErrorAnswer(req, me, TooBusy, "busy").Bytes(),
		"5014":    ErrorAnswer(req, me, InvalidAVPLength, "").Group(FailedAVP, 0, true).Uint32(ResultCode, 0, true, 1).End().Bytes(),
		"success": SuccessAnswer(req, me, AVPID{Code: AccountingRecordType}),
	} {
		var codes []uint32
		var got [][]byte
		require.NoError(t, wire.WalkAVPs(ans, func(a wire.AVP) bool {
			codes = append(codes, a.Code)
			if a.Code == ProxyInfo {
				assert.Zero(t, a.Vendor, name)
				got = append(got, a.Data)
			}
			return true
		}))
		assert.Equal(t, proxies, got, "%s: the request's Proxy-Info AVPs, in order", name)
		_, err := wire.Decode(ans, dict.Default)
		require.NoError(t, err, name)
		t.Logf("%s: %v", name, codes)
	}
	assert.Equal(t, successReference(req, me, AVPID{Code: AccountingRecordType}), SuccessAnswer(req, me, AVPID{Code: AccountingRecordType}))
}

// Proxy-Info AVPs too large to echo with the Session-Id are left out, and
// the answer's header still says its length.
func TestAnswersToHugeProxyInfo(t *testing.T) {
	from := Identity{Host: "server.example.net", Realm: "example.net"}
	big := bytes.Repeat([]byte("p"), MaxEchoedSessionID/2&^3)
	pi := NewRequest(0, 0, 0).Octets(ProxyInfo, 0, true, big).Bytes()[wire.HeaderLen:]
	for _, tc := range []struct {
		sid  int
		echo bool
	}{{16, true}, {MaxEchoedSessionID - len(pi), true}, {MaxEchoedSessionID - len(pi) + 1, false}} {
		req := withRaw(NewRequest(CmdAccounting, AppAccounting, wire.FlagProxiable).
			Octets(SessionID, 0, true, bytes.Repeat([]byte("s"), tc.sid)).Bytes(), pi)
		for name, ans := range map[string][]byte{
			"ErrorAnswer":   ErrorAnswer(req, from, TooBusy, "busy").Group(FailedAVP, 0, true).Octets(SessionID, 0, true, big[:256]).End().Bytes(),
			"SuccessAnswer": SuccessAnswer(req, from),
		} {
			assert.Equal(t, uint32(len(ans)), wire.Length(ans), name)
			assert.LessOrEqual(t, len(ans), wire.MaxMessageLen)
			_, echoed := wire.FindAVP(ans, ProxyInfo, 0)
			_, sid := wire.FindAVP(ans, SessionID, 0)
			assert.True(t, sid, name)
			assert.Equal(t, tc.echo, echoed, "%s: Session-Id of %d, Proxy-Info of %d", name, tc.sid, len(pi))
		}
		assert.Equal(t, successReference(req, from), SuccessAnswer(req, from))
	}
}
