package status

import (
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/radpeer"
)

// A server with Diameter and RADIUS listeners: a Diameter peer whose
// Origin-Host is also the name of one of its NAS rows (a [[client]] name,
// or an address, which is a valid DiameterIdentity too) is one peer to
// the metrics. Gathering does not fail on two series of one name and
// labels (promhttp would then serve the NAS's and silently drop the
// Diameter peer's), the counts of both are summed under the name, and
// aaatp_peer_info has one series for it, so that the join on peer holds.
func TestDiameterPeerNamedAsNAS(t *testing.T) {
	m := NewMetrics()
	for _, name := range []string{"bng1.example.net", "192.0.2.7"} {
		sc := m.counts.served(name) // what WrapHandler counts for a Diameter peer of that Origin-Host
		for range 7 {
			sc.requests.Add(1)
			sc.answered("2xxx", 2*time.Millisecond)
		}
	}
	seen := time.Now()
	snap := Snapshot{Role: RoleServer}
	for _, name := range []string{"bng1.example.net", "192.0.2.7"} {
		snap.Peers = append(snap.Peers, PeerStatus{Peer: name, OriginHost: name, State: "OKAY", Pending: 2, Unanswered: 1})
	}
	snap.Peers = append(snap.Peers, NASRows([]radpeer.NASStats{
		{Addr: "198.51.100.1", Name: "bng1.example.net", Received: 3, Answered: 3, LastSeen: seen, Answers: radpeer.NASAnswers{AccountingResponse: 3}},
		{Addr: "192.0.2.7", Received: 4, Answered: 4, LastSeen: seen, Answers: radpeer.NASAnswers{Accept: 1, Reject: 2, Other: 1}},
	})...)
	m.Sync(snap)
	if _, err := m.reg.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
	}
	fams, text := families(t, SourceFunc(func() Snapshot { return snap }), m)
	for _, name := range []string{"bng1.example.net", "192.0.2.7"} {
		for _, fam := range []string{MetricRequests, MetricPending, MetricUnanswered, MetricLatency, MetricPeerInfo} {
			n := 0
			for _, s := range fams[fam].GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "peer" && l.GetValue() == name {
						n++
					}
				}
			}
			if n != 1 {
				t.Errorf("%s: %d series of peer %q, want 1", fam, n, name)
			}
		}
		expect(t, fams, 7, MetricAnswers, "peer", name, "class", "2xxx")
		expect(t, fams, 7, MetricLatency, "peer", name) // the sample count: a NAS has no latency
		expect(t, fams, 2, MetricPending, "peer", name)
		expect(t, fams, 1, MetricUnanswered, "peer", name)
		expect(t, fams, 1, MetricPeerInfo, "peer", name, "protocol", ProtocolDiameter+","+ProtocolRADIUS, "origin_host", name, "url", "")
		checkJoin(t, fams, name, MetricLatency)
	}
	expect(t, fams, 7+3, MetricRequests, "peer", "bng1.example.net")
	expect(t, fams, 3, MetricAnswers, "peer", "bng1.example.net", "class", "accounting-response")
	expect(t, fams, 0, MetricAnswers, "peer", "bng1.example.net", "class", client.ClassOther)
	expect(t, fams, 7+4, MetricRequests, "peer", "192.0.2.7")
	expect(t, fams, 2, MetricAnswers, "peer", "192.0.2.7", "class", "reject")
	expect(t, fams, 1, MetricAnswers, "peer", "192.0.2.7", "class", client.ClassOther)
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}
