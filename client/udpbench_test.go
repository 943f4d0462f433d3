package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
)

// BenchmarkUDPExchange: Access-Requests over loopback UDP to a
// radpeer.UDPServer, through client.Client (radius://), at 1 and 32
// callers. Against radudp.Client before it went:
// docs/figures/udp-client-vs-radudp-2026-12-03.txt.
func BenchmarkUDPExchange(b *testing.B) {
	secret := []byte("bench-secret")
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	quietLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := radpeer.NewUDPServer(pc, radpeer.ServerConfig{Secret: secret, Logger: quietLog, Handler: radpeer.AcceptAll})
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())
	url := "radius://" + srv.Addr().String()
	req := func(i int) *radius.Request {
		r := &radius.Request{Code: lradius.CodeAccessRequest}
		r.Attributes.Add(radius.AttrUserName, lradius.Attribute(fmt.Sprint("user", i)))
		r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("pw"))
		return r
	}
	type exchanger func(ctx context.Context, r *radius.Request) error
	run := func(b *testing.B, callers int, ex exchanger) {
		b.SetParallelism(callers)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if err := ex(context.Background(), req(i)); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	}
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("client/callers=%d", callers), func(b *testing.B) {
			c, err := client.New(client.Config{Peers: []client.PeerSpec{{URL: url}},
				RADIUS: radpeer.Config{Secret: secret, Logger: quietLog}})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close(context.Background())
			run(b, callers, func(ctx context.Context, r *radius.Request) error {
				_, err := c.Exchange(ctx, r)
				return err
			})
		})
	}
}
