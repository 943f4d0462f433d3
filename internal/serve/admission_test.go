package serve

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ishidawataru/sctp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// conn is a connection of the admission tests: its Ticket, and whether
// its evict function closed it.
type conn struct {
	name   string
	t      *Ticket
	closed bool
}

// admit admits a connection from ip named name, whose evict function
// marks it closed; nil when refused.
func admit(t *testing.T, a *Admission, lg *slog.Logger, ip, name string) *conn {
	t.Helper()
	c := &conn{name: name}
	tk, ok := a.Admit(&net.TCPAddr{IP: net.ParseIP(ip), Port: 1}, lg, func() {
		require.False(t, c.closed, "%s: evicted twice", name)
		c.closed = true
	})
	if !ok {
		return nil
	}
	c.t = tk
	return c
}

// Over a limit on the connections not admitted yet, the oldest that
// holds a place the new one needs is closed, and the new one admitted:
// over the per-address limit the oldest of its address, over the limit
// in all the oldest of the address with the most. Every count stays
// within its limit, and a connection pushed out gives its places back
// once: its own Admitted and Ended then do nothing.
func TestAdmissionPushesOutTheOldestOpening(t *testing.T) {
	var buf bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&buf, nil))
	a := &Admission{Max: 3, PerAddr: 2, MaxConns: -1, MaxConnsPerAddr: -1}
	x1 := admit(t, a, lg, "10.0.0.1", "x1")
	x2 := admit(t, a, lg, "10.0.0.1", "x2")
	x3 := admit(t, a, lg, "10.0.0.1", "x3")
	require.NotNil(t, x3, "over PerAddr: admitted, pushing out one of its address's")
	assert.True(t, x1.closed, "the oldest of the address is closed")
	assert.False(t, x2.closed)
	assert.True(t, x1.t.Evicted())
	assert.Equal(t, 2, a.Opening())
	assert.Equal(t, 2, a.Open())
	assert.Contains(t, buf.String(), "closed to make room for a new one: too many connections from one address")

	y1 := admit(t, a, lg, "10.0.0.2", "y1")
	require.NotNil(t, y1)
	assert.Equal(t, 3, a.Opening())
	z1 := admit(t, a, lg, "10.0.0.3", "z1")
	require.NotNil(t, z1, "over Max: admitted")
	assert.True(t, x2.closed, "the oldest of the address with the most (x: 2, y: 1) is closed, not y1, older than x3")
	assert.False(t, y1.closed)
	assert.Equal(t, 3, a.Opening())

	// x1 and x2 end as their server sees their connections closed:
	// nothing is given back twice.
	x1.t.Admitted()
	x1.t.Ended()
	x2.t.Ended()
	assert.Equal(t, 3, a.Opening())
	assert.Equal(t, 3, a.Open())

	// A tie: x, y and z hold one each: the oldest of them goes.
	w1 := admit(t, a, lg, "10.0.0.4", "w1")
	require.NotNil(t, w1)
	assert.True(t, x3.closed, "x3 is the oldest of three addresses with one each")
	assert.False(t, y1.closed)
	assert.False(t, z1.closed)

	// Admitted connections are never pushed out: with every place in
	// all held by admitted ones, a new connection is refused.
	for _, c := range []*conn{y1, z1, w1} {
		c.t.Admitted()
	}
	assert.Equal(t, 0, a.Opening())
	b := &Admission{Max: -1, PerAddr: -1, MaxConns: 2, MaxConnsPerAddr: -1}
	b1, b2 := admit(t, b, lg, "10.1.0.1", "b1"), admit(t, b, lg, "10.1.0.2", "b2")
	b1.t.Admitted()
	b3 := admit(t, b, lg, "10.1.0.3", "b3")
	require.NotNil(t, b3, "MaxConns reached: the one not admitted yet makes room")
	assert.True(t, b2.closed)
	assert.False(t, b1.closed)
	b3.t.Admitted()
	assert.Nil(t, admit(t, b, lg, "10.1.0.4", "b4"), "every place held by admitted connections: refused")
	assert.Equal(t, uint64(1), b.Refused())
	assert.Equal(t, uint64(1), b.Evicted())
	assert.Equal(t, uint64(3), a.Evicted())
	assert.Zero(t, a.Refused())

	// MaxConnsPerAddr: only a connection of the new one's address can
	// make room.
	c := &Admission{Max: -1, PerAddr: -1, MaxConns: -1, MaxConnsPerAddr: 2}
	c1, c2 := admit(t, c, lg, "10.2.0.1", "c1"), admit(t, c, lg, "10.2.0.2", "c2")
	c1.t.Admitted()
	c3 := admit(t, c, lg, "10.2.0.1", "c3")
	require.NotNil(t, c3, "room under MaxConnsPerAddr")
	c4 := admit(t, c, lg, "10.2.0.1", "c4")
	require.NotNil(t, c4, "c1 admitted and c3 opening: c3 makes room")
	assert.True(t, c3.closed)
	c4.t.Admitted()
	assert.Nil(t, admit(t, c, lg, "10.2.0.1", "c5"), "c1 and c4 admitted: refused")
	assert.False(t, c2.closed, "another address's connection never makes room for this one")
}

