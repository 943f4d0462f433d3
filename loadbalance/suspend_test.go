package loadbalance

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// Conversations that start while a server is suspended go where the walk
// sends them (the next buckets' servers, in service). They stay there
// while that server is in service, whether the suspended one then goes
// down (its buckets go to others by the rebuild) or comes back (its
// buckets are its own again): no conversation moves from a server in
// service.
func TestConversationsStartedWhileSuspendedKeepTheirServer(t *testing.T) {
	for _, then := range []State{Down, InService} {
		t.Run(then.String(), func(t *testing.T) {
			clk := &fakeClock{}
			b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now})
			setState(t, b, "s2", Suspended, false)
			cs := startConversations(t, b, 2000, "susp")
			clk.Advance(time.Minute)
			setState(t, b, "s2", then, then == Down)
			moved := 0
			for _, c := range cs {
				if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != c.server {
					moved++
				}
			}
			if moved != 0 {
				t.Fatalf("s2 suspended then %v: %d of %d conversations moved from servers in service", then, moved, len(cs))
			}
			// New conversations follow the table.
			for i := range 500 {
				nai := fmt.Sprintf("new%d@example.net", i)
				_, want, _ := b.Route(nai)
				if got := mustPick(t, b, Request{NAI: nai, SessionID: "new;" + nai}); got != want {
					t.Fatalf("new conversation went to %s, the table says %s", got, want)
				}
			}
			// Once they have aged out, nothing is remembered.
			clk.Advance(b.IdleTimeout() + time.Minute)
			b.Sweep()
			if then == Down {
				setState(t, b, "s2", InService, true)
				clk.Advance(b.IdleTimeout() + time.Minute)
				b.Sweep()
			}
			if s := b.Snapshot(); s.Sessions != 0 || len(s.OldGenerations) != 0 || !b.cur.Load().quiet {
				t.Fatalf("after ageing out: %d remembered, old tables %v, quiet %v", s.Sessions, s.OldGenerations, b.cur.Load().quiet)
			}
		})
	}
}

// A conversation of the suspended server from before its suspension, that
// does not speak meanwhile, returns to it; one that the walk sent
// elsewhere meanwhile is remembered there like a new one and stays there
// (a second move would gain nothing). A diverted conversation whose
// server goes down moves to the table; one whose server is suspended goes
// where a new one would and stays there; one silent meanwhile comes back.
func TestSuspensionAndConversationsFromBefore(t *testing.T) {
	clk := &fakeClock{}
	b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now})
	before := startConversations(t, b, 3000, "before")
	setState(t, b, "s2", Suspended, false)
	var quiet, spoke []convo
	for i, c := range before {
		if c.server != "s2" {
			continue
		}
		if i%2 == 0 {
			quiet = append(quiet, c)
			continue
		}
		c.server = mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid})
		if c.server == "s2" {
			t.Fatal("a suspended server picked")
		}
		spoke = append(spoke, c)
	}
	if len(quiet) == 0 || len(spoke) == 0 {
		t.Fatal("no conversation of s2: the test checks nothing")
	}
	setState(t, b, "s2", InService, false)
	for _, c := range quiet {
		if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != "s2" {
			t.Fatalf("%s, silent during the suspension, went to %s, want s2", c.sid, got)
		}
	}
	for _, c := range spoke {
		if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != c.server {
			t.Fatalf("%s, sent to %s during the suspension, went to %s", c.sid, c.server, got)
		}
	}
	// Their new server suspended: where a new one goes, and they stay
	// there (a move back would be a second one) while a silent one comes
	// back.
	c, silent := spoke[0], convo{}
	for _, x := range spoke[1:] {
		if x.server == c.server {
			silent = x
			break
		}
	}
	if silent.sid == "" {
		t.Fatal("no second conversation diverted to " + c.server)
	}
	setState(t, b, c.server, Suspended, false)
	got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid})
	if got == c.server {
		t.Fatal("a suspended server picked")
	} else if _, want, _ := b.Route(c.nai); got != want {
		t.Fatalf("with its server suspended, went to %s; the table routes to %s", got, want)
	}
	setState(t, b, c.server, InService, false)
	if again := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); again != got {
		t.Fatalf("after %s resumed went to %s, want %s where it went meanwhile", c.server, again, got)
	}
	if again := mustPick(t, b, Request{NAI: silent.nai, SessionID: silent.sid}); again != silent.server {
		t.Fatalf("silent meanwhile, after its server resumed went to %s, want %s", again, silent.server)
	}
	// Their new server down: they move to the table for good.
	c = silent
	setState(t, b, c.server, Down, true)
	_, want, _ := b.Route(c.nai)
	if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != want {
		t.Fatalf("with its server down went to %s, the table says %s", got, want)
	}
}

