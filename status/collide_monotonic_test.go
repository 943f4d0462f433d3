package status

import (
	"testing"
	"time"

	"github.com/aaatp/aaatp/radpeer"
)

// The counts of a Diameter peer and a NAS row summed under one name (see
// TestDiameterPeerNamedAsNAS) never go back while the name's series
// lives: not when the Diameter peer ends (ForgetPeer) and the NAS row
// stays, nor when the NAS row goes and the Diameter peer stays. A counter
// that goes back is a reset to Prometheus: increase() would jump by the
// whole of what is left.
func TestSummedCountersNeverGoBack(t *testing.T) {
	const name = "192.0.2.7"
	nas := NASRows([]radpeer.NASStats{{Addr: name, Received: 1000, Answered: 1000, LastSeen: time.Now(), Answers: radpeer.NASAnswers{Accept: 990, Other: 10}}})
	dia := PeerStatus{Peer: name, OriginHost: name, State: "OKAY"}
	read := func(m *Metrics, snap Snapshot) (requests, other float64) {
		t.Helper()
		m.Sync(snap)
		fams, _ := families(t, SourceFunc(func() Snapshot { return snap }), m)
		requests, _ = value(fams, MetricRequests, "peer", name)
		other, _ = value(fams, MetricAnswers, "peer", name, "class", "other")
		return requests, other
	}
	for _, tc := range []struct {
		what  string
		after []PeerStatus // the peers of the snapshot after the change
		ends  bool         // the Diameter peer ended (ForgetPeer)
	}{
		{"the Diameter peer ends, the NAS row stays", nas, true},
		{"the NAS row goes, the Diameter peer stays", []PeerStatus{dia}, false},
	} {
		m := NewMetrics()
		sc := m.counts.served(name)
		for range 7 {
			sc.requests.Add(1)
			sc.answered("other", time.Millisecond)
		}
		reqs, other := read(m, Snapshot{Role: RoleServer, Peers: append([]PeerStatus{dia}, nas...)})
		if reqs != 1007 || other != 17 {
			t.Fatalf("%s: before: %v requests, %v other; want 1007 and 17", tc.what, reqs, other)
		}
		if tc.ends {
			m.ForgetPeer(name)
		}
		reqs2, other2 := read(m, Snapshot{Role: RoleServer, Peers: tc.after})
		if reqs2 < reqs || other2 < other {
			t.Errorf("%s: requests %v -> %v, answers of class other %v -> %v: a counter went back", tc.what, reqs, reqs2, other, other2)
		}
		if tc.ends { // the same Origin-Host back: its counts go on
			m.counts.served(name).requests.Add(1)
			if reqs3, _ := read(m, Snapshot{Role: RoleServer, Peers: append([]PeerStatus{dia}, nas...)}); reqs3 != reqs2+1 {
				t.Errorf("%s, then back: requests %v -> %v, want %v", tc.what, reqs2, reqs3, reqs2+1)
			}
		}
	}
}
