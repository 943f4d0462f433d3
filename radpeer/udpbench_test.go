package radpeer

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
)

// BenchmarkUDPServerExchange measures one Access-Request answered over
// loopback, a request at a time, by a UDPServer on a socket bound to
// 127.0.0.1 and by one on the wildcard address (which reads each
// datagram's destination address, to answer from it).
func BenchmarkUDPServerExchange(b *testing.B) {
	for _, bind := range []struct{ name, network, addr string }{
		{"bound", "udp", "127.0.0.1:0"},
		{"wildcard4", "udp4", "0.0.0.0:0"},
		{"wildcard", "udp", ":0"},
	} {
		b.Run(bind.name, func(b *testing.B) {
			pc, err := net.ListenPacket(bind.network, bind.addr)
			if err != nil {
				b.Fatal(err)
			}
			srv, err := NewUDPServer(pc, ServerConfig{Secret: testSecret, DupEntries: 1})
			if err != nil {
				b.Fatal(err)
			}
			go srv.Serve()
			port := pc.LocalAddr().(*net.UDPAddr).Port
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, radius.MaxLength)
			reqs := make([][]byte, 256)
			for i := range reqs {
				reqs[i], _, _ = radius.EncodeRequest(accessReq("alice"), byte(i), testSecret)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				// 256 requests in turn; the duplicate cache keeps one, so
				// each is handled afresh rather than resent from it.
				req := reqs[i%256]
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Read(buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Close(ctx)
		})
	}
}
