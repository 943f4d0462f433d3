package radudp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/throttle"
	lradius "layeh.com/radius"
)

// hangable answers unless hung; it records per-arrival user names.
type hangable struct {
	*fakeServer
	hung atomic.Bool
}

func startHangable(n *memNet, addr string, secret []byte) *hangable {
	h := &hangable{}
	h.fakeServer = startFake(n, addr, func(int, []byte) int {
		if h.hung.Load() {
			return 0
		}
		return 1
	})
	h.fakeServer.secret = secret
	return h
}

func users(arr []arrival) []string {
	var out []string
	for _, a := range arr {
		v, _ := radius.Attr(a.b, radius.AttrUserName)
		out = append(out, string(v))
	}
	return out
}

type eventLog struct {
	mu    sync.Mutex
	start time.Time
	lines []string
}

func watch(bus *client.Bus, start time.Time) (*eventLog, func()) {
	l := &eventLog{start: start}
	cancel := bus.Subscribe(func(e client.Event) {
		if e.Kind != client.EventPolicy {
			return
		}
		l.mu.Lock()
		l.lines = append(l.lines, fmt.Sprintf("+%v %s %s->%s", e.Time.Sub(l.start), e.Server, e.Policy.From, e.Policy.To))
		l.mu.Unlock()
	})
	return l, cancel
}

