package status_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/status"
)

// A server node with --status: the Metrics follow the server's Bus and
// count what its handler answers; the Source lists its live peers.
func Example_server() {
	ctx, stop := context.WithTimeout(context.Background(), time.Second)
	defer stop()

	m := status.NewMetrics()
	bus := peer.NewBus()
	defer m.Watch(bus)() // watchdog states, transitions, failovers

	answer := func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, message.Success).Bytes()
	}
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost: "s1.example.net", OriginRealm: "example.net",
		Handler: m.WrapHandler(answer), // messages by command, latency
		Events:  bus,
	})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())

	started := time.Now()
	src := status.SourceFunc(func() status.Snapshot {
		return status.Snapshot{
			Role:     status.RoleServer,
			Identity: status.Identity{OriginHost: "s1.example.net", OriginRealm: "example.net", Started: started},
			Peers:    status.PeerRows(srv.Peers()),
		}
	})
	web, err := status.ListenAndServe(ctx, "127.0.0.1:0", status.Handler(src, status.WithMetrics(m)))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status page on loopback:", web.URL()[:len("http://127.0.0.1:")] == "http://127.0.0.1:")
	stop()
	web.Wait()
	// Output: status page on loopback: true
}
