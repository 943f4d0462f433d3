package dedup

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"

	"github.com/redis/go-redis/v9"
)

// TestRedisTwoServers: two stores (two servers, each with its own client)
// on one Redis with the same prefix see each other's entries and in-flight
// marks; another prefix is separate.
func TestRedisTwoServers(t *testing.T) {
	a := newRedisStore(t, "realm1:")
	b := newRedisStore(t, "realm1:")
	other := newRedisStore(t, "realm2:")
	k := RequestKey("client", 42)

	o := begin(t, a, k)
	wantKind(t, o, First)
	res := make(chan *Outcome, 1)
	go func() {
		d, err := b.Begin(context.Background(), k) // waits on a's mark
		if err != nil {
			t.Error(err)
		}
		res <- d
	}()
	time.Sleep(30 * time.Millisecond)
	if err := o.Complete(msg(5, 42, "from-a")); err != nil {
		t.Fatal(err)
	}
	d := <-res
	wantKind(t, d, Duplicate)
	if !bytes.HasSuffix(d.Answer(), []byte("from-a")) {
		t.Fatalf("b got %q", d.Answer())
	}
	wantKind(t, begin(t, b, k), Duplicate)
	o3 := begin(t, other, k)
	wantKind(t, o3, First)
	_ = o3.Abandon()
}

// TestRedisLayout checks the stored values and TTLs: the in-flight mark
// with the mark TTL, the answer with the age TTL, and the name of the
// owner that stored it with two mark TTLs.
func TestRedisLayout(t *testing.T) {
	url := needRedis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	s := NewRedis(c, WithKeyPrefix("layout:"), WithMarkTTL(5*time.Second), WithMaxAge(time.Minute))
	defer s.Close()
	ctx := context.Background()
	k := RequestKey("client", 1)
	rk := "{layout:}" + k.String() // the prefix made a hash tag

	o := begin(t, s, k)
	mark, err := c.Get(ctx, rk).Result()
	if err != nil || !strings.HasPrefix(mark, "m") {
		t.Fatalf("mark = %q, %v", mark, err)
	}
	if ttl := c.PTTL(ctx, rk).Val(); ttl <= 0 || ttl > 5*time.Second {
		t.Fatalf("mark TTL %v", ttl)
	}
	if e, err := c.Get(ctx, "{layout:}epoch").Result(); err != nil || e == "" {
		t.Fatalf("epoch key %q, %v", e, err)
	}
	if err := o.Complete(msg(1, 1, "x")); err != nil {
		t.Fatal(err)
	}
	v, _ := c.Get(ctx, rk).Result()
	if want := "a" + string(msg(1, 1, "x")); v != want {
		t.Fatalf("answer = %q, want %q", v, want)
	}
	if ttl := c.PTTL(ctx, rk).Val(); ttl <= 5*time.Second || ttl > time.Minute {
		t.Fatalf("answer TTL %v", ttl)
	}
	if v, err := c.Get(ctx, rk+":o").Result(); err != nil || "m"+v != mark {
		t.Fatalf("owner = %q, %v; want the mark's token", v, err)
	}
	if ttl := c.PTTL(ctx, rk+":o").Val(); ttl <= 10*time.Second || ttl > 15*time.Second {
		t.Fatalf("owner TTL %v, want three mark TTLs", ttl)
	}
	// NewRedis's Close leaves the caller's client open.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("client closed by Store.Close: %v", err)
	}
}

// TestRedisCompleteRetryRecognisesItsOwnWrite: a Complete tried again
// (its first reply lost, or not acknowledged by the replicas) finds its
// own earlier write and succeeds, answer kept or not.
func TestRedisCompleteRetryRecognisesItsOwnWrite(t *testing.T) {
	s := newRedisStore(t, "", WithMaxAnswerSize(100)).(*Redis)
	for i, ans := range [][]byte{msg(1, 1, "x"), msg(1, 1, strings.Repeat("y", 200))} {
		o := begin(t, s, RequestKey("c", uint32(i)), RequestKey("d", uint32(i)))
		want := error(nil)
		if len(ans) > 100 {
			want = ErrAnswerTooLarge
		}
		for try := 1; try <= 2; try++ {
			if err := o.fin.complete(o, ans); err != want {
				t.Fatalf("answer of %d bytes, try %d: %v, want %v", len(ans), try, err, want)
			}
		}
	}
}

