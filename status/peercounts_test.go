package status

import (
	"context"
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
)

// Before any traffic, and before any server is even connected, every
// configured server has its counters at zero: requests, answers of every
// class, errors of every reason, the latency histogram, and the
// failovers and moved requests from it to each other server and to
// "none"; the requests that reached no server have their errors under
// peer "none".
func TestCountersAtZeroBeforeTraffic(t *testing.T) {
	c, err := client.New(client.Config{
		Peers: []client.PeerSpec{{URL: "tcp://127.0.0.1:1", Name: "a"}, {URL: "tcp://127.0.0.1:2", Name: "b"}},
		Peer: peer.Config{OriginHost: "cli.example.net", OriginRealm: "example.net", Logger: quiet,
			Watchdog: watchdog.Config{Twinit: 30 * time.Second}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	src := SourceFunc(func() Snapshot { s := ClientSnapshot(c); s.Role = RoleClient; return s })
	fams, _ := families(t, src, NewMetrics())
	for _, p := range []string{"a", "b"} {
		expect(t, fams, 0, MetricRequests, "peer", p)
		for _, class := range client.DiameterClasses {
			expect(t, fams, 0, MetricAnswers, "peer", p, "class", class)
		}
		for _, reason := range client.ErrorReasons {
			expect(t, fams, 0, MetricErrors, "peer", p, "reason", reason)
		}
		expect(t, fams, 0, MetricLatency, "peer", p)
		expect(t, fams, 1, MetricPeerInfo, "peer", p, "protocol", "diameter", "origin_host", "")
		for _, to := range []string{"a", "b", "none"} {
			if to == p {
				continue
			}
			expect(t, fams, 0, MetricFailovers, "from", p, "to", to)
			expect(t, fams, 0, MetricMoved, "from", p, "to", to)
		}
		if _, ok := value(fams, MetricFailovers, "from", p, "to", p); ok {
			t.Errorf("a failover series from %s to itself", p)
		}
	}
	for _, reason := range client.ErrorReasons {
		expect(t, fams, 0, MetricErrors, "peer", "none", "reason", reason)
	}
	checkJoin(t, fams, "a", MetricLatency, MetricErrors, MetricFailovers, MetricMoved)
}

// Answers are counted by Result-Code class on both sides: a server
// answering 2001, DIAMETER_TOO_BUSY (3004) and DIAMETER_AUTHORIZATION_REJECTED
// (5003) counts one of each for its client, by its Origin-Host, and the
// client one of each for the server, by its configured name. A server's
// peer gone from its snapshot loses them.
func TestAnswerClassesBothSides(t *testing.T) {
	codes := map[string]uint32{"ok": 2001, "busy": 3004, "no": 5003}
	ms := NewMetrics()
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: "srv.example.net", OriginRealm: "example.net", Logger: quiet,
		Handler: ms.WrapHandler(func(_ context.Context, _ *peer.Peer, req []byte) []byte {
			user, _ := message.StringOf(req, message.UserName, 0)
			return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, codes[user]).
				String(message.OriginHost, 0, true, "srv.example.net").
				String(message.OriginRealm, 0, true, "example.net").Bytes()
		})})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())
	c, err := client.New(client.Config{
		Peers: []client.PeerSpec{{URL: "tcp://" + srv.Addr().String(), Name: "hss"}},
		Peer: peer.Config{OriginHost: "cli.example.net", OriginRealm: "example.net", Logger: quiet,
			Watchdog: watchdog.Config{Twinit: 30 * time.Second}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i, user := range []string{"ok", "busy", "no"} {
		req := message.NewRequest(message.CmdAccounting, message.AppAccounting, 0x40).
			String(message.SessionID, 0, true, "cli.example.net;1;"+user).
			String(message.OriginHost, 0, true, "cli.example.net").
			String(message.OriginRealm, 0, true, "example.net").
			String(message.DestinationRealm, 0, true, "example.net").
			String(message.UserName, 0, true, user).
			Uint32(message.AccountingRecordType, 0, true, 2).
			Uint32(message.AccountingRecordNumber, 0, true, uint32(i)).Bytes()
		if _, err := c.Send(ctx, req); err != nil {
			t.Fatalf("%s: %v", user, err)
		}
	}
	fams, _ := families(t, SourceFunc(func() Snapshot { return ClientSnapshot(c) }), NewMetrics())
	server := SourceFunc(func() Snapshot { return Snapshot{Role: RoleServer, Peers: ServerPeers(srv.Peers(), nil)} })
	sfams, _ := families(t, server, ms)
	for class, want := range map[string]float64{"2xxx": 1, "3xxx": 1, "4xxx": 0, "5xxx": 1, "other": 0} {
		expect(t, fams, want, MetricAnswers, "peer", "hss", "class", class)
		expect(t, sfams, want, MetricAnswers, "peer", "cli.example.net", "class", class)
	}
	expect(t, fams, 3, MetricRequests, "peer", "hss")
	expect(t, sfams, 3, MetricRequests, "peer", "cli.example.net")
	expect(t, fams, 3, MetricLatency, "peer", "hss")
	expect(t, sfams, 3, MetricLatency, "peer", "cli.example.net")

	// A server's peer gone from its snapshot loses its series.
	sfams, _ = families(t, SourceFunc(func() Snapshot { return Snapshot{Role: RoleServer} }), ms)
	for _, fam := range []string{MetricRequests, MetricAnswers, MetricLatency} {
		if _, ok := value(sfams, fam, "peer", "cli.example.net"); ok {
			t.Errorf("%s keeps the series of a peer gone", fam)
		}
	}
}
