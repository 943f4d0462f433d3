package loadbalance

import (
	"fmt"
	"math"
	"testing"
)

func bucketsOf(s Snapshot) map[string]int {
	m := map[string]int{}
	for _, srv := range s.Servers {
		m[srv.Name] = srv.Buckets
	}
	return m
}

// A server added by SetServers starts in the initial state and takes its
// share once in service, moving buckets only from the others to it; the
// conversations in progress keep their servers.
func TestSetServersAddsAServer(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(3), Options{Now: clk.Now})
	cs := startConversations(t, b, 500, "before")
	t0 := b.Snapshot().Table
	rebuilt, err := b.SetServers(append(servers(3), Server{Name: "new", Weight: 1, Index: 3}))
	if err != nil || !rebuilt {
		t.Fatalf("SetServers: rebuilt %v, %v", rebuilt, err)
	}
	if st := b.Snapshot().Servers[3]; st.Name != "new" || st.State != InService || st.Buckets != 64 {
		t.Fatalf("added server %+v, want in service with 64 buckets", st)
	}
	t1 := b.Snapshot().Table
	for h := range t0 {
		if t0[h] != t1[h] && t1[h] != "new" {
			t.Fatalf("bucket %d moved between old servers (%s -> %s)", h, t0[h], t1[h])
		}
	}
	for _, c := range cs {
		if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != c.server {
			t.Fatalf("conversation %s moved from %s to %s", c.sid, c.server, got)
		}
	}
	// Its buckets are its home: after a stay down it gets the same back.
	setState(t, b, "s1", Down, true)
	setState(t, b, "new", Down, true)
	setState(t, b, "s1", InService, true)
	setState(t, b, "new", InService, true)
	if got := b.Snapshot().Table; got != t1 {
		t.Fatal("the added server came back to other buckets than its own")
	}
	// With Down as the initial state, the new server takes nothing until
	// it is raised.
	d := mustNew(t, Pearson, servers(2), Options{InitialState: Down})
	setState(t, d, "s0", InService, true)
	if _, err := d.SetServers(append(servers(2), Server{Name: "new", Index: 2})); err != nil {
		t.Fatal(err)
	}
	if n := bucketsOf(d.Snapshot())["new"]; n != 0 {
		t.Fatalf("a new server down holds %d buckets", n)
	}
	setState(t, d, "new", InService, true)
	if n := bucketsOf(d.Snapshot())["new"]; n != 128 {
		t.Fatalf("new server in service beside one other holds %d buckets, want 128", n)
	}
}

// A server left out leaves the table as one going down does, is no longer
// listed, takes no state, and comes back to its own buckets when named
// again.
func TestSetServersRemovesAServer(t *testing.T) {
	b := mustNew(t, Pearson, servers(4), Options{})
	t0 := b.Snapshot().Table
	rebuilt, err := b.SetServers([]Server{{Name: "s0", Index: 0}, {Name: "s1", Index: 1}, {Name: "s3", Index: 3}})
	if err != nil || !rebuilt {
		t.Fatalf("SetServers: rebuilt %v, %v", rebuilt, err)
	}
	s := b.Snapshot()
	if len(s.Servers) != 3 {
		t.Fatalf("listed %d servers, want 3", len(s.Servers))
	}
	for h, name := range s.Table {
		if name == "s2" {
			t.Fatalf("bucket %d still names the removed server", h)
		}
		if t0[h] != "s2" && t0[h] != name {
			t.Fatalf("bucket %d moved from %s, which stayed, to %s", h, t0[h], name)
		}
	}
	if _, err := b.SetState("s2", InService); err == nil {
		t.Fatal("SetState of a removed server accepted")
	}
	for i := range 200 {
		if got := mustPick(t, b, Request{NAI: fmt.Sprintf("u%d", i)}); got == "s2" {
			t.Fatal("a removed server picked")
		}
	}
	if _, err := b.SetServers(servers(4)); err != nil {
		t.Fatal(err)
	}
	if got := b.Snapshot().Table; got != t0 {
		t.Fatal("the server named again did not get its own buckets back")
	}
}

// A server removed while down holds no bucket, so the table stays: it is
// no longer listed all the same.
func TestSetServersRemovesAServerDown(t *testing.T) {
	b := mustNew(t, Pearson, servers(3), Options{})
	setState(t, b, "s2", Down, true)
	t0 := b.Snapshot().Table
	rebuilt, err := b.SetServers(servers(2))
	if err != nil || rebuilt {
		t.Fatalf("SetServers: rebuilt %v, %v; want no rebuild", rebuilt, err)
	}
	s := b.Snapshot()
	if len(s.Servers) != 2 {
		t.Fatalf("listed %+v, want s0 and s1", s.Servers)
	}
	if s.Table != t0 {
		t.Fatal("the table changed")
	}
}