func TestRedisUnreachable(t *testing.T) {
	s, err := Open("redis://127.0.0.1:1/0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.Begin(ctx, RequestKey("c", 1)); err == nil {
		t.Fatal("Begin on an unreachable Redis succeeded")
	}
}

func TestOpen(t *testing.T) {
	s, err := Open("memory", WithMaxEntries(10))
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := s.(*Memory); !ok || len(m.shards) != 8 {
		t.Fatalf("Open(memory) = %T", s)
	}
	_ = s.Close()
	if _, err := Open("bogus://user:s3cret@host"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("bad URL error %v (must not show the password)", err)
	}
	if _, err := Open("redis://host:notaport/x"); err == nil {
		t.Fatal("bad redis URL accepted")
	}
}

// TestOpenURLs: Open tells a single server, Sentinel and Cluster apart by
// go-redis' own URL forms; a Sentinel store waits for a replica by default.
func TestOpenURLs(t *testing.T) {
	for _, tc := range []struct {
		url     string
		cluster bool
		acks    int
	}{
		{"redis://127.0.0.1:1/0", false, 0},
		{"rediss://127.0.0.1:1/0", false, 0},
		{"redis://127.0.0.1:1/0?master_name=m&addr=127.0.0.1:2&addr=127.0.0.1:3", false, 1},
		{"redis+sentinel://127.0.0.1:1?master_name=m", false, 1},
		{"redis+cluster://127.0.0.1:1", true, 0},
		{"rediss+cluster://127.0.0.1:1?addr=127.0.0.1:2", true, 0},
		{"redis://127.0.0.1:1?addr=127.0.0.1:2", true, 0}, // several addresses, no master: a cluster
	} {
		s, err := Open(tc.url)
		if err != nil {
			t.Errorf("Open(%s): %v", tc.url, err)
			continue
		}
		r := s.(*Redis)
		_, isCluster := r.client.(*redis.ClusterClient)
		if isCluster != tc.cluster || r.cfg.acks != tc.acks {
			t.Errorf("Open(%s): %T with replica acks %d", tc.url, r.client, r.cfg.acks)
		}
		_ = s.Close()
	}
	// Context deadlines hold on the wire, unless a Sentinel URL (the one
	// parser that reads it) says otherwise.
	for url, want := range map[string]bool{
		"redis://127.0.0.1:1/0":                                                    true,
		"redis+cluster://127.0.0.1:1":                                              true,
		"redis+sentinel://127.0.0.1:1?master_name=m":                               true,
		"redis+sentinel://127.0.0.1:1?master_name=m&context_timeout_enabled=false": false,
	} {
		s, err := Open(url)
		if err != nil {
			t.Fatal(err)
		}
		var got bool
		switch c := s.(*Redis).client.(type) {
		case *redis.Client:
			got = c.Options().ContextTimeoutEnabled
		case *redis.ClusterClient:
			got = c.Options().ContextTimeoutEnabled
		}
		if got != want {
			t.Errorf("Open(%s): ContextTimeoutEnabled %v, want %v", url, got, want)
		}
		_ = s.Close()
	}
	s, err := Open("redis://127.0.0.1:1?master_name=m", WithReplicaAcks(0, 0))
	if err != nil || s.(*Redis).cfg.acks != 0 {
		t.Fatalf("WithReplicaAcks(0) does not turn the Sentinel default off: %v", err)
	}
	_ = s.Close()
	for _, bad := range []string{
		"redis+sentinel://127.0.0.1:1",             // no master_name
		"redis+bogus://127.0.0.1:1",                // unknown mode
		"redis://u:s3cret@127.0.0.1:1/0?bogus=1",   // unknown parameter
		"redis+cluster://u:s3cret@127.0.0.1:1/%zz", // bad URL
		"redis:/:s3cret@db.example.net:6379/0",     // no "://": not a URL Open knows
		"redis:s3cret@db.example.net:6379/0",
		"u:s3cret@db.example.net:6379",
		"u@s3cret",
		"x@s3cret://db",
	} {
		if s, err := Open(bad); err == nil {
			_ = s.Close()
			t.Errorf("Open(%s) accepted", bad)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%s): the error shows the password: %v", bad, err)
		}
	}
}

