package dedup

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis deployments started by the tests themselves, on free loopback
// ports: a server to restart empty, a Sentinel setup, a Cluster. Without
// the binaries the tests skip, unless CI=true, where they fail.

// needBinary skips the test without the named program, or fails it under
// CI=true.
func needBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed (CI=true: Redis tests must run): %v", name, err)
		}
		t.Skipf("%s not installed; install it (apt-get install redis-server redis-sentinel) to run this test", name)
	}
	return p
}

// redisProc is one redis-server or redis-sentinel process.
type redisProc struct {
	t    testing.TB
	bin  string
	args []string
	port int
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	out  bytes.Buffer
}

func (p *redisProc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// freePort returns a loopback port free at the time of the call.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// spawnRedis starts bin (redis-server or redis-sentinel) on a free port
// with a config file of its own holding conf (one directive a line), and
// waits until it answers PING. The test's cleanup kills it.
func spawnRedis(t testing.TB, bin string, conf ...string) *redisProc {
	t.Helper()
	p := &redisProc{t: t, bin: needBinary(t, bin), port: freePort(t), dir: t.TempDir()}
	lines := append([]string{
		"port " + strconv.Itoa(p.port), "bind 127.0.0.1", "save \"\"", "appendonly no",
		"dir " + p.dir, "protected-mode yes",
	}, conf...)
	cfg := filepath.Join(p.dir, "redis.conf")
	if err := os.WriteFile(cfg, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.args = []string{cfg}
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *redisProc) start() {
	p.t.Helper()
	p.mu.Lock()
	p.out.Reset()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = &syncWriter{mu: &p.mu, w: &p.out}, &syncWriter{mu: &p.mu, w: &p.out}
	orphanGuard(cmd)
	err := cmd.Start()
	p.cmd = cmd
	p.mu.Unlock()
	if err != nil {
		p.t.Fatalf("start %s: %v", p.bin, err)
	}
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.t.Fatalf("%s on %s not answering: %v\n%s", p.bin, p.addr(), err, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the process at once (SIGKILL: no shutdown save).
func (p *redisProc) kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// restart kills the process and starts it again on the same port: a
// redis-server without persistence comes back empty.
func (p *redisProc) restart() {
	p.kill()
	p.start()
}

func (p *redisProc) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.addr()})
	p.t.Cleanup(func() { c.Close() })
	return c
}

type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// startCluster starts a 3-master Redis Cluster (no replicas) and returns
// its nodes once every node reports cluster_state:ok.
func startCluster(t *testing.T) []*redisProc {
	t.Helper()
	nodes := make([]*redisProc, 3)
	bus := make([]int, len(nodes)) // cluster bus ports: port+10000 may be taken
	for i := range nodes {
		bus[i] = freePort(t)
		nodes[i] = spawnRedis(t, "redis-server", "cluster-enabled yes", "cluster-port "+strconv.Itoa(bus[i]),
			"cluster-config-file nodes.conf", "cluster-node-timeout 2000")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const slots = 16384
	for i, n := range nodes {
		c := n.client()
		lo, hi := i*slots/len(nodes), (i+1)*slots/len(nodes)-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("ADDSLOTSRANGE on %s: %v", n.addr(), err)
		}
		if i > 0 {
			if err := nodes[0].client().Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.port, bus[i]).Err(); err != nil {
				t.Fatalf("CLUSTER MEET: %v", err)
			}
		}
	}
	for _, n := range nodes {
		c := n.client()
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("cluster not ok on %s: %v\n%s", n.addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes
}

// clusterURL is the redis+cluster URL of nodes.
func clusterURL(nodes []*redisProc) string {
	u := "redis+cluster://" + nodes[0].addr()
	for i, n := range nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + n.addr()
	}
	return u
}

// sentinelSetup is a master, its replica and two sentinels watching them.
type sentinelSetup struct {
	master, replica *redisProc
	sentinels       []*redisProc
	name            string
}

func startSentinel(t *testing.T) *sentinelSetup {
	t.Helper()
	needBinary(t, "redis-sentinel")
	s := &sentinelSetup{name: "dedupmaster"}
	s.master = spawnRedis(t, "redis-server")
	s.replica = spawnRedis(t, "redis-server", "replicaof 127.0.0.1 "+strconv.Itoa(s.master.port))
	for i := 0; i < 2; i++ {
		s.sentinels = append(s.sentinels, spawnRedis(t, "redis-sentinel",
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1", s.name, s.master.port),
			"sentinel down-after-milliseconds "+s.name+" 1000",
			"sentinel failover-timeout "+s.name+" 5000"))
	}
	// Wait until the replica is in sync and every sentinel knows it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rc := s.replica.client()
	var scs []*redis.SentinelClient
	for _, sn := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.addr()})
		defer sc.Close()
		scs = append(scs, sc)
	}
	for {
		info, _ := rc.Info(ctx, "replication").Result()
		ok := strings.Contains(info, "master_link_status:up")
		for _, sc := range scs {
			reps, err := sc.Replicas(ctx, s.name).Result()
			ok = ok && err == nil && len(reps) == 1
		}
		if ok {
			return s
		}
		if ctx.Err() != nil {
			t.Fatalf("sentinel setup not ready: %s", info)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// url is the Sentinel URL of s: every sentinel, the master name.
func (s *sentinelSetup) url() string {
	u := "redis://" + s.sentinels[0].addr() + "/0?master_name=" + s.name
	for _, sn := range s.sentinels[1:] {
		u += "&addr=" + sn.addr()
	}
	return u
}
