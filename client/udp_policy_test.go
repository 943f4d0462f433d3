package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
)

// The 7750 SR server states of radius:// servers, through Client, in
// virtual time (carried over from radudp.Client's tests).

const (
	addrA = "a:1812"
	addrB = "b:1812"
	addrC = "c:1812"
	urlA  = "radius://" + addrA
	urlB  = "radius://" + addrB
	urlC  = "radius://" + addrC
)

// udpPolicy is the 7750 SR policy of the UDP defaults (3 s x 3 attempts),
// tuned by tune.
func udpPolicy(tune func(*policy.Config)) *policy.Config {
	p := &policy.Config{RequestTimeout: radpeer.DefaultUDPTimeout, Retries: radpeer.DefaultUDPRetries}
	if tune != nil {
		tune(p)
	}
	return p
}

func exchangeAt(t *testing.T, c *Client, r *radius.Request) string {
	t.Helper()
	resp, err := c.Exchange(context.Background(), r)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return resp.Server
}

// The 7750 SR story with the defaults (timeout 3 s, retry 3, down-timeout
// 9 s, hold-down 30 s), direct access and a test user: server a hangs;
// the request retried on it for 9 s goes to b, re-signed with b's secret;
// a is out of service at the down-timeout, held down 30 s, probed once
// with the test user, out of service again when the probe times out, and
// back in service at the next probe once it answers.
func TestUDPServerStatesStory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		specs := memSpecs("a", "b", "c")
		for i := range specs {
			secret := []byte("secret-" + specs[i].Name)
			specs[i].Secret = secret
			startMemServer(t, n, specs[i].Name+":1812", secret, nil)
		}
		start := time.Now()
		c := memClient(t, n, specs, func(cfg *Config) {
			cfg.Algorithm = loadbalance.Direct
			cfg.Policy = udpPolicy(func(p *policy.Config) { p.TestUser = true })
			cfg.RADIUSTestRequest = func(string) *radius.Request { return udpAccess("probe") }
		})
		log, cancel := watchPolicy(c, start)
		defer cancel()
		if got := exchangeAt(t, c, udpAccess("warmup")); got != urlA {
			t.Fatalf("warmup answered by %s, want a (direct)", got)
		}
		n.setHung(addrA, true)
		t0 := time.Now()
		if got := exchangeAt(t, c, udpAccess("alice")); got != urlB {
			t.Fatalf("alice answered by %s; want b, the next server in order", got)
		}
		if took := time.Since(t0); took != 9*time.Second {
			t.Errorf("failover after %v, want 9 s (3 attempts 3 s apart)", took)
		}
		if got := n.users(addrA); strings.Join(got, ",") != "warmup,alice,alice,alice" {
			t.Errorf("a received %v", got)
		}
		synctest.Wait()
		if st := c.group.State(0); st != policy.OutOfService {
			t.Fatalf("a is %v at the down-timeout, want out-of-service", st)
		}
		// During the hold-down, a gets nothing.
		time.Sleep(10 * time.Second)
		if got := exchangeAt(t, c, udpAccess("bob")); got != urlB {
			t.Errorf("bob answered by %s during a's hold-down, want b", got)
		}
		// Hold-down over at +9+30: one probe, the test user's; it times
		// out after 3 s; the hold-down restarts.
		time.Sleep(t0.Add(40 * time.Second).Sub(time.Now()))
		synctest.Wait()
		if st := c.group.State(0); st != policy.Probing {
			t.Errorf("a is %v after the hold-down, want probing", st)
		}
		n.setHung(addrA, false)
		time.Sleep(2 * time.Second) // the probe sent at +39 got no answer; a answers from now on
		synctest.Wait()
		if st := c.group.State(0); st != policy.OutOfService {
			t.Errorf("a is %v after the unanswered probe, want out-of-service", st)
		}
		time.Sleep(t0.Add(72 * time.Second).Sub(time.Now()))
		synctest.Wait()
		if st := c.group.State(0); st != policy.InService {
			t.Errorf("a is %v after the answered probe, want in-service", st)
		}
		got := n.users(addrA)
		if strings.Join(got[4:], ",") != "probe,probe" {
			t.Errorf("a received %v after alice, want exactly two probes, each sent once", got[4:])
		}
		for _, a := range n.arrivals(addrA)[4:] {
			if d := a.at.Sub(t0); d != 39*time.Second && d != 72*time.Second {
				t.Errorf("a probe at +%v, want +39s and +1m12s", d)
			}
		}
		// Each server's changes, in order (two servers' changes at one
		// instant may interleave either way).
		want := map[string][]string{
			"a": {"+0s unknown->in-service", "+9s in-service->out-of-service", "+39s out-of-service->probing",
				"+42s probing->out-of-service", "+1m12s out-of-service->probing", "+1m12s probing->in-service"},
			"b": {"+9s unknown->in-service"},
			"c": nil,
		}
		for server, w := range want {
			if g := log.of(server); !slices.Equal(g, w) {
				t.Errorf("%s's events:\n%s\nwant:\n%s", server, strings.Join(g, "\n"), strings.Join(w, "\n"))
			}
		}
		st := c.ServerStats()
		if st[0].Sent != 2 || st[0].Answered != 2 || st[0].FailedOver != 1 || st[1].Sent != 1 || st[1].Answered != 1 || st[2].Sent != 0 {
			t.Errorf("stats %+v", st)
		}
		if st[0].Probes != 2 {
			t.Errorf("%d probes counted for a, want 2", st[0].Probes)
		}
		var moved []FailoverRecord
		recs, _ := c.FailoverLog()
		for _, r := range recs {
			if r.Outcome == Moved {
				moved = append(moved, r)
			}
		}
		if len(moved) != 1 || moved[0].From != "a" || moved[0].To != "b" || moved[0].Moved != 1 {
			t.Errorf("failover records %+v, want alice's move from a to b", moved)
		}
	})
}

