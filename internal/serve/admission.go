package serve

import (
	"cmp"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
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
// with the shared secret), in total and by source address. It refuses a
// new connection over any of its limits: silent or hostile connections,
// which need no credentials, then cannot use up the process's descriptors
// while they wait for their first message, and admitted ones, which each
// hold a reader, buffers and a backlog of unanswered requests, are bounded
// in all. Its methods are safe for concurrent use.
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
	n       int                // not admitted yet
	open    int                // open, admitted or not
	byAddr  map[netip.Addr]int // not admitted yet, by source address
	openBy  map[netip.Addr]int // open, by source address
	refused atomic.Uint64
}

// A Ticket is one connection's place in its Admission. Its methods are
// safe for concurrent use, and do nothing on a nil Ticket.
type Ticket struct {
	o                 *Admission
	a                 netip.Addr
	admitted, stopped bool // guarded by o.mu
}

func limitOf(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Admit counts a new connection from remote, or refuses it when a limit
// is reached (the caller closes it). The connection's Ticket must be told
// when it is admitted (Admitted) and when it ends (Ended).
func (o *Admission) Admit(remote net.Addr, lg *slog.Logger) (*Ticket, bool) {
	max, perAddr := limitOf(o.Max, DefaultMaxOpening), limitOf(o.PerAddr, DefaultMaxOpeningPerAddr)
	maxConns, connsPerAddr := limitOf(o.MaxConns, DefaultMaxConns), limitOf(o.MaxConnsPerAddr, DefaultMaxConnsPerAddr)
	a, _ := AddrOf(remote)
	a = SourceOf(a)
	o.mu.Lock()
	if o.byAddr == nil {
		o.byAddr, o.openBy = make(map[netip.Addr]int), make(map[netip.Addr]int)
	}
	waiting := " waiting for " + cmp.Or(o.What, "their first message")
	var why string
	switch {
	case maxConns > 0 && o.open >= maxConns:
		why = "too many connections open"
	case connsPerAddr > 0 && o.openBy[a] >= connsPerAddr:
		why = "too many connections open from one address"
	case max > 0 && o.n >= max:
		why = "too many connections" + waiting
	case perAddr > 0 && o.byAddr[a] >= perAddr:
		why = "too many connections from one address" + waiting
	}
	if why != "" {
		open, openFrom, n, na := o.open, o.openBy[a], o.n, o.byAddr[a]
		o.mu.Unlock()
		o.refused.Add(1)
		Log(lg, slog.LevelWarn, KindRefused, "connection closed at once: "+why,
			"remote", remote.String(), "open", open, "max_connections", maxConns, "open_from_addr", openFrom, "max_connections_per_addr", connsPerAddr,
			"opening", n, "from_addr", na, "max", max, "max_per_addr", perAddr)
		return nil, false
	}
	o.open++
	o.openBy[a]++
	o.n++
	o.byAddr[a]++
	o.mu.Unlock()
	return &Ticket{o: o, a: a}, true
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
	if o.byAddr[t.a]--; o.byAddr[t.a] <= 0 {
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
	t.admittedLocked()
	if !t.stopped {
		t.stopped = true
		o := t.o
		o.open--
		if o.openBy[t.a]--; o.openBy[t.a] <= 0 {
			delete(o.openBy, t.a)
		}
	}
	t.o.mu.Unlock()
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

// Refused returns how many connections were refused over a limit.
func (o *Admission) Refused() uint64 { return o.refused.Load() }

// AddrOf returns the IP address of a, without its port, IPv4-mapped
// addresses unmapped.
func AddrOf(a net.Addr) (netip.Addr, bool) {
	switch v := a.(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		return ip.Unmap(), ok
	case *net.UDPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
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
