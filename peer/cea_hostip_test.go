package peer

import (
	"net"
	"net/netip"
	"testing"

	"github.com/ishidawataru/sctp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// hostIPs returns the Host-IP-Address AVPs of a CER or CEA.
func hostIPs(m []byte) []netip.Addr {
	var got []netip.Addr
	wire.WalkAVPs(m, func(a wire.AVP) bool {
		if a.Code == message.HostIPAddress && len(a.Data) >= 6 {
			ip, _ := netip.AddrFromSlice(a.Data[2:])
			got = append(got, ip)
		}
		return true
	})
	return got
}

// Over a multi-homed SCTP association the CER and CEA list every local
// address of the association, one Host-IP-Address each (RFC 6733 2.1,
// 5.3), never 0.0.0.0; over TCP the connection's own address.
func TestCEAHostIPAddressesOverSCTP(t *testing.T) {
	cfg, err := clientConfig("server.example.net").validate()
	require.NoError(t, err)
	local := &sctp.SCTPAddr{IPAddrs: []net.IPAddr{{IP: net.IPv4(10, 0, 0, 1)}, {IP: net.ParseIP("2001:db8::2")}}, Port: 3868}
	want := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8::2")}
	cer := withIDs(cfg.newCER(local), wire.NewHopByHopGenRandom())
	assert.Equal(t, want, hostIPs(cer), "CER")
	cea := cfg.newCEA(cer, local, message.Success, "", nil)
	assert.Equal(t, want, hostIPs(cea), "CEA")
	tcp := &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.1"), Port: 3868}
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.1")}, hostIPs(cfg.newCEA(cer, tcp, message.Success, "", nil)))
}
