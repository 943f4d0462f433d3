package main

import (
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/status"
)

// A stream server's status row carries its peer's counters, the recycled
// connections included, and adds up the Identifiers in use on each
// connection to the calls waiting for one.
func TestStreamRow(t *testing.T) {
	s := client.ServerStats{Server: "radius+tcp://127.0.0.1:2083", Peer: "radius+tcp://127.0.0.1:2083", State: "OKAY"}
	w := &radpeer.Stats{Sent: 9, Answered: 7, MovedOut: 1, RecycledConns: 3, Waiting: 2,
		Conns: []radpeer.ConnStats{{Pending: 4, Tw: 6 * time.Second}, {Pending: 1, Tw: 6 * time.Second}}}
	got := streamRow(s, "in-service", w)
	want := status.PeerStatus{Peer: s.Peer, Server: s.Server, Policy: "in-service", Protocol: status.ProtocolRADIUS, State: "OKAY",
		Pending: 7, Sent: 9, Answered: 7, MovedOut: 1, RecycledConns: 3, Tw: 6 * time.Second}
	if got != want {
		t.Errorf("row\n got %+v\nwant %+v", got, want)
	}
	if got := streamRow(s, "down", nil); got.Sent != 0 || got.RecycledConns != 0 || got.Policy != "down" || got.State != "OKAY" {
		t.Errorf("row without a peer: %+v", got)
	}
}
