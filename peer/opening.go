package peer

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Defaults of Server.MaxOpening and Server.MaxOpeningPerAddr.
const (
	DefaultMaxOpening        = 256
	DefaultMaxOpeningPerAddr = 64
)

// opening counts a Server's connections that have not finished their
// capabilities exchange, in total and by source address.
type opening struct {
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

// admit counts a new connection from remote, or refuses it when a limit is
// reached. release must be called once when its exchange is over.
func (o *opening) admit(remote net.Addr, max, perAddr int, lg *slog.Logger) (release func(), ok bool) {
	max, perAddr = limitOf(max, DefaultMaxOpening), limitOf(perAddr, DefaultMaxOpeningPerAddr)
	a, _ := addrOf(remote)
	o.mu.Lock()
	if o.byAddr == nil {
		o.byAddr = make(map[netip.Addr]int)
	}
	var why string
	switch {
	case max > 0 && o.n >= max:
		why = "too many connections waiting for their CER"
	case perAddr > 0 && o.byAddr[a] >= perAddr:
		why = "too many connections from one address waiting for their CER"
	}
	if why != "" {
		n, na := o.n, o.byAddr[a]
		o.mu.Unlock()
		o.refused.Add(1)
		logLimited(lg, slog.LevelWarn, logLimit, "connection closed at once: "+why,
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

// ServerStats are a Server's counters.
type ServerStats struct {
	// Opening is how many accepted connections have not finished their
	// capabilities exchange now.
	Opening int `json:"opening"`
	// RefusedOverLimit counts connections closed at once because
	// MaxOpening or MaxOpeningPerAddr was reached.
	RefusedOverLimit uint64 `json:"refused_over_limit"`
}

// Stats returns the Server's counters. It is safe for concurrent use.
func (s *Server) Stats() ServerStats {
	s.open.mu.Lock()
	n := s.open.n
	s.open.mu.Unlock()
	return ServerStats{Opening: n, RefusedOverLimit: s.open.refused.Load()}
}