// What a suspension remembers is bounded by MaxSessions like the rest.
func TestSuspensionMemoryIsBounded(t *testing.T) {
	b := mustNew(t, Pearson, servers(2), Options{MaxSessions: 100})
	setState(t, b, "s0", Suspended, false)
	startConversations(t, b, 1000, "many")
	if s := b.Snapshot(); s.Sessions > 100 || s.Untracked == 0 {
		t.Fatalf("sessions %d (max 100), untracked %d", s.Sessions, s.Untracked)
	}
}

// A server in service that holds no bucket (its weight is too small a
// share for one) still takes the requests when every bucket's owner is
// suspended, one server per key while the states hold; Route agrees.
func TestServerWithoutBucketsTakesOverWhenTheOthersAreSuspended(t *testing.T) {
	srv := []Server{{Name: "big", Weight: 1000, Index: 0}, {Name: "tiny1", Weight: 1, Index: 1}, {Name: "tiny2", Weight: 1, Index: 2}}
	for _, alg := range []Algorithm{Pearson, Hash} {
		b := mustNew(t, alg, srv, Options{})
		if alg == Pearson {
			if got := bucketsOf(b.Snapshot()); got["tiny1"] != 0 || got["tiny2"] != 0 {
				t.Fatalf("buckets %v: want the tiny ones to hold none", got)
			}
		}
		setState(t, b, "big", Suspended, false)
		if alg == Hash {
			setState(t, b, "tiny1", Suspended, false)
			setState(t, b, "tiny2", Suspended, false)
			setState(t, b, "tiny2", InService, false)
		}
		seen := map[string]int{}
		for i := range 300 {
			nai := fmt.Sprintf("u%d@example.net", i)
			r := Request{NAI: nai, SessionID: "s;" + nai}
			got := mustPick(t, b, r)
			if again := mustPick(t, b, r); again != got {
				t.Fatalf("%v: %s went to %s then %s", alg, nai, got, again)
			}
			if _, want, err := b.Route(nai); err != nil || want != got {
				t.Fatalf("%v: Pick %s, Route %s, %v", alg, got, want, err)
			}
			seen[got]++
		}
		if seen["big"] != 0 || (alg == Pearson && (seen["tiny1"] == 0 || seen["tiny2"] == 0)) || (alg == Hash && seen["tiny2"] != 300) {
			t.Fatalf("%v: picks %v", alg, seen)
		}
	}
}

// Sweeping during a suspension that has diverted nothing yet keeps the
// snapshot: Pickers taken before and after are one.
func TestSweepDuringSuspensionKeepsTheSnapshot(t *testing.T) {
	b := mustNew(t, Pearson, servers(3), Options{})
	setState(t, b, "s1", Suspended, false)
	before := b.Picker()
	b.Sweep()
	if b.Picker().p != before.p {
		t.Fatal("a sweep that changed nothing published a new snapshot")
	}
}

// A conversation the memory knows, whose server is suspended, goes where
// the walk sends it; it is then on that server and stays there while it
// is in service, whether its first server comes back or goes down, as a
// conversation the memory did not know does: a conversation moves at
// most once while the servers it is on stay in service.
func TestKnownConversationMovesOnceDuringSuspension(t *testing.T) {
	for _, then := range []State{Down, InService} {
		t.Run(then.String(), func(t *testing.T) {
			clk := &fakeClock{}
			b := mustNew(t, Pearson, servers(5), Options{Now: clk.Now})
			setState(t, b, "s4", Down, true)
			cs := startWatchedConversations(t, b, 400, "known")
			a := cs[0].server
			setState(t, b, a, Suspended, false)
			walked := map[string]string{}
			for _, c := range cs {
				if c.server != a {
					continue
				}
				if walked[c.sid] = mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); walked[c.sid] == a {
					t.Fatal("a suspended server picked")
				}
			}
			clk.Advance(time.Second)
			setState(t, b, a, then, then == Down)
			moved := 0
			for _, c := range cs {
				want := c.server
				if w, ok := walked[c.sid]; ok {
					want = w
				}
				if got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid}); got != want {
					moved++
				}
			}
			if moved != 0 {
				t.Fatalf("%s suspended then %v: %d of %d known conversations moved again between servers in service (%d were on %s)", a, then, moved, len(cs), len(walked), a)
			}
		})
	}
}

