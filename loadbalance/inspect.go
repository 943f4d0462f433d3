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
	skip := make([]bool, len(b.servers))
	for _, n := range suspended {
		slot, ok := b.byName[n]
		if !ok {
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
	return hash, b.servers[slot].Name, nil
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
	Servers    []ServerStatus // in configured order
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
		Servers:    make([]ServerStatus, len(b.servers)),
		Sessions:   b.sess.count(),
		Untracked:  b.sess.untracked.Load(),
	}
	var counts []int
	if p.table != nil {
		counts = p.table.counts(len(b.servers))
		for h, slot := range p.table {
			if slot != noSlot {
				s.Table[h] = b.servers[slot].Name
			}
		}
	}
	for i, srv := range b.servers {
		s.Servers[i] = ServerStatus{Server: srv, State: p.state[i]}
		if counts != nil {
			s.Servers[i].Buckets = counts[i]
		}
	}
	for _, o := range p.old {
		s.OldGenerations = append(s.OldGenerations, o.gen)
	}
	return s
}