// Any reply, to any subscriber, resets the down-timeout: a server that
// misses one subscriber's requests but answers another's stays in
// service.
func TestUDPDownTimeoutResetByAnyReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		startMemServer(t, n, addrA, nil, nil)
		startMemServer(t, n, addrB, nil, nil)
		n.setDeaf(addrA, func(a arrival) bool { return a.user == "bob" })
		c := memClient(t, n, memSpecs("a", "b"), func(cfg *Config) { cfg.Algorithm = loadbalance.Direct })
		start := time.Now()
		done := make(chan string, 1)
		go func() {
			resp, err := c.Exchange(context.Background(), udpAccess("bob"))
			if err != nil {
				t.Error(err)
				done <- ""
				return
			}
			done <- resp.Server
		}()
		for _, at := range []time.Duration{2, 8, 14} { // alice within every 9 s
			time.Sleep(start.Add(at * time.Second).Sub(time.Now()))
			if got := exchangeAt(t, c, udpAccess("alice")); got != urlA {
				t.Errorf("alice at +%ds answered by %s, want a", at, got)
			}
		}
		if got := <-done; got != urlB {
			t.Errorf("bob answered by %q, want b after a's 3 attempts", got)
		}
		synctest.Wait()
		if st := c.group.State(0); st != policy.InService {
			t.Errorf("a is %v, want in-service: alice's replies reset the down-timeout", st)
		}
	})
}

// A reply that comes after its caller gave up still shows the server
// alive: a, idle afterwards, stays in service past the down-timeout. Told
// to the policy only through the answers callers got, the one reply a
// sent (late, within its attempt's 3 s) left the down-timeout the request
// started running, and a was held down at 9 s while it answered
// everything (a RADIUS/UDP simulator schedule: a request handed to a
// healthy server at its caller's deadline).
func TestUDPLateReplyKeepsServerInService(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		a := startMemServer(t, n, addrA, nil, nil)
		startMemServer(t, n, addrB, nil, nil)
		a.gate = make(chan struct{})
		c := memClient(t, n, memSpecs("a", "b"), func(cfg *Config) { cfg.Algorithm = loadbalance.Direct })
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Exchange(ctx, udpAccess("hasty"))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hasty: %v, want its deadline", err)
		}
		time.Sleep(time.Second)
		close(a.gate) // a replies 2 s after the send, within the attempt's 3 s
		synctest.Wait()
		if late := c.UDPPeers()[0].Stats().Late; late != 1 {
			t.Fatalf("a's late replies: %d, want 1", late)
		}
		time.Sleep(10 * time.Second) // past the down-timeout (9 s), no request
		synctest.Wait()
		if st := c.group.State(0); st != policy.InService {
			t.Errorf("a is %v after its late reply, want in-service", st)
		}
	})
}

