package loadbalance

import "sort"

// NumBuckets is the number of buckets in a table: one per Pearson hash value.
const NumBuckets = 256

// noSlot marks a bucket that belongs to no server (empty in-service set).
const noSlot = -1

// bucketTable maps a hash value to the slot (position in the configured
// server list) that owns it, or noSlot. A bucketTable is immutable once
// published.
type bucketTable [NumBuckets]int16

// uniform reports whether every bucket of t names the same server (nil:
// no table, false).
func (t *bucketTable) uniform() bool {
	if t == nil || t[0] == noSlot {
		return false
	}
	for _, s := range t {
		if s != t[0] {
			return false
		}
	}
	return true
}

// member is a server taking part in a table build.
type member struct {
	slot   int // position in the configured server list
	index  int // configured Server.Index, the first tie-break
	weight int // > 0
}

// sortMembers orders members by configured Index, then slot: the
// deterministic tie-break order used by apportionment and assignment.
func sortMembers(ms []member) {
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].index != ms[j].index {
			return ms[i].index < ms[j].index
		}
		return ms[i].slot < ms[j].slot
	})
}

// apportion returns each member's bucket quota (aligned with ms, which must
// be sorted by sortMembers): the largest-remainder (Hamilton) apportionment
// of NumBuckets in proportion to the weights. Leftover buckets go to the
// largest remainders; equal remainders are broken by configured order.
func apportion(ms []member) []int {
	q := make([]int, len(ms))
	if len(ms) == 0 {
		return q
	}
	// In int64: at most MaxSlots members of at most MaxWeight each, times
	// NumBuckets, fits whatever the size of int.
	var total int64
	for _, m := range ms {
		total += int64(m.weight)
	}
	rem := make([]int64, len(ms))
	given := 0
	for i, m := range ms {
		q[i] = int(NumBuckets * int64(m.weight) / total)
		rem[i] = NumBuckets * int64(m.weight) % total
		given += q[i]
	}
	order := make([]int, len(ms))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return rem[order[a]] > rem[order[b]] })
	for k := 0; given < NumBuckets; k++ {
		q[order[k]]++
		given++
	}
	return q
}

// buildTable assigns the 256 buckets to ms (sorted by sortMembers) in
// proportion to their weights, moving as few buckets as possible from prev
// (nil for a first build):
//
//   - every member keeps min(its buckets in prev, its new quota) of its old
//     buckets; when it must shed some, the kept ones are spread evenly over
//     its old buckets rather than cut from one end;
//   - the freed buckets (those of servers that left, and any excess) go to
//     the members still under quota, interleaved by smooth weighted
//     round-robin on their deficits, so each takes buckets until it reaches
//     its quota.
//
// The number of buckets that change owner is therefore exactly
// NumBuckets - sum(min(old_i, quota_i)), the minimum for these quotas. A
// first build is the same procedure with nothing kept, which interleaves the
// servers over the hash space (so a suspended server's traffic, which walks
// to the next buckets, spreads over several servers).
//
// With home (the table of every configured server in service; nil for
// none), every member first takes its home buckets, up to its quota (those
// it holds first), wherever they are; only then does it keep its other
// old buckets (those whose home server is not in the set first) and take
// freed ones. So a server that leaves and comes back takes back the
// buckets it had, the others keep their own, whatever the order of the
// absences before, and with every server of home in service the table is
// home. The buckets that the next change of the set can move are known in
// advance. A bucket moves beyond the minimum above only to go back to its
// home server, where another member holds it and keeps its quota: after
// absences that overlapped.
func buildTable(prev, home *bucketTable, ms []member) *bucketTable {
	t := new(bucketTable)
	for i := range t {
		t[i] = noSlot
	}
	if len(ms) == 0 {
		return t
	}
	quota := apportion(ms)
	pos := make(map[int]int, len(ms)) // slot -> position in ms
	for i, m := range ms {
		pos[m.slot] = i
	}
	has := make([]int, len(ms))
	// take gives member i q of bs (all unassigned), spread evenly over them.
	take := func(i int, bs []int, q int) {
		k := len(bs)
		if q > k {
			q = k
		}
		for j, b := range bs {
			// Take the j-th bucket iff floor((j+1)q/k) > floor(jq/k):
			// exactly q of the k, evenly spread.
			if (j+1)*q/k > j*q/k {
				t[b] = int16(ms[i].slot)
				has[i]++
			}
		}
	}
	if home != nil {
		// Home buckets first: those the member holds, then the others.
		held := make([][]int, len(ms))
		away := make([][]int, len(ms))
		for b, h := range home {
			i, ok := pos[int(h)]
			if h == noSlot || !ok {
				continue
			}
			if prev != nil && prev[b] == h {
				held[i] = append(held[i], b)
			} else {
				away[i] = append(away[i], b)
			}
		}
		for i := range ms {
			q := quota[i]
			for _, group := range [][]int{held[i], away[i]} {
				n := min(q, len(group))
				take(i, group, n)
				q -= n
			}
		}
	}

	// Old buckets of each surviving member not taken above, in bucket
	// order: with home, those whose home is not in the set (they have
	// nowhere to go back to), then the others (their home server is at
	// its quota).
	if prev != nil {
		old := make([][]int, len(ms))
		var others [][]int
		if home != nil {
			others = make([][]int, len(ms))
		}
		for b, s := range prev {
			i, ok := pos[int(s)]
			if s == noSlot || !ok || t[b] != noSlot {
				continue
			}
			if home != nil && home[b] != noSlot && inSet(pos, int(home[b])) {
				others[i] = append(others[i], b)
			} else {
				old[i] = append(old[i], b)
			}
		}
		for i := range ms {
			q := quota[i] - has[i]
			n := min(q, len(old[i]))
			take(i, old[i], n)
			if others != nil {
				take(i, others[i], q-n)
			}
		}
	}

	free := 0
	deficit := make([]int, len(ms))
	for i := range ms {
		deficit[i] = quota[i] - has[i]
		free += deficit[i]
	}
	cur := make([]int, len(ms))
	for b := range t {
		if t[b] != noSlot {
			continue
		}
		best := -1
		for i, d := range deficit {
			if d == 0 {
				continue
			}
			cur[i] += d
			if best < 0 || cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= free
		t[b] = int16(ms[best].slot)
	}
	return t
}

func inSet(pos map[int]int, slot int) bool {
	_, ok := pos[slot]
	return ok
}

// counts returns how many buckets each slot owns (indexed by slot; n slots).
func (t *bucketTable) counts(n int) []int {
	c := make([]int, n)
	for _, s := range t {
		if s != noSlot {
			c[s]++
		}
	}
	return c
}

// Table is a bucket table as an operator sees it: Table[h] is the name of
// the server that owns hash value h, or "" when no server is in service.
type Table [NumBuckets]string

// MovedFraction reports the fraction (0..1) of the 256 buckets whose owner
// differs between two tables: the share of hash space (and so, of new
// conversations) a rebuild moved.
func MovedFraction(before, after Table) float64 {
	moved := 0
	for i := range before {
		if before[i] != after[i] {
			moved++
		}
	}
	return float64(moved) / NumBuckets
}
