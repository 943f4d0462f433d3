package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
	"github.com/redis/go-redis/v9"
)

// TestRedisStateLost: a redis-server restarted empty (no persistence) is
// noticed by the next Begin of every store that used it: a warning is
// logged, StateLost counts it once, the WithStateLost function is called
// once. A store that starts after the restart has lost nothing.
func TestRedisStateLost(t *testing.T) {
	srv := spawnRedis(t, "redis-server")
	url := "redis://" + srv.addr() + "/0"
	var logs testhelp.SyncBuffer
	var calls atomic.Int32
	open := func() *Redis {
		s, err := Open(url, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
			WithStateLost(func() { calls.Add(1) }), WithPoll(time.Millisecond, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s.(*Redis)
	}
	a, b := open(), open()
	k := RequestKey("client", 1)
	o := begin(t, a, k)
	if err := o.Complete(msg(1, 1, "applied once")); err != nil {
		t.Fatal(err)
	}
	wantKind(t, begin(t, b, k), Duplicate)
	if a.StateLost() != 0 || b.StateLost() != 0 || calls.Load() != 0 {
		t.Fatalf("a loss before any: %d %d %d", a.StateLost(), b.StateLost(), calls.Load())
	}

	srv.restart()

	// The first Begin after the restart: the entry is gone (it would be
	// applied again), and the store says so.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var o2 *Outcome
	var err error
	for o2, err = a.Begin(ctx, k); err != nil; o2, err = a.Begin(ctx, k) { // the old connection fails once
		if ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	wantKind(t, o2, First)
	_ = o2.Abandon()
	if a.StateLost() != 1 || calls.Load() != 1 {
		t.Fatalf("after the restart: StateLost %d, callback %d, want 1, 1", a.StateLost(), calls.Load())
	}
	if !strings.Contains(logs.String(), "lost its entries") || !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("no warning logged:\n%s", logs.String())
	}
	// The other server notices too, by the new epoch a wrote.
	for _, err = b.Begin(ctx, RequestKey("client", 2)); err != nil; _, err = b.Begin(ctx, RequestKey("client", 2)) {
		if ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	if b.StateLost() != 1 || calls.Load() != 2 {
		t.Fatalf("second server: StateLost %d, callbacks %d, want 1, 2", b.StateLost(), calls.Load())
	}
	// Once noticed, not again.
	o3 := begin(t, a, RequestKey("client", 3))
	_ = o3.Abandon()
	if a.StateLost() != 1 || calls.Load() != 2 {
		t.Fatalf("counted twice: %d %d", a.StateLost(), calls.Load())
	}
	// A store started after the restart has lost nothing.
	c := open()
	o4 := begin(t, c, RequestKey("client", 4))
	_ = o4.Abandon()
	if c.StateLost() != 0 {
		t.Fatal("a new store reports a loss")
	}
	// FLUSHALL is a loss too.
	if err := srv.client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	o5 := begin(t, c, RequestKey("client", 5))
	_ = o5.Abandon()
	if c.StateLost() != 1 {
		t.Fatal("FLUSHALL not noticed")
	}
}

// TestRedisCluster: the store's behaviour on a real 3-master Redis
// Cluster, through Open's redis+cluster URL: every key of a store in one
// hash slot, so that the scripts run (no CROSSSLOT) even for a request
// whose two keys would hash to different slots.
func TestRedisCluster(t *testing.T) {
	nodes := startCluster(t)
	url := clusterURL(nodes)
	var seq atomic.Int32
	mk := func(t *testing.T, opts ...Option) Store {
		opts = append([]Option{WithKeyPrefix(fmt.Sprintf("cluster%d:", seq.Add(1))), WithPoll(time.Millisecond, 20*time.Millisecond)}, opts...)
		s, err := Open(url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := mk(t).(*Redis)
	if _, ok := s.client.(*redis.ClusterClient); !ok {
		t.Fatalf("Open(%s) made a %T", url, s.client)
	}
	ctx := context.Background()
	cc := s.client.(*redis.ClusterClient)
	// Two keys in different slots without the hash tag, one with it.
	k1, k2 := RequestKey("c", 1), AccountingRecord{SessionID: "s"}.Key()
	raw1, _ := cc.ClusterKeySlot(ctx, "aaatp:dedup:"+k1.String()).Result()
	raw2, _ := cc.ClusterKeySlot(ctx, "aaatp:dedup:"+k2.String()).Result()
	if raw1 == raw2 {
		t.Fatal("pick keys of different slots")
	}
	o := begin(t, s, k1, k2)
	if err := o.Complete(msg(1, 1, "x")); err != nil {
		t.Fatal(err)
	}
	slot1, _ := cc.ClusterKeySlot(ctx, s.prefix+k1.String()).Result()
	slot2, _ := cc.ClusterKeySlot(ctx, s.prefix+k2.String()).Result()
	slotE, _ := cc.ClusterKeySlot(ctx, s.epochK).Result()
	if slot1 != slot2 || slot1 != slotE {
		t.Fatalf("slots %d %d %d: the keys of a store must share one", slot1, slot2, slotE)
	}
	wantKind(t, begin(t, mk(t, WithKeyPrefix(strings.TrimSuffix(strings.TrimPrefix(s.prefix, "{"), "}"))), k2), Duplicate)
	testStore(t, mk)
}

// TestRedisSentinel: the store through a Sentinel URL (master name, two
// sentinels), then a master failover (SENTINEL FAILOVER) in the middle of
// traffic from two servers: every request answered, none applied twice,
// every duplicate sent to the other server answered from the store.
func TestRedisSentinel(t *testing.T) {
	setup := startSentinel(t)
	var seq atomic.Int32
	mk := func(t *testing.T, opts ...Option) Store {
		opts = append([]Option{WithKeyPrefix(fmt.Sprintf("sentinel%d:", seq.Add(1))), WithPoll(time.Millisecond, 20*time.Millisecond),
			WithLogger(slog.New(slog.DiscardHandler))}, opts...) // the shortfalls are counted; their warnings are noise here
		s, err := Open(setup.url(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	if s := mk(t).(*Redis); s.cfg.acks != 1 {
		t.Fatalf("a Sentinel store waits for %d replicas, want 1", s.cfg.acks)
	}
	t.Run("Store", func(t *testing.T) { testStore(t, mk) })
	t.Run("Failover", func(t *testing.T) { testSentinelFailover(t, setup, mk) })
	t.Run("ReplicaDown", func(t *testing.T) { testSentinelReplicaDown(t, setup, mk) })
}

// testSentinelReplicaDown: with no replica to acknowledge writes, the
// store keeps answering, counts the shortfalls, and after the first one
// stops waiting the full timeout on every write.
func testSentinelReplicaDown(t *testing.T, setup *sentinelSetup, mk storeMaker) {
	setup.master.kill() // the replica since the failover
	s := mk(t).(*Redis)
	start := time.Now()
	for i := 0; i < 20; i++ {
		o := begin(t, s, RequestKey("c", uint32(i)))
		wantKind(t, o, First)
		if err := o.Complete(msg(1, uint32(i), "x")); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	if n := s.ReplicaShortfalls(); n < 20 {
		t.Errorf("shortfalls %d, want one per write at least", n)
	}
	// The first write waits maxAckTries WAITs of 250 ms, then one WAIT a
	// second (ackProbe).
	if elapsed > 3*time.Second {
		t.Errorf("20 requests took %v without a replica: the store waits on every write", elapsed)
	}
	t.Logf("20 requests without a replica: %v, %d shortfalls", elapsed, s.ReplicaShortfalls())
}

func testSentinelFailover(t *testing.T, setup *sentinelSetup, mk storeMaker) {
	prefix := WithKeyPrefix("failover:")
	storeA, storeB := mk(t, prefix), mk(t, prefix)
	var mu sync.Mutex
	applied := map[uint32]int{}
	handler := func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		mu.Lock()
		applied[wire.EndToEnd(req)]++
		mu.Unlock()
		return message.NewAnswer(req).ResultCode(message.Success).Bytes()
	}
	var ca, cb Counters
	servers := [2]peer.Handler{Wrap(storeA, handler, &ca), Wrap(storeB, handler, &cb)}

	// send is a client: it sends the request to server first and, while
	// the answer is DIAMETER_TOO_BUSY (the store failing over), again to
	// the other one with the T flag, then a duplicate of the answered
	// request to the other server, which must replay the answer.
	send := func(e2e uint32, first int) error {
		req := message.NewRequest(message.CmdTest, message.AppTest, wire.FlagProxiable).
			String(message.OriginHost, 0, true, "client.example.net").Bytes()
		wire.SetEndToEnd(req, e2e)
		srv := first
		deadline := time.Now().Add(20 * time.Second)
		for {
			ans := servers[srv](context.Background(), nil, append([]byte(nil), req...))
			if rc, _ := message.ResultCodeOf(ans); rc == message.Success {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("request %d never answered", e2e)
			}
			srv = 1 - srv
			wire.SetRetransmit(req)
			time.Sleep(20 * time.Millisecond)
		}
		dup := append([]byte(nil), req...)
		wire.SetRetransmit(dup)
		for {
			ans := servers[1-srv](context.Background(), nil, dup)
			if rc, _ := message.ResultCodeOf(ans); rc == message.Success {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("duplicate of %d never answered", e2e)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent atomic.Uint32
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				e2e := sent.Add(1)
				if err := send(e2e, int(e2e%2)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	before := sent.Load()
	sc := redis.NewSentinelClient(&redis.Options{Addr: setup.sentinels[0].addr()})
	defer sc.Close()
	if err := sc.Failover(context.Background(), setup.name).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	// Wait until the replica is the master, then let traffic run on it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		addr, err := sc.GetMasterAddrByName(context.Background(), setup.name).Result()
		if err == nil && len(addr) == 2 && addr[1] == fmt.Sprint(setup.replica.port) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover: master %v %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := sent.Load()
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for e2e, n := range applied {
		if n > 1 {
			twice++
			t.Errorf("request %d applied %d times", e2e, n)
		}
	}
	if uint32(len(applied)) != total {
		t.Errorf("%d requests sent, %d applied", total, len(applied))
	}
	t.Logf("%d requests (%d before the failover), %d applied twice; store errors %d+%d, duplicates %d+%d, replica shortfalls %d+%d",
		total, before, twice, ca.StoreErrs.Load(), cb.StoreErrs.Load(), ca.Duplicates.Load(), cb.Duplicates.Load(),
		storeA.(*Redis).ReplicaShortfalls(), storeB.(*Redis).ReplicaShortfalls())
	if total <= before {
		t.Error("no traffic after the failover")
	}
	if errors.Is(ctx.Err(), context.Canceled) && ca.Duplicates.Load()+cb.Duplicates.Load() < uint64(total) {
		t.Errorf("duplicates answered from the store %d, want %d", ca.Duplicates.Load()+cb.Duplicates.Load(), total)
	}
}
