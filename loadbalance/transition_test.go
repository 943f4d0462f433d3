package loadbalance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"
)

type convo struct {
	nai, sid, server string
}

func startConversations(t *testing.T, b *Balancer, n int, prefix string) []convo {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), uint64(len(prefix))))
	cs := make([]convo, n)
	for i := range cs {
		cs[i].nai = randomNAI(rng)
		cs[i].sid = fmt.Sprintf("%s;%d;%d", prefix, i, rng.Uint32())
		cs[i].server = mustPick(t, b, Request{NAI: cs[i].nai, SessionID: cs[i].sid})
	}
	return cs
}

// watchedCount is how many of cs hash into a bucket the current snapshot
// watches.
func watchedCount(b *Balancer, cs []convo) int {
	p := b.cur.Load()
	n := 0
	for _, c := range cs {
		if p.watch.has(PearsonHashString(c.nai)) {
			n++
		}
	}
	return n
}

// startWatchedConversations starts n conversations whose NAIs hash into
// buckets the current snapshot watches (so all are remembered).
func startWatchedConversations(t *testing.T, b *Balancer, n int, prefix string) []convo {
	t.Helper()
	p := b.cur.Load()
	if p.watch.empty() {
		t.Fatal("no bucket watched")
	}
	rng := rand.New(rand.NewPCG(uint64(n), uint64(len(prefix))))
	cs := make([]convo, 0, n)
	for i := 0; len(cs) < n; i++ {
		nai := randomNAI(rng)
		if !p.watch.has(PearsonHashString(nai)) {
			continue
		}
		c := convo{nai: nai, sid: fmt.Sprintf("%s;%d;%d", prefix, i, rng.Uint32())}
		c.server = mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid})
		cs = append(cs, c)
	}
	return cs
}

func TestTransitionKeepsConversationsUntilTheyAgeOut(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now, IdleTimeout: 5 * time.Minute})
	setState(t, b, "s4", Down, true) // gen 2: s0..s3
	old := startConversations(t, b, 2000, "old")
	// Remembered: exactly the conversations in the buckets a change could
	// move (those s4's return takes, mostly).
	if got, want := b.Snapshot().Sessions, watchedCount(b, old); got != want || want == 0 || want == len(old) {
		t.Fatalf("remembered %d conversations, want the %d (of %d) in watched buckets", got, want, len(old))
	}

	// s4 returns to service: a new table, and a transition.
	before := b.Snapshot().Table
	setState(t, b, "s4", InService, true)
	snap := b.Snapshot()
	if !slices.Equal(snap.OldGenerations, []uint64{2}) || snap.Generation != 3 {
		t.Fatalf("generation %d, old %v; want 3 and [2]", snap.Generation, snap.OldGenerations)
	}
	movedConvs := 0
	for _, c := range old {
		h := PearsonHashString(c.nai)
		if before[h] == snap.Table[h] {
			continue
		}
		movedConvs++
		// Known conversation: stays on its old server.
		if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != c.server {
			t.Fatalf("old conversation %s moved from %s to %s during the transition", c.sid, c.server, got)
		}
		// The same user's new conversation: new table.
		if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid + ";new"}); got != "s4" || snap.Table[h] != "s4" {
			t.Fatalf("new conversation went to %s, new table says %s", got, snap.Table[h])
		}
		// Later requests of the conversation without the NAI keep its bucket.
		if got := mustPick(t, b, Request{SessionID: c.sid}); got != c.server {
			t.Fatalf("NAI-less request of %s went to %s, want %s", c.sid, got, c.server)
		}
	}
	t.Logf("%d of %d conversations were in buckets that moved to s4", movedConvs, len(old))
	if movedConvs == 0 {
		t.Fatal("no conversation in a moved bucket; test proves nothing")
	}

	// Age out: keep one old conversation alive, let the others go idle.
	var keep convo
	for _, c := range old {
		if h := PearsonHashString(c.nai); before[h] != snap.Table[h] {
			keep = c
			break
		}
	}
	for i := 0; i < 3; i++ {
		clk.Advance(2 * time.Minute)
		mustPick(t, b, Request{NAI: keep.nai, SessionID: keep.sid})
	}
	// 6 minutes since the others were seen: purged; keep holds table 2.
	remembered := b.Snapshot().Sessions
	if remembered < movedConvs {
		t.Fatalf("%d conversations remembered, fewer than the %d that moved", remembered, movedConvs)
	}
	purged := b.Sweep()
	if purged < remembered-1 {
		t.Fatalf("Sweep purged %d, want at least %d", purged, remembered-1)
	}
	if s := b.Snapshot(); !slices.Equal(s.OldGenerations, []uint64{2}) {
		t.Fatalf("old table dropped while a conversation still uses it: %v", s.OldGenerations)
	}
	if got := mustPick(t, b, Request{NAI: keep.nai, SessionID: keep.sid}); got != keep.server {
		t.Fatalf("live old conversation went to %s, want %s", got, keep.server)
	}
	// A purged conversation coming back is a new one: new table.
	for _, c := range old {
		h := PearsonHashString(c.nai)
		if c.sid != keep.sid && before[h] != snap.Table[h] {
			if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != snap.Table[h] {
				t.Fatalf("aged-out conversation went to %s, new table says %s", got, snap.Table[h])
			}
			break
		}
	}
	// Now the last one ages out too: the old table is dropped.
	clk.Advance(5*time.Minute + 2*time.Second)
	b.Sweep()
	if s := b.Snapshot(); len(s.OldGenerations) != 0 || s.Generation != 3 || s.Sessions != 0 {
		t.Fatalf("after ageing out: generation %d, old %v, sessions %d", s.Generation, s.OldGenerations, s.Sessions)
	}
	if got := mustPick(t, b, Request{NAI: keep.nai, SessionID: keep.sid}); got != "s4" {
		t.Fatalf("conversation after the transition went to %s, want s4", got)
	}
}