func (l *eventLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// twoHangables starts hangable servers a:1812 and b:1812 on a new memory
// network, closed when the test ends.
func twoHangables(t *testing.T) (*memNet, *hangable, *hangable) {
	n := newMemNet()
	a := startHangable(n, "a:1812", testSecret)
	b := startHangable(n, "b:1812", testSecret)
	t.Cleanup(func() { b.close(); a.close() })
	return n, a, b
}

func newTestClient(t *testing.T, n *memNet, cfg Config) *Client {
	t.Helper()
	cfg.Dial = n.Dial
	if cfg.Secret == nil {
		cfg.Secret = testSecret
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The 7750 SR story with the defaults (timeout 3 s, retry 3, down-timeout
// 9 s, hold-down 30 s), direct access and a test user: server a hangs; the
// request retried on it for 9 s goes to b, re-signed with b's secret; a is
// out of service at the down-timeout, held down 30 s, probed once with the
// test user, out of service again when the probe times out, and back in
// service at the next probe once it answers.
func TestClientServerStatesStory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		a := startHangable(n, "a:1812", []byte("secret-a"))
		b := startHangable(n, "b:1812", []byte("secret-b"))
		c3 := startHangable(n, "c:1812", []byte("secret-c"))
		defer a.close()
		defer b.close()
		defer c3.close()
		start := time.Now()
		c := newTestClient(t, n, Config{
			Servers: []ServerSpec{
				{Name: "a", URL: "radius://a:1812", Secret: []byte("secret-a")},
				{Name: "b", URL: "radius://b:1812", Secret: []byte("secret-b")},
				{Name: "c", URL: "radius://c:1812", Secret: []byte("secret-c")},
			},
			Algorithm: loadbalance.Direct,
			TestUser:  &TestUser{Name: "probe", Password: "probe-pw"},
		})
		log, cancel := watch(c.Events(), start)
		defer cancel()
		// b answers first so that it is in service (healthy) for a's probes.
		if _, err := c.Exchange(context.Background(), accessRequest("warmup")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.servers[1].auth.Exchange(context.Background(), accessRequest("warm-b")); err != nil {
			t.Fatal(err)
		}
		a.hung.Store(true)
		t0 := time.Now()
		resp, err := c.Exchange(context.Background(), accessRequest("alice"))
		if err != nil || resp.Server != "b:1812" {
			t.Fatalf("resp %+v err %v; want b's answer", resp, err)
		}
		if took := time.Since(t0); took != 9*time.Second {
			t.Errorf("failover after %v, want 9 s (3 attempts 3 s apart)", took)
		}
		if got := users(a.arrivals()); strings.Join(got, ",") != "warmup,alice,alice,alice" {
			t.Errorf("a received %v", got)
		}
		if c.State(0) != policy.OutOfService {
			t.Fatalf("a is %v at the down-timeout, want out-of-service", c.State(0))
		}
		// During the hold-down, a gets nothing.
		time.Sleep(10 * time.Second)
		if _, err := c.Exchange(context.Background(), accessRequest("bob")); err != nil {
			t.Fatal(err)
		}
		if got := users(b.arrivals()); got[len(got)-1] != "bob" {
			t.Errorf("bob did not go to b: %v", got)
		}
		// Hold-down over at +9+30: one probe, the test user's; it times out
		// after 3 s; the hold-down restarts.
		time.Sleep(t0.Add(39*time.Second).Sub(time.Now()) + time.Second)
		synctest.Wait()
		if c.State(0) != policy.Probing {
			t.Errorf("a is %v after the hold-down, want probing", c.State(0))
		}
		a.hung.Store(false)
		time.Sleep(2 * time.Second) // the probe sent at +39 got no answer; a answers from now on
		synctest.Wait()
		if c.State(0) != policy.OutOfService {
			t.Errorf("a is %v after the unanswered probe, want out-of-service", c.State(0))
		}
		time.Sleep(t0.Add(72 * time.Second).Sub(time.Now()))
		synctest.Wait()
		if c.State(0) != policy.InService {
			t.Errorf("a is %v after the answered probe, want in-service", c.State(0))
		}
		got := users(a.arrivals())
		if strings.Join(got[4:], ",") != "probe,probe" {
			t.Errorf("a received %v after alice, want exactly two probes", got[4:])
		}
		want := []string{
			"+0s a unknown->in-service", "+0s b unknown->in-service",
			"+9s a in-service->out-of-service",
			"+39s a out-of-service->probing", "+42s a probing->out-of-service",
			"+1m12s a out-of-service->probing", "+1m12s a probing->in-service",
		}
		if g := log.get(); strings.Join(g, "|") != strings.Join(want, "|") {
			t.Errorf("events:\n%s\nwant:\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
		}
		if st := c.Stats(); st.Answered != 3 || st.Failed != 0 || st.Failovers != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}

// Any reply, to any subscriber, resets the down-timeout: a server that
// misses one subscriber's requests but answers another's stays in service.
func TestClientDownTimeoutResetByAnyReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		picky := startFake(n, "a:1812", func(_ int, b []byte) int {
			if v, _ := radius.Attr(b, radius.AttrUserName); string(v) == "bob" {
				return 0
			}
			return 1
		})
		other := startFake(n, "b:1812", nil)
		defer picky.close()
		defer other.close()
		c := newTestClient(t, n, Config{
			Servers:   []ServerSpec{{Name: "a", URL: "radius://a:1812"}, {Name: "b", URL: "radius://b:1812"}},
			Algorithm: loadbalance.Direct,
		})
		done := make(chan error, 1)
		go func() {
			_, err := c.Exchange(context.Background(), accessRequest("bob"))
			done <- err
		}()
		for _, at := range []time.Duration{2, 8, 14} { // alice within every 9 s
			time.Sleep(at*time.Second - time.Duration(0))
			if _, err := c.Exchange(context.Background(), accessRequest("alice")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(-at * 0)
		}
		if err := <-done; err != nil {
			t.Fatalf("bob: %v (want b's answer after a's 3 attempts)", err)
		}
		if c.State(0) != policy.InService {
			t.Errorf("a is %v, want in-service: alice's replies reset the down-timeout", c.State(0))
		}
	})
}

// Without a test user the first real request after the hold-down is the
// probe: sent once; unanswered, its caller gets ErrProbeFailed and the
// server is held down again.
func TestClientRealRequestProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, _ := twoHangables(t)
		c := newTestClient(t, n, Config{
			Servers:   []ServerSpec{{Name: "a", URL: "radius://a:1812"}, {Name: "b", URL: "radius://b:1812"}},
			Algorithm: loadbalance.Direct, HoldDown: 10 * time.Second,
		})
		a.hung.Store(true)
		if _, err := c.Exchange(context.Background(), accessRequest("alice")); err != nil {
			t.Fatal(err) // a times out, b answers and is in service
		}
		time.Sleep(10 * time.Second)
		before := len(a.arrivals())
		_, err := c.Exchange(context.Background(), accessRequest("probe-me"))
		if !errors.Is(err, ErrProbeFailed) {
			t.Fatalf("err %v, want ErrProbeFailed", err)
		}
		synctest.Wait() // the policy's own probe timer fires at the same instant
		if got := len(a.arrivals()) - before; got != 1 {
			t.Errorf("the probe was sent %d times, want once", got)
		}
		if c.State(0) != policy.OutOfService {
			t.Errorf("a is %v, want out-of-service", c.State(0))
		}
		if st := c.Stats(); st.Reasons["probe not answered"] != 1 {
			t.Errorf("reasons %v", st.Reasons)
		}
		// Next probe answered: in service.
		a.hung.Store(false)
		time.Sleep(10 * time.Second)
		if _, err := c.Exchange(context.Background(), accessRequest("probe-2")); err != nil {
			t.Fatal(err)
		}
		if c.State(0) != policy.InService {
			t.Errorf("a is %v, want in-service", c.State(0))
		}
	})
}