// A connection whose evict function is nil is never pushed out.
func TestAdmissionNeverPushesOutWithoutEvict(t *testing.T) {
	a := &Admission{Max: 1, MaxConns: -1}
	tk, ok := a.Admit(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}, nil, nil)
	require.True(t, ok)
	assert.Nil(t, admit(t, a, nil, "10.0.0.2", "new"), "nothing can make room: refused")
	tk.Ended()
	assert.NotNil(t, admit(t, a, nil, "10.0.0.2", "new"))
}

// One host with an IPv6 /56 (256 /64s, what an ISP hands a home) fills
// the opening places with the defaults: a peer from elsewhere is still
// admitted, and the host's further connections push out its own, never
// the peer's, however many it opens.
func TestAdmissionOneSlash56CannotLockOthersOut(t *testing.T) {
	a := &Admission{}
	attack := func(i int) *conn {
		ip := net.ParseIP("2001:db8:0:ab00::1").To16()
		ip[7] = byte(i / DefaultMaxOpeningPerAddr % 256)
		ip[15] = byte(i)
		return admit(t, a, nil, ip.String(), fmt.Sprint("attacker ", i))
	}
	for i := range DefaultMaxOpening {
		require.NotNil(t, attack(i))
	}
	assert.Equal(t, DefaultMaxOpening, a.Opening())
	peer := admit(t, a, nil, "192.0.2.10", "peer")
	require.NotNil(t, peer, "a peer from another network is admitted")
	for i := range 10 * DefaultMaxOpening {
		require.NotNil(t, attack(DefaultMaxOpening+i))
		require.LessOrEqual(t, a.Opening(), DefaultMaxOpening)
	}
	assert.False(t, peer.closed, "the /56's connections push out their own")
	// The same from 256 /64s of the /56, one connection each.
	b := &Admission{}
	for i := range DefaultMaxOpening {
		ip := net.ParseIP("2001:db8:0:ab00::1").To16()
		ip[7] = byte(i)
		require.NotNil(t, admit(t, b, nil, ip.String(), "attacker"))
	}
	peer = admit(t, b, nil, "2001:db8:1::1", "peer")
	require.NotNil(t, peer)
	for i := range 10 * DefaultMaxOpening {
		ip := net.ParseIP("2001:db8:0:ab00::2").To16()
		ip[7] = byte(i)
		require.NotNil(t, admit(t, b, nil, ip.String(), "attacker"))
	}
	assert.False(t, peer.closed, "a /48 of its own: never the network with the most")
}

