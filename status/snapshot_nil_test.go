package status

import (
	"testing"

	"github.com/aaatp/aaatp/peer"
)

// A client with a connection limit has configured servers without a peer:
// their rows say so instead of panicking.
func TestPeerRowsNotConnected(t *testing.T) {
	rows := PeerRows([]*peer.Peer{nil})
	if len(rows) != 1 || rows[0].State != "not connected" {
		t.Fatalf("rows %+v", rows)
	}
}
