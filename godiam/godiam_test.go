package godiam

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiorix/go-diameter/v4/diam"
	"github.com/fiorix/go-diameter/v4/diam/avp"
	"github.com/fiorix/go-diameter/v4/diam/datatype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

func acr(sid string) *diam.Message {
	m := diam.NewRequest(diam.Accounting, 3, nil)
	m.NewAVP(avp.SessionID, avp.Mbit, 0, datatype.UTF8String(sid))
	m.NewAVP(avp.OriginHost, avp.Mbit, 0, datatype.DiameterIdentity("c.example.net"))
	m.NewAVP(avp.OriginRealm, avp.Mbit, 0, datatype.DiameterIdentity("example.net"))
	m.NewAVP(avp.DestinationRealm, avp.Mbit, 0, datatype.DiameterIdentity("example.net"))
	m.NewAVP(avp.AccountingRecordType, avp.Mbit, 0, datatype.Enumerated(2))
	m.NewAVP(avp.AccountingRecordNumber, avp.Mbit, 0, datatype.Unsigned32(0))
	return m
}

func resultCode(t *testing.T, m *diam.Message) uint32 {
	t.Helper()
	a, err := m.FindAVP(avp.ResultCode, 0)
	require.NoError(t, err)
	return uint32(a.Data.(datatype.Unsigned32))
}

// A go-diameter request goes through a client.Client to a peer.Server
// whose handler is written with go-diameter, and its answer comes back as
// a *diam.Message.
func TestSendAndHandleOverLoopback(t *testing.T) {
	var seen *diam.Message
	h := NewHandler(func(ctx context.Context, p *peer.Peer, req *diam.Message) *diam.Message {
		seen = req
		ans := req.Answer(diam.Success)
		sid, _ := req.FindAVP(avp.SessionID, 0)
		ans.InsertAVP(sid)
		id := p.LocalIdentity()
		ans.NewAVP(avp.OriginHost, avp.Mbit, 0, datatype.DiameterIdentity(id.Host))
		ans.NewAVP(avp.OriginRealm, avp.Mbit, 0, datatype.DiameterIdentity(id.Realm))
		return ans
	})
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: "s.example.net", OriginRealm: "example.net",
		AcctApps: []uint32{3}, Handler: h, Logger: quiet})
	require.NoError(t, err)
	go srv.Serve()
	defer srv.Close(context.Background())
	c, err := client.New(client.Config{
		Peers: []client.PeerSpec{{URL: "tcp://" + srv.Addr().String()}},
		Peer:  peer.Config{OriginHost: "c.example.net", OriginRealm: "example.net", AcctApps: []uint32{3}, Logger: quiet},
	})
	require.NoError(t, err)
	defer c.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := acr("c.example.net;1;1")
	ans, err := Send(ctx, c, req)
	require.NoError(t, err)
	assert.Equal(t, uint32(diam.Success), resultCode(t, ans))
	assert.False(t, ans.Header.CommandFlags&diam.RequestFlag != 0, "an answer")
	require.NotNil(t, seen)
	assert.Equal(t, seen.Header.EndToEndID, ans.Header.EndToEndID, "the answer carries the End-to-End id sent")
	sid, err := ans.FindAVP(avp.SessionID, 0)
	require.NoError(t, err)
	assert.Equal(t, datatype.UTF8String("c.example.net;1;1"), sid.Data)
	oh, err := ans.FindAVP(avp.OriginHost, 0)
	require.NoError(t, err)
	assert.Equal(t, datatype.DiameterIdentity("s.example.net"), oh.Data)
	require.NotNil(t, seen)
	rt, err := seen.FindAVP(avp.AccountingRecordType, 0)
	require.NoError(t, err)
	assert.Equal(t, datatype.Enumerated(2), rt.Data, "the handler saw the request's AVPs")

	// Through one peer as well.
	p := c.Peers()[0]
	ans, err = Send(ctx, SenderFunc(p.Request), acr("c.example.net;1;2"))
	require.NoError(t, err)
	assert.Equal(t, uint32(diam.Success), resultCode(t, ans))

	// A relay's Codec keeps the id it is given, up to the server.
	relayed := acr("c.example.net;1;3")
	relayed.Header.EndToEndID = 0x12345678
	ans, err = Codec{KeepEndToEnd: true}.Send(ctx, c, relayed)
	require.NoError(t, err)
	assert.Equal(t, uint32(0x12345678), seen.Header.EndToEndID)
	assert.Equal(t, uint32(0x12345678), ans.Header.EndToEndID)
}