// The policy may hear of a request's reply, told on the reader's
// goroutine, before the goroutine that submitted the request tells it
// the request was sent (a failover's hand-over runs on the timer of the
// server that did not reply). Sent after its reply, the request started
// a down-timeout that waited for a reply come already: b, idle
// afterwards, was held down at 9 s.
func TestUDPSentToldAfterItsReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		startMemServer(t, n, addrA, nil, nil)
		startMemServer(t, n, addrB, nil, nil)
		n.setHung(addrA, true)
		c := memClient(t, n, memSpecs("a", "b"), func(cfg *Config) { cfg.Algorithm = loadbalance.Direct })
		answered := make(chan struct{})
		held := 0
		beforeSent = func(calls []*call.Call) {
			if calls[0].Sends() > 1 { // the hand-over to b
				held++
				<-answered // b's reply first
			}
		}
		defer func() { beforeSent = nil }()
		if got := exchangeAt(t, c, udpAccess("alice")); got != urlB {
			t.Fatalf("alice answered by %s, want b", got)
		}
		close(answered)
		synctest.Wait()
		if held != 1 {
			t.Fatalf("the hand-over to b held %d times, want once", held)
		}
		time.Sleep(10 * time.Second) // past b's down-timeout (9 s), no request
		synctest.Wait()
		if st := c.group.State(1); st != policy.InService {
			t.Errorf("b is %v after answering alice, want in-service", st)
		}
	})
}

// Without a test user the first real request after the hold-down is the
// probe: sent once, never retransmitted; unanswered, the server is held
// down again. Unlike radudp.Client, which failed its caller with
// ErrProbeFailed, Client hands the request on to another server, as for
// any request a server did not answer.
func TestUDPRealRequestProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		startMemServer(t, n, addrA, nil, nil)
		startMemServer(t, n, addrB, nil, nil)
		c := memClient(t, n, memSpecs("a", "b"), func(cfg *Config) {
			cfg.Algorithm = loadbalance.Direct
			cfg.Policy = udpPolicy(func(p *policy.Config) { p.HoldDown = 10 * time.Second })
		})
		n.setHung(addrA, true)
		if got := exchangeAt(t, c, udpAccess("alice")); got != urlB {
			t.Fatalf("alice answered by %s, want b", got) // a times out, b answers and is in service
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if st := c.group.State(0); st != policy.Probing {
			t.Fatalf("a is %v after its hold-down, want probing", st)
		}
		before := len(n.arrivals(addrA))
		t0 := time.Now()
		if got := exchangeAt(t, c, udpAccess("probe-me")); got != urlB {
			t.Errorf("the unanswered probe answered by %s, want b", got)
		}
		if took := time.Since(t0); took != 3*time.Second {
			t.Errorf("the probe went on after %v, want one attempt of 3 s", took)
		}
		synctest.Wait() // the policy's own probe timer fires at the same instant
		if got := n.users(addrA)[before:]; !slices.Equal(got, []string{"probe-me"}) {
			t.Errorf("a received %v as the probe, want probe-me once", got)
		}
		if st := c.group.State(0); st != policy.OutOfService {
			t.Errorf("a is %v, want out-of-service", st)
		}
		// Next probe answered: in service.
		n.setHung(addrA, false)
		time.Sleep(10 * time.Second)
		synctest.Wait() // the dispatcher ends the hold-down at this instant
		if got := exchangeAt(t, c, udpAccess("probe-2")); got != urlA {
			t.Errorf("probe-2 answered by %s, want a", got)
		}
		if st := c.group.State(0); st != policy.InService {
			t.Errorf("a is %v, want in-service", st)
		}
	})
}

// Policy events are published in the order of the changes, whichever
// goroutines make them. The Client's dispatcher publishes the end of a's
// hold-down; while a subscriber holds that event, a real request probes a
// and its reply puts a back in service. A second subscriber must see that
// change after the first.
func TestUDPPolicyEventsInTheOrderOfTheChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		startMemServer(t, n, addrA, nil, nil)
		startMemServer(t, n, addrB, nil, nil)
		bus := NewBus()
		release := make(chan struct{})
		var hold sync.Once
		bus.Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventPolicy && e.Policy.To == policy.Probing {
				hold.Do(func() { <-release })
			}
		})
		var mu sync.Mutex
		var seen []string // what the second subscriber sees of a
		bus.Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventPolicy && e.Server == "a" {
				mu.Lock()
				seen = append(seen, e.Policy.From.String()+"->"+e.Policy.To.String())
				mu.Unlock()
			}
		})
		c := memClient(t, n, memSpecs("a", "b"), func(cfg *Config) {
			cfg.Algorithm = loadbalance.Direct
			cfg.Policy = udpPolicy(func(p *policy.Config) { p.HoldDown = 10 * time.Second })
			cfg.Events = bus
		})
		n.setHung(addrA, true)
		exchangeAt(t, c, udpAccess("alice")) // a times out, b answers and is in service
		n.setHung(addrA, false)
		time.Sleep(10 * time.Second) // hold-down over: the first subscriber holds its event
		synctest.Wait()
		if st := c.group.State(0); st != policy.Probing {
			t.Fatalf("a is %v, want probing", st)
		}
		if got := exchangeAt(t, c, udpAccess("probe")); got != urlA {
			t.Errorf("the probe answered by %s, want a", got)
		}
		synctest.Wait()
		mu.Lock()
		if want := []string{"unknown->out-of-service"}; !slices.Equal(seen, want) {
			t.Errorf("while the first subscriber holds a's probing, the second saw %q, want %q", seen, want)
		}
		mu.Unlock()
		close(release)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		want := []string{"unknown->out-of-service", "out-of-service->probing", "probing->in-service"}
		if !slices.Equal(seen, want) {
			t.Errorf("a's events %q, want %q", seen, want)
		}
	})
}

