package radpeer

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"
)

// Sources that never signed a request with the secret (failed checks,
// Access-Requests without Message-Authenticator: anyone can send those,
// from spoofed addresses over UDP) fill the table, and a client that
// signs still gets counted under its own address: it takes the place of
// the least recently seen of them, whose counters go to "other". Before,
// the first 256 sources kept their places for the life of the process.
func TestNASTableKeepsPlacesForSigningClients(t *testing.T) {
	var tab nasTable
	spoofed := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}) }
	for i := range maxCountedSources {
		tab.badAuth(spoofed(i))
	}
	tab.received(spoofed(0), false) // seen again: no longer the least recent
	nas := netip.MustParseAddr("192.0.2.1")
	tab.received(nas, true)
	tab.answered(nas, []byte{byte(lradius.CodeAccountingResponse)})
	tab.received(netip.MustParseAddr("192.0.2.99"), false) // unsigned and new: "other"

	snap := tab.snapshot()
	require.Len(t, snap, maxCountedSources+1, "the table's bound, and other")
	by := map[string]NASStats{}
	for _, s := range snap {
		by[s.Addr] = s
	}
	assert.Equal(t, uint64(1), by["192.0.2.1"].Received, "the signing client has its own counters")
	assert.Equal(t, uint64(1), by["192.0.2.1"].Answers.AccountingResponse)
	assert.NotContains(t, by, spoofed(1).String(), "the least recently seen unsigned source made room")
	assert.Contains(t, by, spoofed(0).String())
	assert.Equal(t, uint64(1), by["other"].BadAuth, "its counters went to other")
	assert.Equal(t, uint64(1), by["other"].Received, "with the unsigned newcomer's")

	// Once every place is a signing client's, a new one is counted as
	// other: the bound holds.
	for i := range maxCountedSources {
		tab.received(netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)}), true)
	}
	assert.Len(t, tab.snapshot(), maxCountedSources+1)
	tab.received(netip.MustParseAddr("192.0.2.200"), true)
	snap = tab.snapshot()
	assert.Len(t, snap, maxCountedSources+1)
	assert.Equal(t, "other", snap[len(snap)-1].Addr)
}