// A weight change gives the new shares.
func TestSetServersChangesWeights(t *testing.T) {
	b := mustNew(t, Pearson, servers(2), Options{})
	srv := servers(2)
	srv[1].Weight = 3
	if rebuilt, err := b.SetServers(srv); err != nil || !rebuilt {
		t.Fatalf("SetServers: rebuilt %v, %v", rebuilt, err)
	}
	if got := bucketsOf(b.Snapshot()); got["s0"] != 64 || got["s1"] != 192 {
		t.Fatalf("buckets %v, want s0 64 and s1 192", got)
	}
	// The new shares are the servers' homes: after a stay down, each
	// gets the same buckets back.
	t1 := b.Snapshot().Table
	for _, name := range []string{"s0", "s1"} {
		setState(t, b, name, Down, true)
		setState(t, b, name, InService, true)
		if got := b.Snapshot().Table; got != t1 {
			t.Fatalf("%s came back to other buckets after the weight change", name)
		}
	}
	if rebuilt, _ := b.SetServers(srv); rebuilt {
		t.Fatal("the same servers again rebuilt the table")
	}
}

// A bad list changes nothing, and the names a Balancer knows over its
// life are bounded.
func TestSetServersValidatesAndIsBounded(t *testing.T) {
	b := mustNew(t, Pearson, servers(2), Options{})
	t0 := b.Snapshot()
	for _, bad := range [][]Server{
		nil,
		{{Name: "s0"}, {Name: "s0"}},
		{{Name: "s0"}, {Name: ""}},
		{{Name: "x", Weight: -1}},
	} {
		if _, err := b.SetServers(bad); err == nil {
			t.Fatalf("SetServers(%v) accepted", bad)
		}
	}
	if got := b.Snapshot(); got.Generation != t0.Generation || got.Table != t0.Table || len(got.Servers) != 2 {
		t.Fatal("a refused list changed the balancer")
	}
	names := 2
	for names+4 <= MaxSlots {
		batch := make([]Server, 4)
		for i := range batch {
			batch[i] = Server{Name: fmt.Sprintf("n%d", names+i)}
		}
		if _, err := b.SetServers(batch); err != nil {
			t.Fatalf("after %d names: %v", names, err)
		}
		names += 4
	}
	if _, err := b.SetServers([]Server{{Name: "one-too-many"}, {Name: "and-another"}, {Name: "and-a-third"}, {Name: "and-a-fourth"}, {Name: "and-a-fifth"}}); err == nil {
		t.Fatalf("more than %d names accepted", MaxSlots)
	}
	if _, err := b.SetServers([]Server{{Name: "n8"}}); err != nil {
		t.Fatalf("a known name refused at the bound: %v", err)
	}
}

// Weights are bounded by MaxWeight: the bound itself is accepted (by New
// and SetServers, beside servers of weight 1, over the most names a
// Balancer may know) and shares the table by weight; one more is refused
// with an error, never a panic.
func TestWeightAboveMaxWeightIsRefused(t *testing.T) {
	for _, w := range []int{MaxWeight + 1, 1 << 56, math.MaxInt} {
		srv := []Server{{Name: "big", Weight: w}, {Name: "small", Weight: 1}}
		if _, err := New(Pearson, srv, Options{}); err == nil {
			t.Fatalf("New accepted weight %d", w)
		}
		b := mustNew(t, Pearson, servers(2), Options{})
		if _, err := b.SetServers(srv); err == nil {
			t.Fatalf("SetServers accepted weight %d", w)
		}
	}
	srv := []Server{{Name: "big", Weight: MaxWeight}, {Name: "small", Weight: 1}}
	b := mustNew(t, Pearson, srv, Options{})
	if got := bucketsOf(b.Snapshot()); got["big"]+got["small"] != NumBuckets || got["big"] < NumBuckets-1 {
		t.Fatalf("buckets with weights %d and 1: %v", MaxWeight, got)
	}
	// The most names a Balancer may know, every one at the bound: the
	// home table sums their weights.
	all := make([]Server, 0, MaxSlots)
	for i := range MaxSlots {
		all = append(all, Server{Name: fmt.Sprintf("n%d", i), Weight: MaxWeight, Index: i})
	}
	b = mustNew(t, Pearson, all[:NumBuckets], Options{})
	for k := NumBuckets; k < MaxSlots; k += NumBuckets {
		if _, err := b.SetServers(all[k : k+NumBuckets]); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range b.Snapshot().Servers {
		if s.Buckets != 1 {
			t.Fatalf("%s holds %d buckets, want 1 each", s.Name, s.Buckets)
		}
	}
}
