package status

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/watchdog"
)

// aaatp_server_state is the server policy's state, 1 for the state it
// is in: a Diameter client's server in balance mode, whose row's Policy
// says the balancer's view before it ("in-service (256 buckets); server
// in-service"), had four series all 0; a NAS row (a RADIUS client of a
// server, Policy "nas") had four all 0 too, where it has no server
// policy and gets none.
func TestServerStateIsTheServerPolicys(t *testing.T) {
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: "srv.example.net", OriginRealm: "example.net",
		Handler: answer, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())
	c, err := client.New(client.Config{
		Mode:   client.Balance,
		Peers:  []client.PeerSpec{{URL: "tcp://" + srv.Addr().String(), Name: "s1"}},
		Policy: &policy.Config{RequestTimeout: time.Second, Retries: 1},
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
	if _, err := c.Send(ctx, acr(1)); err != nil { // a reply: the policy says in-service
		t.Fatal(err)
	}
	snap := ClientSnapshot(c)
	for deadline := time.Now().Add(5 * time.Second); snap.Peers[0].ServerPolicy != "in-service" && time.Now().Before(deadline); snap = ClientSnapshot(c) {
		time.Sleep(10 * time.Millisecond)
	}
	if row := snap.Peers[0]; row.ServerPolicy != "in-service" || !strings.HasSuffix(row.Policy, "; server in-service") {
		t.Fatalf("row: Policy %q, ServerPolicy %q", row.Policy, row.ServerPolicy)
	}
	snap.Peers = append(snap.Peers, NASRows([]radpeer.NASStats{{Addr: "198.51.100.1", Name: "bng1", Received: 1, Answered: 1, LastSeen: time.Now()}})...)
	m := NewMetrics()
	m.Sync(snap)
	fams, text := families(t, SourceFunc(func() Snapshot { return snap }), m)
	count := map[string]int{}
	for _, s := range fams[MetricServerState].GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "peer" {
				count[l.GetValue()]++
			}
		}
	}
	name := snap.Peers[0].Name()
	if count["bng1"] != 0 || count[name] != len(serverStates) {
		t.Errorf("server_state series by peer %v: want none for the NAS bng1, %d for %s\n%s", count, len(serverStates), name, text)
	}
	expect(t, fams, 1, MetricServerState, "peer", name, "state", "in-service")
}
