package radpeer

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	lradius "layeh.com/radius"
)

// maxCountedSources bounds the clients (NAS addresses) a server keeps
// counters for; those beyond it are counted together as "other", but a
// client that signs its requests with the secret takes the place of one
// that never did (see nasTable).
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
// maxCountedSources addresses. Anyone can send a request that fails its
// check, or an Access-Request without Message-Authenticator, from many
// addresses (spoofed, over UDP): such a source does not keep its place
// from a client that signs with the secret. When the table is full, a
// new source that signed takes the place of the least recently seen
// source that never did, whose counters go to "other"; any other new
// source is counted as "other". Safe for concurrent use.
type nasTable struct {
	mu    sync.Mutex
	by    map[netip.Addr]*nasEntry
	other NASStats
	// names names a client by its address (nil: none); set before use.
	names func(netip.Addr) string
}

type nasEntry struct {
	stats  NASStats
	signed bool // a request signed with the secret came from it
}

// of returns a's counters, signed telling that a's request was signed;
// t.mu is held.
func (t *nasTable) of(a netip.Addr, signed bool) *NASStats {
	if t.by == nil {
		t.by = make(map[netip.Addr]*nasEntry)
	}
	if e, ok := t.by[a]; ok {
		e.signed = e.signed || signed
		return &e.stats
	}
	if len(t.by) >= maxCountedSources && (!signed || !t.evictUnsigned()) {
		return &t.other
	}
	e := &nasEntry{stats: NASStats{Addr: a.String()}, signed: signed}
	if t.names != nil {
		e.stats.Name = t.names(a)
	}
	t.by[a] = e
	return &e.stats
}

// rename names every client counted again, after the names changed.
func (t *nasTable) rename() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for a, e := range t.by {
		if t.names != nil {
			e.stats.Name = t.names(a)
		}
	}
}

// evictUnsigned moves the least recently seen source that never signed
// into "other", and reports whether there was one; t.mu is held.
func (t *nasTable) evictUnsigned() bool {
	var oldest netip.Addr
	var at time.Time
	found := false
	for a, e := range t.by {
		if !e.signed && (!found || e.stats.LastSeen.Before(at)) {
			oldest, at, found = a, e.stats.LastSeen, true
		}
	}
	if !found {
		return false
	}
	t.other.add(t.by[oldest].stats)
	delete(t.by, oldest)
	return true
}

// add adds the counters of o to n.
func (n *NASStats) add(o NASStats) {
	n.Received += o.Received
	n.Answered += o.Answered
	n.BadAuth += o.BadAuth
	n.Answers.Accept += o.Answers.Accept
	n.Answers.Reject += o.Answers.Reject
	n.Answers.Challenge += o.Answers.Challenge
	n.Answers.AccountingResponse += o.Answers.AccountingResponse
	n.Answers.Other += o.Answers.Other
	if o.LastSeen.After(n.LastSeen) {
		n.LastSeen = o.LastSeen
	}
}

func (t *nasTable) count(a netip.Addr, signed bool, f func(*NASStats)) {
	t.mu.Lock()
	s := t.of(a, signed)
	f(s)
	s.LastSeen = time.Now()
	t.mu.Unlock()
}

// received counts a request that passed verification; signed: with the
// secret (see maPolicy.verify).
func (t *nasTable) received(a netip.Addr, signed bool) {
	t.count(a, signed, func(s *NASStats) { s.Received++ })
}
func (t *nasTable) answered(a netip.Addr, ans []byte) {
	t.count(a, false, func(s *NASStats) {
		s.Answered++
		if len(ans) > 0 {
			s.Answers.count(lradius.Code(ans[0]))
		}
	})
}
func (t *nasTable) badAuth(a netip.Addr) { t.count(a, false, func(s *NASStats) { s.BadAuth++ }) }

// snapshot returns the counters by address, sorted, "other" last when
// any; nil when none.
func (t *nasTable) snapshot() []NASStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.by) == 0 {
		return nil
	}
	out := make([]NASStats, 0, len(t.by)+1)
	for _, e := range t.by {
		out = append(out, e.stats)
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
