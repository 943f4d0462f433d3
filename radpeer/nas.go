package radpeer

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	lradius "layeh.com/radius"
)

// maxCountedSources bounds the clients (NAS addresses) a server keeps
// counters for; those beyond it are counted together as "other".
const maxCountedSources = 256

// NASStats are a server's counters for one client address.
type NASStats struct {
	Addr string `json:"addr"` // the client's address; "other" for those past the bound
	// Name is the name of the client of ServerConfig.Clients at Addr; ""
	// without Clients.
	Name     string    `json:"name,omitempty"`
	Received uint64    `json:"received"` // requests that passed verification
	Answered uint64    `json:"answered"` // answers sent, resent ones included
	BadAuth  uint64    `json:"bad_auth"` // requests that failed verification
	LastSeen time.Time `json:"last_seen"`
	// Answers are the answers sent by Code.
	Answers NASAnswers `json:"answers"`
}

// NASAnswers counts a server's answers to one client by Code.
type NASAnswers struct {
	Accept             uint64 `json:"accept"`
	Reject             uint64 `json:"reject"`
	Challenge          uint64 `json:"challenge"`
	AccountingResponse uint64 `json:"accounting_response"`
	Other              uint64 `json:"other"` // CoA and Disconnect answers, Status-Server's...
}

// count counts one answer of Code code.
func (n *NASAnswers) count(code lradius.Code) {
	switch code {
	case lradius.CodeAccessAccept:
		n.Accept++
	case lradius.CodeAccessReject:
		n.Reject++
	case lradius.CodeAccessChallenge:
		n.Challenge++
	case lradius.CodeAccountingResponse:
		n.AccountingResponse++
	default:
		n.Other++
	}
}

// nasTable keeps NASStats by client address for at most
// maxCountedSources addresses. Safe for concurrent use.
type nasTable struct {
	mu    sync.Mutex
	by    map[netip.Addr]*NASStats
	other NASStats
	// names names a client by its address (nil: none); set before use.
	names func(netip.Addr) string
}

// of returns a's counters; t.mu is held.
func (t *nasTable) of(a netip.Addr) *NASStats {
	if t.by == nil {
		t.by = make(map[netip.Addr]*NASStats)
	}
	if s, ok := t.by[a]; ok {
		return s
	}
	if len(t.by) >= maxCountedSources {
		return &t.other
	}
	s := &NASStats{Addr: a.String()}
	if t.names != nil {
		s.Name = t.names(a)
	}
	t.by[a] = s
	return s
}

func (t *nasTable) count(a netip.Addr, f func(*NASStats)) {
	t.mu.Lock()
	s := t.of(a)
	f(s)
	s.LastSeen = time.Now()
	t.mu.Unlock()
}

func (t *nasTable) received(a netip.Addr) { t.count(a, func(s *NASStats) { s.Received++ }) }
func (t *nasTable) answered(a netip.Addr, ans []byte) {
	t.count(a, func(s *NASStats) {
		s.Answered++
		if len(ans) > 0 {
			s.Answers.count(lradius.Code(ans[0]))
		}
	})
}
func (t *nasTable) badAuth(a netip.Addr) { t.count(a, func(s *NASStats) { s.BadAuth++ }) }

// snapshot returns the counters by address, sorted, "other" last when
// any; nil when none.
func (t *nasTable) snapshot() []NASStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.by) == 0 {
		return nil
	}
	out := make([]NASStats, 0, len(t.by)+1)
	for _, s := range t.by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b NASStats) int {
		switch {
		case a.Addr < b.Addr:
			return -1
		case a.Addr > b.Addr:
			return 1
		}
		return 0
	})
	if t.other != (NASStats{}) {
		o := t.other
		o.Addr = "other"
		out = append(out, o)
	}
	return out
}

// badAuthBySource returns the failed authenticators by address, nil when
// none.
func (t *nasTable) badAuthBySource() map[string]uint64 {
	var out map[string]uint64
	for _, s := range t.snapshot() {
		if s.BadAuth > 0 {
			if out == nil {
				out = make(map[string]uint64)
			}
			out[s.Addr] = s.BadAuth
		}
	}
	return out
}