func TestHashTagged(t *testing.T) {
	for in, want := range map[string]string{
		"aaatp:dedup:": "{aaatp:dedup:}", "": "{dedup}", "realm1:": "{realm1:}",
		"{realm1}:dedup:": "{realm1}:dedup:", "x{a}y": "x{a}y", "{}x": "{{}x}", "a{b": "{a{b}",
	} {
		if got := hashTagged(in); got != want {
			t.Errorf("hashTagged(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRedisFullRefusesWithNoEviction: a Redis at its maxmemory with the
// noeviction policy, as Redis recommends for the store, refuses the
// store's writes: Begin fails (Wrap answers DIAMETER_TOO_BUSY) rather than
// marking or answering anything.
func TestRedisFullRefusesWithNoEviction(t *testing.T) {
	url := needRedis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	s := newRedisStore(t, "")
	o := begin(t, s, RequestKey("c", 1)) // the epoch key is written
	_ = o.Abandon()
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer c.ConfigSet(ctx, "maxmemory", "0") // before the client closes
	if o, err := s.Begin(ctx, RequestKey("c", 2)); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("Begin on a full Redis: %v %v, want an OOM error", o, err)
	}
	ans := Wrap(s, func(context.Context, *peer.Peer, []byte) []byte {
		t.Fatal("handler ran without the store")
		return nil
	}, nil)(ctx, nil, acrFor(3, 3))
	if rc, _ := message.ResultCodeOf(ans); rc != message.TooBusy {
		t.Fatalf("Wrap answered %d, want 3004", rc)
	}
}

// silentServer accepts connections and reads from them, never answering:
// a Redis that hangs. It returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return l.Addr().String()
}

// TestRedisBeginHonoursContextOnTheWire: against a Redis that takes
// commands and never answers, Begin returns at its context's deadline,
// not at the client's socket read timeout (seconds), for each kind of
// URL Open takes.
func TestRedisBeginHonoursContextOnTheWire(t *testing.T) {
	addr := silentServer(t)
	for _, url := range []string{
		"redis://" + addr + "/0",
		"redis://" + addr + "/0?master_name=m",
		"redis+cluster://" + addr,
	} {
		s, err := Open(url, WithKeyPrefix("hang:"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		_, err = s.Begin(ctx, RequestKey("c", 1))
		el := time.Since(start)
		cancel()
		_ = s.Close() // the Sentinel client's takes seconds: go-redis waits out its dials
		if n := len(s.(*Redis).releasing); n != 0 {
			t.Errorf("%s: Close returned with %d releases of the failed claim under way", url, n)
		}
		if err == nil || el > time.Second {
			t.Errorf("%s: Begin returned %v after %v, want an error at about 100ms", url, err, el)
		}
	}
}

// replyDropper is a TCP proxy to a Redis that forwards every command but,
// on the connections open when dropReplies was last called, none of the
// replies: commands run on Redis while the client times out waiting.
type replyDropper struct {
	conns     atomic.Int64 // connections accepted
	dropBelow atomic.Int64 // connections numbered below it drop replies
	addr      string
}

func (p *replyDropper) dropReplies() { p.dropBelow.Store(p.conns.Load()) }

func newReplyDropper(t *testing.T, target string) *replyDropper {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{addr: l.Addr().String()}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			track(c)
			track(s)
			id := p.conns.Add(1) - 1
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(s, c); s.Close() }()
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := s.Read(buf)
					if n > 0 && id >= p.dropBelow.Load() {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// TestRedisClaimLostReplyReleasesMark: a claim that ran on Redis but whose
// reply never reached the client (a read timeout) leaves marks nobody
// owns. Begin drops them after the error, so that the request, tried
// again at another server, does not wait the whole mark TTL.
func TestRedisClaimLostReplyReleasesMark(t *testing.T) {
	url := needRedis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newReplyDropper(t, opt.Addr)
	viaProxy, err := Open("redis://"+proxy.addr+"/0", WithKeyPrefix("lost:"))
	if err != nil {
		t.Fatal(err)
	}
	defer viaProxy.Close()
	other := newRedisStore(t, "lost:", WithMarkTTL(10*time.Second))
	ctx := context.Background()
	_ = begin(t, viaProxy, RequestKey("c", 0)).Abandon() // the scripts are loaded: no NOSCRIPT round trip below

	k := RequestKey("c", 1)
	proxy.dropReplies() // the pool's connection: the claim's reply is lost
	ctx1, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = viaProxy.Begin(ctx1, k)
	cancel()
	if err == nil {
		t.Fatal("Begin without a reply succeeded")
	}
	ctx2, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	o, err := other.Begin(ctx2, k)
	if err != nil {
		t.Fatalf("the request elsewhere: %v after %v (the orphaned mark held it)", err, time.Since(start))
	}
	wantKind(t, o, First)
	_ = o.Abandon()
}

// declaredOnly returns script src run so that every redis.call whose key
// (its first argument) is not one of KEYS fails the script, as the Redis
// EVAL docs require and some Redis-compatible servers and proxies enforce.
func declaredOnly(src string) *redis.Script {
	return redis.NewScript(`local declared = {}
for _, k in ipairs(KEYS) do declared[k] = true end
local function call(cmd, k, ...)
  if not declared[k] then error('key not in KEYS: ' .. tostring(k)) end
  return redis.call(cmd, k, ...)
end
` + strings.ReplaceAll(src, "redis.call(", "call("))
}

// TestRedisScriptsDeclareTheirKeys: the scripts touch no key they were
// not given in KEYS: claim, Complete (its answer kept or not, tried again,
// taken over), a duplicate, Abandon.
func TestRedisScriptsDeclareTheirKeys(t *testing.T) {
	saved := [4]*redis.Script{claimScript, completeScript, abandonScript, settleScript}
	claimScript, completeScript, abandonScript, settleScript = declaredOnly(claimLua), declaredOnly(completeLua), declaredOnly(abandonLua), declaredOnly(settleLua)
	t.Cleanup(func() {
		claimScript, completeScript, abandonScript, settleScript = saved[0], saved[1], saved[2], saved[3]
	})
	s := newRedisStore(t, "", WithMaxAnswerSize(100), WithMarkTTL(time.Second)).(*Redis)
	for i, ans := range [][]byte{msg(1, 1, "x"), msg(1, 1, strings.Repeat("y", 200))} {
		k1, k2 := RequestKey("c", uint32(i)), RequestKey("d", uint32(i))
		o := begin(t, s, k1, k2)
		want := error(nil)
		if len(ans) > 100 {
			want = ErrAnswerTooLarge
		}
		for try := 1; try <= 2; try++ { // the second finds its own write
			if err := o.fin.complete(o, ans); err != want {
				t.Fatalf("answer of %d bytes, try %d: %v, want %v", len(ans), try, err, want)
			}
		}
		if want == nil {
			wantKind(t, begin(t, s, k1), Duplicate)
		} else if _, err := s.Begin(context.Background(), k2); err != ErrAnswerNotKept {
			t.Fatalf("duplicate of an answer not kept: %v", err)
		}
	}
	_ = begin(t, s, RequestKey("c", 9)).Abandon()
	// Taken over: another owner's mark on one key; Complete stores
	// nothing and drops its other mark.
	o := begin(t, s, RequestKey("c", 10), RequestKey("d", 10))
	if err := s.client.Set(context.Background(), o.fin.(*redisMark).keys[1], "mother", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := o.Complete(msg(1, 1, "z")); err != ErrMarkLost {
		t.Fatalf("Complete of a mark taken over: %v, want ErrMarkLost", err)
	}
	// Settling a commit that landed, and one that did not.
	for i, commit := range []bool{true, false} {
		o := begin(t, s, RequestKey("c", uint32(11+i)), RequestKey("d", uint32(11+i)))
		mk := o.fin.(*redisMark)
		if commit {
			if err := mk.complete(o, msg(1, 1, "w")); err != nil {
				t.Fatal(err)
			}
		}
		if landed, err := mk.settle(mk.withOwners()); err != nil || landed != commit {
			t.Fatalf("settle after a commit (%v): landed %v, %v", commit, landed, err)
		}
	}
}

// commandCalls returns the calls of each command counted by INFO
// commandstats, by name ("evalsha").
func commandCalls(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		calls[name] = n
	}
	return calls
}

// TestRedisClaimNotSentReleasesNothing: a Begin whose claim never reached
// Redis (its context done before, Redis not reachable) sends no abandon
// after it: there is no mark to drop, and in an outage every failed
// request would hold a connection and a goroutine for up to a second.
func TestRedisClaimNotSentReleasesNothing(t *testing.T) {
	url := needRedis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	s := newRedisStore(t, "").(*Redis)
	_ = begin(t, s, RequestKey("c", 0)).Abandon() // connected, scripts loaded
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range uint32(20) {
		if _, err := s.Begin(ctx, RequestKey("c", i+1)); !errors.Is(err, context.Canceled) {
			t.Fatalf("Begin with a cancelled context: %v", err)
		}
	}
	time.Sleep(200 * time.Millisecond) // any release would have run
	if calls := commandCalls(t, c); calls["evalsha"]+calls["eval"] != 0 {
		t.Fatalf("20 Begins with a cancelled context sent scripts: %v", calls)
	}

	down, err := Open("redis://127.0.0.1:1/0")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	for i := range uint32(2) {
		if _, err := down.Begin(context.Background(), RequestKey("c", i)); err == nil {
			t.Fatal("Begin on an unreachable Redis succeeded")
		}
	}
	if n := down.(*Redis).releases.Load(); n != 0 {
		t.Fatalf("%d releases after claims that could not connect", n)
	}
}

// TestRedisClaimReleasesBounded: claims that may have run (sent, their
// reply never come: a Redis that hangs) are each followed by a release,
// but no more than maxReleases at once: the rest are left to expire by
// their mark TTL, which is all the release would spare.
func TestRedisClaimReleasesBounded(t *testing.T) {
	s, err := Open("redis://"+silentServer(t)+"/0", WithKeyPrefix("hang:"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := s.(*Redis)
	for i := range uint32(3 * maxReleases) { // within a release's second
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := s.Begin(ctx, RequestKey("c", i))
		cancel()
		if err == nil {
			t.Fatal("Begin on a Redis that never answers succeeded")
		}
	}
	if n := r.releases.Load(); n == 0 || n > maxReleases {
		t.Fatalf("%d releases after %d claims lost on the wire, want 1 to %d", n, 3*maxReleases, maxReleases)
	}
}

// cancelAfterPipeline cancels a context once a pipeline (a claim and its
// WAIT) has run.
type cancelAfterPipeline struct {
	cancel atomic.Pointer[context.CancelFunc]
}

func (h *cancelAfterPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *cancelAfterPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *cancelAfterPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if c := h.cancel.Swap(nil); c != nil {
			(*c)()
		}
		return err
	}
}

// TestRedisAcksCancelledReleasesMark: with WithReplicaAcks and replicas
// that do not acknowledge (a lone server: WAIT 1 never succeeds), Begin
// marks the keys and claims again; if the request's context ends in
// between, Begin must release the marks of its first claim, which nobody
// owns: else the request's retry, here or at another server, waits for
// them the whole mark TTL.
func TestRedisAcksCancelledReleasesMark(t *testing.T) {
	url := needRedis(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	client := redis.NewClient(opt)
	defer client.Close()
	hook := &cancelAfterPipeline{}
	client.AddHook(hook)
	s := NewRedis(client, WithKeyPrefix("acks-cancel:"), WithReplicaAcks(1, 20*time.Millisecond), WithMarkTTL(time.Minute))
	other := newRedisStore(t, "acks-cancel:", WithMarkTTL(time.Minute))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hook.cancel.Store(&cancel)
	k := RequestKey("nas1", 99)
	if _, err := s.Begin(ctx, k); err == nil {
		t.Fatal("Begin succeeded with its context cancelled")
	}
	// The retry elsewhere gets the request well within the mark TTL (a
	// minute): the release is bounded by a second.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	o, err := other.Begin(ctx2, k)
	if err != nil {
		t.Fatalf("the retry waited for a mark nobody owns: %v", err)
	}
	wantKind(t, o, First)
	_ = o.Abandon()
}
