package loadbalance

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Algorithm selects how Pick chooses a server.
type Algorithm uint8

const (
	// Pearson is the default: weighted 256-bucket table over the
	// RFC 3074 Pearson hash of the NAI (or Session-Id), with suspension
	// falling through to the next bucket and old/new tables living side by
	// side while conversations age out.
	Pearson Algorithm = iota
	// Hash (7750 SR "hash"): the same Pearson hash, unweighted (equal
	// buckets), with no conversation memory across rebuilds.
	Hash
	// Direct (7750 SR "direct"): always the in-service server with the
	// lowest configured Index.
	Direct
	// RoundRobin (7750 SR "round-robin"): the in-service servers in turn.
	RoundRobin
)

var algNames = [...]string{Pearson: "pearson", Hash: "hash", Direct: "direct", RoundRobin: "round-robin"}

func (a Algorithm) String() string {
	if int(a) < len(algNames) {
		return algNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm parses "pearson", "hash", "direct" or "round-robin".
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, n := range algNames {
		if s == n {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("loadbalance: unknown algorithm %q (want pearson, hash, direct or round-robin)", s)
}

// State is a server's availability as the balancer sees it.
type State uint8

const (
	// InService: the connection is open and answering (watchdog OKAY).
	// Becoming InService after Down adds the server to the table (rebuild).
	InService State = iota + 1
	// Suspended: watchdog SUSPECT. No rebuild; the server keeps its buckets
	// but picks skip it and go to the next bucket (h+1, h+2, ...) whose
	// server is in service; a conversation that starts or speaks there
	// meanwhile stays on the server it was sent to (see the package
	// documentation).
	// A server that goes from Down to Suspended (a
	// reopened connection not yet returned to service) stays out of the
	// table.
	Suspended
	// Down: closed or out of service. Removes the server from the table
	// (rebuild).
	Down
)

func (s State) String() string {
	switch s {
	case InService:
		return "in-service"
	case Suspended:
		return "suspended"
	case Down:
		return "down"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Server is a configured server (one connection).
type Server struct {
	Name   string // unique, non-empty
	Weight int    // share of the buckets (pearson); 0 means 1; at most MaxWeight
	Index  int    // configured order: direct picks the lowest in service
}

// MaxWeight is the largest Server.Weight that New and SetServers accept.
// The table has NumBuckets buckets, so a weight ratio above NumBuckets to
// one already gives the lighter server no bucket of its own; the bound
// keeps the arithmetic of sharing the buckets exact.
const MaxWeight = 1 << 20

// checkWeight validates s.Weight and returns it with 0 read as 1.
func checkWeight(s Server) (int, error) {
	switch {
	case s.Weight < 0:
		return 0, fmt.Errorf("loadbalance: server %q has negative weight", s.Name)
	case s.Weight > MaxWeight:
		return 0, fmt.Errorf("loadbalance: server %q has weight %d, above the maximum %d", s.Name, s.Weight, MaxWeight)
	case s.Weight == 0:
		return 1, nil
	}
	return s.Weight, nil
}

// Request carries the keys of one request. The hash key is NAI (User-Name)
// when present, else SessionID; SessionID also identifies the
// conversation. Pick keeps neither string: a conversation it remembers
// holds a copy, so the strings may refer to memory the caller reuses once
// Pick has returned.
type Request struct {
	NAI       string
	SessionID string
}

// ErrNoServer is returned when no server is in service.
var ErrNoServer = errors.New("loadbalance: no server in service")

// ErrNoAffinity is returned by Route for round-robin, which has no fixed
// route per key.
var ErrNoAffinity = errors.New("loadbalance: round-robin has no per-key route")

// DefaultIdleTimeout is Options.IdleTimeout's default. It exceeds the
// usual RADIUS accounting interim interval (Acct-Interim-Interval, often
// 300 seconds) with room for late updates, so that a session that sends
// nothing but interims is not forgotten between two of them.
const DefaultIdleTimeout = 10 * time.Minute

// Options tunes a Balancer. The zero value gives the defaults.
type Options struct {
	// IdleTimeout after which a silent conversation is forgotten and,
	// with it, its claim on an old table. It must exceed the longest gap
	// between two requests of a conversation that should keep its server
	// (for RADIUS accounting, the interim interval). Default
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxSessions bounds the conversation memory. Default 1<<20.
	MaxSessions int
	// Now is the clock. Default time.Now. Tests inject a fake one.
	Now func() time.Time
	// InitialState of every server. Default InService; use Down when the
	// connections are not open yet and raise each with SetState.
	InitialState State
}

// oldTable is a previous generation kept for conversations in progress.
type oldTable struct {
	gen   uint64
	table *bucketTable
	// unsureUntil, when not nil, holds for each bucket the clock until
	// which an unknown Session-Id hashing there may be a conversation of
	// this table that the memory never saw (the bucket moved away from a
	// server still in service before its conversations had all been
	// remembered for IdleTimeout): such a Session-Id keeps this table's
	// server. unsureEnd is the latest of them.
	unsureUntil *[NumBuckets]int64
	unsureEnd   int64
}

// unsure reports whether an unknown Session-Id in bucket h may be a
// conversation of o at time now.
func (o *oldTable) unsure(h uint8, now int64) bool {
	return o.unsureUntil != nil && now < o.unsureUntil[h]
}

// unwatched marks a bucket whose new conversations are not remembered.
const unwatched = math.MinInt64

// bucketSet is a set of the 256 buckets.
type bucketSet [NumBuckets / 64]uint64

func (s *bucketSet) add(h int)        { s[h>>6] |= 1 << (h & 63) }
func (s *bucketSet) has(h uint8) bool { return s[h>>6]&(1<<(h&63)) != 0 }
func (s *bucketSet) empty() bool      { return *s == bucketSet{} }
func (s *bucketSet) union(o bucketSet) {
	for i := range s {
		s[i] |= o[i]
	}
}

// picker is an immutable routing snapshot. Everything it points to is
// read-only once published.
type picker struct {
	gen   uint64
	table *bucketTable // pearson, hash: current table
	old   []oldTable   // pearson: previous tables still referenced, newest first
	// watch (pearson) holds the buckets that the next change of the
	// in-service set could move from one in-service server to another:
	// only new conversations there are remembered. quiet: watch and
	// diverted are empty and no old table lives, so Pick does not consult
	// the memory at all.
	watch bucketSet
	// divert (pearson) holds the buckets whose owner is suspended: a new
	// conversation there goes where the walk sends it and is remembered
	// there, so that it stays when the owner comes back or goes down.
	divert bucketSet
	quiet  bool
	// sparse: watch is empty and no old table lives, but diverted is
	// not empty: only the diverted buckets need the memory, so a request
	// carrying a NAI outside them does not consult it (one without a NAI
	// does: its conversation may have started with one).
	sparse bool
	// uniform: every bucket of table names one server (a single server
	// in service), and that one is in service or no more than one other
	// is, so a walk's answer does not depend on the key and Pick needs no
	// hash.
	uniform bool
	servers []Server // by slot, as of this snapshot (SetServers changes them)
	removed []bool   // by slot: no longer configured
	state   []State  // by slot
	ready   []int16  // in-service slots by (Index, slot): direct, round-robin
	// diverted (pearson) holds the buckets (of their first request) of
	// the conversations diverted from a suspended server that may still
	// be remembered: divert, and every bucket a Sweep found one in.
	diverted bucketSet
}

// Balancer picks servers for requests. Create it with New.
type Balancer struct {
	// Immutable after New.
	alg     Algorithm
	initial State // a new server's state (Options.InitialState)
	idle    int64 // ns
	touch   int64 // ns: refresh a conversation's last use at most this often
	// forget (ns): a conversation is forgotten once its recorded last use
	// is older than this, idle + touch, since the record may lag its real
	// last use by up to touch.
	forget int64
	now    func() time.Time
	epoch  time.Time
	// mono: now is time.Now, so clock reads only the monotonic clock
	// (time.Since), half the cost of time.Now's wall and monotonic reads.
	mono bool

	// Shared with Pick, lock-free.
	cur  atomic.Pointer[picker]
	rr   atomic.Uint64 // round-robin counter
	sess sessions      // conversation memory (pearson)

	// Owned by writers (SetState, SetServers, Sweep), guarded by mu.
	mu      sync.Mutex
	servers []Server       // by slot, weights normalized; slots are never reused for another name
	byName  map[string]int // name -> slot
	removed []bool         // by slot: taken out of the configuration by SetServers
	state   []State        // by slot
	member  []bool         // by slot: holds buckets (in the in-service set)
	gen     uint64
	// watchSince[h] is the clock since which bucket h has been watched
	// under its current owner without a break (every new conversation
	// there remembered), or unwatched.
	watchSince [NumBuckets]int64
	// home (pearson) is the table with every server in service: buckets
	// go back to their home server when it returns (see buildTable).
	home *bucketTable
	// diverted: the buckets where conversations diverted from a
	// suspended server may be remembered (those of the suspended servers
	// since the last scan of the memory, and those where the scan found
	// one alive); while it is not empty, Pick must consult the memory
	// there and the memory must be kept.
	diverted bucketSet
}

// New builds a Balancer over servers with the given algorithm.
func New(alg Algorithm, servers []Server, opts Options) (*Balancer, error) {
	if int(alg) >= len(algNames) {
		return nil, fmt.Errorf("loadbalance: invalid algorithm %d", alg)
	}
	if len(servers) == 0 || len(servers) > NumBuckets {
		return nil, fmt.Errorf("loadbalance: need 1 to %d servers, got %d", NumBuckets, len(servers))
	}
	if opts.IdleTimeout < 0 || opts.MaxSessions < 0 {
		return nil, errors.New("loadbalance: negative IdleTimeout or MaxSessions")
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.MaxSessions == 0 {
		opts.MaxSessions = 1 << 20
	}
	mono := opts.Now == nil
	if mono {
		opts.Now = time.Now
	}
	if opts.InitialState == 0 {
		opts.InitialState = InService
	}
	if opts.InitialState > Down {
		return nil, fmt.Errorf("loadbalance: invalid initial state %d", opts.InitialState)
	}
	b := &Balancer{
		alg:     alg,
		initial: opts.InitialState,
		servers: make([]Server, len(servers)),
		removed: make([]bool, len(servers)),
		byName:  make(map[string]int, len(servers)),
		idle:    int64(opts.IdleTimeout),
		touch:   min(int64(time.Second), int64(opts.IdleTimeout)/8),
		forget:  int64(opts.IdleTimeout) + min(int64(time.Second), int64(opts.IdleTimeout)/8),
		now:     opts.Now,
		mono:    mono,
		state:   make([]State, len(servers)),
		member:  make([]bool, len(servers)),
	}
	b.epoch = b.now()
	for i, s := range servers {
		if s.Name == "" {
			return nil, fmt.Errorf("loadbalance: server %d has no name", i)
		}
		if _, dup := b.byName[s.Name]; dup {
			return nil, fmt.Errorf("loadbalance: duplicate server name %q", s.Name)
		}
		w, err := checkWeight(s)
		if err != nil {
			return nil, err
		}
		s.Weight = w
		b.servers[i] = s
		b.byName[s.Name] = i
		b.state[i] = opts.InitialState
		b.member[i] = opts.InitialState == InService
	}
	b.sess.init(opts.MaxSessions)
	b.gen = 1
	for h := range b.watchSince {
		b.watchSince[h] = unwatched
	}
	b.buildHome()
	t := b.buildTable(nil)
	b.rewatch(nil, t, b.clock())
	b.publish(t, nil)
	return b, nil
}

// buildHome builds the table with every server the Balancer knows in
// service (pearson): where buckets return to. A server removed by
// SetServers keeps its home buckets, to take them back if it is named
// again; a server added or reweighted moves as few buckets of the home as
// it can, as a change of the servers in service does with the current
// table, so that a server added takes back, after a stay down, the
// buckets it took when it came. Caller holds mu (or is New).
func (b *Balancer) buildHome() {
	if b.alg != Pearson {
		return
	}
	member := b.member
	b.member = make([]bool, len(member))
	for i := range b.member {
		b.member[i] = true
	}
	b.home = b.buildTable(b.home)
	b.member = member
}

// buildTable builds the next table from prev for the current members.
// Caller holds mu.
func (b *Balancer) buildTable(prev *bucketTable) *bucketTable {
	if b.alg == Direct || b.alg == RoundRobin {
		return nil
	}
	var ms []member
	for slot, in := range b.member {
		if in {
			w := b.servers[slot].Weight
			if b.alg == Hash {
				w = 1
			}
			ms = append(ms, member{slot: slot, index: b.servers[slot].Index, weight: w})
		}
	}
	sortMembers(ms)
	return buildTable(prev, b.home, ms)
}

// movable returns the buckets of t that a single change of the in-service
// set (any one non-member joining, any one member leaving) would give to
// another server while their current owner stays in the table: the only
// buckets whose conversations a rebuild must know about (those of a
// leaving server move whatever the memory holds). A server removed by
// SetServers cannot join until it is named again, which is a new
// configuration and a rebuild of its own (the buckets it then takes back
// are covered as any unwatched bucket a rebuild moves), so it is not
// counted: otherwise its home buckets would stay watched for good.
// Caller holds mu.
func (b *Balancer) movable(t *bucketTable) bucketSet {
	var set bucketSet
	if b.alg != Pearson {
		return set
	}
	for slot := range b.member {
		if b.removed[slot] {
			continue
		}
		b.member[slot] = !b.member[slot]
		alt := b.buildTable(t)
		b.member[slot] = !b.member[slot]
		for h, s := range t {
			if s != noSlot && int(s) != slot && alt[h] != s {
				set.add(h)
			}
		}
	}
	return set
}

// rewatch recomputes the watched buckets for the new table nt (which
// replaces prev, nil at first) and keeps watchSince in step. A watched
// bucket is fully covered (since = now - IdleTimeout) when it has a new
// owner, or at the start: its owner holds no conversation there from
// before. A bucket that keeps its owner and starts being watched is
// covered only IdleTimeout later, once the conversations from before have
// either spoken (and been remembered) or aged out. Caller holds mu.
func (b *Balancer) rewatch(prev, nt *bucketTable, now int64) {
	w := b.movable(nt)
	for h := range b.watchSince {
		switch {
		case !w.has(uint8(h)):
			b.watchSince[h] = unwatched
		case prev == nil || prev[h] != nt[h]:
			b.watchSince[h] = now - b.idle
		case b.watchSince[h] == unwatched:
			b.watchSince[h] = now
		}
	}
}

// unsureBuckets returns, for the rebuild from prev to nt, until when each
// bucket that moved from a server still in the table may hold unknown
// conversations of prev: those not watched for a whole IdleTimeout before
// now. nil when there is none. Caller holds mu, before rewatch.
func (b *Balancer) unsureBuckets(prev, nt *bucketTable, now int64) (*[NumBuckets]int64, int64) {
	var until *[NumBuckets]int64
	var end int64
	for h, s := range prev {
		if s == noSlot || nt[h] == s || !b.member[s] {
			continue
		}
		since := b.watchSince[h]
		if since != unwatched && now-since >= b.idle {
			continue // every conversation still alive there is remembered
		}
		if since == unwatched {
			since = now
		}
		if until == nil {
			until = new([NumBuckets]int64)
		}
		until[h] = since + b.idle
		end = max(end, until[h])
	}
	return until, end
}

// publish swaps in a new snapshot. Caller holds mu (or is New).
func (b *Balancer) publish(t *bucketTable, old []oldTable) {
	p := &picker{gen: b.gen, table: t, old: old, servers: slices.Clone(b.servers), removed: slices.Clone(b.removed), state: slices.Clone(b.state), uniform: t.uniform()}
	if b.alg == Pearson {
		for h, since := range b.watchSince {
			if since != unwatched {
				p.watch.add(h)
			}
		}
		for h, s := range t {
			if s != noSlot && b.state[s] == Suspended {
				p.divert.add(h)
			}
		}
		b.diverted.union(p.divert)
		p.diverted = b.diverted
		p.quiet = p.watch.empty() && len(old) == 0 && b.diverted.empty()
		p.sparse = p.watch.empty() && len(old) == 0 && !b.diverted.empty()
	}
	var ms []member
	for slot, st := range b.state {
		if st == InService {
			ms = append(ms, member{slot: slot, index: b.servers[slot].Index})
		}
	}
	sortMembers(ms)
	for _, m := range ms {
		p.ready = append(p.ready, int16(m.slot))
	}
	// A walk past a table whose one server is not in service chooses
	// among the others by the key.
	p.uniform = p.uniform && (b.state[t[0]] == InService || len(p.ready) <= 1)
	b.cur.Store(p)
}

// clock is the time since the Balancer was made, in ns. It is read on
// every Pick of a remembered conversation.
func (b *Balancer) clock() int64 {
	if b.mono {
		return int64(time.Since(b.epoch))
	}
	return int64(b.now().Sub(b.epoch))
}

// SetState records a server's new state. It reports whether the bucket
// table was rebuilt (a new generation), which happens only when the set of
// in-service servers changed: Down -> InService, or InService/Suspended ->
// Down. Suspended <-> InService for a server already in the table only
// publishes a new snapshot. A rebuild also purges idle conversations and
// drops old tables no live conversation refers to.
func (b *Balancer) SetState(name string, st State) (rebuilt bool, err error) {
	if st < InService || st > Down {
		return false, fmt.Errorf("loadbalance: invalid state %d", st)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	slot, ok := b.byName[name]
	if !ok || b.removed[slot] {
		return false, fmt.Errorf("loadbalance: unknown server %q", name)
	}
	if b.state[slot] == st {
		return false, nil
	}
	b.state[slot] = st
	was := b.member[slot]
	switch st {
	case InService:
		b.member[slot] = true
	case Down:
		b.member[slot] = false
	}
	if b.member[slot] == was {
		cur := b.cur.Load()
		b.publish(cur.table, cur.old)
		return false, nil
	}
	b.rebuildLocked()
	return true, nil
}

// rebuildLocked starts a new generation: the table for the current
// members, the previous one kept for the conversations it routed.
// Caller holds mu.
func (b *Balancer) rebuildLocked() {
	cur := b.cur.Load()
	b.gen++
	nt := b.buildTable(cur.table)
	var old []oldTable
	if b.alg == Pearson {
		now := b.clock()
		until, end := b.unsureBuckets(cur.table, nt, now)
		old = append(old, oldTable{gen: cur.gen, table: cur.table, unsureUntil: until, unsureEnd: end})
		old = append(old, cur.old...)
		_, perGen, diverted := b.sess.sweep(now, b.forget)
		old = keepReferenced(old, perGen, now)
		b.diverted = diverted
		b.rewatch(cur.table, nt, now)
		b.forgetIfQuiet(old, now)
	}
	b.publish(nt, old)
}

// MaxSlots bounds how many distinct server names a Balancer knows over
// its life (New's and every SetServers'): a removed server keeps its slot,
// so that a conversation it started can be told from another's and the
// server can come back to its buckets.
const MaxSlots = 1024

// SetServers replaces the configured servers, as a reload of the
// configuration does: a server named before keeps its state and its
// conversations and takes the new Weight and Index; a new name starts in
// Options.InitialState; a name left out leaves the table as a server going
// down does (its conversations move on, the others keep their servers
// while the old table lives). Nothing changes on an error: an empty list,
// a duplicate or empty name, a negative weight or one above MaxWeight,
// or more than MaxSlots names over the Balancer's life. It reports whether the table was
// rebuilt (a new generation).
func (b *Balancer) SetServers(servers []Server) (rebuilt bool, err error) {
	if len(servers) == 0 || len(servers) > NumBuckets {
		return false, fmt.Errorf("loadbalance: need 1 to %d servers, got %d", NumBuckets, len(servers))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	want := make(map[string]Server, len(servers))
	added := 0
	for i, s := range servers {
		if s.Name == "" {
			return false, fmt.Errorf("loadbalance: server %d has no name", i)
		}
		w, err := checkWeight(s)
		if err != nil {
			return false, err
		}
		if _, dup := want[s.Name]; dup {
			return false, fmt.Errorf("loadbalance: duplicate server name %q", s.Name)
		}
		s.Weight = w
		want[s.Name] = s
		if _, ok := b.byName[s.Name]; !ok {
			added++
		}
	}
	if len(b.servers)+added > MaxSlots {
		return false, fmt.Errorf("loadbalance: more than %d server names over the balancer's life", MaxSlots)
	}
	changed := false // a change of the table's members or weights
	listed := false  // a change of the servers listed only
	for slot, srv := range b.servers {
		s, keep := want[srv.Name]
		switch {
		case !keep && !b.removed[slot]:
			listed = true
			b.removed[slot], b.state[slot] = true, Down
			changed = changed || b.member[slot]
			b.member[slot] = false
		case keep:
			changed = changed || s.Weight != srv.Weight || s.Index != srv.Index || b.removed[slot]
			if b.removed[slot] {
				b.removed[slot], b.state[slot] = false, b.initial
				b.member[slot] = b.initial == InService
			}
			b.servers[slot] = s
		}
	}
	for _, s := range servers {
		if _, ok := b.byName[s.Name]; ok {
			continue
		}
		b.byName[s.Name] = len(b.servers)
		b.servers = append(b.servers, want[s.Name])
		b.removed = append(b.removed, false)
		b.state = append(b.state, b.initial)
		b.member = append(b.member, b.initial == InService)
		changed = true
	}
	if !changed {
		if listed {
			// A server down removed: the table stays, Snapshot lists it
			// no more, and its home buckets, which its return would have
			// moved, are watched no more (no rebuild recomputes them).
			cur := b.cur.Load()
			if b.alg == Pearson {
				now := b.clock()
				b.rewatch(cur.table, cur.table, now)
				b.forgetIfQuiet(cur.old, now)
			}
			b.publish(cur.table, cur.old)
		}
		return false, nil
	}
	b.buildHome()
	b.rebuildLocked()
	return true, nil
}

// keepReferenced filters old tables down to those some live conversation
// started under, or that may still claim unknown ones.
func keepReferenced(old []oldTable, perGen map[uint64]int, now int64) []oldTable {
	var kept []oldTable
	for _, o := range old {
		if perGen[o.gen] > 0 || now < o.unsureEnd {
			kept = append(kept, o)
		}
	}
	return kept
}

// forgetIfQuiet empties the conversation memory when nothing in it can
// matter any more: no bucket watched and no old table. Caller holds mu.
func (b *Balancer) forgetIfQuiet(old []oldTable, now int64) {
	if !b.diverted.empty() {
		return
	}
	for _, since := range b.watchSince {
		if since != unwatched {
			return
		}
	}
	if len(old) == 0 && b.sess.count() > 0 {
		b.sess.mu.Lock()
		b.sess.rehash(now, -1, false)
		b.sess.mu.Unlock()
	}
}

// Sweep purges conversations idle for longer than IdleTimeout and drops the
// old tables no live conversation refers to any more, ending the transition
// once the last old conversation has aged out. The owner calls it
// periodically (e.g. every IdleTimeout/2); it costs time proportional to
// the remembered conversations and never blocks Pick. It returns the number
// of conversations purged.
func (b *Balancer) Sweep() (purged int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock()
	purged, perGen, diverted := b.sess.sweep(now, b.forget)
	cur := b.cur.Load()
	old := keepReferenced(cur.old, perGen, now)
	was := b.diverted
	b.diverted = diverted
	b.diverted.union(cur.divert)
	if len(old) != len(cur.old) || b.diverted != was {
		b.publish(cur.table, old)
	}
	if b.alg == Pearson {
		n := b.sess.count()
		b.forgetIfQuiet(old, now)
		purged += n - b.sess.count()
	}
	return purged
}

// IdleTimeout is the time after which an idle conversation is forgotten
// (Options.IdleTimeout, or its default): Sweep at least every half of it.
func (b *Balancer) IdleTimeout() time.Duration { return time.Duration(b.idle) }

// Generation is the current table generation. It starts at 1 and grows by
// one at each rebuild.
func (b *Balancer) Generation() uint64 { return b.cur.Load().gen }

// Pick chooses the server for r. It never blocks, and allocates only to
// remember a first-seen Session-Id that a rebuild could move (pearson; see
// the package documentation). It returns ErrNoServer when no server can
// take the request.
//
// With pearson, a request of a known conversation goes to the server its
// starting table gave it (or, for one that started or spoke while that
// server was suspended, the server it was sent to instead), while that
// server is in service; if that server is suspended, the request goes
// where a new conversation would and the conversation stays there while
// that one is in service (a move back would be a second move); if it is
// down or its table is gone, the conversation moves to the current table
// for good.
// Requests of a remembered conversation keep the bucket of its first
// request, even if later ones lack the NAI.
func (b *Balancer) Pick(r Request) (Server, error) { return b.Picker().Pick(r) }

// Picker is one routing snapshot of a Balancer: its table and its
// servers' states as of one change, immutable. An owner that keeps its
// own view of the servers takes a Picker in the same step as the view, so
// that what the view says is in service and what the Picker picks from
// are one. The memory of conversations is the Balancer's, shared by its
// Pickers; the tables it binds conversations to are the newest
// snapshot's: a Picker older than the current one routes a conversation
// as its own view allows but never binds it to its older table, so that a
// conversation started under a newer table keeps its server. (The first
// request of a new conversation through an older Picker goes where that
// Picker's view allows; its next ones follow the current table.) The zero
// Picker picks nothing. A Picker is safe for concurrent use.
type Picker struct {
	b *Balancer
	p *picker
}

// Picker returns the current routing snapshot.
func (b *Balancer) Picker() Picker { return Picker{b, b.cur.Load()} }

// Pick chooses the server for r as Balancer.Pick did when k was current.
func (k Picker) Pick(r Request) (Server, error) {
	b, p := k.b, k.p
	if p == nil {
		return Server{}, ErrNoServer
	}
	var slot int
	switch b.alg {
	case Direct:
		if len(p.ready) == 0 {
			return Server{}, ErrNoServer
		}
		slot = int(p.ready[0])
	case RoundRobin:
		if len(p.ready) == 0 {
			return Server{}, ErrNoServer
		}
		slot = int(p.ready[(b.rr.Add(1)-1)%uint64(len(p.ready))])
	case Hash:
		slot = p.walk(p.table, p.hash(r), nil)
	default:
		slot = b.pickPearson(p, r)
	}
	if slot == noSlot {
		return Server{}, ErrNoServer
	}
	return p.servers[slot], nil
}

func keyHash(r Request) uint8 {
	if r.NAI != "" {
		return PearsonHashString(r.NAI)
	}
	return PearsonHashString(r.SessionID)
}

// hash is keyHash(r) where the bucket matters, 0 where it does not (a
// uniform table: every bucket names the same server).
func (p *picker) hash(r Request) uint8 {
	if p.uniform {
		return 0
	}
	return keyHash(r)
}

func (b *Balancer) pickPearson(p *picker, r Request) int {
	if r.SessionID == "" || p.quiet {
		return p.walk(p.table, p.hash(r), nil)
	}
	if p.sparse && r.NAI != "" {
		// Only diverted conversations matter, and one whose first
		// request carried this NAI is in its bucket.
		if h := keyHash(r); !p.diverted.has(h) {
			return p.walk(p.table, h, nil)
		}
	}
	now := b.clock()
	h := b.sess.hash(r.SessionID)
	c := b.sess.lookup(h, r.SessionID)
	if c == nil {
		bucket := keyHash(r)
		// Which table an unknown Session-Id belongs to, and whether to
		// remember it, is the newest snapshot's call: a newer Picker may
		// have started this conversation without remembering it (nothing
		// could move it there), and an older Picker still in use must not
		// bind it to its own older table. It only routes it, below.
		q := p
		if cur := b.cur.Load(); cur.gen > p.gen {
			q = cur
		}
		gen := q.gen
		// The oldest table that may claim it: while its window lasts,
		// every unknown Session-Id of the bucket went to its server and
		// was remembered, so the newer tables' servers got none unseen.
		for i := len(q.old) - 1; i >= 0; i-- {
			if q.old[i].unsure(bucket, now) {
				gen = q.old[i].gen // may be a conversation of that table
				break
			}
		}
		tag := packTag(gen, bucket)
		switch {
		case gen == p.gen && p.divert.has(bucket):
			// Its server is suspended: remembered where the walk sends
			// it, to stay there (see route).
			var s int
			if s, tag = p.place(bucket); s == noSlot {
				return noSlot
			}
		case gen == q.gen && !q.watch.has(bucket):
			if q == p {
				return p.walk(p.table, bucket, nil) // no change could move it
			}
			return b.route(p, tag, nil)
		}
		c = &conv{key: strings.Clone(r.SessionID), hash: h}
		c.tag.Store(tag)
		c.last.Store(now)
		if c = b.sess.insert(c, now, b.forget); c == nil {
			return b.route(p, tag, nil) // not remembered
		}
	}
	last := c.last.Load()
	tag := c.tag.Load()
	if now-last > b.forget {
		// Aged out: a new conversation under the newest table (this
		// Picker's, unless it is an older one still in use: tags only
		// move forward). Only the Pick that refreshes last from the
		// aged value re-tags, so that another one that read the aged
		// last cannot overwrite a tag written since (its re-tag or a
		// later move); it follows the tag as it finds it.
		if c.last.CompareAndSwap(last, now) {
			nt := packTag(max(tagGen(tag), b.cur.Load().gen), keyHash(r))
			if tagGen(nt) == p.gen {
				_, nt = p.place(uint8(nt))
			}
			if c.tag.CompareAndSwap(tag, nt) {
				return b.route(p, nt, c)
			}
		}
		tag = c.tag.Load()
	} else if now-last >= b.touch {
		c.last.Store(now)
	}
	return b.route(p, tag, c)
}

// route returns the slot for a conversation tagged tag, as p sees it: its
// starting table's server while that is in service; if it is suspended,
// the current table's walk, re-tagging c (when not nil) as diverted there
// (see divert); the current table once that server is down or its table
// gone, moving c there for good. A diverted conversation (started or
// spoken while its server was suspended) is routed likewise by the server
// the walk gave it, whatever the tables say.
//
// A tag newer than p was written through a newer Picker; p, taken
// before, is still in use. The conversation keeps its tag (it would
// otherwise be bound to p's older table for good) and goes to the server
// its table gives it if p has that one in service, else where p sends a
// new conversation.
func (b *Balancer) route(p *picker, tag uint64, c *conv) int {
	gen, bucket := tagGen(tag), uint8(tag)
	if d := tagDiverted(tag); d != noSlot {
		switch {
		case d < len(p.state) && p.state[d] == InService:
			return d
		case gen > p.gen:
			return p.walk(p.table, bucket, nil) // p is older than the tag
		case d < len(p.state) && p.state[d] == Suspended:
			return b.divert(p, tag, c) // now on the walk's server
		}
		// d down: the current table for good.
		return b.move(p, tag, c)
	}
	if gen == p.gen {
		if p.divert.has(bucket) { // its server is suspended
			return b.divert(p, tag, c)
		}
		return p.walk(p.table, bucket, nil)
	}
	if gen > p.gen {
		if t := b.tableOf(gen); t != nil {
			if s := t[bucket]; s != noSlot && int(s) < len(p.state) && p.state[s] == InService {
				return int(s)
			}
		}
		return p.walk(p.table, bucket, nil)
	}
	for _, o := range p.old {
		if o.gen != gen {
			continue
		}
		s := o.table[bucket]
		switch {
		case s == noSlot:
		case p.state[s] == InService:
			return int(s)
		case p.state[s] == Suspended:
			return b.divert(p, tag, c)
		}
		break
	}
	// Old server down or old table gone: move to the current table.
	return b.move(p, tag, c)
}

// move returns where p sends a new conversation of tag's bucket and moves
// c (when not nil) there for good: re-tagged under p's table. The CAS
// fails if a newer Picker retagged it meanwhile. A Picker older than the
// current snapshot only routes it: re-tagged under its older table, the
// conversation would follow that table's server, not the current one's.
func (b *Balancer) move(p *picker, tag uint64, c *conv) int {
	s, nt := p.place(uint8(tag))
	if c != nil && b.cur.Load().gen == p.gen {
		c.tag.CompareAndSwap(tag, nt)
	}
	return s
}

// divert returns where p's walk sends a conversation tagged tag whose
// server is suspended, and re-tags c (when not nil) as diverted there: it
// is now on that server and stays there while that one is in service, as
// a conversation started there meanwhile does, rather than move a second
// time when its first server comes back or goes down. A Picker older
// than the current snapshot only routes it.
func (b *Balancer) divert(p *picker, tag uint64, c *conv) int {
	bucket := uint8(tag)
	s := p.walk(p.table, bucket, nil)
	if c != nil && s != noSlot && b.cur.Load().gen == p.gen {
		c.tag.CompareAndSwap(tag, packDiverted(p.gen, s, bucket))
	}
	return s
}

// place returns where p sends a new conversation of bucket, and the tag
// it starts with under p's table: diverted to that server when the
// bucket's owner is suspended.
func (p *picker) place(bucket uint8) (int, uint64) {
	s := p.walk(p.table, bucket, nil)
	if s != noSlot && p.divert.has(bucket) {
		return s, packDiverted(p.gen, s, bucket)
	}
	return s, packTag(p.gen, bucket)
}

// tableOf returns the table of generation gen if the current snapshot
// still has it, else nil.
func (b *Balancer) tableOf(gen uint64) *bucketTable {
	cur := b.cur.Load()
	if cur.gen == gen {
		return cur.table
	}
	for _, o := range cur.old {
		if o.gen == gen {
			return o.table
		}
	}
	return nil
}

// walk returns the owner of bucket h in t if it is in service, else the
// owner of the first of h+1, h+2, ... (wrapping) that is. If no bucket's
// owner is in service, a server in service may still hold no bucket (its
// weight too small a share for one): then one of those, chosen by h so
// that a key keeps its server and the keys spread over them; noSlot if
// none. skip, when non-nil, marks slots to treat as suspended.
func (p *picker) walk(t *bucketTable, h uint8, skip []bool) int {
	for i := 0; i < NumBuckets; i++ {
		s := t[h]
		if s != noSlot && p.state[s] == InService && (skip == nil || !skip[s]) {
			return int(s)
		}
		h++
	}
	for k := range p.ready {
		s := int(p.ready[(int(h)+k)%len(p.ready)])
		if skip == nil || !skip[s] {
			return s
		}
	}
	return noSlot
}
