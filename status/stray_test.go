package status

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A client's RADIUS servers' retransmissions and stray replies reach the
// page, the JSON and the metrics: over UDP the retransmissions and the
// late, duplicate, bad and no_ma replies, over TCP or TLS the late,
// unmatched, bad_auth and no_ma ones, each series from zero on. A
// Diameter peer and a server's NAS client have none of them.
func TestRADIUSStrayReplies(t *testing.T) {
	f := newFake()
	f.snap.Peers = append(f.snap.Peers,
		PeerStatus{Peer: "radius://127.0.0.1:1812", Server: "udp1", Protocol: ProtocolRADIUS, Sent: 10, Retransmissions: 4, Answered: 6,
			Stray: StrayReplies{Late: 2, Duplicate: 1, Bad: 3}},
		PeerStatus{Peer: "radsec://127.0.0.1:2083", Server: "tls1", Protocol: ProtocolRadSec, State: "OKAY", Sent: 9, Answered: 7,
			Stray: StrayReplies{Late: 5, BadAuth: 1, NoMA: 2}, Tw: 6 * time.Second},
		PeerStatus{Peer: "10.0.0.9", Protocol: ProtocolRADIUS, Policy: "nas", Answered: 3})
	page := body(t, get(t, Handler(f), "/"))
	for _, want := range []string{
		`<th class="n">sent</th><th class="n">retransmitted</th><th class="n">answered</th>`,
		`<td class="n">10</td><td class="n">4</td><td class="n">6</td>`,
		`<td class="stray">late 2, duplicate 1, bad 3</td>`,
		`<td class="stray">late 5, bad_auth 1, no_ma 2</td>`,
		`<td class="n">100</td><td class="n"></td><td class="n">97</td>`, // s1, Diameter
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	var js struct {
		Peers []map[string]any `json:"peers"`
	}
	if err := json.Unmarshal([]byte(body(t, get(t, Handler(f), "/status.json"))), &js); err != nil {
		t.Fatal(err)
	}
	udp, tls := js.Peers[2], js.Peers[3]
	if udp["sent"] != 10.0 || udp["retransmissions"] != 4.0 {
		t.Errorf("UDP row sent %v, retransmissions %v", udp["sent"], udp["retransmissions"])
	}
	if got, _ := json.Marshal(udp["stray_replies"]); string(got) != `{"bad":3,"duplicate":1,"late":2}` {
		t.Errorf("UDP row stray_replies %s", got)
	}
	if got, _ := json.Marshal(tls["stray_replies"]); string(got) != `{"bad_auth":1,"late":5,"no_ma":2}` {
		t.Errorf("TLS row stray_replies %s", got)
	}
	for _, k := range []string{"retransmissions", "stray_replies"} {
		if v, ok := js.Peers[0][k]; ok {
			t.Errorf("Diameter peer has %s %v", k, v)
		}
	}

	fams, _ := families(t, f, NewMetrics())
	expect(t, fams, 4, MetricRetransmissions, "peer", "udp1")
	for reason, n := range map[string]float64{StrayLate: 2, StrayDuplicate: 1, StrayBad: 3, StrayNoMA: 0} {
		expect(t, fams, n, MetricStrayReplies, "peer", "udp1", "reason", reason)
	}
	for reason, n := range map[string]float64{StrayLate: 5, StrayUnmatched: 0, StrayBadAuth: 1, StrayNoMA: 2} {
		expect(t, fams, n, MetricStrayReplies, "peer", "tls1", "reason", reason)
	}
	if _, ok := value(fams, MetricRetransmissions, "peer", "tls1"); ok {
		t.Errorf("%s has a series for a server over TLS", MetricRetransmissions)
	}
	for _, p := range []string{"s1.example.net", "tcp://127.0.0.1:3868", "10.0.0.9"} {
		if _, ok := value(fams, MetricStrayReplies, "peer", p); ok {
			t.Errorf("%s has a series for %s", MetricStrayReplies, p)
		}
	}
	if n := len(fams[MetricStrayReplies].GetMetric()); n != 8 {
		t.Errorf("%s has %d series, want 8", MetricStrayReplies, n)
	}
}
