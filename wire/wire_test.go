package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"

	"github.com/fiorix/go-diameter/v4/diam"
	"github.com/fiorix/go-diameter/v4/diam/avp"
	"github.com/fiorix/go-diameter/v4/diam/datatype"
	"github.com/fiorix/go-diameter/v4/diam/dict"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rawHeader builds a header with the given fields.
func rawHeader(version uint8, length uint32, flags uint8, cmd, app, hbh, e2e uint32) []byte {
	b := make([]byte, HeaderLen)
	b[0] = version
	b[1], b[2], b[3] = byte(length>>16), byte(length>>8), byte(length)
	b[4] = flags
	b[5], b[6], b[7] = byte(cmd>>16), byte(cmd>>8), byte(cmd)
	binary.BigEndian.PutUint32(b[8:], app)
	binary.BigEndian.PutUint32(b[12:], hbh)
	binary.BigEndian.PutUint32(b[16:], e2e)
	return b
}

// rawAVP builds an AVP whose length field is exactly length (which may lie)
// and whose data is data followed by padding to 4 bytes.
func rawAVP(code uint32, flags uint8, vendor uint32, length uint32, data []byte) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b, code)
	b[4] = flags
	b[5], b[6], b[7] = byte(length>>16), byte(length>>8), byte(length)
	if flags&avpFlagVendor != 0 {
		b = binary.BigEndian.AppendUint32(b, vendor)
	}
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// rawMsg concatenates a header with AVPs, fixing the header length to the
// real total unless length is non-zero.
func rawMsg(flags uint8, cmd uint32, length uint32, avps ...[]byte) []byte {
	body := bytes.Join(avps, nil)
	if length == 0 {
		length = uint32(HeaderLen + len(body))
	}
	return append(rawHeader(1, length, flags, cmd, 0, 0x11223344, 0x55667788), body...)
}

// newCER builds a Capabilities-Exchange-Request with go-diameter itself.
func newCER(t testing.TB, originHost string) []byte {
	return newCERWithIP(t, originHost, "127.0.0.1")
}

func newCERWithIP(t testing.TB, originHost, ip string) []byte {
	t.Helper()
	m := diam.NewRequest(diam.CapabilitiesExchange, 0, dict.Default)
	m.NewAVP(avp.OriginHost, avp.Mbit, 0, datatype.DiameterIdentity(originHost))
	m.NewAVP(avp.OriginRealm, avp.Mbit, 0, datatype.DiameterIdentity("example.net"))
	m.NewAVP(avp.HostIPAddress, avp.Mbit, 0, datatype.Address(net.ParseIP(ip).To4()))
	m.NewAVP(avp.VendorID, avp.Mbit, 0, datatype.Unsigned32(10415))
	m.NewAVP(avp.ProductName, 0, 0, datatype.UTF8String("aaatp"))
	m.NewAVP(avp.VendorSpecificApplicationID, avp.Mbit, 0, &diam.GroupedAVP{
		AVP: []*diam.AVP{
			diam.NewAVP(avp.VendorID, avp.Mbit, 0, datatype.Unsigned32(10415)),
			diam.NewAVP(avp.AuthApplicationID, avp.Mbit, 0, datatype.Unsigned32(16777238)),
		},
	})
	// A vendor-specific AVP, to exercise the 12-byte AVP header.
	m.NewAVP(1032, avp.Vbit, 10415, datatype.Enumerated(1004)) // RAT-Type (3GPP)
	b, err := m.Serialize()
	require.NoError(t, err)
	return b
}

func TestParseHeader(t *testing.T) {
	b := rawHeader(1, 0x012345&^3, FlagRequest|FlagProxiable, 0x0abcde, 4, 0xdeadbeef, 0xcafef00d)
	h, err := ParseHeader(b)
	require.NoError(t, err)
	assert.Equal(t, Header{Version: 1, Length: 0x012344, Flags: 0xc0, CommandCode: 0x0abcde, AppID: 4, HopByHop: 0xdeadbeef, EndToEnd: 0xcafef00d}, h)
	assert.True(t, h.IsRequest())
	assert.True(t, h.IsProxiable())
	assert.False(t, h.IsError())
	assert.False(t, h.IsRetransmit())

	_, err = ParseHeader(b[:19])
	require.ErrorIs(t, err, ErrBadFrame)
	assert.Contains(t, err.Error(), "19 bytes, too short for the 20-byte header")
}