// Policy and rebuild events are published in the order of the changes,
// whichever goroutines make them. The Client's timer goroutine publishes
// the end of a's hold-down; while a subscriber holds that event, a real
// request probes a and its reply puts a back in service. A second
// subscriber must see that change, and its rebuild, after the first:
// before, the reply's goroutine published them at once.
func TestClientEventsInTheOrderOfTheChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, _ := twoHangables(t)
		bus := client.NewBus()
		release := make(chan struct{})
		var hold sync.Once
		bus.Subscribe(func(e client.Event) {
			if e.Kind == client.EventPolicy && e.Policy.To == policy.Probing {
				hold.Do(func() { <-release })
			}
		})
		var mu sync.Mutex
		var seen []string // what the second subscriber sees of a
		bus.Subscribe(func(e client.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case e.Kind == client.EventPolicy && e.Server == "a":
				seen = append(seen, e.Policy.From.String()+"->"+e.Policy.To.String())
			case e.Kind == client.EventBalancerRebuilt && e.Server == "a":
				seen = append(seen, "rebuilt")
			}
		})
		c := newTestClient(t, n, Config{
			Servers:   []ServerSpec{{Name: "a", URL: "radius://a:1812"}, {Name: "b", URL: "radius://b:1812"}},
			Algorithm: loadbalance.Direct, HoldDown: 10 * time.Second, Events: bus,
		})
		a.hung.Store(true)
		if _, err := c.Exchange(context.Background(), accessRequest("alice")); err != nil {
			t.Fatal(err) // a times out, b answers and is in service
		}
		a.hung.Store(false)
		time.Sleep(10 * time.Second) // hold-down over: the first subscriber holds its event
		synctest.Wait()
		if c.State(0) != policy.Probing {
			t.Fatalf("a is %v, want probing", c.State(0))
		}
		if _, err := c.Exchange(context.Background(), accessRequest("probe")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		close(release)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		want := []string{"unknown->out-of-service", "rebuilt", "out-of-service->probing", "probing->in-service", "rebuilt"}
		if !slices.Equal(seen, want) {
			t.Errorf("a's events %q, want %q", seen, want)
		}
	})
}

// Hash keeps a subscriber on one server; when it is out of service the
// subscriber's requests go to another, and the others stay where they
// were. Round-robin alternates. When every server fails, the caller gets
// one error naming each server once.
func TestClientAccessAlgorithms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		var hs []*hangable
		var specs []ServerSpec
		for _, name := range []string{"a", "b", "c"} {
			hs = append(hs, startHangable(n, name+":1812", testSecret))
			specs = append(specs, ServerSpec{Name: name, URL: "radius://" + name + ":1812"})
		}
		defer func() {
			for _, h := range hs {
				h.close()
			}
		}()
		c := newTestClient(t, n, Config{Servers: specs, Algorithm: loadbalance.Hash})
		where := func(user string) string {
			resp, err := c.Exchange(context.Background(), accessRequest(user))
			if err != nil {
				t.Fatal(err)
			}
			return resp.Server
		}
		home := map[string]string{}
		for i := range 30 {
			u := fmt.Sprintf("user%d", i)
			home[u] = where(u)
			if again := where(u); again != home[u] {
				t.Fatalf("%s went to %s then %s", u, home[u], again)
			}
		}
		hs[0].hung.Store(true)
		for u, h := range home {
			got := where(u)
			if h != "a:1812" && got != h {
				t.Errorf("%s moved from %s to %s while its server is fine", u, h, got)
			}
			if got == "a:1812" {
				t.Errorf("%s answered by the hung server", u)
			}
		}
		rr := newTestClient(t, n, Config{Servers: specs[1:], Algorithm: loadbalance.RoundRobin})
		var seq []string
		for range 4 {
			resp, err := rr.Exchange(context.Background(), accessRequest("x"))
			if err != nil {
				t.Fatal(err)
			}
			seq = append(seq, resp.Server)
		}
		if seq[0] == seq[1] || seq[0] != seq[2] || seq[1] != seq[3] {
			t.Errorf("round-robin sequence %v", seq)
		}
		for _, h := range hs {
			h.hung.Store(true)
		}
		_, err := rr.Exchange(context.Background(), accessRequest("y"))
		var fe *FailedError
		if !errors.As(err, &fe) || len(fe.Tried) != 2 || fe.Tried[0] == fe.Tried[1] || !errors.Is(err, ErrTimeout) {
			t.Errorf("err %v, want one FailedError naming b and c once each", err)
		}
	})
}