// The access algorithms. Hash and Pearson keep a subscriber on one
// server; when it is out of service the subscriber's requests go to
// another, and the others stay where they were. Direct takes the first
// server in service, then the next in order. Round-robin alternates.
// When every server fails, each was tried once.
func TestUDPAccessAlgorithms(t *testing.T) {
	for _, alg := range []loadbalance.Algorithm{loadbalance.Hash, loadbalance.Pearson} {
		t.Run(alg.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newMemNet()
				for _, a := range []string{addrA, addrB, addrC} {
					startMemServer(t, n, a, nil, nil)
				}
				c := memClient(t, n, memSpecs("a", "b", "c"), func(cfg *Config) { cfg.Algorithm = alg })
				home := map[string]string{}
				servers := map[string]int{}
				for i := range 30 {
					u := fmt.Sprintf("user%d", i)
					home[u] = exchangeAt(t, c, udpAccess(u))
					servers[home[u]]++
					if again := exchangeAt(t, c, udpAccess(u)); again != home[u] {
						t.Fatalf("%s went to %s then %s", u, home[u], again)
					}
				}
				if len(servers) != 3 {
					t.Fatalf("30 subscribers spread over %v", servers)
				}
				n.setHung(addrA, true)
				away := map[string]string{} // where a's subscribers went
				for i := range 30 {
					u := fmt.Sprintf("user%d", i)
					got := exchangeAt(t, c, udpAccess(u))
					if home[u] != urlA && got != home[u] {
						t.Errorf("%s moved from %s to %s while its server is fine", u, home[u], got)
					}
					if got == urlA {
						t.Errorf("%s answered by the hung server", u)
					}
				}
				// While a is out of service, each of its subscribers
				// stays on the one server it moved to: the policy's
				// state is the balancer's, not a counter's turn. (The
				// first request of each, above, may have been handed on
				// before the policy took a out: its down-timeout and the
				// first request's last attempt end at the same instant,
				// on two goroutines.)
				synctest.Wait()
				if st := c.PolicyStates(); st[0] != policy.OutOfService.String() {
					t.Fatalf("a is %s after its down-timeout, want out of service", st[0])
				}
				for u, h := range home {
					if h == urlA {
						away[u] = exchangeAt(t, c, udpAccess(u))
					}
				}
				// The balancer heard it: a's buckets moved, and the
				// conversations that stayed are remembered.
				snap, _ := c.Balancer()
				for _, s := range snap.Servers {
					if want := loadbalance.InService; s.Name == "a" && s.State == want {
						t.Errorf("balancer: a is %v while its policy holds it out of service (%v)", s.State, c.PolicyStates())
					}
				}
				for range 3 {
					for u, was := range away {
						if got := exchangeAt(t, c, udpAccess(u)); got != was {
							t.Errorf("%s, whose server is out of service, went to %s then %s", u, was, got)
						}
					}
				}
			})
		})
	}
	t.Run("direct", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newMemNet()
			for _, a := range []string{addrA, addrB, addrC} {
				startMemServer(t, n, a, nil, nil)
			}
			c := memClient(t, n, memSpecs("a", "b", "c"), func(cfg *Config) { cfg.Algorithm = loadbalance.Direct })
			for i := range 5 {
				if got := exchangeAt(t, c, udpAccess(fmt.Sprint("u", i))); got != urlA {
					t.Errorf("u%d answered by %s, want a, the first in service", i, got)
				}
			}
			n.setHung(addrA, true)
			for i := range 10 { // the first waits for a's attempts; the others skip a, out of service
				if got := exchangeAt(t, c, udpAccess(fmt.Sprint("v", i))); got != urlB {
					t.Errorf("v%d answered by %s, want b, the next in order", i, got)
				}
			}
			if got := len(n.arrivals(addrC)); got != 0 {
				t.Errorf("c received %d requests, want none", got)
			}
		})
	})
	t.Run("round-robin", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newMemNet()
			startMemServer(t, n, addrB, nil, nil)
			startMemServer(t, n, addrC, nil, nil)
			rr := memClient(t, n, memSpecs("b", "c"), func(cfg *Config) { cfg.Algorithm = loadbalance.RoundRobin })
			var seq []string
			for range 4 {
				seq = append(seq, exchangeAt(t, rr, udpAccess("x")))
			}
			if seq[0] == seq[1] || seq[0] != seq[2] || seq[1] != seq[3] {
				t.Errorf("round-robin sequence %v", seq)
			}
			n.setHung(addrB, true)
			n.setHung(addrC, true)
			start := time.Now()
			_, err := rr.Exchange(context.Background(), udpAccess("y"))
			var te *radpeer.TimeoutError
			if !errors.As(err, &te) || !errors.Is(err, radpeer.ErrNoReply) {
				t.Fatalf("err %v, want a TimeoutError", err)
			}
			if want := "no answer from " + urlB + ", " + urlC + ":"; !strings.Contains(err.Error(), want) {
				t.Errorf("err %q does not name the servers tried, each once, in order (%q)", err, want)
			}
			if took := time.Since(start); took != 18*time.Second {
				t.Errorf("failed after %v, want 18 s: 3 attempts 3 s apart at each server", took)
			}
			for _, a := range []string{addrB, addrC} {
				var ys int
				for _, u := range n.users(a) {
					if u == "y" {
						ys++
					}
				}
				if ys != 3 {
					t.Errorf("%s received y %d times, want 3 (once, with its retransmissions)", a, ys)
				}
			}
		})
	})
}