// Send gives every request a fresh End-to-End id from aaatp's generator,
// not the random one go-diameter's NewRequest drew (review 34b, finding
// 1): random 32-bit ids repeat within RFC 6733's 4 minutes. The ids sent
// are all different and count up; the answer carries the one sent; req is
// not changed.
func TestSendGivesFreshEndToEnd(t *testing.T) {
	var sent []uint32
	s := SenderFunc(func(_ context.Context, b []byte) ([]byte, error) {
		sent = append(sent, wire.EndToEnd(b))
		return message.NewAnswer(b).ResultCode(message.Success).Bytes(), nil
	})
	const n = 10000
	seen := make(map[uint32]bool, n)
	for i := range n {
		req := acr("c.example.net;1;" + fmt.Sprint(i))
		drawn := req.Header.EndToEndID
		ans, err := Send(context.Background(), s, req)
		require.NoError(t, err)
		require.Len(t, sent, i+1)
		id := sent[i]
		require.Equal(t, drawn, req.Header.EndToEndID, "req is not changed")
		require.Equal(t, id, ans.Header.EndToEndID, "the answer carries the id sent")
		require.NotZero(t, id)
		require.False(t, seen[id], "id %#08x sent twice", id)
		seen[id] = true
		if i > 0 && id-sent[i-1] >= 1<<31 {
			t.Fatalf("id %#08x after %#08x: not from the counting generator", id, sent[i-1])
		}
	}

	// KeepEndToEnd keeps a nonzero id, and still draws one for zero.
	req := acr("c.example.net;2;1")
	req.Header.EndToEndID = 77
	_, err := Codec{KeepEndToEnd: true}.Send(context.Background(), s, req)
	require.NoError(t, err)
	assert.Equal(t, uint32(77), sent[len(sent)-1])
	req.Header.EndToEndID = 0
	_, err = Codec{KeepEndToEnd: true}.Send(context.Background(), s, req)
	require.NoError(t, err)
	assert.NotZero(t, sent[len(sent)-1])
}

// Two different requests that go-diameter gave the same End-to-End id (as
// its random ids do, about n²/2³³ times among n requests) are two requests
// for a server that detects duplicates by Origin-Host and End-to-End id
// (dedup.Memory here): the second gets its own answer, not the first's.
func TestSendCollidingIdsAreNotDuplicates(t *testing.T) {
	store := dedup.NewMemory()
	defer store.Close()
	s := SenderFunc(func(ctx context.Context, b []byte) ([]byte, error) {
		o, err := store.Begin(ctx, dedup.KeysOf(b)...)
		if err != nil {
			return nil, err
		}
		if !o.First() {
			return o.Answer(), nil // the earlier request's answer
		}
		sid, _ := message.StringOf(b, message.SessionID, 0)
		ans := message.NewAnswer(b).String(message.SessionID, 0, true, sid).ResultCode(message.Success).
			String(message.OriginHost, 0, true, "s.example.net").String(message.OriginRealm, 0, true, "example.net").Bytes()
		return ans, o.Complete(ans)
	})
	a, b := acr("c.example.net;1;1"), acr("c.example.net;2;1")
	b.Header.EndToEndID = a.Header.EndToEndID
	for _, req := range []*diam.Message{a, b} {
		ans, err := Send(context.Background(), s, req)
		require.NoError(t, err)
		want, err := req.FindAVP(avp.SessionID, 0)
		require.NoError(t, err)
		got, err := ans.FindAVP(avp.SessionID, 0)
		require.NoError(t, err)
		assert.Equal(t, want.Data, got.Data, "the answer is to this request")
	}
}

// malformed builds an ACR whose second AVP has the V flag but only 8
// bytes: go-diameter's own decoder reads past it and panics.
func malformed() []byte {
	b, _ := Codec{}.Encode(acr("x;1"))
	bad := []byte{0, 0, 0x01, 0x07, 0x80, 0, 0, 8} // Session-Id, V flag, length 8
	b = append(b, bad...)
	binary.BigEndian.PutUint32(b[0:4], uint32(len(b))|1<<24)
	return b
}