// The ASR5K throttle on RADIUS accounting: 10,000 Accounting-Stop records
// released at once, at a max rate of 1,000/s in 50 ms slots, reach the
// server 50 per slot, none dropped; an Access-Request sent in the middle of
// the burst is not held behind it (separate limits per class).
func TestClientAccountingBurstThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		srv := startServer(t, n, "a:1812", nil, nil)
		c := newTestClient(t, n, Config{
			Servers:   []ServerSpec{{Name: "a", URL: "radius://a:1812", Accounting: throttle.Limits{MaxRate: 1000}}},
			Algorithm: loadbalance.Direct,
		})
		var arrivals sync.Map // slot index -> *atomic.Int64
		n.drop = func(from, to string, b []byte) bool {
			if to == "a:1812" && radius.Code(b) == lradius.CodeAccountingRequest {
				k := time.Now().UnixNano() / int64(50*time.Millisecond)
				v, _ := arrivals.LoadOrStore(k, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}
			return false
		}
		const burst = 10_000
		start := time.Now()
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := range burst {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Exchange(context.Background(), accountingStop(fmt.Sprintf("s%d", i))); err != nil {
					failed.Add(1)
				}
			}()
		}
		time.Sleep(time.Second)
		t0 := time.Now()
		if _, err := c.Exchange(context.Background(), accessRequest("alice")); err != nil || time.Since(t0) != 0 {
			t.Errorf("Access-Request during the burst: %v after %v", err, time.Since(t0))
		}
		wg.Wait()
		took := time.Since(start)
		if failed.Load() != 0 || srv.applied.Load() != burst+1 {
			t.Fatalf("%d failed, %d applied; want none failed and all applied", failed.Load(), srv.applied.Load())
		}
		if took < 9950*time.Millisecond || took > 10*time.Second {
			t.Errorf("the burst took %v, want 10 s at 1,000/s", took)
		}
		slots, total := 0, int64(0)
		arrivals.Range(func(_, v any) bool {
			slots++
			k := v.(*atomic.Int64).Load()
			total += k
			if k != 50 {
				t.Errorf("a slot carried %d records, want 50", k)
			}
			return true
		})
		if total != burst || slots != 200 {
			t.Errorf("%d records in %d slots, want 10,000 in 200", total, slots)
		}
	})
}

// At most 256 requests of a class are outstanding at a server (one
// Identifier space); the rest wait in the queues and go as answers come.
func TestClientMaxOutstanding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		srv := startServer(t, n, "a:1812", nil, nil)
		srv.gate = make(chan struct{})
		c := newTestClient(t, n, Config{Servers: []ServerSpec{{Name: "a", URL: "radius://a:1812"}}, Timeout: time.Minute})
		var wg sync.WaitGroup
		for i := range 600 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Exchange(context.Background(), accountingStop(fmt.Sprintf("s%d", i))); err != nil {
					t.Errorf("request %d: %v", i, err)
				}
			}()
		}
		synctest.Wait()
		st := c.Stats()
		if got := st.Servers[0].Throttle.Outstanding[throttle.Accounting]; got != 256 || srv.applied.Load() != 256 || st.Queued != 600-256 {
			t.Errorf("outstanding %d, at the server %d, queued %d; want 256, 256, 344", got, srv.applied.Load(), st.Queued)
		}
		close(srv.gate)
		wg.Wait()
		if st := c.Stats(); st.Answered != 600 {
			t.Errorf("answered %d, want 600", st.Answered)
		}
	})
}

