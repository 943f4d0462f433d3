package loadbalance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// Two absences that overlap: each server takes back its own buckets when
// it returns, and with every server in service again the table is the
// one they started with.
func TestOverlappingAbsencesEndAtHome(t *testing.T) {
	ss := []Server{{Name: "s0", Index: 0}, {Name: "s1", Index: 1}, {Name: "s2", Index: 2}, {Name: "s3", Index: 3}}
	b, err := New(Pearson, ss, Options{})
	if err != nil {
		t.Fatal(err)
	}
	home := b.Snapshot().Table
	for _, step := range []struct {
		name string
		st   State
	}{{"s1", Down}, {"s2", Down}, {"s1", InService}, {"s2", InService}} {
		if _, err := b.SetState(step.name, step.st); err != nil {
			t.Fatal(err)
		}
		if step.st != InService {
			continue
		}
		tab := b.Snapshot().Table
		for h := range home {
			if home[h] == step.name && tab[h] != step.name {
				t.Errorf("%s back: its bucket %d is %s's", step.name, h, tab[h])
			}
		}
	}
	if got := b.Snapshot().Table; got != home {
		t.Errorf("every server back in service: %.0f%% of the buckets not home", 100*MovedFraction(home, got))
	}
}

// Random absences of weighted servers, overlapping or not: with every
// server back in service, the table is the home table.
func TestEveryServerBackIsHome(t *testing.T) {
	for seed := range uint64(1000) {
		rng := rand.New(rand.NewPCG(seed, 33))
		n := 2 + rng.IntN(10)
		var ss []Server
		for i := range n {
			w := 1 + rng.IntN(10)
			if rng.IntN(4) == 0 {
				w = 1 + rng.IntN(MaxWeight)
			}
			ss = append(ss, Server{Name: fmt.Sprint("s", i), Weight: w, Index: i})
		}
		b, err := New(Pearson, ss, Options{})
		if err != nil {
			t.Fatal(err)
		}
		home := b.Snapshot().Table
		down := map[int]bool{}
		var steps []string
		for range 1 + rng.IntN(8) {
			i := rng.IntN(n)
			st := Down
			if down[i] {
				st = InService
			}
			if _, err := b.SetState(ss[i].Name, st); err != nil {
				t.Fatal(err)
			}
			down[i] = st == Down
			steps = append(steps, fmt.Sprint(ss[i].Name, " ", st))
		}
		for i := range n {
			if down[i] {
				b.SetState(ss[i].Name, InService)
				steps = append(steps, fmt.Sprint(ss[i].Name, " ", InService))
			}
		}
		if got := b.Snapshot().Table; got != home {
			t.Fatalf("seed %d: %v, steps %v: %.0f%% of the buckets not home", seed, ss, steps, 100*MovedFraction(home, got))
		}
	}
}

// With a home table, every rebuild meets its quotas, gives each member
// its home buckets (up to its quota), and moves the minimum number of
// buckets but for those that go back to their home server from a member
// that stays; one absence at a time moves exactly the minimum.
func TestBuildTableWithHomeMovesTheMinimumButToGoHome(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 34))
		n := 2 + rng.IntN(10)
		var all []member
		for i := range n {
			all = append(all, member{slot: i, index: i, weight: 1 + rng.IntN(10)})
		}
		home := buildTable(nil, nil, all)
		homeCount := home.counts(n)
		single := seed%2 == 0 // one absence at a time
		in := make([]bool, n)
		for i := range in {
			in[i] = true
		}
		prev := home
		for step := range 40 {
			i := rng.IntN(n)
			if single && slices.Contains(in, false) {
				for j := range in {
					in[j] = true
				}
			} else if single {
				in[i] = false
			} else {
				in[i] = !in[i]
			}
			var ms []member
			for _, m := range all {
				if in[m.slot] {
					ms = append(ms, m)
				}
			}
			next := buildTable(prev, home, ms)
			checkQuotas(t, next, ms, n)
			if len(ms) == 0 {
				prev = next
				continue
			}
			q := apportion(ms)
			for k, m := range ms {
				own := 0
				for h := range next {
					if next[h] == home[h] && int(home[h]) == m.slot {
						own++
					}
				}
				if want := min(q[k], homeCount[m.slot]); own != want {
					t.Fatalf("seed %d step %d: slot %d holds %d of its home buckets, want %d", seed, step, m.slot, own, want)
				}
			}
			wentHome := 0
			for h := range next {
				if next[h] != prev[h] && next[h] == home[h] && prev[h] != noSlot && in[prev[h]] {
					wentHome++
				}
			}
			moved, least := movedBuckets(prev, next), minMoved(prev, ms, q, n)
			if moved < least || moved > least+wentHome || single && moved != least {
				t.Fatalf("seed %d step %d: moved %d buckets, minimum %d, %d went home from a member that stays", seed, step, moved, least, wentHome)
			}
			prev = next
		}
	}
}
