package loadbalance

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a deterministic, race-free clock for Options.Now.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func servers(n int) []Server {
	s := make([]Server, n)
	for i := range s {
		s[i] = Server{Name: fmt.Sprintf("s%d", i), Weight: 1, Index: i}
	}
	return s
}

func mustNew(t testing.TB, alg Algorithm, srv []Server, opts Options) *Balancer {
	t.Helper()
	b, err := New(alg, srv, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustPick(t testing.TB, b *Balancer, r Request) string {
	t.Helper()
	s, err := b.Pick(r)
	if err != nil {
		t.Fatalf("Pick(%+v): %v", r, err)
	}
	return s.Name
}

func setState(t testing.TB, b *Balancer, name string, st State, wantRebuild bool) {
	t.Helper()
	rebuilt, err := b.SetState(name, st)
	if err != nil {
		t.Fatal(err)
	}
	if rebuilt != wantRebuild {
		t.Fatalf("SetState(%s, %v): rebuilt = %v, want %v", name, st, rebuilt, wantRebuild)
	}
}

func randomNAI(rng *rand.Rand) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 8+rng.IntN(16))
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	return string(b) + "@example.net"
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []Algorithm{Pearson, Hash, Direct, RoundRobin} {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Fatalf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := ParseAlgorithm("random"); err == nil {
		t.Fatal("ParseAlgorithm accepted an unknown name")
	}
}

func TestNewValidates(t *testing.T) {
	bad := [][]Server{
		nil,
		{{Name: ""}},
		{{Name: "a"}, {Name: "a"}},
		{{Name: "a", Weight: -1}},
	}
	for _, s := range bad {
		if _, err := New(Pearson, s, Options{}); err == nil {
			t.Fatalf("New accepted %+v", s)
		}
	}
	b := mustNew(t, Pearson, servers(2), Options{})
	if _, err := b.SetState("nope", Down); err == nil {
		t.Fatal("SetState accepted an unknown server")
	}
	if _, err := b.SetState("s0", State(9)); err == nil {
		t.Fatal("SetState accepted an invalid state")
	}
}

func TestPearsonDistributionFollowsWeights(t *testing.T) {
	srv := []Server{{"w1", 1, 0}, {"w2", 2, 1}, {"w3", 3, 2}, {"w4", 4, 3}}
	b := mustNew(t, Pearson, srv, Options{})
	rng := rand.New(rand.NewPCG(42, 1))
	const n = 100_000
	got := map[string]int{}
	for i := 0; i < n; i++ {
		got[mustPick(t, b, Request{NAI: randomNAI(rng)})]++
	}
	for _, s := range srv {
		want := float64(n) * float64(s.Weight) / 10
		dev := math.Abs(float64(got[s.Name])-want) / want
		t.Logf("%s: %d picks, expected %.0f, deviation %.2f%%", s.Name, got[s.Name], want, 100*dev)
		if dev > 0.05 {
			t.Errorf("%s deviates %.1f%% from its weight", s.Name, 100*dev)
		}
	}
}

func TestSameNAISameServer(t *testing.T) {
	b := mustNew(t, Pearson, servers(8), Options{})
	rng := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 1000; i++ {
		nai := randomNAI(rng)
		first := mustPick(t, b, Request{NAI: nai})
		for j := 0; j < 5; j++ {
			// Different conversations of the same user land together too.
			if s := mustPick(t, b, Request{NAI: nai, SessionID: fmt.Sprintf("sess;%d;%d", i, j)}); s != first {
				t.Fatalf("NAI %q went to %s then %s", nai, first, s)
			}
		}
		_, routed, err := b.Route(nai)
		if err != nil || routed != first {
			t.Fatalf("Route(%q) = %q, %v; Pick said %q", nai, routed, err, first)
		}
	}
}

func TestNoNAIFallsBackToSessionID(t *testing.T) {
	b := mustNew(t, Hash, servers(8), Options{})
	for i := 0; i < 200; i++ {
		sid := fmt.Sprintf("nas.example.net;%d;1", i)
		_, want, _ := b.Route(sid)
		if got := mustPick(t, b, Request{SessionID: sid}); got != want {
			t.Fatalf("no-NAI request with %q went to %s, its Session-Id routes to %s", sid, got, want)
		}
	}
}

func TestMovementThroughBalancer(t *testing.T) {
	const n = 8
	b := mustNew(t, Pearson, servers(n), Options{})
	t0 := b.Snapshot().Table
	setState(t, b, "s3", Down, true)
	t1 := b.Snapshot().Table
	removal := MovedFraction(t0, t1)
	setState(t, b, "s3", InService, true)
	t2 := b.Snapshot().Table
	addition := MovedFraction(t1, t2)
	t.Logf("remove 1 of %d: moved %.4f (ideal 1/%d = %.4f); add it back: moved %.4f (ideal 1/%d = %.4f)",
		n, removal, n, 1.0/n, addition, n, 1.0/n)
	if removal != 1.0/n || addition != 1.0/n {
		t.Fatalf("moved %.4f on removal and %.4f on addition, want exactly %.4f", removal, addition, 1.0/n)
	}
	for h := range t0 {
		if t0[h] != "s3" && t0[h] != t1[h] {
			t.Fatalf("bucket %d moved from surviving %s to %s", h, t0[h], t1[h])
		}
		if t1[h] != t2[h] && t2[h] != "s3" {
			t.Fatalf("bucket %d moved between old servers on addition", h)
		}
	}
	// From 7 to 8 after a fresh build of 7 (quotas 37,37,37,37,36,36,36).
	b7 := mustNew(t, Pearson, servers(n), Options{InitialState: Down})
	for i := 0; i < n-1; i++ {
		b7.SetState(fmt.Sprintf("s%d", i), InService)
	}
	before := b7.Snapshot().Table
	b7.SetState("s7", InService)
	if f := MovedFraction(before, b7.Snapshot().Table); f != 32.0/256 {
		t.Fatalf("7 -> 8: moved %.4f, want 1/8", f)
	}
}

func TestSuspendedDoesNotRebuildAndUsesNextBucket(t *testing.T) {
	b := mustNew(t, Pearson, servers(4), Options{})
	snap := b.Snapshot()
	gen := snap.Generation
	setState(t, b, "s1", Suspended, false)
	if b.Generation() != gen || b.Snapshot().Table != snap.Table {
		t.Fatal("suspension changed the table")
	}
	rng := rand.New(rand.NewPCG(9, 9))
	moved := 0
	for i := 0; i < 2000; i++ {
		nai := randomNAI(rng)
		h := PearsonHashString(nai)
		got := mustPick(t, b, Request{NAI: nai})
		if snap.Table[h] != "s1" {
			if got != snap.Table[h] {
				t.Fatalf("%q (bucket %d of %s) moved to %s", nai, h, snap.Table[h], got)
			}
			continue
		}
		moved++
		// Next bucket in order whose server is not suspended.
		want := ""
		for k := 1; k < NumBuckets; k++ {
			if o := snap.Table[uint8(int(h)+k)]; o != "s1" {
				want = o
				break
			}
		}
		if got != want {
			t.Fatalf("%q in suspended bucket %d went to %s, next bucket's server is %s", nai, h, got, want)
		}
	}
	if moved == 0 {
		t.Fatal("no NAI hit the suspended server's buckets")
	}
	// Back in service with the same set: no rebuild, traffic returns.
	setState(t, b, "s1", InService, false)
	if b.Generation() != gen {
		t.Fatal("return from suspension rebuilt the table")
	}
	for h := 0; h < NumBuckets; h++ {
		_, got, _ := b.Route(string(rune(h)))
		if want := snap.Table[PearsonHashString(string(rune(h)))]; got != want {
			t.Fatalf("after resume bucket of %q goes to %s, want %s", string(rune(h)), got, want)
		}
	}
	// Route's hypothetical suspension agrees with a real one.
	_, hypo, _ := b.Route("someone@example.net", "s1", "s2")
	setState(t, b, "s1", Suspended, false)
	setState(t, b, "s2", Suspended, false)
	if real := mustPick(t, b, Request{NAI: "someone@example.net"}); real != hypo {
		t.Fatalf("Route with s1,s2 suspended said %s, Pick says %s", hypo, real)
	}
}

func TestDownFromSuspendedRebuildsAndReopenNeedsInService(t *testing.T) {
	b := mustNew(t, Pearson, servers(3), Options{})
	setState(t, b, "s0", Suspended, false)
	setState(t, b, "s0", Down, true)
	// A reopened connection still suspect does not join the table.
	setState(t, b, "s0", Suspended, false)
	if n := b.Snapshot().Servers[0].Buckets; n != 0 {
		t.Fatalf("suspended-after-down server owns %d buckets", n)
	}
	setState(t, b, "s0", InService, true)
	if n := b.Snapshot().Servers[0].Buckets; n != 86 {
		t.Fatalf("returned server owns %d buckets, want 86", n)
	}
}

func TestErrNoServer(t *testing.T) {
	for _, alg := range []Algorithm{Pearson, Hash, Direct, RoundRobin} {
		b := mustNew(t, alg, servers(2), Options{})
		b.SetState("s0", Suspended)
		b.SetState("s1", Down)
		if _, err := b.Pick(Request{NAI: "a@b", SessionID: "x"}); !errors.Is(err, ErrNoServer) {
			t.Fatalf("%v: Pick with nothing in service: %v", alg, err)
		}
		b.SetState("s0", InService)
		if got := mustPick(t, b, Request{NAI: "a@b", SessionID: "x"}); got != "s0" {
			t.Fatalf("%v: got %s, want s0", alg, got)
		}
	}
	b := mustNew(t, Pearson, servers(2), Options{InitialState: Down})
	if _, err := b.Pick(Request{NAI: "a@b"}); !errors.Is(err, ErrNoServer) {
		t.Fatalf("all down initially: %v", err)
	}
	if _, _, err := b.Route("a@b"); !errors.Is(err, ErrNoServer) {
		t.Fatalf("Route all down: %v", err)
	}
}

func TestDirect(t *testing.T) {
	srv := []Server{{"c", 1, 3}, {"a", 1, 1}, {"b", 1, 2}}
	b := mustNew(t, Direct, srv, Options{})
	for i := 0; i < 10; i++ {
		if got := mustPick(t, b, Request{NAI: fmt.Sprint(i)}); got != "a" {
			t.Fatalf("direct picked %s, want a (lowest index)", got)
		}
	}
	b.SetState("a", Suspended)
	if got := mustPick(t, b, Request{}); got != "b" {
		t.Fatalf("direct with a suspended picked %s, want b", got)
	}
	if _, got, _ := b.Route("x", "b"); got != "c" {
		t.Fatalf("Route with a, b out: %s, want c", got)
	}
	b.SetState("a", InService)
	if got := mustPick(t, b, Request{}); got != "a" {
		t.Fatalf("direct after a returned picked %s", got)
	}
}

func TestRoundRobin(t *testing.T) {
	b := mustNew(t, RoundRobin, servers(3), Options{})
	count := map[string]int{}
	for i := 0; i < 300; i++ {
		count[mustPick(t, b, Request{NAI: "same@user"})]++
	}
	for _, s := range servers(3) {
		if count[s.Name] != 100 {
			t.Fatalf("round-robin counts %v", count)
		}
	}
	b.SetState("s1", Down)
	clear(count)
	for i := 0; i < 100; i++ {
		count[mustPick(t, b, Request{})]++
	}
	if count["s1"] != 0 || count["s0"] != 50 || count["s2"] != 50 {
		t.Fatalf("round-robin with s1 down: %v", count)
	}
	if _, _, err := b.Route("x"); !errors.Is(err, ErrNoAffinity) {
		t.Fatalf("Route on round-robin: %v", err)
	}
}

func TestHashIsUnweightedAndHasNoMemory(t *testing.T) {
	srv := []Server{{"a", 1, 0}, {"b", 9, 1}}
	b := mustNew(t, Hash, srv, Options{})
	s := b.Snapshot()
	if s.Servers[0].Buckets != 128 || s.Servers[1].Buckets != 128 {
		t.Fatalf("hash buckets %d/%d, want equal", s.Servers[0].Buckets, s.Servers[1].Buckets)
	}
	for i := 0; i < 100; i++ {
		b.Pick(Request{NAI: fmt.Sprint(i), SessionID: fmt.Sprint(i)})
	}
	if s := b.Snapshot(); s.Sessions != 0 {
		t.Fatalf("hash remembered %d conversations", s.Sessions)
	}
	b.SetState("a", Down)
	if s := b.Snapshot(); len(s.OldGenerations) != 0 || s.Servers[1].Buckets != 256 {
		t.Fatalf("hash rebuild: %+v", s)
	}
}

func TestPickAllocations(t *testing.T) {
	b := mustNew(t, Pearson, servers(8), Options{})
	r := Request{NAI: "user0123456789@example.net", SessionID: "nas;1;2"}
	mustPick(t, b, r)
	if n := testing.AllocsPerRun(200, func() { b.Pick(r) }); n != 0 {
		t.Fatalf("known session: %v allocs", n)
	}
	if n := testing.AllocsPerRun(200, func() { b.Pick(Request{NAI: r.NAI}) }); n != 0 {
		t.Fatalf("no session: %v allocs", n)
	}
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = fmt.Sprintf("nas;%d;fresh", i)
	}
	i := 0
	if n := testing.AllocsPerRun(200, func() { b.Pick(Request{NAI: r.NAI, SessionID: ids[i]}); i++ }); n > 1 {
		t.Fatalf("first-seen session: %v allocs, want at most 1", n)
	}
}