// An accounting record that server a applied but whose answers were lost
// is retried on a (its duplicate cache answers, lost again), then fails
// over to b, which shares a's store: b answers from the store, and the
// record is applied once.
func TestClientAccountingFailoverAppliedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		store := dedup.NewMemory()
		defer store.Close()
		a := startServer(t, n, "a:1813", []byte("secret-a"), store)
		b := startServer(t, n, "b:1813", []byte("secret-b"), store)
		n.drop = func(from, to string, _ []byte) bool { return from == "a:1813" } // a's answers are lost
		c := newTestClient(t, n, Config{
			Servers: []ServerSpec{
				{Name: "a", URL: "radius://a:1813", Secret: []byte("secret-a")},
				{Name: "b", URL: "radius://b:1813", Secret: []byte("secret-b")},
			},
			Algorithm: loadbalance.Direct,
		})
		rec := accountingStop("sess-42")
		rec.Attributes.Add(radius.AttrEventTimestamp, lradius.Attribute([]byte{0x66, 1, 2, 3}))
		resp, err := c.Exchange(context.Background(), rec)
		if err != nil || resp.Server != "b:1813" || resp.Packet.Code != lradius.CodeAccountingResponse {
			t.Fatalf("resp %+v err %v; want b's Accounting-Response", resp, err)
		}
		if a.applied.Load() != 1 || b.applied.Load() != 0 {
			t.Errorf("applied by a %d, by b %d; want once, by a", a.applied.Load(), b.applied.Load())
		}
		if st := a.Stats(); st.Resent != 2 {
			t.Errorf("a's cache answered %d copies, want the 2 retransmissions", st.Resent)
		}
	})
}

// With StatusServer, the probe and the keep-alive are Status-Server
// (RFC 5997), sent once each, never retried; the keep-alive keeps a quiet
// server's down-timeout honest and an answering one in service.
func TestClientStatusServerProbeAndKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, _ := twoHangables(t)
		c := newTestClient(t, n, Config{
			Servers: []ServerSpec{
				{Name: "a", URL: "radius://a:1812", StatusServer: true},
				{Name: "b", URL: "radius://b:1812", StatusServer: true},
			},
			Algorithm: loadbalance.Direct, KeepAlive: 20 * time.Second, HoldDown: 10 * time.Second,
		})
		synctest.Wait()
		// Keep-alives at once: both answer, both in service without traffic.
		if c.State(0) != policy.InService || c.State(1) != policy.InService {
			t.Fatalf("states %v %v after the first keep-alives, want in-service", c.State(0), c.State(1))
		}
		a.hung.Store(true)
		time.Sleep(20 * time.Second) // second keep-alive to a: unanswered
		time.Sleep(9 * time.Second)  // its down-timeout
		synctest.Wait()
		if c.State(0) != policy.OutOfService {
			t.Fatalf("a is %v after an unanswered keep-alive and the down-timeout, want out-of-service", c.State(0))
		}
		a.hung.Store(false)
		time.Sleep(10 * time.Second) // hold-down over: the Status-Server probe, answered
		synctest.Wait()
		if c.State(0) != policy.InService {
			t.Errorf("a is %v after the probe, want in-service", c.State(0))
		}
		for _, arr := range a.arrivals() {
			if radius.Code(arr.b) != lradius.CodeStatusServer {
				t.Errorf("a received %v, want only Status-Server", radius.Code(arr.b))
			}
		}
		if got := len(a.arrivals()); got != 3 {
			t.Errorf("a received %d Status-Servers, want 3 (two keep-alives, one probe)", got)
		}
	})
}