// failedAVP returns the AVP inside the Failed-AVP of answer b.
func failedAVP(t *testing.T, b []byte) wire.AVP {
	t.Helper()
	g, ok := wire.FindAVP(b, message.FailedAVP, 0)
	require.True(t, ok, "no Failed-AVP")
	var got []wire.AVP
	require.NoError(t, wire.WalkGrouped(g, func(a wire.AVP) bool {
		got = append(got, wire.AVP{Code: a.Code, Vendor: a.Vendor, Data: append([]byte{}, a.Data...)})
		return true
	}))
	require.Len(t, got, 1)
	return got[0]
}

func decodeAnswer(t *testing.T, b []byte) *diam.Message {
	t.Helper()
	require.NotNil(t, b)
	m, err := Codec{}.Decode(b)
	require.NoError(t, err)
	return m
}

// A request go-diameter would panic on, or one of a command the
// dictionary does not know, never reaches the handler: it gets the error
// answer, with the request's ids.
func TestHandlerRefusesWhatDoesNotDecode(t *testing.T) {
	called := false
	h := NewHandler(func(context.Context, *peer.Peer, *diam.Message) *diam.Message { called = true; return nil })

	bad := malformed()
	_, err := wire.Decode(bad, nil)
	require.ErrorIs(t, err, wire.ErrBadFrame)
	badAns := h(context.Background(), nil, bad)
	ans := decodeAnswer(t, badAns)
	assert.Equal(t, uint32(message.InvalidAVPLength), resultCode(t, ans), "an AVP shorter than its header")
	assert.Equal(t, wire.AVP{Code: 263, Data: []byte{}}, failedAVP(t, badAns), "its header in the Failed-AVP")
	assert.Equal(t, wire.EndToEnd(bad), ans.Header.EndToEndID)
	assert.Zero(t, ans.Header.CommandFlags&diam.RequestFlag)

	unknown := message.NewRequest(999, 3, 0).Bytes()
	wire.SetEndToEnd(unknown, 77)
	ub := h(context.Background(), nil, unknown)
	require.NotNil(t, ub)
	rc, ok := message.ResultCodeOf(ub)
	require.True(t, ok)
	assert.Equal(t, uint32(message.CommandUnsupported), rc)
	assert.Equal(t, uint32(77), wire.EndToEnd(ub))
	assert.NotZero(t, wire.Flags(ub)&wire.FlagError, "a protocol error has the E bit")

	assert.Nil(t, h(context.Background(), nil, []byte{1, 0, 0}), "not a message")

	// An Unsigned32 AVP one octet long: DIAMETER_INVALID_AVP_LENGTH.
	short := message.NewRequest(280, 0, 0).Octets(message.OriginStateID, 0, true, []byte{0, 0, 0, 1, 2}).Bytes()
	sb := h(context.Background(), nil, short)
	require.NotNil(t, sb)
	rc, ok = message.ResultCodeOf(sb)
	require.True(t, ok)
	assert.Equal(t, uint32(message.InvalidAVPLength), rc)
	assert.Equal(t, wire.AVP{Code: message.OriginStateID, Data: []byte{0, 0, 0, 1, 2}}, failedAVP(t, sb))

	// Nested deeper than wire.MaxAVPDepth: DIAMETER_INVALID_AVP_VALUE.
	deep := message.NewRequest(280, 0, 0)
	for range wire.MaxAVPDepth + 1 {
		deep.Group(message.FailedAVP, 0, true)
	}
	for range wire.MaxAVPDepth + 1 {
		deep.End()
	}
	db := h(context.Background(), nil, deep.Bytes())
	require.NotNil(t, db)
	rc, ok = message.ResultCodeOf(db)
	require.True(t, ok)
	assert.Equal(t, uint32(message.InvalidAVPValue), rc)
	assert.Equal(t, uint32(message.FailedAVP), failedAVP(t, db).Code, "the AVP nested too deep")
	assert.False(t, called)
}

// An answer the handler builds that cannot be encoded becomes
// DIAMETER_UNABLE_TO_COMPLY rather than a panic.
func TestHandlerAnswerThatDoesNotEncode(t *testing.T) {
	h := NewHandler(func(_ context.Context, _ *peer.Peer, req *diam.Message) *diam.Message {
		ans := req.Answer(diam.Success)
		ans.AVP = append(ans.AVP, &diam.AVP{Code: avp.ProxyInfo, Flags: avp.Mbit}) // no Data
		return ans
	})
	req, err := Codec{}.Encode(acr("x;2"))
	require.NoError(t, err)
	ans := decodeAnswer(t, h(context.Background(), nil, req))
	assert.Equal(t, uint32(message.UnableToComply), resultCode(t, ans))
}