// Random admissions, admissions by a first message, ends and evictions
// keep every count within its limit and equal to a count of the
// connections themselves; a new connection is refused only when no
// connection not admitted yet holds a place it needs; the lists and maps
// empty once every connection has ended.
func TestAdmissionRandomKeepsEveryBound(t *testing.T) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	for round := range 50 {
		a := &Admission{Max: 1 + rng.Intn(8), PerAddr: 1 + rng.Intn(4), MaxConns: 1 + rng.Intn(12), MaxConnsPerAddr: 1 + rng.Intn(6)}
		if rng.Intn(3) == 0 {
			a.MaxConns = -1
		}
		var live []*conn
		ips := []string{"10.0.0.1", "10.0.0.2", "10.0.1.1", "2001:db8::1", "2001:db8::2", "2001:db8:0:1::1", "2001:db9::1"}
		for step := range 400 {
			switch op := rng.Intn(10); {
			case op < 5:
				ip := ips[rng.Intn(len(ips))]
				src := SourceOf(netip.MustParseAddr(ip))
				// What a refusal is allowed for: every place needed is
				// held by admitted connections.
				var fromSrc, any bool
				for _, c := range live {
					if !c.closed && !c.t.admitted {
						any = true
						fromSrc = fromSrc || c.t.a == src
					}
				}
				perAddrFull := a.openBy[src] >= a.MaxConnsPerAddr || a.byAddr[src] != nil && a.byAddr[src].n >= a.PerAddr
				c := admit(t, a, nil, ip, fmt.Sprint(step))
				if c == nil {
					require.False(t, perAddrFull && fromSrc || !perAddrFull && any, "seed %d round %d step %d: refused while a connection not admitted yet held a place", seed, round, step)
					continue
				}
				live = append(live, c)
			case op < 8 && len(live) > 0:
				live[rng.Intn(len(live))].t.Admitted()
			case len(live) > 0:
				i := rng.Intn(len(live))
				live[i].t.Ended()
				live = append(live[:i], live[i+1:]...)
			}
			// Connections closed by eviction end, as their server sees
			// them closed.
			n, open := 0, 0
			opening, openBy := map[netip.Addr]int{}, map[netip.Addr]int{}
			kept := live[:0]
			for _, c := range live {
				if c.closed {
					if rng.Intn(2) == 0 {
						c.t.Admitted()
					}
					c.t.Ended()
					continue
				}
				kept = append(kept, c)
				open++
				openBy[c.t.a]++
				if !c.t.admitted {
					n++
					opening[c.t.a]++
				}
			}
			live = kept
			require.Equal(t, n, a.Opening(), "seed %d round %d step %d", seed, round, step)
			require.Equal(t, open, a.Open())
			require.LessOrEqual(t, n, a.Max)
			if a.MaxConns > 0 {
				require.LessOrEqual(t, open, a.MaxConns)
			}
			for s, k := range opening {
				require.LessOrEqual(t, k, a.PerAddr)
				require.Equal(t, k, a.byAddr[s].n)
				m := 0
				for tk := a.byAddr[s].head; tk != nil; tk = tk.next {
					m++
				}
				require.Equal(t, k, m, "every connection not admitted yet is in its list")
			}
			require.Len(t, a.byAddr, len(opening))
			for s, k := range openBy {
				require.LessOrEqual(t, k, a.MaxConnsPerAddr)
				require.Equal(t, k, a.openBy[s])
			}
			require.Len(t, a.openBy, len(openBy))
		}
		for _, c := range live {
			c.t.Ended()
		}
		require.Empty(t, a.byAddr)
		require.Empty(t, a.byNet)
		require.Empty(t, a.openBy)
		require.Zero(t, a.Opening())
		require.Zero(t, a.Open())
	}
}

// An SCTP association's address lists every address of a multi-homed
// peer: the first, its primary, is the source the per-address limits
// count it by, and every one is a Host-IP-Address.
func TestAddrOfSCTP(t *testing.T) {
	peerA := &sctp.SCTPAddr{IPAddrs: []net.IPAddr{{IP: net.IPv4(10, 0, 0, 1)}, {IP: net.IPv4(10, 0, 0, 2)}}, Port: 3868}
	peerB := &sctp.SCTPAddr{IPAddrs: []net.IPAddr{{IP: net.IPv4(192, 0, 2, 7)}, {IP: net.ParseIP("2001:db8::8")}}, Port: 3868}
	ip, ok := AddrOf(peerA)
	require.True(t, ok)
	assert.Equal(t, netip.MustParseAddr("10.0.0.1"), ip)
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::8")}, AddrsOf(peerB))
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.0.0.3")}, AddrsOf(&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.3")}))
	assert.Empty(t, AddrsOf(&sctp.SCTPAddr{IPAddrs: []net.IPAddr{{IP: net.IPv4zero}}}), "no address worth advertising")
	_, ok = AddrOf(&sctp.SCTPAddr{})
	assert.False(t, ok)
	_, ok = AddrOf(nil)
	assert.False(t, ok)

	adm := &Admission{PerAddr: 1, Max: -1, MaxConns: -1, MaxConnsPerAddr: -1}
	_, ok = adm.Admit(peerA, nil, nil)
	require.True(t, ok)
	_, ok = adm.Admit(peerB, nil, nil)
	assert.True(t, ok, "two multi-homed peers are two sources")
	_, ok = adm.Admit(&sctp.SCTPAddr{IPAddrs: []net.IPAddr{{IP: net.IPv4(10, 0, 0, 1)}}, Port: 1}, nil, nil)
	assert.False(t, ok, "another association from peer A's primary is peer A's")
}