// countingClock counts its reads: Pick reads the clock only when it
// consults the conversation memory.
type countingClock struct {
	fakeClock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time { c.reads.Add(1); return c.fakeClock.Now() }

// Once every server is in service again after a suspension, the
// conversations diverted meanwhile keep their servers (also by requests
// without a NAI), but only requests in the buckets where such a
// conversation lives consult the memory: the others cost what they cost
// before the suspension. Once the last diverted conversation has aged
// out, the memory is dropped.
func TestDivertedConversationsCostOnlyInTheirBuckets(t *testing.T) {
	clk := &countingClock{}
	b := mustNew(t, Pearson, servers(8), Options{Now: clk.Now})
	setState(t, b, "s1", Suspended, false)
	held := b.cur.Load().divert
	cs := startConversations(t, b, 2000, "div")
	setState(t, b, "s1", InService, false)
	clk.Advance(time.Minute)
	// They keep speaking, half of those diverted (remembered) without NAI:
	// keyed by the bucket of their first request.
	for i, c := range cs {
		r := Request{NAI: c.nai, SessionID: c.sid}
		if i%2 == 1 && held.has(PearsonHashString(c.nai)) {
			r.NAI = ""
		}
		if got := mustPick(t, b, r); got != c.server {
			t.Fatalf("%s started on %s, went to %s", c.sid, c.server, got)
		}
	}
	b.Sweep()
	if b.Snapshot().Sessions == 0 {
		t.Fatal("no diverted conversation remembered: the test checks nothing")
	}
	rng := rand.New(rand.NewPCG(8, 8))
	reads, n := clk.reads.Load(), 0
	for n < 1000 {
		nai := randomNAI(rng)
		if held.has(PearsonHashString(nai)) {
			continue
		}
		n++
		mustPick(t, b, Request{NAI: nai, SessionID: "other;" + nai})
	}
	if d := clk.reads.Load() - reads; d != 0 {
		t.Errorf("1000 requests outside the buckets of the diverted conversations read the clock %d times (consulted the memory)", d)
	}
	for i, c := range cs {
		r := Request{NAI: c.nai, SessionID: c.sid}
		if i%3 == 1 && held.has(PearsonHashString(c.nai)) {
			r.NAI = ""
		}
		if got := mustPick(t, b, r); got != c.server {
			t.Fatalf("after the sweep, %s started on %s, went to %s", c.sid, c.server, got)
		}
	}
	clk.Advance(b.IdleTimeout() + time.Minute)
	b.Sweep()
	if s := b.Snapshot(); s.Sessions != 0 || !b.cur.Load().quiet {
		t.Fatalf("after ageing out: %d remembered, quiet %v", s.Sessions, b.cur.Load().quiet)
	}
}

// A conversation started while its bucket's server is suspended that the
// memory cannot hold (MaxSessions reached) is routed as if never seen:
// it goes back to that server when it returns, with no rebuild, while
// those remembered stay where they were sent (the package documentation
// says so).
func TestUnrememberedConversationsStartedWhileSuspendedGoBack(t *testing.T) {
	b := mustNew(t, Pearson, servers(2), Options{MaxSessions: 10})
	setState(t, b, "s0", Suspended, false)
	cs := startConversations(t, b, 500, "full")
	if b.Snapshot().Untracked == 0 {
		t.Fatal("every conversation remembered: the test checks nothing")
	}
	setState(t, b, "s0", InService, false)
	back, stayed := 0, 0
	for _, c := range cs {
		known := b.sess.lookup(b.sess.hash(c.sid), c.sid) != nil
		_, owner, _ := b.Route(c.nai)
		got := mustPick(t, b, Request{NAI: c.nai, SessionID: c.sid})
		switch {
		case known && got != c.server:
			t.Fatalf("%s, remembered, went from %s to %s", c.sid, c.server, got)
		case !known && got != owner:
			t.Fatalf("%s, not remembered, went to %s; the table says %s", c.sid, got, owner)
		case got != c.server:
			back++
		case known:
			stayed++
		}
	}
	if back == 0 || stayed == 0 {
		t.Fatalf("%d went back, %d remembered stayed: the test checks nothing", back, stayed)
	}
}