// With Status-Server as the test request, the probe and the keep-alive
// are Status-Server (RFC 5997), sent once each, never retransmitted; the
// keep-alive keeps a quiet server's down-timeout honest and an answering
// one in service.
func TestUDPStatusServerProbeAndKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		startMemServer(t, n, addrA, nil, nil)
		startMemServer(t, n, addrB, nil, nil)
		c := memClient(t, n, memSpecs("a", "b"), func(cfg *Config) {
			cfg.Algorithm = loadbalance.Direct
			cfg.Policy = udpPolicy(func(p *policy.Config) {
				p.TestUser, p.KeepAlive, p.HoldDown = true, 20*time.Second, 10*time.Second
			})
			cfg.RADIUSTestRequest = func(string) *radius.Request { return &radius.Request{Code: lradius.CodeStatusServer} }
		})
		synctest.Wait()
		// Keep-alives at once: both answer, both in service without traffic.
		if a, b := c.group.State(0), c.group.State(1); a != policy.InService || b != policy.InService {
			t.Fatalf("states %v %v after the first keep-alives, want in-service", a, b)
		}
		n.setHung(addrA, true)
		time.Sleep(20 * time.Second) // second keep-alive to a: unanswered
		time.Sleep(9 * time.Second)  // its down-timeout
		synctest.Wait()
		if st := c.group.State(0); st != policy.OutOfService {
			t.Fatalf("a is %v after an unanswered keep-alive and the down-timeout, want out-of-service", st)
		}
		n.setHung(addrA, false)
		time.Sleep(10 * time.Second) // hold-down over: the Status-Server probe, answered
		synctest.Wait()
		if st := c.group.State(0); st != policy.InService {
			t.Errorf("a is %v after the probe, want in-service", st)
		}
		got := n.arrivals(addrA)
		for _, arr := range got {
			if arr.code != lradius.CodeStatusServer {
				t.Errorf("a received %v, want only Status-Server", arr.code)
			}
		}
		var at []time.Duration
		for _, arr := range got {
			at = append(at, arr.at.Sub(got[0].at))
		}
		if want := []time.Duration{0, 20 * time.Second, 39 * time.Second}; !slices.Equal(at, want) {
			t.Errorf("a received Status-Server at %v, want %v (two keep-alives, one probe, none retransmitted)", at, want)
		}
		if p := c.ServerStats()[0].Probes; p != 3 {
			t.Errorf("%d test requests counted for a, want 3", p)
		}
	})
}
