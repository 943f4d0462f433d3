package dedup

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/wire"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stopRedis()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fakeClock is a settable clock for the in-memory store.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// msg returns a Diameter-like message: a 20-byte header with the given
// Hop-by-Hop and End-to-End identifiers, then body.
func msg(hbh, e2e uint32, body string) []byte {
	b := make([]byte, wire.HeaderLen, wire.HeaderLen+len(body))
	b[0] = 1
	wire.SetHopByHop(b, hbh)
	b[16], b[17], b[18], b[19] = byte(e2e>>24), byte(e2e>>16), byte(e2e>>8), byte(e2e)
	return append(b, body...)
}

// The Redis server shared by the tests of this package, started on first use.
var (
	redisOnce sync.Once
	redisCmd  *exec.Cmd
	redisURL  string
	redisErr  error
	redisOut  bytes.Buffer
	redisPfx  atomic.Uint64
)

// needRedis returns the URL of a redis-server running on loopback for this
// test binary. Without redis-server the test skips, unless CI=true, where it
// fails.
func needRedis(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not installed (CI=true: Redis tests must run): %v", err)
		}
		t.Skip("redis-server not installed; install it (apt-get install redis-server) to run the Redis store tests")
	}
	redisOnce.Do(startRedis)
	if redisErr != nil {
		t.Fatalf("start redis-server: %v\n%s", redisErr, redisOut.String())
	}
	// Every test starts from an empty database, so that -count=N and the
	// order of tests do not matter (the server lives for the whole run).
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHDB: %v", err)
	}
	return redisURL
}

func startRedis() {
	for attempt := 0; attempt < 3; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			redisErr = err
			return
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		redisOut.Reset()
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--protected-mode", "yes")
		cmd.Stdout = &redisOut
		cmd.Stderr = &redisOut
		orphanGuard(cmd)
		if redisErr = cmd.Start(); redisErr != nil {
			return
		}
		url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			redisErr = c.Ping(ctx).Err()
			cancel()
			if redisErr == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
		if redisErr == nil {
			redisCmd, redisURL = cmd, url
			return
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

func stopRedis() {
	if redisCmd != nil {
		_ = redisCmd.Process.Kill()
		_ = redisCmd.Wait()
		redisCmd = nil
	}
}

// newRedisStore opens a Redis store with a key prefix unique to the test.
func newRedisStore(t *testing.T, prefix string, opts ...Option) Store {
	t.Helper()
	url := needRedis(t)
	if prefix == "" {
		prefix = fmt.Sprintf("test%d:", redisPfx.Add(1))
	}
	opts = append([]Option{WithKeyPrefix(prefix), WithPoll(time.Millisecond, 20*time.Millisecond)}, opts...)
	s, err := Open(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
