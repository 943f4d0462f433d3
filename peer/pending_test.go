package peer

import (
	"math/rand/v2"
	"testing"
)

// TestPendingTableAgainstMap runs random puts, gets and deletes on a
// pendingTable and on a map side by side, ids mostly in sequence with
// some left behind and some far apart (so that slots collide and the
// array grows to its bound), and checks that they agree after every step.
func TestPendingTableAgainstMap(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		var tb pendingTable
		ref := map[uint32]*dcall{}
		next := r.Uint32()
		var live []uint32
		for step := range 20000 {
			switch k := r.IntN(10); {
			case k < 5 || len(live) == 0: // a new request
				id := next
				next++
				if r.IntN(50) == 0 {
					id = r.Uint32() // an id far from the others
				}
				if _, dup := ref[id]; dup {
					continue
				}
				cl := &dcall{}
				tb.put(id, cl)
				ref[id] = cl
				live = append(live, id)
			case k < 9: // an answer: mostly the oldest
				i := 0
				if r.IntN(4) == 0 {
					i = r.IntN(len(live))
				}
				id := live[i]
				live = append(live[:i], live[i+1:]...)
				if got := tb.get(id); got != ref[id] {
					t.Fatalf("seed %d step %d: get(%d) = %p, want %p", seed, step, id, got, ref[id])
				}
				tb.del(id)
				delete(ref, id)
			default: // an id not in the table
				id := r.Uint32()
				if got := tb.get(id); got != ref[id] {
					t.Fatalf("seed %d step %d: get(%d) of an absent id = %p", seed, step, id, got)
				}
				tb.del(id)
				delete(ref, id)
			}
			if step%97 == 0 {
				checkSame(t, &tb, ref)
			}
		}
		checkSame(t, &tb, ref)
		if len(tb.slots) > maxPendingSlots {
			t.Fatalf("seed %d: %d slots, bound %d", seed, len(tb.slots), maxPendingSlots)
		}
		tb.clear()
		if tb.len() != 0 || tb.get(live[0]) != nil {
			t.Fatalf("seed %d: not empty after clear", seed)
		}
	}
}

// TestPendingTableFullArray: past maxPendingSlots entries the array stops
// growing and the rest go to the map, every one still found.
func TestPendingTableFullArray(t *testing.T) {
	var tb pendingTable
	n := 3 * maxPendingSlots
	cls := make([]*dcall, n)
	for i := range n {
		cls[i] = &dcall{}
		tb.put(uint32(i), cls[i])
	}
	if len(tb.slots) != maxPendingSlots || len(tb.over) != n-maxPendingSlots || tb.len() != n {
		t.Fatalf("%d slots, %d in the map, len %d", len(tb.slots), len(tb.over), tb.len())
	}
	for i := range n {
		if tb.get(uint32(i)) != cls[i] {
			t.Fatalf("id %d lost", i)
		}
	}
}

func checkSame(t *testing.T, tb *pendingTable, ref map[uint32]*dcall) {
	t.Helper()
	if tb.len() != len(ref) {
		t.Fatalf("len %d, want %d", tb.len(), len(ref))
	}
	seen := 0
	tb.each(func(id uint32, cl *dcall) {
		if ref[id] != cl {
			t.Fatalf("each: %d -> %p, want %p", id, cl, ref[id])
		}
		seen++
	})
	if seen != len(ref) {
		t.Fatalf("each saw %d, want %d", seen, len(ref))
	}
}

// BenchmarkPendingTable: one request's life on a busy connection (put its
// id, find and delete the id of the answer that came back), 256 pending,
// against a map.
func BenchmarkPendingTable(b *testing.B) {
	const live = 256
	cl := &dcall{}
	b.Run("table", func(b *testing.B) {
		var tb pendingTable
		for i := range uint32(live) {
			tb.put(i, cl)
		}
		id := uint32(live)
		for b.Loop() {
			tb.put(id, cl)
			old := id - live
			if tb.get(old) == nil {
				b.Fatal("lost")
			}
			tb.del(old)
			id++
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[uint32]*dcall{}
		for i := range uint32(live) {
			m[i] = cl
		}
		id := uint32(live)
		for b.Loop() {
			m[id] = cl
			old := id - live
			if m[old] == nil {
				b.Fatal("lost")
			}
			delete(m, old)
			id++
		}
	})
}