// With one server holding every bucket, Pick skips the hash: the picker
// must say so exactly when it is true, and Pick must still agree with
// Route (which always hashes) for every combination of states.
func TestUniformTableSkipsTheHash(t *testing.T) {
	states := []State{InService, Suspended, Down}
	for _, alg := range []Algorithm{Pearson, Hash} {
		b := mustNew(t, alg, servers(3), Options{})
		rng := rand.New(rand.NewPCG(1, 2))
		for combo := range 27 {
			st := []State{states[combo%3], states[combo/3%3], states[combo/9]}
			for i, s := range st {
				if _, err := b.SetState(fmt.Sprintf("s%d", i), s); err != nil {
					t.Fatal(err)
				}
			}
			snap := b.Snapshot()
			one := false
			for _, s := range snap.Servers {
				one = one || s.Buckets == NumBuckets
			}
			if got := b.cur.Load().uniform; got != one {
				t.Fatalf("%v %v: uniform %v, but one server holds every bucket: %v", alg, st, got, one)
			}
			for range 200 {
				nai := randomNAI(rng)
				_, want, werr := b.Route(nai)
				got, gerr := b.Pick(Request{NAI: nai})
				if (werr == nil) != (gerr == nil) || werr == nil && got.Name != want {
					t.Fatalf("%v %v: Pick(%q) = %q, %v; Route = %q, %v", alg, st, nai, got.Name, gerr, want, werr)
				}
			}
		}
	}
}