func TestValidate(t *testing.T) {
	ok := Header{Version: 1, Length: 64, Flags: FlagRequest, CommandCode: 280}
	tests := []struct {
		name   string
		mutate func(h *Header)
		maxLen uint32
		reason string // "" means valid
	}{
		{"valid request", func(*Header) {}, 0, ""},
		{"valid answer with E flag", func(h *Header) { h.Flags = FlagError | FlagProxiable }, 0, ""},
		{"valid retransmitted request", func(h *Header) { h.Flags |= FlagRetransmit }, 0, ""},
		{"header only", func(h *Header) { h.Length = 20 }, 0, ""},
		{"exactly max", func(h *Header) { h.Length = 128 }, 128, ""},
		{"maxLen 0 means the default", func(h *Header) { h.Length = DefaultMaxMessageLen }, 0, ""},
		{"version 0", func(h *Header) { h.Version = 0 }, 0, "version 0, want 1"},
		{"version 2", func(h *Header) { h.Version = 2 }, 0, "version 2, want 1"},
		{"length 0", func(h *Header) { h.Length = 0 }, 0, "length 0 below the 20-byte header"},
		{"length 12", func(h *Header) { h.Length = 12 }, 0, "length 12 below the 20-byte header"},
		{"length above maxLen", func(h *Header) { h.Length = 132 }, 128, "length 132 above the maximum 128"},
		{"length above default", func(h *Header) { h.Length = DefaultMaxMessageLen + 4 }, 0, "length 65540 above the maximum 65536"},
		{"24-bit maximum", func(h *Header) { h.Length = MaxMessageLen }, 0, "above the maximum"},
		{"length not multiple of 4", func(h *Header) { h.Length = 22 }, 0, "length 22 not a multiple of 4"},
		// Header bits are the receiver's business, not framing: reserved
		// bits are ignored (RFC 6733 3), an E-bit request gets an answer.
		{"reserved flag 0x01", func(h *Header) { h.Flags |= 0x01 }, 0, ""},
		{"reserved flag 0x08", func(h *Header) { h.Flags = 0x08 }, 0, ""},
		{"E flag on request", func(h *Header) { h.Flags = FlagRequest | FlagError }, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := ok
			tt.mutate(&h)
			err := Validate(h, tt.maxLen)
			if tt.reason == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrBadFrame)
			var fe *FrameError
			require.ErrorAs(t, err, &fe)
			assert.Contains(t, fe.Reason, tt.reason)
			assert.Contains(t, err.Error(), tt.reason)
		})
	}
}

func TestFrameErrorUnwrap(t *testing.T) {
	cause := errors.New("cause")
	err := error(&FrameError{Reason: "r", Err: cause})
	assert.ErrorIs(t, err, ErrBadFrame)
	assert.ErrorIs(t, err, cause)
	assert.Equal(t, "wire: bad Diameter frame: r: cause", err.Error())
	assert.NotErrorIs(t, errors.New("other"), ErrBadFrame)
}

