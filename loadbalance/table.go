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
// none), a member that must shed buckets keeps its home buckets first and
// sheds the others first, and a freed bucket goes first to its home server
// when that one is under quota. So a server that leaves and comes back
// takes back the buckets it had, the others keep theirs, and the buckets
// that the next change of the set can move are known in advance.
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

	// Old buckets of each surviving member, in bucket order.
	old := make([][]int, len(ms))
	if prev != nil {
		for b, s := range prev {
			if i, ok := pos[int(s)]; ok && s != noSlot {
				old[i] = append(old[i], b)
			}
		}
	}
	kept := make([]int, len(ms))
	keep := func(i int, bs []int, q int) {
		k := len(bs)
		if q > k {
			q = k
		}
		for j, b := range bs {
			// Keep the j-th bucket iff floor((j+1)q/k) > floor(jq/k):
			// exactly q of the k, evenly spread.
			if (j+1)*q/k > j*q/k {
				t[b] = int16(ms[i].slot)
				kept[i]++
			}
		}
	}
	for i, bs := range old {
		if home == nil || len(bs) <= quota[i] {
			keep(i, bs, quota[i])
			continue
		}
		// Its home buckets first, then those whose home is not in the
		// set (they have nowhere to go back to), then the rest.
		var own, homeless, others []int
		for _, b := range bs {
			switch h := int(home[b]); {
			case h == ms[i].slot:
				own = append(own, b)
			case h == noSlot || !inSet(pos, h):
				homeless = append(homeless, b)
			default:
				others = append(others, b)
			}
		}
		q := quota[i]
		for _, group := range [][]int{own, homeless, others} {
			n := min(q, len(group))
			keep(i, group, n)
			q -= n
		}
	}

	free := 0
	deficit := make([]int, len(ms))
	for i := range ms {
		deficit[i] = quota[i] - kept[i]
		free += deficit[i]
	}
	if home != nil {
		// Freed buckets go home when their home server has room.
		for b := range t {
			if t[b] != noSlot {
				continue
			}
			if i, ok := pos[int(home[b])]; ok && home[b] != noSlot && deficit[i] > 0 {
				t[b] = home[b]
				deficit[i]--
				free--
			}
		}
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
