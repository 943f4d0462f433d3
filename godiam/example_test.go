package godiam_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/fiorix/go-diameter/v4/diam"
	"github.com/fiorix/go-diameter/v4/diam/avp"
	"github.com/fiorix/go-diameter/v4/diam/datatype"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/godiam"
	"github.com/aaatp/aaatp/peer"
)

// A server whose handler is written with go-diameter: it answers every
// Accounting-Request with DIAMETER_SUCCESS, its Session-Id and record.
func ExampleNewHandler() {
	handler := godiam.NewHandler(func(ctx context.Context, p *peer.Peer, req *diam.Message) *diam.Message {
		ans := req.Answer(diam.Success)
		for _, code := range []uint32{avp.SessionID, avp.AccountingRecordType, avp.AccountingRecordNumber} {
			if a, err := req.FindAVP(code, 0); err == nil {
				ans.AddAVP(a)
			}
		}
		id := p.LocalIdentity()
		ans.NewAVP(avp.OriginHost, avp.Mbit, 0, datatype.DiameterIdentity(id.Host))
		ans.NewAVP(avp.OriginRealm, avp.Mbit, 0, datatype.DiameterIdentity(id.Realm))
		return ans
	})
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost: "s1.example.net", OriginRealm: "example.net",
		AcctApps: []uint32{3},
		Handler:  handler,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())
	fmt.Println("serving", srv.Addr().Network())
	// Output: serving tcp
}

// A client that builds its requests with go-diameter and its dictionary
// and reads the answers the same way.
func ExampleSend() {
	srv := startServer() // as in the NewHandler example
	defer srv.Close(context.Background())

	c, err := client.New(client.Config{
		Peers: []client.PeerSpec{{URL: "tcp://" + srv.Addr().String()}},
		Peer: peer.Config{OriginHost: "c1.example.net", OriginRealm: "example.net",
			AcctApps: []uint32{3}, Logger: slog.New(slog.DiscardHandler)},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())

	req := diam.NewRequest(diam.Accounting, 3, nil)
	req.NewAVP(avp.SessionID, avp.Mbit, 0, datatype.UTF8String("c1.example.net;1;1"))
	req.NewAVP(avp.OriginHost, avp.Mbit, 0, datatype.DiameterIdentity("c1.example.net"))
	req.NewAVP(avp.OriginRealm, avp.Mbit, 0, datatype.DiameterIdentity("example.net"))
	req.NewAVP(avp.DestinationRealm, avp.Mbit, 0, datatype.DiameterIdentity("example.net"))
	req.NewAVP(avp.AccountingRecordType, avp.Mbit, 0, datatype.Enumerated(2)) // START_RECORD
	req.NewAVP(avp.AccountingRecordNumber, avp.Mbit, 0, datatype.Unsigned32(0))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ans, err := godiam.Send(ctx, c, req)
	if err != nil {
		log.Fatal(err)
	}
	rc, _ := ans.FindAVP(avp.ResultCode, 0)
	oh, _ := ans.FindAVP(avp.OriginHost, 0)
	fmt.Println(uint32(rc.Data.(datatype.Unsigned32)), string(oh.Data.(datatype.DiameterIdentity)))
	// Output: 2001 s1.example.net
}

func startServer() *peer.Server {
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost: "s1.example.net", OriginRealm: "example.net", AcctApps: []uint32{3},
		Handler: godiam.NewHandler(func(_ context.Context, p *peer.Peer, req *diam.Message) *diam.Message {
			ans := req.Answer(diam.Success)
			ans.NewAVP(avp.OriginHost, avp.Mbit, 0, datatype.DiameterIdentity(p.LocalIdentity().Host))
			ans.NewAVP(avp.OriginRealm, avp.Mbit, 0, datatype.DiameterIdentity(p.LocalIdentity().Realm))
			return ans
		}),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve()
	return srv
}