// Encode writes the real length even when AVPs were appended without
// NewAVP, so the header's Message-Length is stale.
func TestEncodeComputesLength(t *testing.T) {
	m := acr("x;3")
	m.AVP = append(m.AVP, diam.NewAVP(avp.UserName, avp.Mbit, 0, datatype.UTF8String("user@example.net")))
	b, err := Codec{}.Encode(m)
	require.NoError(t, err)
	assert.Equal(t, uint32(len(b)), wire.Length(b))
	back, err := Codec{}.Decode(b)
	require.NoError(t, err)
	u, err := back.FindAVP(avp.UserName, 0)
	require.NoError(t, err)
	assert.Equal(t, datatype.UTF8String("user@example.net"), u.Data)

	_, err = Codec{}.Encode(nil)
	assert.Error(t, err)
}

// A decoded message owns its bytes: go-diameter's reader would hand out
// []byte values (Address, unknown AVPs) aliasing a buffer it reuses for
// messages up to 1024 bytes; here neither the input nor a later decode
// changes them.
func TestDecodedMessageOwnsItsBytes(t *testing.T) {
	m := acr("x;4")
	m.NewAVP(avp.HostIPAddress, avp.Mbit, 0, datatype.Address(net.ParseIP("192.0.2.1").To4()))
	m.NewAVP(uint32(65000), 0, 0, datatype.OctetString("opaque")) // not in the dictionary: Unknown
	b, err := Codec{}.Encode(m)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), 1024, "small enough for go-diameter's pooled buffer")
	got, err := Codec{}.Decode(b)
	require.NoError(t, err)

	other := acr("y;5")
	other.NewAVP(avp.HostIPAddress, avp.Mbit, 0, datatype.Address(net.ParseIP("198.51.100.9").To4()))
	other.NewAVP(uint32(65000), 0, 0, datatype.OctetString("XXXXXX"))
	ob, err := Codec{}.Encode(other)
	require.NoError(t, err)
	for range 3 {
		_, err := Codec{}.Decode(ob)
		require.NoError(t, err)
	}
	for i := range b {
		b[i] = 0xff // scribble over the input
	}
	addr, err := got.FindAVP(avp.HostIPAddress, 0)
	require.NoError(t, err)
	assert.Equal(t, net.ParseIP("192.0.2.1").To4(), net.IP(addr.Data.(datatype.Address)))
	var unk *diam.AVP
	for _, a := range got.AVP {
		if a.Code == 65000 {
			unk = a
		}
	}
	require.NotNil(t, unk)
	require.IsType(t, datatype.Unknown(nil), unk.Data, "a []byte-based value")
	assert.Equal(t, "opaque", string(unk.Data.(datatype.Unknown)))
}

// An answer that does not decode is an error of Send, never a panic.
func TestSendAnswerThatDoesNotDecode(t *testing.T) {
	s := SenderFunc(func(context.Context, []byte) ([]byte, error) { return malformed(), nil })
	_, err := Send(context.Background(), s, acr("x;6"))
	assert.ErrorIs(t, err, wire.ErrBadFrame)

	short := SenderFunc(func(context.Context, []byte) ([]byte, error) {
		return []byte{1, 0, 0, 4, 0, 0, 1, 15, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0}, nil // length 4: go-diameter would allocate ~4 GiB
	})
	_, err = Send(context.Background(), short, acr("x;7"))
	assert.ErrorIs(t, err, wire.ErrBadFrame)

	boom := errors.New("no peer")
	_, err = Send(context.Background(), SenderFunc(func(context.Context, []byte) ([]byte, error) { return nil, boom }), acr("x;8"))
	assert.ErrorIs(t, err, boom)
}

