package loadbalance

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// With every server in service no change of the set can move a
// conversation from one live server to another (a leaver's conversations
// move anyway), so nothing is remembered: the memory stays empty and a
// first-seen Session-Id costs no allocation.
func TestSteadyStateRemembersNothing(t *testing.T) {
	b := mustNew(t, Pearson, servers(8), Options{})
	for i := range 20_000 {
		mustPick(t, b, Request{NAI: fmt.Sprintf("user%d@example.net", i), SessionID: fmt.Sprintf("nas;1;%d", i)})
	}
	if s := b.Snapshot(); s.Sessions != 0 || s.Untracked != 0 {
		t.Fatalf("steady state remembers %d conversations (untracked %d), want none", s.Sessions, s.Untracked)
	}
	// The Session-Ids are built beforehand: building them in the measured
	// function would count fmt's allocations, which vary under the race
	// detector (sync.Pool drops items at random there). Pick alone must
	// allocate nothing, with or without -race.
	const runs = 500
	ids := make([]string, runs+1) // AllocsPerRun adds one warm-up call
	for i := range ids {
		ids[i] = fmt.Sprintf("first;%d", i)
	}
	i := 0
	if n := testing.AllocsPerRun(runs, func() {
		b.Pick(Request{NAI: "u@example.net", SessionID: ids[i]})
		i++
	}); n != 0 {
		t.Fatalf("first-seen session in steady state: %v allocs", n)
	}
	if i != len(ids) {
		t.Fatalf("measured %d picks, built %d first-seen Session-Ids", i, len(ids))
	}
	if s := b.Snapshot(); s.Sessions != 0 || s.Untracked != 0 {
		t.Fatalf("after the measured picks: %d conversations remembered (untracked %d), want none", s.Sessions, s.Untracked)
	}
}

// A server's return takes back exactly the buckets it had, so while it is
// away only the conversations in those buckets are remembered, and once
// everything is back in service and the old table has aged out the
// memory is emptied.
func TestOnlyTheReturningServersBucketsAreWatched(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now})
	home := b.Snapshot().Table
	setState(t, b, "s2", Down, true)
	w := b.cur.Load().watch
	for h := range NumBuckets {
		if w.has(uint8(h)) != (home[h] == "s2") {
			t.Fatalf("bucket %d (home %s): watched %v", h, home[h], w.has(uint8(h)))
		}
	}
	cs := startConversations(t, b, 3000, "away")
	if got, want := b.Snapshot().Sessions, watchedCount(b, cs); got != want {
		t.Fatalf("remembered %d, want %d", got, want)
	}
	setState(t, b, "s2", InService, true)
	if got := b.Snapshot().Table; got != home {
		t.Fatal("s2's return did not restore the table")
	}
	for _, c := range cs {
		if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != c.server {
			t.Fatalf("%s moved from %s to %s", c.sid, c.server, got)
		}
	}
	clk.Advance(b.IdleTimeout() + time.Minute)
	b.Sweep()
	if s := b.Snapshot(); s.Sessions != 0 || len(s.OldGenerations) != 0 {
		t.Fatalf("after the transition: %d remembered, old tables %v", s.Sessions, s.OldGenerations)
	}
}

// A restart: conversations started while every server was in service are
// not remembered; one server goes down and comes back a minute later.
// Every conversation whose server stayed up keeps it across both
// rebuilds, whether or not it spoke during the outage, and the returning
// server gets its new conversations at once.
func TestRestartKeepsUnrememberedConversations(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now})
	cs := startConversations(t, b, 3000, "before")
	if n := b.Snapshot().Sessions; n != 0 {
		t.Fatalf("%d remembered in steady state", n)
	}
	clk.Advance(10 * time.Second)
	setState(t, b, "s4", Down, true)
	for i, c := range cs {
		if i%2 == 0 { // half of them speak during the outage
			got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid})
			if c.server != "s4" && got != c.server {
				t.Fatalf("%s moved from %s to %s while s4 was down", c.sid, c.server, got)
			}
			cs[i].server = got
		}
	}
	clk.Advance(time.Minute)
	setState(t, b, "s4", InService, true)
	for i, c := range cs {
		got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid})
		if c.server != "s4" && got != c.server {
			t.Fatalf("conversation %d (spoke during the outage: %v) moved from %s to %s", i, i%2 == 0, c.server, got)
		}
	}
	fresh := 0
	for i := range 2000 {
		nai := fmt.Sprintf("new%d@example.net", i)
		_, want, _ := b.Route(nai)
		if got := mustPick(t, b, Request{NAI: nai, SessionID: "new;" + nai}); got != want {
			t.Fatalf("new conversation went to %s, the table says %s", got, want)
		}
		if want == "s4" {
			fresh++
		}
	}
	if fresh == 0 {
		t.Fatal("no new conversation went to s4")
	}
}

