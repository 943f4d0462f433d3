package hostile

import (
	"fmt"
	"testing"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// acrTo is an ACR from host with the given Destination-Realm and, unless
// "", Destination-Host.
func acrTo(host string, n uint32, destHost, destRealm string) []byte {
	b := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, fmt.Sprintf("%s;1;%d", host, n)).
		String(message.OriginHost, 0, true, host).
		String(message.OriginRealm, 0, true, realm)
	if destHost != "" {
		b = b.String(message.DestinationHost, 0, true, destHost)
	}
	m := b.String(message.DestinationRealm, 0, true, destRealm).
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, n).Bytes()
	wire.SetHopByHop(m, n)
	wire.SetEndToEnd(m, n)
	return m
}

// Before the change (Diameter): a request whose Destination-Host names
// another host was answered 2001 and applied, as was one for another
// realm. A server that is not an agent answers DIAMETER_UNABLE_TO_DELIVER
// (3002) for another host and DIAMETER_REALM_NOT_SERVED (3003) for another
// realm (RFC 6733 6.1.4, 6.1.6), and applies neither.
func TestDiameterRequestForAnotherHostOrRealm(t *testing.T) {
	const realmNotServed = 3003
	s := startServer(t, 0)
	const host = "routed.example.net"
	tc := raw(t, s, host)
	cases := []struct {
		name                string
		destHost, destRealm string
		want                uint32
	}{
		{"for this host", serverHost, realm, message.Success},
		{"for another host", "other.example.net", realm, message.UnableToDeliver},
		{"for another realm", "", "other.example.org", realmNotServed},
		{"for this realm, no host", "", realm, message.Success},
	}
	for i, c := range cases {
		rc := ask(t, tc, acrTo(host, uint32(i+1), c.destHost, c.destRealm))
		t.Logf("FIGURES destination: a request %s (Destination-Host %q, Destination-Realm %q) answered %d, want %d", c.name, c.destHost, c.destRealm, rc, c.want)
		if rc != c.want {
			t.Errorf("a request %s answered %d, want %d", c.name, rc, c.want)
		}
	}
	s.alive()
	tc.Close() // no DPA to wait for at the shutdown
	r := s.stopReport()
	if applied, _ := r["applied"].(float64); applied != 2 {
		t.Errorf("applied %v, want 2: the requests for this host and realm only", r["applied"])
	}
}