func TestGettersAndPatchers(t *testing.T) {
	msg := newCER(t, "client.example.net")
	h, err := ParseHeader(msg)
	require.NoError(t, err)
	require.NoError(t, Validate(h, 0))
	assert.Equal(t, uint32(len(msg)), Length(msg))
	assert.Equal(t, uint32(257), CommandCode(msg))
	assert.Equal(t, uint32(0), AppID(msg))
	assert.Equal(t, FlagRequest, Flags(msg))
	assert.True(t, IsRequest(msg))
	assert.Equal(t, h.HopByHop, HopByHop(msg))
	assert.Equal(t, h.EndToEnd, EndToEnd(msg))

	orig := bytes.Clone(msg)
	SetHopByHop(msg, 0x01020304)
	SetEndToEnd(msg, 0x0a0b0c0d)
	SetRetransmit(msg)
	assert.Equal(t, uint32(0x01020304), HopByHop(msg))
	assert.Equal(t, uint32(0x0a0b0c0d), EndToEnd(msg))
	assert.Equal(t, FlagRequest|FlagRetransmit, Flags(msg))
	// Only bytes 4 (flags) and 12..19 (ids) may differ.
	for i := range msg {
		if i != 4 && (i < 12 || i >= 20) {
			require.Equalf(t, orig[i], msg[i], "byte %d changed", i)
		}
	}

	// go-diameter's own reader sees the patched values.
	m, err := diam.ReadMessage(bytes.NewReader(msg), dict.Default)
	require.NoError(t, err)
	assert.Equal(t, uint32(0x01020304), m.Header.HopByHopID)
	assert.Equal(t, uint32(0x0a0b0c0d), m.Header.EndToEndID)
	assert.Equal(t, FlagRequest|FlagRetransmit, m.Header.CommandFlags)

	ClearRetransmit(msg)
	assert.Equal(t, FlagRequest, Flags(msg))
	SetFlags(msg, FlagProxiable)
	assert.Equal(t, FlagProxiable, Flags(msg))
	assert.False(t, IsRequest(msg))
}

func TestDecodeRoundTrip(t *testing.T) {
	msg := newCER(t, "client.example.net")
	SetHopByHop(msg, 0) // zero must survive (go-diameter's NewMessage would randomize it)
	SetEndToEnd(msg, 0x0a0b0c0d)
	SetRetransmit(msg)

	m, err := Decode(msg, nil)
	require.NoError(t, err)
	assert.Equal(t, uint32(0), m.Header.HopByHopID)
	assert.Equal(t, uint32(0x0a0b0c0d), m.Header.EndToEndID)
	assert.Equal(t, FlagRequest|FlagRetransmit, m.Header.CommandFlags)
	assert.Equal(t, uint32(257), m.Header.CommandCode)
	assert.Equal(t, uint32(len(msg)), m.Header.MessageLength)
	require.Len(t, m.AVP, 7)

	oh, err := m.FindAVP(avp.OriginHost, 0)
	require.NoError(t, err)
	assert.Equal(t, datatype.DiameterIdentity("client.example.net"), oh.Data)
	ip, err := m.FindAVP(avp.HostIPAddress, 0)
	require.NoError(t, err)
	assert.True(t, net.IP(ip.Data.(datatype.Address)).Equal(net.ParseIP("127.0.0.1")))
	assert.Equal(t, uint32(10415), m.AVP[6].VendorID)

	// Re-encoding gives back the same bytes.
	out, err := m.Serialize()
	require.NoError(t, err)
	assert.Equal(t, msg, out)
}

func TestDecodeErrors(t *testing.T) {
	oh := rawAVP(264, 0x40, 0, 8+4, []byte("host"))
	tests := []struct {
		name   string
		msg    []byte
		reason string
	}{
		{"empty", nil, "0 bytes, too short"},
		{"length below 20", rawMsg(FlagRequest, 280, 12), "length 12 below the 20-byte header"},
		{"length 0", rawMsg(FlagRequest, 280, 0x0)[:0:0], "too short"},
		// The 24-bit field cannot exceed MaxMessageLen, so the check that
		// matters is against the bytes actually given: nothing is allocated
		// from the claimed length.
		{"length at the 24-bit maximum", rawMsg(FlagRequest, 280, MaxMessageLen&^3, oh), "header length 16777212 but 32 bytes given"},
		{"length larger than the bytes", rawMsg(FlagRequest, 280, 40, oh), "header length 40 but 32 bytes given"},
		{"trailing bytes", append(rawMsg(FlagRequest, 280, 0, oh), 0, 0, 0, 0), "header length 32 but 36 bytes given"},
		{"version 2", func() []byte { b := rawMsg(FlagRequest, 280, 0, oh); b[0] = 2; return b }(), "version 2"},
		{"vendor AVP shorter than 12", rawMsg(FlagRequest, 280, 0, rawAVP(264, 0xc0, 0, 8, nil)), "AVP length below its header at offset 20"},
		{"vendor AVP of 11", rawMsg(FlagRequest, 280, 0, rawAVP(264, 0x80, 0, 11, []byte{0, 0, 0})), "AVP length below its header"},
		{"AVP length 0", rawMsg(FlagRequest, 280, 0, oh, rawAVP(296, 0x40, 0, 0, []byte("realm"))), "AVP length below its header at offset 32"},
		{"AVP past the end", rawMsg(FlagRequest, 280, 0, rawAVP(264, 0x40, 0, 100, []byte("host"))), "AVP length runs past the end of the message"},
		{"AVP header truncated", rawMsg(FlagRequest, 280, 0, oh, []byte{0, 0, 1, 8}), "AVP header truncated"},
		{"unknown command", rawMsg(FlagRequest, 9999, 0, oh), "unknown command 9999"},
		{"Unsigned32 with 8 bytes", rawMsg(FlagRequest, 280, 0, oh, rawAVP(278, 0x40, 0, 16, make([]byte, 8))), "AVP 278 (vendor 0) at offset 32: Unsigned32 of 8 octets, not 4"},
		{"Address with 2 bytes", rawMsg(FlagRequest, 257, 0, rawAVP(257, 0x40, 0, 10, []byte{0, 1})), "AVP 257 (vendor 0) at offset 20"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode(tt.msg, dict.Default)
			require.Error(t, err)
			assert.Nil(t, m)
			assert.ErrorIs(t, err, ErrBadFrame)
			var fe *FrameError
			require.ErrorAs(t, err, &fe)
			assert.Contains(t, err.Error(), tt.reason)
		})
	}
}

