package loadbalance

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// A Picker keeps the table of its moment: a change makes a new one and
// leaves the old one as it was.
func TestPickerIsASnapshot(t *testing.T) {
	b, err := New(Pearson, []Server{{Name: "s1", Weight: 1}, {Name: "s2", Weight: 1}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := b.Picker()
	if before.p != b.Picker().p {
		t.Fatal("two Pickers of one moment differ")
	}
	if _, err := b.SetState("s1", Down); err != nil {
		t.Fatal(err)
	}
	after := b.Picker()
	if after.p == before.p {
		t.Fatal("a change kept the Picker")
	}
	got := map[string]int{}
	for i := range 200 {
		r := Request{NAI: fmt.Sprintf("user%d@example.net", i)}
		s, err := before.Pick(r)
		if err != nil {
			t.Fatal(err)
		}
		got[s.Name]++
		if s, err := after.Pick(r); err != nil || s.Name != "s2" {
			t.Fatalf("after s1 went down: %v %v", s.Name, err)
		}
	}
	if got["s1"] == 0 || got["s2"] == 0 {
		t.Fatalf("the Picker before the change picked %v", got)
	}
	if _, err := (Picker{}).Pick(Request{NAI: "x"}); !errors.Is(err, ErrNoServer) {
		t.Fatalf("zero Picker: %v", err)
	}
}

// A Picker taken before a rebuild may still be used (the owner's view of
// that moment) while a newer one remembers conversations. A conversation
// the newer table started must not be bound back to the older table by
// the stale Picker: through the current Picker it keeps the server it
// started on.
func TestStalePickerDoesNotRebindNewerConversations(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now})
	setState(t, b, "s4", Down, true)           // gen 2
	setState(t, b, "s3", Down, true)           // gen 3
	startWatchedConversations(t, b, 500, "g3") // keep table 3 alive
	stale := b.Picker()
	setState(t, b, "s3", InService, true) // gen 4, table 3 kept
	if got := b.Snapshot().OldGenerations; len(got) == 0 || got[0] != 3 {
		t.Fatalf("old generations %v, want table 3 kept", got)
	}
	rng := rand.New(rand.NewPCG(4, 4))
	differs := 0
	for i := range 5000 {
		r := Request{NAI: randomNAI(rng), SessionID: fmt.Sprintf("g4;%d", i)}
		first := mustPick(t, b, r)
		if s, err := stale.Pick(r); err == nil && s.Name != first {
			differs++
		}
		if got := mustPick(t, b, r); got != first {
			t.Fatalf("%s started on %s, went to %s after a pick through an older Picker", r.SessionID, first, got)
		}
	}
	if differs == 0 {
		t.Fatal("the older Picker never disagreed: the test checks nothing")
	}
	t.Logf("the older Picker routed %d of 5000 elsewhere", differs)

	// The same after the conversations aged out: one seen again first
	// through the older Picker is a new conversation of the current
	// table, not of the older one.
	var cs []convo
	for i := range 5000 {
		c := convo{nai: randomNAI(rng), sid: fmt.Sprintf("aged;%d", i)}
		c.server = mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid})
		cs = append(cs, c)
	}
	clk.Advance(b.IdleTimeout() + time.Minute)
	for _, c := range cs {
		r := Request{NAI: c.nai, SessionID: c.sid}
		stale.Pick(r)
		_, want, _ := b.Route(c.nai)
		if got := mustPick(t, b, r); got != want {
			t.Fatalf("%s, aged out and seen again through an older Picker, went to %s; the current table says %s", c.sid, got, want)
		}
	}
}

// A conversation whose server went down moves to the current table for
// good; a Picker older than the current snapshot that routes it
// meanwhile routes it as its own view allows but does not bind it to its
// older table: through the current Picker it goes where the current
// table says.
func TestStalePickerDoesNotRebindWhenTheServerIsDown(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now})
	setState(t, b, "s4", Down, true) // gen 2
	cs := startWatchedConversations(t, b, 400, "g2")
	a := cs[0].server
	setState(t, b, a, Down, true)              // gen 3: a down
	startWatchedConversations(t, b, 400, "g3") // keep table 3 referenced
	stale := b.Picker()
	setState(t, b, "s4", InService, true) // gen 4
	cur := b.cur.Load()
	n := 0
	for _, c := range cs {
		if c.server != a {
			continue
		}
		n++
		r := Request{NAI: c.nai, SessionID: c.sid}
		if _, err := stale.Pick(r); err != nil {
			t.Fatal(err)
		}
		if g := tagGen(b.sess.lookup(b.sess.hash(c.sid), c.sid).tag.Load()); g > 2 && g < cur.gen {
			t.Fatalf("%s re-tagged by the generation %d Picker to generation %d (current %d)", c.sid, stale.p.gen, g, cur.gen)
		}
		_, want, _ := b.Route(c.nai)
		if got := mustPick(t, b, r); got != want {
			t.Fatalf("%s (its server %s down) went to %s after a pick through an older Picker; the current table says %s", c.sid, a, got, want)
		}
	}
	if n == 0 {
		t.Fatal("no conversation of " + a)
	}
}
