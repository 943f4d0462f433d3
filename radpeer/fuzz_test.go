package radpeer

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// FuzzUDPServerPacket feeds the UDP server any datagram, signed with the
// secret or not: it never panics, answers only a request that verified,
// and never answers with more than one datagram per datagram.
func FuzzUDPServerPacket(f *testing.F) {
	for _, r := range []*radius.Request{accessReq("alice"), acctReq("s1"), {Code: lradius.CodeStatusServer}} {
		b, _, err := radius.EncodeRequest(r, 7, testSecret)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(b, 0, 0, 0)) // padding
		f.Add(b[:len(b)-1])
	}
	f.Add([]byte{1, 1, 0, 20})
	f.Fuzz(func(t *testing.T, b []byte) {
		rc := newRecordConn(false)
		srv, err := NewUDPServer(rc, ServerConfig{Secret: testSecret, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1812}
		srv.packet(append([]byte(nil), b...), from, udpLocal{})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if n := rc.written(); n > 1 {
			t.Fatalf("%d answers to one datagram", n)
		}
		if rc.written() == 1 && radius.VerifyRequest(unpadded(b), testSecret, false) != nil {
			t.Fatalf("answered a datagram that does not verify: %x", b)
		}
	})
}

// unpadded is b cut to its Length field, as the server reads it.
func unpadded(b []byte) []byte {
	if len(b) < 4 {
		return b
	}
	if n := int(b[2])<<8 | int(b[3]); n >= 20 && n <= len(b) {
		return b[:n]
	}
	return b
}