// A caller that gives up gets its context's error, once; requests whose
// deadline passes while the throttle holds them fail with
// throttle.ErrExpired, each with one error, none silently dropped.
func TestClientCallerDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		srv := startServer(t, n, "a:1812", nil, nil)
		c := newTestClient(t, n, Config{Servers: []ServerSpec{{Name: "a", URL: "radius://a:1812",
			Accounting: throttle.Limits{MaxRate: 1}}}, Slot: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
		defer cancel()
		errs := make(chan error, 5)
		for i := range 5 {
			go func() {
				_, err := c.Exchange(ctx, accountingStop(fmt.Sprintf("s%d", i)))
				errs <- err
			}()
		}
		var ok, expired, gaveUp int
		for range 5 {
			switch err := <-errs; {
			case err == nil:
				ok++
			case errors.Is(err, throttle.ErrExpired):
				expired++
			case errors.Is(err, context.DeadlineExceeded):
				gaveUp++
			default:
				t.Errorf("unexpected error %v", err)
			}
		}
		// One per 1 s slot: the slots at 0, 1 and 2 s carry one each.
		if ok != 3 || ok+expired+gaveUp != 5 || srv.applied.Load() != 3 {
			t.Errorf("%d answered, %d expired in the queue, %d gave up, %d applied; want 3 answered, 2 failed", ok, expired, gaveUp, srv.applied.Load())
		}
		st := c.Stats()
		if st.Answered != 3 || st.Failed != 2 || st.Queued != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

// A queue alarm's clearing is published after its raising: a subscriber
// holds the raised alarm (and with it the Client's timer goroutine, which
// publishes it) while the requests the throttle released go on; a second
// subscriber sees raised, then cleared. Before, each alarm was published
// from a goroutine of its own, and the clearing came first. A subscriber
// may read the Client's stats from an alarm.
func TestClientQueueAlarmsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		startServer(t, n, "a:1812", nil, nil)
		bus := client.NewBus()
		release := make(chan struct{})
		var held atomic.Bool
		var cp atomic.Pointer[Client]
		bus.Subscribe(func(e client.Event) {
			if e.Kind == client.EventQueueAlarm {
				_ = cp.Load().Stats() // takes the Client's lock: none is held here
				if held.CompareAndSwap(false, true) {
					<-release
				}
			}
		})
		var mu sync.Mutex
		var seen []bool
		bus.Subscribe(func(e client.Event) {
			if e.Kind == client.EventQueueAlarm {
				mu.Lock()
				seen = append(seen, e.Raised)
				mu.Unlock()
			}
		})
		c := newTestClient(t, n, Config{Servers: []ServerSpec{{Name: "a", URL: "radius://a:1812",
			Accounting: throttle.Limits{MaxRate: 10}}}, Slot: 100 * time.Millisecond, AlarmHigh: 3, AlarmLow: 1, Events: bus})
		cp.Store(c)
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				if _, err := c.Exchange(context.Background(), accountingStop(fmt.Sprintf("s%d", i))); err != nil {
					t.Error(err)
				}
			})
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		mu.Lock()
		if len(seen) != 0 {
			t.Errorf("alarms seen raised=%v while the first subscriber holds the raise", seen)
		}
		mu.Unlock()
		close(release)
		wg.Wait()
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if want := []bool{true, false}; !slices.Equal(seen, want) {
			t.Errorf("alarms seen raised=%v, want %v", seen, want)
		}
	})
}

// The throttle's queues hold at most MaxQueued requests: past it Exchange
// fails at once with ErrBusy.
func TestClientMaxQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		startServer(t, n, "a:1812", nil, nil)
		c := newTestClient(t, n, Config{Servers: []ServerSpec{{Name: "a", URL: "radius://a:1812",
			Accounting: throttle.Limits{MaxRate: 1}}}, Slot: time.Second, MaxQueued: 3})
		errs := make(chan error, 4)
		for i := range 4 { // one goes in this slot, three wait
			go func() {
				_, err := c.Exchange(context.Background(), accountingStop(fmt.Sprintf("s%d", i)))
				errs <- err
			}()
			synctest.Wait()
		}
		if q := c.Stats().Queued; q != 3 {
			t.Fatalf("%d queued, want 3", q)
		}
		if _, err := c.Exchange(context.Background(), accountingStop("one-too-many")); !errors.Is(err, ErrBusy) {
			t.Fatalf("err %v, want ErrBusy", err)
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		if st := c.Stats(); st.Reasons["queue full"] != 1 || st.Answered != 4 {
			t.Errorf("stats %+v", st)
		}
	})
}