// The guarantee over random histories: a conversation whose server has
// stayed in service since it last spoke, and that has not aged out, goes
// to that server again; once IdleTimeout has passed with every server in
// service, new conversations follow the table and nothing is remembered.
// Weights make the quotas uneven, so some rebuilds move buckets whose
// conversations were not all remembered (the memory then holds those
// buckets' unknown Session-Ids on their old server until they could have
// aged out).
func TestConversationsKeepTheirServerOverRandomHistories(t *testing.T) {
	const idle = time.Minute
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 2 + rng.IntN(6)
		srv := servers(n)
		for i := range srv {
			srv[i].Weight = 1 + rng.IntN(3)
		}
		clk := &fakeClock{}
		b := mustNew(t, Pearson, srv, Options{Now: clk.Now, IdleTimeout: idle})
		up := make([]bool, n)
		epoch := make([]int, n) // bumped when a server leaves service
		for i := range up {
			up[i] = true
		}
		type conv struct {
			nai, sid string
			server   int
			epoch    int
			last     time.Duration
		}
		var convs []conv
		now := time.Duration(0)
		slotOf := func(name string) int {
			var k int
			fmt.Sscanf(name, "s%d", &k)
			return k
		}
		for step := range 400 {
			switch r := rng.IntN(10); {
			case r < 2: // a server changes state
				k := rng.IntN(n)
				st := InService
				if up[k] {
					st = Down
					epoch[k]++
				}
				up[k] = !up[k]
				b.SetState(fmt.Sprintf("s%d", k), st)
			case r < 3:
				d := time.Duration(rng.IntN(20)) * time.Second
				clk.Advance(d)
				now += d
			case r < 4:
				b.Sweep()
			default: // conversations speak, new ones start
				for range 20 {
					var c *conv
					if len(convs) > 0 && rng.IntN(3) > 0 {
						c = &convs[rng.IntN(len(convs))]
					} else {
						convs = append(convs, conv{nai: randomNAI(rng), sid: fmt.Sprintf("%d;%d", seed, len(convs)), server: -1})
						c = &convs[len(convs)-1]
					}
					s, err := b.Pick(Request{NAI: c.nai, SessionID: c.sid})
					if err != nil {
						c.server = -1
						continue
					}
					got := slotOf(s.Name)
					// Up to the edge: silent for at most IdleTimeout.
					if c.server >= 0 && up[c.server] && epoch[c.server] == c.epoch && now-c.last <= idle && got != c.server {
						t.Fatalf("seed %d step %d: %s moved from s%d to s%d (last spoke %v ago)", seed, step, c.sid, c.server, got, now-c.last)
					}
					c.server, c.epoch, c.last = got, epoch[got], now
				}
			}
		}
		// Everything back in service, then IdleTimeout.
		for k := range up {
			b.SetState(fmt.Sprintf("s%d", k), InService)
		}
		clk.Advance(idle + 2*time.Second)
		b.Sweep()
		if s := b.Snapshot(); s.Sessions != 0 || len(s.OldGenerations) != 0 {
			t.Fatalf("seed %d: all in service and idle: %d remembered, old tables %v", seed, s.Sessions, s.OldGenerations)
		}
		for i := range 200 {
			nai := randomNAI(rng)
			_, want, _ := b.Route(nai)
			if got := mustPick(t, b, Request{NAI: nai, SessionID: fmt.Sprintf("end;%d", i)}); got != want {
				t.Fatalf("seed %d: new conversation went to %s, table says %s", seed, got, want)
			}
		}
	}
}

