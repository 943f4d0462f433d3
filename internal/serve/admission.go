package serve

import (
	"cmp"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ishidawataru/sctp"
)

// Defaults of Admission's limits.
const (
	DefaultMaxOpening        = 256
	DefaultMaxOpeningPerAddr = 64
	DefaultMaxConns          = 1024
	DefaultMaxConnsPerAddr   = 256
)

// Admission counts a listener's connections: those open, and those not
// admitted yet (Diameter: no CER answered; RADIUS: no request verified
// with the shared secret), in total and by source address, and bounds
// them: silent or hostile connections, which need no credentials, then
// cannot use up the process's descriptors while they wait for their first
// message, and admitted ones, which each hold a reader, buffers and a
// backlog of unanswered requests, are bounded in all.
//
// When a new connection finds a limit reached, a connection not admitted
// yet that holds a place it needs is closed to make room for it (pushed
// out), and the new one is admitted: the oldest from the new connection's
// source address when a per-address limit is reached, otherwise the
// oldest from the source that holds the most places not admitted yet, in
// the network that holds the most (an IPv4 /24, an IPv6 /48). A host
// without credentials that takes every place thus pushes out its own
// connections first, and cannot keep a peer that holds them from
// connecting and proving itself, within the opening timeout. A new
// connection is refused only when every place it needs is held by
// admitted connections. Its methods are safe for concurrent use.
type Admission struct {
	// Max and PerAddr bound the connections not admitted yet, in all and
	// from one source address; MaxConns and MaxConnsPerAddr the
	// connections open, admitted or not, in all and from one source
	// address (so that one host cannot take every place; an IPv6 /64
	// counts as one address, see SourceOf). Zero means
	// DefaultMaxOpening, DefaultMaxOpeningPerAddr, DefaultMaxConns and
	// DefaultMaxConnsPerAddr; negative means no limit. Set them before the
	// first Admit.
	Max, PerAddr, MaxConns, MaxConnsPerAddr int
	// What names, in the log line of a refusal, what the connections
	// wait for ("their CER", "a first valid request").
	What string

	mu      sync.Mutex
	n       int                     // not admitted yet
	open    int                     // open, admitted or not
	byAddr  map[netip.Addr]*opening // not admitted yet, by source address
	byNet   map[netip.Prefix]int    // not admitted yet, by network
	openBy  map[netip.Addr]int      // open, by source address
	seq     uint64                  // of the last Ticket
	refused atomic.Uint64
	evicted atomic.Uint64
}

// opening is a source's connections not admitted yet: how many, and
// those that can be pushed out, oldest first.
type opening struct {
	n          int
	head, tail *Ticket
}

// A Ticket is one connection's place in its Admission. Its methods are
// safe for concurrent use, and do nothing on a nil Ticket.
type Ticket struct {
	o      *Admission
	a      netip.Addr
	remote net.Addr
	seq    uint64
	evict  func() // nil: never pushed out
	// The rest is guarded by o.mu. prev and next link the Ticket in its
	// source's opening list while it can be pushed out.
	prev, next                 *Ticket
	admitted, stopped, evicted bool
}

