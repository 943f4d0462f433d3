package loadbalance

import "fmt"

// Route answers the operator's question "where does this key go?" for a new
// conversation keyed by key (a NAI, or a Session-Id), under the current
// table, as if the servers named in suspended were suspended (in addition to
// those that are). hash is the key's Pearson hash (its bucket). For direct,
// server is the lowest-Index in-service server; round-robin returns
// ErrNoAffinity. Route does not touch the conversation memory.
func (b *Balancer) Route(key string, suspended ...string) (hash uint8, server string, err error) {
	p := b.cur.Load()
	skip := make([]bool, len(p.servers))
	for _, n := range suspended {
		slot := p.slot(n)
		if slot == noSlot {
			return 0, "", fmt.Errorf("loadbalance: unknown server %q", n)
		}
		skip[slot] = true
	}
	hash = PearsonHashString(key)
	slot := noSlot
	switch b.alg {
	case RoundRobin:
		return hash, "", ErrNoAffinity
	case Direct:
		for _, s := range p.ready {
			if !skip[s] {
				slot = int(s)
				break
			}
		}
	default:
		slot = p.walk(p.table, hash, skip)
	}
	if slot == noSlot {
		return hash, "", ErrNoServer
	}
	return hash, p.servers[slot].Name, nil
}

// slot returns the slot of the configured server name, noSlot if none.
func (p *picker) slot(name string) int {
	for i, s := range p.servers {
		if s.Name == name && !p.removed[i] {
			return i
		}
	}
	return noSlot
}

// ServerStatus is one server in a Snapshot.
type ServerStatus struct {
	Server
	State   State
	Buckets int // buckets owned in the current table (pearson, hash)
}

// Snapshot is a diagnostic copy of the balancer's state (RFC 3539 3.4.3
// [4]: evaluate the load balancing).
type Snapshot struct {
	Algorithm  Algorithm
	Generation uint64
	Servers    []ServerStatus // configured order; servers added by SetServers after
	Table      Table          // current table (pearson, hash); zero otherwise
	// OldGenerations are the previous tables still kept for conversations
	// in progress, newest first. Empty when no transition is under way.
	OldGenerations []uint64
	Sessions       int    // conversations remembered (including idle ones not yet purged)
	Untracked      uint64 // first-seen conversations not remembered (memory full)
}

// Snapshot returns a copy of the current state.
func (b *Balancer) Snapshot() Snapshot {
	p := b.cur.Load()
	s := Snapshot{
		Algorithm:  b.alg,
		Generation: p.gen,
		Servers:    make([]ServerStatus, 0, len(p.servers)),
		Sessions:   b.sess.count(),
		Untracked:  b.sess.untracked.Load(),
	}
	var counts []int
	if p.table != nil {
		counts = p.table.counts(len(p.servers))
		for h, slot := range p.table {
			if slot != noSlot {
				s.Table[h] = p.servers[slot].Name
			}
		}
	}
	for i, srv := range p.servers {
		if p.removed[i] {
			continue
		}
		st := ServerStatus{Server: srv, State: p.state[i]}
		if counts != nil {
			st.Buckets = counts[i]
		}
		s.Servers = append(s.Servers, st)
	}
	for _, o := range p.old {
		s.OldGenerations = append(s.OldGenerations, o.gen)
	}
	return s
}