// Without an injected clock the Balancer ages conversations by the
// monotonic clock: a remembered conversation is purged once IdleTimeout
// has passed since its request, not before.
func TestDefaultClockAgesConversations(t *testing.T) {
	const idle = 100 * time.Millisecond
	b := mustNew(t, Pearson, servers(8), Options{IdleTimeout: idle})
	setState(t, b, "s7", Down, true)
	var start time.Time
	for i := 0; b.Snapshot().Sessions == 0; i++ {
		if i == 10_000 {
			t.Fatal("no Session-Id remembered with a server down")
		}
		start = time.Now()
		mustPick(t, b, Request{NAI: fmt.Sprintf("user%d@example.net", i), SessionID: fmt.Sprintf("nas;1;%d", i)})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := b.Sweep()
		if n > 0 {
			if el := time.Since(start); el <= idle {
				t.Fatalf("conversation purged %v after its request, IdleTimeout is %v", el, idle)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("conversation not purged 10 s after its request (IdleTimeout %v)", idle)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := b.Snapshot(); s.Sessions != 0 {
		t.Fatalf("%d conversations remembered after the purge, want 0", s.Sessions)
	}
}

// A server removed by SetServers cannot return unless it is named again,
// which is a new configuration: its home buckets are not watched, so once
// every configured server is in service and the old table has aged out
// nothing is watched and nothing remembered, as in any steady state.
//
// The same when it is removed while down (the usual way a dead server
// leaves the configuration), although that rebuilds nothing: it held no
// bucket.
func TestRemovedServerLeavesNothingWatched(t *testing.T) {
	for _, down := range []bool{false, true} {
		t.Run(fmt.Sprintf("down=%v", down), func(t *testing.T) { testRemovedServerLeavesNothingWatched(t, down) })
	}
}

func testRemovedServerLeavesNothingWatched(t *testing.T, down bool) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now})
	if down {
		setState(t, b, "s4", Down, true)
	}
	if rebuilt, err := b.SetServers(servers(4)); err != nil || rebuilt == down { // s4 removed
		t.Fatalf("SetServers: rebuilt %v, %v", rebuilt, err)
	}
	for minute := range 30 {
		startConversations(t, b, 100, fmt.Sprintf("m%d", minute))
		clk.Advance(time.Minute)
		b.Sweep()
	}
	if w := b.cur.Load().watch; !w.empty() {
		n := 0
		for h := range NumBuckets {
			if w.has(uint8(h)) {
				n++
			}
		}
		t.Errorf("%d buckets watched with every configured server in service", n)
	}
	if s := b.Snapshot(); s.Sessions != 0 || len(s.OldGenerations) != 0 || !b.cur.Load().quiet {
		t.Errorf("after 30 minutes with every configured server in service: %d remembered, old tables %v, quiet %v", s.Sessions, s.OldGenerations, b.cur.Load().quiet)
	}
	// Named again, it takes back its buckets; the conversations there,
	// unknown to the memory, keep their servers until they could have
	// aged out.
	cs := startConversations(t, b, 2000, "before")
	if _, err := b.SetServers(servers(5)); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != c.server {
			t.Fatalf("%s moved from %s to %s when s4 was named again", c.sid, c.server, got)
		}
	}
}

// A conversation is forgotten only once it has been silent for longer
// than IdleTimeout, although the memory refreshes its last use at most
// once a second: one that spoke twice within that second and then once
// more exactly IdleTimeout after its last request still keeps its server
// during a transition.
func TestConversationKeptUntilSilentForIdleTimeout(t *testing.T) {
	const idle = 5 * time.Minute
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now, IdleTimeout: idle})
	setState(t, b, "s4", Down, true)
	cs := startWatchedConversations(t, b, 300, "edge")
	clk.Advance(900 * time.Millisecond)
	for _, c := range cs {
		mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}) // last request
	}
	setState(t, b, "s4", InService, true) // a transition: s4 takes back its buckets
	clk.Advance(idle)
	b.Sweep()
	for _, c := range cs {
		if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != c.server {
			t.Fatalf("%s, silent for exactly IdleTimeout, went to %s, want %s", c.sid, got, c.server)
		}
	}
}

// RADIUS accounting sessions commonly send an interim update every 300
// seconds: with the default IdleTimeout such a conversation, whose
// interims come a little late, keeps its server across a transition.
func TestDefaultIdleTimeoutOutlastsInterimUpdates(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now})
	if b.IdleTimeout() <= 300*time.Second+time.Minute {
		t.Fatalf("default IdleTimeout %v: an interim update every 300 s with some delay is forgotten", b.IdleTimeout())
	}
	setState(t, b, "s4", Down, true)
	cs := startWatchedConversations(t, b, 300, "acct")
	setState(t, b, "s4", InService, true)
	for range 4 {
		clk.Advance(330 * time.Second)
		b.Sweep()
		for _, c := range cs {
			if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != c.server {
				t.Fatalf("%s, an interim every 330 s, went to %s, want %s", c.sid, got, c.server)
			}
		}
	}
}
