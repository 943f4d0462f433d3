package serve

import (
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
)

// Admission counts a listener's connections that are not admitted yet
// (Diameter: no CER answered; RADIUS: no request verified with the
// shared secret), in total and by source address, and refuses a new one
// over either limit: silent or hostile connections, which need no
// credentials, then cannot use up the process's descriptors while they
// wait for their first message. Its methods are safe for concurrent use.
type Admission struct {
	// Max and PerAddr bound the connections not admitted yet, in all and
	// from one source address. Zero means DefaultMaxOpening and
	// DefaultMaxOpeningPerAddr; negative means no limit. Set them before
	// the first Admit.
	Max, PerAddr int
	// What names, in the log line of a refusal, what the connections
	// wait for ("their CER", "a first valid request").
	What string

	mu      sync.Mutex
	n       int
	byAddr  map[netip.Addr]int
	refused atomic.Uint64
}

func limitOf(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Admit counts a new connection from remote, or refuses it when a limit
// is reached (the caller closes it). release must be called once the
// connection is admitted or ends, whichever comes first; calling it again
// does nothing.
func (o *Admission) Admit(remote net.Addr, lg *slog.Logger) (release func(), ok bool) {
	max, perAddr := limitOf(o.Max, DefaultMaxOpening), limitOf(o.PerAddr, DefaultMaxOpeningPerAddr)
	a, _ := AddrOf(remote)
	o.mu.Lock()
	if o.byAddr == nil {
		o.byAddr = make(map[netip.Addr]int)
	}
	var why string
	switch {
	case max > 0 && o.n >= max:
		why = "too many connections waiting for "
	case perAddr > 0 && o.byAddr[a] >= perAddr:
		why = "too many connections from one address waiting for "
	}
	if why != "" {
		n, na := o.n, o.byAddr[a]
		o.mu.Unlock()
		o.refused.Add(1)
		what := o.What
		if what == "" {
			what = "their first message"
		}
		Log(lg, slog.LevelWarn, KindRefused, "connection closed at once: "+why+what,
			"remote", remote.String(), "opening", n, "from_addr", na, "max", max, "max_per_addr", perAddr)
		return nil, false
	}
	o.n++
	o.byAddr[a]++
	o.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			o.mu.Lock()
			o.n--
			if o.byAddr[a]--; o.byAddr[a] <= 0 {
				delete(o.byAddr, a)
			}
			o.mu.Unlock()
		})
	}, true
}

// Opening returns how many connections are counted now.
func (o *Admission) Opening() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
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
