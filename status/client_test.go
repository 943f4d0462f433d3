package status

import (
	"context"
	"net"
	"reflect"
	"testing"
	"time"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
)

// A RADIUS stream server's row carries its peer's counters, the recycled
// connections and the stray replies included, and adds up the Identifiers in use on each
// connection to the calls waiting for one.
func TestStreamRow(t *testing.T) {
	var got PeerStatus
	got.addStream(radpeer.Stats{Sent: 9, Answered: 7, MovedOut: 1, RecycledConns: 3, Waiting: 2,
		Late: 5, Unmatched: 4, BadAuth: 2, NoMA: 1, TimedOut: 8,
		Conns: []radpeer.ConnStats{{Pending: 4, Tw: 6 * time.Second}, {Pending: 1, Tw: 6 * time.Second}}})
	want := PeerStatus{Pending: 7, Sent: 9, Answered: 7, MovedOut: 1, RecycledConns: 3, Tw: 6 * time.Second,
		Stray: StrayReplies{Late: 5, Unmatched: 4, BadAuth: 2, NoMA: 1}}
	if got != want {
		t.Errorf("row\n got %+v\nwant %+v", got, want)
	}
}

// The snapshot of a client of radius:// servers: a RADIUS row per server
// in configured order (no watchdog state, each request counted once as
// sent and its copies sent again as retransmissions), the failover from the server that never replies, and the totals
// of the Client's servers.
func TestClientSnapshotRADIUS(t *testing.T) {
	secret := []byte("s3cret")
	silent, err := net.ListenPacket("udp", "127.0.0.1:0") // reads nothing, answers nothing
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := radpeer.NewUDPServer(pc, radpeer.ServerConfig{Secret: secret, Logger: quiet,
		Handler: func(context.Context, *lradius.Packet, []byte) (lradius.Code, lradius.Attributes) {
			return lradius.CodeAccessAccept, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())
	c, err := client.New(client.Config{Mode: client.PrimarySecondary,
		Peers:  []client.PeerSpec{{URL: "radius://" + silent.LocalAddr().String(), Name: "a"}, {URL: "radius://" + srv.Addr().String(), Name: "b"}},
		RADIUS: radpeer.Config{Secret: secret, Logger: quiet},
		UDP:    radpeer.UDPConfig{Timeout: 50 * time.Millisecond, Retries: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	r := &radius.Request{Code: lradius.CodeAccessRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute("alice"))
	r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("pw"))
	if _, err := c.Exchange(context.Background(), r); err != nil {
		t.Fatal(err)
	}

	// The failover's record is written once the hand-over has placed the
	// request, which the answer can overtake: wait for it (bounded).
	s := ClientSnapshot(c)
	for deadline := time.Now().Add(5 * time.Second); s.FailoversTotal == 0 && time.Now().Before(deadline); s = ClientSnapshot(c) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(s.Peers) != 2 {
		t.Fatalf("rows %+v", s.Peers)
	}
	a, b := s.Peers[0], s.Peers[1]
	if a.Server != "a" || a.Protocol != ProtocolRADIUS || a.State != "" || a.Sent != 1 || a.Retransmissions != 1 || a.Answered != 0 {
		t.Errorf("the silent server's row: %+v", a)
	}
	if b.Server != "b" || b.Protocol != ProtocolRADIUS || b.Sent != 1 || b.Retransmissions != 0 || b.Answered != 1 || b.Pending != 0 {
		t.Errorf("the answering server's row: %+v", b)
	}
	if s.Totals.Answered != 1 || s.Totals.Failed != 0 || s.Totals.Moved != 1 || s.Totals.Retransmitted != 0 {
		t.Errorf("totals %+v", s.Totals)
	}
	if s.FailoversTotal != 1 || len(s.Failovers) != 1 || s.Failovers[0].From != "a" || s.Failovers[0].To != "b" {
		t.Errorf("failovers %d %+v", s.FailoversTotal, s.Failovers)
	}
}

// The peers that ended keep the order given, one row a name.
func TestServerPeersEnded(t *testing.T) {
	rows := ServerPeers(nil, []peer.Stats{{Peer: "b"}, {Peer: "a"}, {Peer: "b", State: "OKAY"}})
	if len(rows) != 2 || rows[0].Peer != "b" || rows[0].State != "" || rows[1].Peer != "a" {
		t.Errorf("ended rows: %+v", rows)
	}
}

// A server answers every request dedup.Wrap applied, answered from its
// store or refused.
func TestDedupTotals(t *testing.T) {
	var dd dedup.Counters
	dd.Received.Store(21)
	dd.Applied.Store(10)
	dd.Duplicates.Store(3)
	dd.StoreErrs.Store(2)
	dd.Superseded.Store(1)
	dd.NotKept.Store(1)
	dd.Transient.Store(1)     // refused for now, not kept: answered
	dd.PassedThrough.Store(1) // answered without the store
	dd.Cancelled.Store(1)     // not answered
	dd.Dropped.Store(1)       // not answered: a RADIUS record the store failed
	if got, want := DedupTotals(&dd), (Totals{Received: 21, Answered: 19, Duplicates: 3}); got != want {
		t.Errorf("totals %+v, want %+v", got, want)
	}
}

// A RADIUS server's clients are rows of their own: protocol radius,
// policy "nas", the answers sent to each, when it was last heard from,
// and their counters: requests received, answers by class; the metrics
// export them under the NAS's address.
func TestNASRows(t *testing.T) {
	seen := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	rows := NASRows([]radpeer.NASStats{{Addr: "192.0.2.1", Received: 3, Answered: 2, LastSeen: seen,
		Answers: radpeer.NASAnswers{Accept: 1, Reject: 1}}})
	want := []PeerStatus{{Peer: "192.0.2.1", Protocol: ProtocolRADIUS, Policy: "nas", Since: seen, Answered: 2,
		Counters: &PeerCounters{Requests: 3, Answers: map[string]uint64{"accept": 1, "reject": 1, "challenge": 0, "accounting-response": 0, "other": 0}}}}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows %+v, want %+v", rows, want)
	}
	fams, _ := families(t, SourceFunc(func() Snapshot { return Snapshot{Role: RoleServer, Peers: rows} }), NewMetrics())
	expect(t, fams, 3, MetricRequests, "peer", "192.0.2.1")
	expect(t, fams, 1, MetricAnswers, "peer", "192.0.2.1", "class", "reject")
	expect(t, fams, 0, MetricAnswers, "peer", "192.0.2.1", "class", "challenge")
	if _, ok := value(fams, MetricLatency, "peer", "192.0.2.1"); ok {
		t.Error("a NAS has a latency histogram")
	}
	checkJoin(t, fams, "192.0.2.1")

	// A NAS that uses two listeners (auth and accounting ports, UDP and
	// TCP) is one peer: its rows' counts add up, in one series each.
	rows = append(rows, NASRows([]radpeer.NASStats{{Addr: "192.0.2.1", Received: 4, Answered: 4,
		Answers: radpeer.NASAnswers{AccountingResponse: 4}}})...)
	fams, _ = families(t, SourceFunc(func() Snapshot { return Snapshot{Role: RoleServer, Peers: rows} }), NewMetrics())
	expect(t, fams, 7, MetricRequests, "peer", "192.0.2.1")
	expect(t, fams, 1, MetricAnswers, "peer", "192.0.2.1", "class", "reject")
	expect(t, fams, 4, MetricAnswers, "peer", "192.0.2.1", "class", "accounting-response")
}

// A NAS named by the server's configured clients is labelled by its
// name, and the addresses of one client are one row.
func TestNASRowsByClientName(t *testing.T) {
	early, late := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)
	rows := NASRows([]radpeer.NASStats{
		{Addr: "192.0.2.1", Name: "pop-a", Received: 3, Answered: 3, LastSeen: late, Answers: radpeer.NASAnswers{Accept: 3}},
		{Addr: "192.0.2.2", Name: "pop-a", Received: 2, Answered: 1, LastSeen: early, Answers: radpeer.NASAnswers{Reject: 1}},
		{Addr: "198.51.100.9", Name: "nas9", Received: 1, Answered: 1, LastSeen: early, Answers: radpeer.NASAnswers{AccountingResponse: 1}},
		{Addr: "other", Received: 5},
	})
	if len(rows) != 3 {
		t.Fatalf("rows %+v: want pop-a, nas9 and other", rows)
	}
	if r := rows[0]; r.Peer != "pop-a" || r.Counters.Requests != 5 || r.Answered != 4 || !r.Since.Equal(late) ||
		r.Counters.Answers["accept"] != 3 || r.Counters.Answers["reject"] != 1 {
		t.Errorf("pop-a's row %+v (counters %+v): want its two addresses summed, last seen the latest", r, r.Counters)
	}
	if rows[1].Peer != "nas9" || rows[2].Peer != "other" {
		t.Errorf("rows %q, %q: want nas9, other", rows[1].Peer, rows[2].Peer)
	}
	fams, _ := families(t, SourceFunc(func() Snapshot { return Snapshot{Role: RoleServer, Peers: rows} }), NewMetrics())
	expect(t, fams, 5, MetricRequests, "peer", "pop-a")
	expect(t, fams, 1, MetricAnswers, "peer", "nas9", "class", "accounting-response")
}