func limitOf(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Admit counts a new connection from remote, or refuses it (the caller
// closes it). When a limit is reached it pushes out an older connection
// not admitted yet that holds a place the new one needs, if there is
// one (see Admission), and admits the new one; otherwise it refuses it.
//
// evict closes the new connection, should a later Admit push it out: it
// is called at most once, on that Admit's goroutine with no lock held,
// and must not block. Once it is called, the Ticket's Admitted and Ended
// do nothing (the places are given back already). A nil evict keeps the
// connection from ever being pushed out. The connection's Ticket must be
// told when it is admitted (Admitted) and when it ends (Ended).
func (o *Admission) Admit(remote net.Addr, lg *slog.Logger, evict func()) (*Ticket, bool) {
	max, perAddr := limitOf(o.Max, DefaultMaxOpening), limitOf(o.PerAddr, DefaultMaxOpeningPerAddr)
	maxConns, connsPerAddr := limitOf(o.MaxConns, DefaultMaxConns), limitOf(o.MaxConnsPerAddr, DefaultMaxConnsPerAddr)
	a, _ := AddrOf(remote)
	a = SourceOf(a)
	o.mu.Lock()
	if o.byAddr == nil {
		o.byAddr, o.byNet, o.openBy = make(map[netip.Addr]*opening), make(map[netip.Prefix]int), make(map[netip.Addr]int)
	}
	waiting := " waiting for " + cmp.Or(o.What, "their first message")
	var why string
	fromAddr := false // the place needed is one of a's
	src := o.byAddr[a]
	switch {
	case connsPerAddr > 0 && o.openBy[a] >= connsPerAddr:
		why, fromAddr = "too many connections open from one address", true
	case perAddr > 0 && src != nil && src.n >= perAddr:
		why, fromAddr = "too many connections from one address"+waiting, true
	case maxConns > 0 && o.open >= maxConns:
		why = "too many connections open"
	case max > 0 && o.n >= max:
		why = "too many connections" + waiting
	}
	var victim *Ticket
	if why != "" {
		if fromAddr {
			if src != nil {
				victim = src.head
			}
		} else {
			victim = o.victimLocked()
		}
		if victim == nil {
			open, openFrom, n, na := o.open, o.openBy[a], o.n, 0
			if src != nil {
				na = src.n
			}
			o.mu.Unlock()
			o.refused.Add(1)
			Log(lg, slog.LevelWarn, KindRefused, "connection closed at once: "+why,
				"remote", remote.String(), "open", open, "max_connections", maxConns, "open_from_addr", openFrom, "max_connections_per_addr", connsPerAddr,
				"opening", n, "from_addr", na, "max", max, "max_per_addr", perAddr)
			return nil, false
		}
		victim.evicted = true
		victim.endLocked()
	}
	o.seq++
	t := &Ticket{o: o, a: a, remote: remote, seq: o.seq, evict: evict}
	o.open++
	o.openBy[a]++
	o.n++
	o.byNet[networkOf(a)]++
	if src = o.byAddr[a]; src == nil {
		src = &opening{}
		o.byAddr[a] = src
	}
	src.n++
	if evict != nil {
		t.prev = src.tail
		if src.tail != nil {
			src.tail.next = t
		} else {
			src.head = t
		}
		src.tail = t
	}
	o.mu.Unlock()
	if victim != nil {
		o.evicted.Add(1)
		Log(lg, slog.LevelWarn, KindRefused, "connection not admitted yet closed to make room for a new one: "+why,
			"remote", victim.remote.String(), "new", remote.String(), "max_connections", maxConns, "max_connections_per_addr", connsPerAddr,
			"max", max, "max_per_addr", perAddr)
		victim.evict()
	}
	return t, true
}

// victimLocked returns the connection to push out when a limit in all is
// reached: in the network with the most connections not admitted yet,
// from its source with the most, the oldest; a tie goes to the one whose
// oldest is older. Nil when none can be pushed out. It takes a pass over
// the sources with connections not admitted yet, two at most. o.mu is
// held.
func (o *Admission) victimLocked() *Ticket {
	var nw netip.Prefix
	best, found := 0, false
	var oldest uint64
	for a, s := range o.byAddr {
		if s.head == nil {
			continue
		}
		w := networkOf(a)
		if n := o.byNet[w]; !found || n > best || n == best && s.head.seq < oldest {
			nw, best, oldest, found = w, n, s.head.seq, true
		}
	}
	if !found {
		return nil
	}
	var victim *Ticket
	best = 0
	for a, s := range o.byAddr {
		if s.head == nil || networkOf(a) != nw {
			continue
		}
		if victim == nil || s.n > best || s.n == best && s.head.seq < victim.seq {
			victim, best = s.head, s.n
		}
	}
	return victim
}

// networkOf returns the network a source address a (from SourceOf) is
// counted in when a connection must be pushed out: its IPv4 /24, its
// IPv6 /48 (a site's prefix: one subscriber's delegation fits in it), or
// the address alone when it is neither (a link-local one, an address
// that could not be read).
func networkOf(a netip.Addr) netip.Prefix {
	bits := 0
	switch {
	case a.Is4():
		bits = 24
	case a.Is6() && !a.IsLinkLocalUnicast():
		bits = 48
	}
	if bits == 0 {
		return netip.PrefixFrom(a, a.BitLen())
	}
	p, _ := a.Prefix(bits)
	return p
}

// SourceOf returns the source the per-address limits count a connection
// from address a by: a itself, or for a global IPv6 address its /64. A
// host or site is given a /64 whole (RFC 6177), so counted by its /128
// addresses one host could open as many connections as it likes. A
// link-local address counts alone: every link's hosts share fe80::/64.
func SourceOf(a netip.Addr) netip.Addr {
	if a.Is6() && !a.Is4In6() && !a.IsLinkLocalUnicast() {
		if p, err := a.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return a
}

// Admitted ends the connection's count among those not admitted yet; it
// stays counted as open until Ended. Calling it again does nothing.
func (t *Ticket) Admitted() {
	if t == nil {
		return
	}
	t.o.mu.Lock()
	t.admittedLocked()
	t.o.mu.Unlock()
}

func (t *Ticket) admittedLocked() {
	if t.admitted {
		return
	}
	t.admitted = true
	o := t.o
	o.n--
	w := networkOf(t.a)
	if o.byNet[w]--; o.byNet[w] <= 0 {
		delete(o.byNet, w)
	}
	s := o.byAddr[t.a]
	if t.evict != nil {
		if t.prev != nil {
			t.prev.next = t.next
		} else {
			s.head = t.next
		}
		if t.next != nil {
			t.next.prev = t.prev
		} else {
			s.tail = t.prev
		}
		t.prev, t.next = nil, nil
	}
	if s.n--; s.n <= 0 {
		delete(o.byAddr, t.a)
	}
}

// Ended ends every count of the connection, admitted or not. Calling it
// again does nothing.
func (t *Ticket) Ended() {
	if t == nil {
		return
	}
	t.o.mu.Lock()
	t.endLocked()
	t.o.mu.Unlock()
}

func (t *Ticket) endLocked() {
	t.admittedLocked()
	if !t.stopped {
		t.stopped = true
		o := t.o
		o.open--
		if o.openBy[t.a]--; o.openBy[t.a] <= 0 {
			delete(o.openBy, t.a)
		}
	}
}

// Evicted reports whether the connection was pushed out to make room
// for a newer one (its evict function was called).
func (t *Ticket) Evicted() bool {
	if t == nil {
		return false
	}
	t.o.mu.Lock()
	defer t.o.mu.Unlock()
	return t.evicted
}

// Opening returns how many connections not admitted yet are counted now.
func (o *Admission) Opening() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

// Open returns how many connections, admitted or not, are counted now.
func (o *Admission) Open() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.open
}

// Refused returns how many new connections were refused over a limit.
func (o *Admission) Refused() uint64 { return o.refused.Load() }

// Evicted returns how many connections not admitted yet were closed to
// make room for a new one.
func (o *Admission) Evicted() uint64 { return o.evicted.Load() }

// AddrOf returns the IP address of a, without its port, IPv4-mapped
// addresses unmapped. For an SCTP association's address, which lists
// every address of a multi-homed endpoint, it is the first: the primary.
func AddrOf(a net.Addr) (netip.Addr, bool) {
	switch v := a.(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		return ip.Unmap(), ok
	case *net.UDPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		return ip.Unmap(), ok
	case *sctp.SCTPAddr:
		if v == nil || len(v.IPAddrs) == 0 {
			return netip.Addr{}, false
		}
		ip, ok := netip.AddrFromSlice(v.IPAddrs[0].IP)
		return ip.Unmap(), ok
	case interface{ AddrPort() netip.AddrPort }:
		return v.AddrPort().Addr().Unmap(), true
	}
	if a == nil {
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// AddrsOf returns every IP address of a, IPv4-mapped addresses unmapped,
// leaving out the unspecified ones: those of a multi-homed SCTP
// endpoint, or the one AddrOf returns. It is empty when a holds none.
func AddrsOf(a net.Addr) []netip.Addr {
	var ips []netip.Addr
	if v, ok := a.(*sctp.SCTPAddr); ok && v != nil {
		for _, x := range v.IPAddrs {
			if ip, ok := netip.AddrFromSlice(x.IP); ok && !ip.Unmap().IsUnspecified() && !slices.Contains(ips, ip.Unmap()) {
				ips = append(ips, ip.Unmap())
			}
		}
		return ips
	}
	if ip, ok := AddrOf(a); ok && ip.IsValid() && !ip.IsUnspecified() {
		ips = append(ips, ip)
	}
	return ips
}
