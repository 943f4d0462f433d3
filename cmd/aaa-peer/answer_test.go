package main

import (
	"bytes"
	"testing"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// answerReference is the server's answer as message.Builder writes it,
// one wire.FindAVP per AVP read: the oracle of successAnswer.
func answerReference(s *server, req []byte) []byte {
	start := func() *message.Builder {
		b := message.NewAnswer(req)
		if sid, ok := wire.FindAVP(req, message.SessionID, 0); ok {
			b.Octets(message.SessionID, 0, true, sid)
		}
		return b.Uint32(message.ResultCode, 0, true, message.Success).
			String(message.OriginHost, 0, true, s.o.originHost).
			String(message.OriginRealm, 0, true, s.o.originRealm)
	}
	app, cmd := wire.AppID(req), wire.CommandCode(req)
	switch {
	case app == message.AppAccounting && cmd == message.CmdAccounting:
		b := start()
		if v, ok := message.Uint32Of(req, message.AccountingRecordType, 0); ok {
			b.Uint32(message.AccountingRecordType, 0, true, v)
		}
		if v, ok := message.Uint32Of(req, message.AccountingRecordNumber, 0); ok {
			b.Uint32(message.AccountingRecordNumber, 0, true, v)
		}
		return b.Bytes()
	case app == message.AppTest && cmd == message.CmdTest:
		b := start()
		if v, ok := message.Uint32Of(req, message.AVPTestValue, message.VendorTest); ok {
			b.Uint32(message.AVPTestValue, message.VendorTest, true, v)
		}
		return b.Bytes()
	}
	return nil
}

// FuzzSuccessAnswer: the server's answers to accounting and test requests
// are byte for byte those of message.Builder (answerReference), whatever
// the request holds: Session-Ids of any length, repeated, vendor-specific,
// ill-sized or truncated AVPs, flags and ids.
func FuzzSuccessAnswer(f *testing.F) {
	acr := func() *message.Builder {
		return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable)
	}
	f.Add(acr().String(message.SessionID, 0, true, "client.example.net;1;42").String(message.OriginHost, 0, true, "c").
		Uint32(message.AccountingRecordType, 0, true, 2).Uint32(message.AccountingRecordNumber, 0, true, 42).Bytes(), "server.example.net", "example.net")
	f.Add(acr().Uint32(message.AccountingRecordNumber, 0, true, 9).String(message.SessionID, 0, true, "ab").
		String(message.SessionID, 0, true, "second").Uint32(message.AccountingRecordNumber, 0, true, 10).
		Octets(message.AccountingRecordType, 0, true, []byte{1, 2, 3, 4, 5}).Uint32(message.AccountingRecordType, 0, true, 3).Bytes(), "s", "r1")
	f.Add(acr().String(message.SessionID, 7, true, "vendor").Uint32(message.AccountingRecordType, 5, true, 1).
		String(message.SessionID, 0, true, "").Bytes(), "host", "")
	f.Add(acr().Bytes(), "h", "r")
	f.Add(message.NewRequest(message.CmdTest, message.AppTest, 0).String(message.SessionID, 0, true, "t;1").
		Uint32(message.AVPTestValue, message.VendorTest, true, 77).Uint32(message.AVPTestValue, 0, true, 78).Bytes(), "h.example", "realm")
	f.Add(message.NewRequest(message.CmdTest, message.AppTest, 0).Octets(message.AVPTestValue, message.VendorTest, true, []byte{1}).
		Uint32(message.AVPTestValue, message.VendorTest, true, 5).Bytes(), "h", "r")
	long := acr().String(message.SessionID, 0, true, string(bytes.Repeat([]byte("x"), 3001))).Bytes()
	f.Add(long, "h", "r")
	f.Add(long[:len(long)-3], "h", "r")
	f.Fuzz(func(t *testing.T, req []byte, host, realm string) {
		if h, err := wire.ParseHeader(req); err != nil || wire.Validate(h, wire.DefaultMaxMessageLen) != nil || int(h.Length) != len(req) {
			return // the frame reader refuses it before
		}
		s := &server{o: serverOptions{originHost: host, originRealm: realm}}
		want := answerReference(s, req)
		if want == nil {
			return // not a command the server answers with success
		}
		if got := s.answer(req); !bytes.Equal(got, want) {
			t.Fatalf("answer\n%x\nreference\n%x", got, want)
		}
	})
}

// BenchmarkAnswer: the server's answer to aaa-peer client's ACR, in one
// walk (successAnswer) and with message.Builder (answerReference), side by
// side.
func BenchmarkAnswer(b *testing.B) {
	s := &server{o: serverOptions{originHost: "server.example.net", originRealm: "example.net"}}
	req := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "client.example.net;1764590000123456789;42").
		String(message.OriginHost, 0, true, "client.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 1).
		Uint32(message.AccountingRecordNumber, 0, true, 42).
		String(message.UserName, 0, true, "user42@example.net").Bytes()
	b.Run("walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = s.answer(req)
		}
	})
	b.Run("builder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = answerReference(s, req)
		}
	})
}