// A value go-diameter refuses (an Address of a family it does not know,
// or too short for one) is answered DIAMETER_INVALID_AVP_VALUE with that
// AVP in a Failed-AVP (RFC 6733 7.1.5), the innermost one when it is
// inside a Grouped AVP; an Address too short for its family is answered
// DIAMETER_INVALID_AVP_LENGTH, also with it.
func TestInvalidValueAnswerCarriesFailedAVP(t *testing.T) {
	good, err := Codec{}.Encode(acr("s;1"))
	require.NoError(t, err)
	hostIP := func(data []byte) []byte {
		return message.NewRequest(0, 0, 0).Octets(message.HostIPAddress, 0, true, data).Bytes()[wire.HeaderLen:]
	}
	for _, tc := range []struct {
		name string
		avp  []byte
		rc   uint32
		want wire.AVP
	}{
		{"family 0", hostIP([]byte{0, 0, 10, 0, 0, 1}), message.InvalidAVPValue, wire.AVP{Code: message.HostIPAddress, Data: []byte{0, 0, 10, 0, 0, 1}}},
		{"family 0xffff", hostIP([]byte{0xff, 0xff, 1, 2}), message.InvalidAVPValue, wire.AVP{Code: message.HostIPAddress, Data: []byte{0xff, 0xff, 1, 2}}},
		{"no family", hostIP([]byte{0, 1}), message.InvalidAVPLength, wire.AVP{Code: message.HostIPAddress, Data: []byte{0, 1}}},
		{"inside a Failed-AVP", message.NewRequest(0, 0, 0).Group(message.FailedAVP, 0, true).
			Uint32(message.OriginStateID, 0, true, 1).Octets(message.HostIPAddress, 0, true, []byte{0xff, 0xff, 1, 2}).End().Bytes()[wire.HeaderLen:],
			message.InvalidAVPValue, wire.AVP{Code: message.HostIPAddress, Data: []byte{0xff, 0xff, 1, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := append(append([]byte(nil), good...), tc.avp...)
			binary.BigEndian.PutUint32(req[0:4], uint32(len(req))|1<<24)
			reached := false
			h := NewHandler(func(_ context.Context, _ *peer.Peer, m *diam.Message) *diam.Message {
				reached = true
				return m.Answer(diam.Success)
			})
			ans := h(context.Background(), nil, req)
			require.NotNil(t, ans)
			require.False(t, reached)
			rc, _ := message.ResultCodeOf(ans)
			assert.Equal(t, tc.rc, rc)
			assert.Equal(t, tc.want, failedAVP(t, ans), "the offending AVP in the Failed-AVP")
		})
	}
}

// A go-diameter Handler that panics (here a type assertion on an AVP it
// did not expect) in a peer.Server is answered DIAMETER_UNABLE_TO_COMPLY,
// and the connection serves the next request.
func TestHandlerPanicAnswered(t *testing.T) {
	h := NewHandler(func(ctx context.Context, p *peer.Peer, req *diam.Message) *diam.Message {
		sid, _ := req.FindAVP(avp.SessionID, 0)
		if sid.Data.(datatype.UTF8String) == "c.example.net;1;panic" {
			_ = sid.Data.(datatype.Unsigned32) // panics
		}
		ans := req.Answer(diam.Success)
		id := p.LocalIdentity()
		ans.NewAVP(avp.OriginHost, avp.Mbit, 0, datatype.DiameterIdentity(id.Host))
		ans.NewAVP(avp.OriginRealm, avp.Mbit, 0, datatype.DiameterIdentity(id.Realm))
		return ans
	})
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: "s.example.net", OriginRealm: "example.net",
		AcctApps: []uint32{3}, Handler: h, Logger: quiet})
	require.NoError(t, err)
	go srv.Serve()
	defer srv.Close(context.Background())
	p, err := peer.Dial("tcp://"+srv.Addr().String(), peer.Config{OriginHost: "c.example.net", OriginRealm: "example.net", AcctApps: []uint32{3}, Logger: quiet})
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, p.WaitState(ctx, watchdog.Okay))
	ans, err := Send(ctx, SenderFunc(p.Request), acr("c.example.net;1;panic"))
	require.NoError(t, err)
	assert.Equal(t, uint32(diam.UnableToComply), resultCode(t, ans))
	ans, err = Send(ctx, SenderFunc(p.Request), acr("c.example.net;1;2"))
	require.NoError(t, err)
	assert.Equal(t, uint32(diam.Success), resultCode(t, ans))
	assert.Equal(t, uint64(1), srv.Peers()[0].Stats().HandlerPanics)
}