// A short vendor AVP nested inside a Grouped AVP makes go-diameter index
// data[8:12] unchecked and panic: Decode must refuse it before go-diameter
// sees it (and would turn a panic into an error if one got through).
func TestDecodeRefusesWhatPanicsGoDiameter(t *testing.T) {
	inner := rawAVP(266, 0x80, 0, 8, nil) // 'V' set, only 8 bytes
	group := rawAVP(260, 0x40, 0, uint32(8+len(inner)), inner)
	msg := rawMsg(FlagRequest, 257, 0, group)

	// First prove the trap is real in go-diameter itself.
	panicked := func() (p bool) {
		defer func() { p = recover() != nil }()
		_, _ = diam.ReadMessage(bytes.NewReader(msg), dict.Default)
		return false
	}()
	require.True(t, panicked, "go-diameter no longer panics on a short vendor AVP in a group; the recover in Decode may be unnecessary")

	m, err := Decode(msg, dict.Default)
	require.ErrorIs(t, err, ErrBadFrame)
	assert.Nil(t, m)
	assert.ErrorIs(t, err, ErrAVPLength)
	assert.Contains(t, err.Error(), "AVP length below its header at offset 28")
}

// go-diameter v4.0.4's ReadMessage decodes bodies of up to 1024 bytes into a
// pooled buffer, and the []byte-based values (Address, IPv4, IPv6, Unknown)
// point into it: the next ReadMessage overwrites them. (String-based types
// such as DiameterIdentity are copied by the string conversion.) This test
// pins the trap; it fails if a go-diameter upgrade fixes it, which is good
// news to act on.
func TestGoDiameterReadMessageAliasesPooledBuffer(t *testing.T) {
	a, b := newCERWithIP(t, "a.example.net", "10.0.0.1"), newCERWithIP(t, "b.example.net", "10.9.9.9")
	seen := false
	// sync.Pool drops a quarter of Puts at random under -race, so try a few
	// times; without -race the first attempt shows it.
	for i := 0; i < 50 && !seen; i++ {
		ma, err := diam.ReadMessage(bytes.NewReader(a), dict.Default)
		require.NoError(t, err)
		ip, err := ma.FindAVP(avp.HostIPAddress, 0)
		require.NoError(t, err)
		require.Equal(t, "10.0.0.1", net.IP(ip.Data.(datatype.Address)).String())
		_, err = diam.ReadMessage(bytes.NewReader(b), dict.Default)
		require.NoError(t, err)
		seen = net.IP(ip.Data.(datatype.Address)).String() != "10.0.0.1"
	}
	assert.True(t, seen, "expected go-diameter's ReadMessage to alias its pooled buffer")
}

