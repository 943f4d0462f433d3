package dedup

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

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
// with the mark TTL, the answer with the age TTL.
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
	rk := "layout:" + k.String()

	o := begin(t, s, k)
	v, err := c.Get(ctx, rk).Result()
	if err != nil || !strings.HasPrefix(v, "m") {
		t.Fatalf("mark = %q, %v", v, err)
	}
	if ttl := c.PTTL(ctx, rk).Val(); ttl <= 0 || ttl > 5*time.Second {
		t.Fatalf("mark TTL %v", ttl)
	}
	if err := o.Complete(msg(1, 1, "x")); err != nil {
		t.Fatal(err)
	}
	v, _ = c.Get(ctx, rk).Result()
	if want := "a" + string(msg(1, 1, "x")); v != want {
		t.Fatalf("answer = %q, want %q", v, want)
	}
	if ttl := c.PTTL(ctx, rk).Val(); ttl <= 5*time.Second || ttl > time.Minute {
		t.Fatalf("answer TTL %v", ttl)
	}
	// NewRedis's Close leaves the caller's client open.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("client closed by Store.Close: %v", err)
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