// A Handler's protocol-error answer (3xxx) built with req.Answer(code), as
// the Handler doc says, is sent with the E bit (RFC 6733 7.1.3) that
// go-diameter's Answer does not set (review 34b, finding 2), so that a
// client reads DIAMETER_TOO_BUSY as a refusal; other answers are sent
// without it, and an E bit the handler set is kept.
func TestHandlerProtocolErrorHasEBit(t *testing.T) {
	req, err := Codec{}.Encode(acr("c.example.net;1;1"))
	require.NoError(t, err)
	for _, tc := range []struct {
		rc    uint32 // 0: no Result-Code
		setE  bool   // the handler sets the E bit itself
		wantE bool
	}{
		{diam.TooBusy, false, true},
		{diam.UnableToDeliver, false, true},
		{diam.CommandUnsupported, false, true},
		{3999, false, true},
		{diam.Success, false, false},
		{2999, false, false},
		{4000, false, false},
		{diam.UnableToComply, false, false},
		{0, false, false},
		{diam.TooBusy, true, true},
		{diam.UnableToComply, true, true},
	} {
		h := NewHandler(func(_ context.Context, _ *peer.Peer, req *diam.Message) *diam.Message {
			ans := req.Answer(tc.rc)
			if tc.setE {
				ans.Header.CommandFlags |= diam.ErrorFlag
			}
			// A 3xxx inside a group is no top-level Result-Code.
			ans.NewAVP(avp.ProxyInfo, avp.Mbit, 0, &diam.GroupedAVP{AVP: []*diam.AVP{
				diam.NewAVP(avp.ProxyHost, avp.Mbit, 0, datatype.DiameterIdentity("p.example.net")),
				diam.NewAVP(avp.ResultCode, avp.Mbit, 0, datatype.Unsigned32(diam.TooBusy)),
			}})
			return ans
		})
		ans := h(context.Background(), nil, req)
		require.NotNil(t, ans)
		rc, _ := message.ResultCodeOf(ans)
		assert.Equal(t, tc.rc, rc)
		assert.Equal(t, tc.wantE, wire.Flags(ans)&wire.FlagError != 0, "Result-Code %d (handler's E bit %v): flags %#02x", tc.rc, tc.setE, wire.Flags(ans))
		assert.Zero(t, wire.Flags(ans)&wire.FlagRequest, "an answer")
	}
}

// Through a client.Client, a DIAMETER_TOO_BUSY from a go-diameter Handler
// is a refusal: the client sends the request on to its other server, whose
// answer the caller gets.
func TestHandlerTooBusyFailsOver(t *testing.T) {
	server := func(host string, rc uint32, asked *atomic.Int32) *peer.Server {
		h := NewHandler(func(_ context.Context, p *peer.Peer, req *diam.Message) *diam.Message {
			asked.Add(1)
			ans := req.Answer(rc)
			ans.NewAVP(avp.OriginHost, avp.Mbit, 0, datatype.DiameterIdentity(p.LocalIdentity().Host))
			ans.NewAVP(avp.OriginRealm, avp.Mbit, 0, datatype.DiameterIdentity(p.LocalIdentity().Realm))
			return ans
		})
		srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: host, OriginRealm: "example.net",
			AcctApps: []uint32{3}, Handler: h, Logger: quiet})
		require.NoError(t, err)
		go srv.Serve()
		t.Cleanup(func() { srv.Close(context.Background()) })
		return srv
	}
	var busyAsked, goodAsked atomic.Int32
	busy, good := server("busy.example.net", diam.TooBusy, &busyAsked), server("good.example.net", diam.Success, &goodAsked)
	c, err := client.New(client.Config{
		Mode:  client.PrimarySecondary,
		Peers: []client.PeerSpec{{URL: "tcp://" + busy.Addr().String()}, {URL: "tcp://" + good.Addr().String()}},
		Peer:  peer.Config{OriginHost: "c.example.net", OriginRealm: "example.net", AcctApps: []uint32{3}, Logger: quiet},
	})
	require.NoError(t, err)
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range c.Peers() {
		require.NoError(t, p.WaitState(ctx, watchdog.Okay)) // the busy server is the primary in service
	}
	ans, err := Send(ctx, c, acr("c.example.net;1;1"))
	require.NoError(t, err)
	assert.Equal(t, uint32(diam.Success), resultCode(t, ans))
	oh, err := ans.FindAVP(avp.OriginHost, 0)
	require.NoError(t, err)
	assert.Equal(t, datatype.DiameterIdentity("good.example.net"), oh.Data)
	assert.Equal(t, int32(1), busyAsked.Load(), "the busy server was asked first")
	assert.Equal(t, int32(1), goodAsked.Load())
}