// Decode's result owns its bytes: it survives later go-diameter reads (which
// recycle the pooled buffer) and changes to the input slice, and no decoded
// value's memory overlaps the input.
func TestDecodeDoesNotAlias(t *testing.T) {
	unknown := rawAVP(0x00ffff01, 0, 0, 8+4, []byte("abcd")) // not in the dictionary
	a := append(newCERWithIP(t, "a.example.net", "10.0.0.1"), unknown...)
	binary.BigEndian.PutUint32(a[0:4], uint32(len(a))|1<<24)
	b := newCERWithIP(t, "b.example.net", "10.9.9.9")
	require.Less(t, len(a), 1024, "must be small enough for go-diameter's pooled buffer")

	ma, err := Decode(a, dict.Default)
	require.NoError(t, err)
	for i := 0; i < 50; i++ {
		_, err = diam.ReadMessage(bytes.NewReader(b), dict.Default)
		require.NoError(t, err)
		_, err = Decode(b, dict.Default)
		require.NoError(t, err)
	}
	for i := HeaderLen; i < len(a); i++ {
		a[i] = 0xff
	}
	ip, err := ma.FindAVP(avp.HostIPAddress, 0)
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1", net.IP(ip.Data.(datatype.Address)).String())
	u := ma.AVP[len(ma.AVP)-1]
	require.Equal(t, uint32(0x00ffff01), u.Code)
	assert.Equal(t, datatype.Unknown("abcd"), u.Data)
	assert.False(t, overlaps(a, ip.Data.(datatype.Address)))
	assert.False(t, overlaps(a, u.Data.(datatype.Unknown)))
}

func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	// b is contiguous, so it overlaps a iff its first or last element is
	// one of a's elements (or b contains a, which the first check of a's
	// own first element below covers).
	for i := range a {
		if &a[i] == &b[0] || &a[i] == &b[len(b)-1] {
			return true
		}
	}
	for j := range b {
		if &b[j] == &a[0] {
			return true
		}
	}
	return false
}

func TestFindAVP(t *testing.T) {
	msg := newCER(t, "client.example.net")
	d, ok := FindAVP(msg, avp.OriginHost, 0)
	require.True(t, ok)
	assert.Equal(t, "client.example.net", string(d))

	d, ok = FindAVP(msg, 1032, 10415) // vendor AVP
	require.True(t, ok)
	assert.Equal(t, uint32(1004), binary.BigEndian.Uint32(d))

	_, ok = FindAVP(msg, 1032, 0) // right code, wrong vendor
	assert.False(t, ok)
	_, ok = FindAVP(msg, avp.AuthApplicationID, 0) // nested in a group: not top-level
	assert.False(t, ok)
	_, ok = FindAVP(msg, avp.ResultCode, 0)
	assert.False(t, ok)

	// The data aliases msg: no copy on the hot path.
	d, _ = FindAVP(msg, avp.OriginHost, 0)
	d[0] = 'C'
	d2, _ := FindAVP(msg, avp.OriginHost, 0)
	assert.Equal(t, "Client.example.net", string(d2))
}

func TestFindAVPMalformed(t *testing.T) {
	oh := rawAVP(264, 0x40, 0, 12, []byte("host"))
	tests := []struct {
		name string
		msg  []byte
	}{
		{"nil", nil},
		{"short header", make([]byte, 19)},
		{"header length beyond the slice", rawMsg(0, 280, 64, oh)},
		{"AVP length 0 before the target", rawMsg(0, 280, 0, rawAVP(1, 0, 0, 0, nil), oh)},
		{"vendor AVP of 8 bytes before the target", rawMsg(0, 280, 0, rawAVP(1, 0x80, 0, 8, nil), oh)},
		{"AVP past the end", rawMsg(0, 280, 0, rawAVP(264, 0, 0, 200, []byte("host")))},
		{"truncated AVP header", rawMsg(0, 280, 0, []byte{0, 0, 1, 8})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ok := FindAVP(tt.msg, 264, 0)
			assert.False(t, ok)
		})
	}
	// The header length bounds the walk even when the slice is longer.
	msg := append(rawMsg(0, 280, 0), oh...)
	_, ok := FindAVP(msg, 264, 0)
	assert.False(t, ok)
}