func TestTransitionIdleConversationFoundBeforeSweepUsesNewTable(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(3), Options{Now: clk.Now, InitialState: Down})
	b.SetState("s0", InService)
	b.SetState("s1", InService)
	cs := startConversations(t, b, 500, "idle")
	b.SetState("s2", InService) // transition from here
	tab := b.Snapshot().Table
	clk.Advance(b.IdleTimeout() + 2*time.Second)
	for _, c := range cs {
		if got, want := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}), tab[PearsonHashString(c.nai)]; got != want {
			t.Fatalf("idle conversation went to %s, new table says %s", got, want)
		}
	}
}

func TestTransitionOldServerDownOrSuspended(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(4), Options{Now: clk.Now})
	setState(t, b, "s3", Down, true)
	cs := startConversations(t, b, 2000, "x")
	t2 := b.Snapshot().Table
	setState(t, b, "s3", InService, true) // transition: gen 2 -> 3
	t3 := b.Snapshot().Table

	// Two old conversations whose bucket moved and whose old server is s0.
	var pair []convo
	for _, x := range cs {
		if h := PearsonHashString(x.nai); t2[h] != t3[h] && x.server == "s0" {
			pair = append(pair, x)
			if len(pair) == 2 {
				break
			}
		}
	}
	if len(pair) < 2 {
		t.Fatal("no suitable conversation")
	}
	c, quiet := pair[0], pair[1]
	r, rq := Request{NAI: c.nai, SessionID: c.sid}, Request{NAI: quiet.nai, SessionID: quiet.sid}

	// Old server suspended: the request goes where a new one would, and the
	// conversation is on that server now: it stays there once s0 is in
	// service again, and when s0 goes down. One silent meanwhile comes back
	// to s0.
	setState(t, b, "s0", Suspended, false)
	w := mustPick(t, b, r)
	if w == "s0" {
		t.Fatal("picked a suspended server")
	} else if _, want, _ := b.Route(c.nai); w != want {
		t.Fatalf("with its old server suspended, went to %s; current table routes to %s", w, want)
	}
	setState(t, b, "s0", InService, false)
	if got := mustPick(t, b, r); got != w {
		t.Fatalf("after resume went to %s, want %s where it went meanwhile", got, w)
	}
	if got := mustPick(t, b, rq); got != "s0" {
		t.Fatalf("silent during the suspension, after resume went to %s, want its old server s0", got)
	}

	// Old server down: the conversation moves to the current table for good.
	setState(t, b, "s0", Down, true) // gen 4
	if got := mustPick(t, b, r); got != w {
		t.Fatalf("with s0 down went to %s, want %s where it went during the suspension", got, w)
	}
	_, want, _ := b.Route(quiet.nai)
	if got := mustPick(t, b, rq); got != want || got == "s0" {
		t.Fatalf("with its old server down went to %s, current table says %s", got, want)
	}
	setState(t, b, "s0", InService, true) // gen 5; conversation now belongs to gen 4
	if got := mustPick(t, b, rq); got != want {
		t.Fatalf("after s0 returned the moved conversation went to %s, want to stay on %s", got, want)
	}
	if got := mustPick(t, b, r); got != w {
		t.Fatalf("after s0 returned the conversation went to %s, want to stay on %s", got, w)
	}
}

