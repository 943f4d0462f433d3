package radpeer

import (
	"net/netip"
	"sync"
)

// maxCountedSources bounds the sources a server counts failed
// authenticators by; the failures of sources beyond it are counted
// together under "other".
const maxCountedSources = 256

// sourceCounts counts events (failed authenticators) by source address,
// for at most maxCountedSources sources. Safe for concurrent use.
type sourceCounts struct {
	mu    sync.Mutex
	by    map[netip.Addr]uint64
	other uint64
}

func (s *sourceCounts) add(a netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = make(map[netip.Addr]uint64)
	}
	if _, ok := s.by[a]; ok || len(s.by) < maxCountedSources {
		s.by[a]++
		return
	}
	s.other++
}

// snapshot returns the counts by address ("other" for the sources past
// the bound), nil when there are none.
func (s *sourceCounts) snapshot() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.by) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(s.by)+1)
	for a, n := range s.by {
		out[a.String()] = n
	}
	if s.other > 0 {
		out["other"] = s.other
	}
	return out
}
