package loadbalance

import (
	"math/rand/v2"
	"testing"
)

func equalMembers(slots ...int) []member {
	ms := make([]member, len(slots))
	for i, s := range slots {
		ms[i] = member{slot: s, index: s, weight: 1}
	}
	return ms
}

// minMoved is the theoretical minimum number of buckets that must change
// owner to go from prev to quotas q: every server can keep at most
// min(old count, new quota).
func minMoved(prev *bucketTable, ms []member, q []int, nslots int) int {
	kept := 0
	if prev != nil {
		c := prev.counts(nslots)
		for i, m := range ms {
			kept += min(c[m.slot], q[i])
		}
	}
	return NumBuckets - kept
}

func movedBuckets(a, b *bucketTable) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

func checkQuotas(t *testing.T, tab *bucketTable, ms []member, nslots int) {
	t.Helper()
	q := apportion(ms)
	c := tab.counts(nslots)
	for i, m := range ms {
		if c[m.slot] != q[i] {
			t.Fatalf("slot %d owns %d buckets, quota %d", m.slot, c[m.slot], q[i])
		}
	}
}

func TestApportionLargestRemainder(t *testing.T) {
	ms := []member{{0, 0, 1}, {1, 1, 2}, {2, 2, 3}, {3, 3, 4}}
	// 256*w/10 = 25.6, 51.2, 76.8, 102.4 -> floors 25,51,76,102 (254);
	// the 2 leftovers go to the largest remainders .8 and .6.
	got := apportion(ms)
	want := []int{26, 51, 77, 102}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("apportion = %v, want %v", got, want)
		}
	}
	// Ties broken by configured order: 3 equal servers, 256 = 3*85 + 1.
	got = apportion(equalMembers(0, 1, 2))
	if got[0] != 86 || got[1] != 85 || got[2] != 85 {
		t.Fatalf("apportion equal = %v, want [86 85 85]", got)
	}
}

func TestBuildTableDeterministicAndInterleaved(t *testing.T) {
	ms := equalMembers(0, 1, 2, 3)
	a, b := buildTable(nil, nil, ms), buildTable(nil, nil, ms)
	if *a != *b {
		t.Fatal("same input built different tables")
	}
	checkQuotas(t, a, ms, 4)
	// Interleaved: no server owns a run longer than 1 bucket when equal.
	for i := 1; i < NumBuckets; i++ {
		if a[i] == a[i-1] {
			t.Fatalf("buckets %d and %d both owned by %d: not interleaved", i-1, i, a[i])
		}
	}
}

func TestBuildTableRemovalMovesOnlyTheLeaversShare(t *testing.T) {
	for n := 2; n <= 16; n++ {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		before := buildTable(nil, nil, equalMembers(all...))
		for gone := 0; gone < n; gone++ {
			rest := append(append([]int{}, all[:gone]...), all[gone+1:]...)
			ms := equalMembers(rest...)
			after := buildTable(before, nil, ms)
			checkQuotas(t, after, ms, n)
			moved := movedBuckets(before, after)
			// Only the leaver's buckets move: exactly its old share.
			if leaver := before.counts(n)[gone]; moved != leaver {
				t.Fatalf("n=%d remove %d: moved %d, leaver owned %d", n, gone, moved, leaver)
			}
			for b := range before {
				if int(before[b]) != gone && before[b] != after[b] {
					t.Fatalf("n=%d remove %d: bucket %d moved from a survivor", n, gone, b)
				}
			}
			if frac, ideal := float64(moved)/NumBuckets, 1/float64(n); frac > ideal+1.0/NumBuckets || frac < ideal-1.0/NumBuckets {
				t.Fatalf("n=%d: moved fraction %.4f, ideal 1/N = %.4f", n, frac, ideal)
			}
		}
	}
}

func TestBuildTableAdditionTakesOnlyItsQuota(t *testing.T) {
	for n := 1; n <= 15; n++ {
		old := make([]int, n)
		for i := range old {
			old[i] = i
		}
		before := buildTable(nil, nil, equalMembers(old...))
		ms := equalMembers(append(old, n)...)
		after := buildTable(before, nil, ms)
		checkQuotas(t, after, ms, n+1)
		moved := movedBuckets(before, after)
		if newcomer := after.counts(n + 1)[n]; moved != newcomer {
			t.Fatalf("n=%d add: moved %d, newcomer owns %d", n, moved, newcomer)
		}
		for b := range before {
			if before[b] != after[b] && int(after[b]) != n {
				t.Fatalf("n=%d add: bucket %d moved between old servers", n, b)
			}
		}
		if frac, ideal := float64(moved)/NumBuckets, 1/float64(n+1); frac > ideal+1.0/NumBuckets || frac < ideal-1.0/NumBuckets {
			t.Fatalf("n=%d: moved fraction %.4f, ideal 1/(N+1) = %.4f", n, frac, ideal)
		}
	}
}

// Random weighted set changes: every rebuild meets its quotas and moves
// exactly the theoretical minimum number of buckets.
func TestBuildTableRandomChangesAreMinimal(t *testing.T) {
	const nslots = 12
	rng := rand.New(rand.NewPCG(7, 7))
	weights := make([]int, nslots)
	for i := range weights {
		weights[i] = 1 + rng.IntN(9)
	}
	in := make([]bool, nslots)
	var prev *bucketTable
	for step := 0; step < 2000; step++ {
		in[rng.IntN(nslots)] = rng.IntN(3) > 0
		var ms []member
		for s := 0; s < nslots; s++ {
			if in[s] {
				ms = append(ms, member{slot: s, index: nslots - s, weight: weights[s]})
			}
		}
		sortMembers(ms)
		next := buildTable(prev, nil, ms)
		checkQuotas(t, next, ms, nslots)
		if prev != nil && len(ms) > 0 {
			if got, want := movedBuckets(prev, next), minMoved(prev, ms, apportion(ms), nslots); got != want {
				t.Fatalf("step %d: moved %d buckets, minimum %d", step, got, want)
			}
		}
		prev = next
	}
}

func TestMovedFraction(t *testing.T) {
	var a, b Table
	for i := range a {
		a[i], b[i] = "x", "x"
	}
	if f := MovedFraction(a, b); f != 0 {
		t.Fatalf("identical tables: %v", f)
	}
	for i := 0; i < 64; i++ {
		b[i] = "y"
	}
	if f := MovedFraction(a, b); f != 0.25 {
		t.Fatalf("64 of 256 changed: %v", f)
	}
}