func TestSessionMemoryGrowsAndIsBounded(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(4), Options{Now: clk.Now, MaxSessions: 3000})
	setState(t, b, "s3", Down, true)
	cs := startWatchedConversations(t, b, 2900, "g") // forces several growths
	if s := b.Snapshot(); s.Sessions != 2900 || s.Untracked != 0 {
		t.Fatalf("sessions %d, untracked %d", s.Sessions, s.Untracked)
	}
	setState(t, b, "s3", InService, true)
	for _, c := range cs {
		if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != c.server {
			t.Fatalf("conversation lost across growth: %s went to %s, was %s", c.sid, got, c.server)
		}
	}
	setState(t, b, "s2", Down, true) // something to watch again
	startWatchedConversations(t, b, 500, "over")
	if s := b.Snapshot(); s.Sessions > 3000 || s.Untracked == 0 {
		t.Fatalf("bound not enforced: sessions %d, untracked %d", s.Sessions, s.Untracked)
	}
	clk.Advance(b.IdleTimeout() + time.Minute)
	if purged := b.Sweep(); purged < 2900 {
		t.Fatalf("purged %d", purged)
	}
	if s := b.Snapshot(); s.Sessions != 0 || len(s.OldGenerations) != 0 {
		t.Fatalf("after sweep: %+v", s.OldGenerations)
	}
}

// Concurrent Picks (with first-seen and known conversations, which grow the
// memory) while another goroutine changes the set and sweeps. Run with -race.
func TestConcurrentPicksWhileStateChanges(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(6), Options{Now: clk.Now, IdleTimeout: time.Second})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sid := fmt.Sprintf("g%d;%d", g, rng.IntN(5000))
				s, err := b.Pick(Request{NAI: sid + "@realm", SessionID: sid})
				if err == nil && s.Name == "" {
					t.Error("empty server without error")
					return
				}
				if i%512 == 0 {
					b.Snapshot()
				}
			}
		}(g)
	}
	rng := rand.New(rand.NewPCG(99, 1))
	states := []State{InService, Suspended, Down}
	for i := 0; i < 150; i++ {
		b.SetState(fmt.Sprintf("s%d", rng.IntN(6)), states[rng.IntN(3)])
		if i%15 == 0 {
			clk.Advance(300 * time.Millisecond)
			b.Sweep()
		}
	}
	close(stop)
	wg.Wait()
}

// Pick copies the Session-Id of a conversation it remembers: a caller may
// pass strings over a buffer it reuses once Pick returns, and the
// conversation is still found under its own Session-Id afterwards.
func TestRememberedSessionIDIsCopied(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now, IdleTimeout: 5 * time.Minute})
	setState(t, b, "s4", Down, true)
	cs := startWatchedConversations(t, b, 50, "copied")
	buf := make([]byte, 0, 64)
	for i := range cs {
		// Remember the conversation again through an aliasing string,
		// then overwrite the bytes under it.
		cs[i].sid += ";alias"
		buf = append(buf[:0], cs[i].sid...)
		alias := unsafe.String(unsafe.SliceData(buf), len(buf))
		cs[i].server = mustPick(t, b, Request{NAI: cs[i].nai, SessionID: alias})
		for j := range buf {
			buf[j] = 'x'
		}
	}
	before := b.Snapshot().Table
	setState(t, b, "s4", InService, true) // a new table: the remembered ones stay
	after := b.Snapshot().Table
	moved := 0
	for _, c := range cs {
		if before[PearsonHashString(c.nai)] == after[PearsonHashString(c.nai)] {
			continue
		}
		moved++
		if got := mustPick(t, b, Request{SessionID: c.sid}); got != c.server {
			t.Fatalf("conversation %s went to %s, want %s: its remembered key was not a copy", c.sid, got, c.server)
		}
	}
	if moved == 0 {
		t.Fatal("no conversation in a moved bucket: the test checks nothing")
	}
}
