package hostile

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// Observation 3: answers echo the Session-Id, so a peer sending 60 KB
// Session-Ids made the memory dedup store hold 88 KB per request (2.6 GB
// after 30,000). With entries big enough to be kept (--dedup-max-answer
// 128 KiB), --dedup-max-bytes bounds what the store holds, oldest first,
// and the server's RSS stays near the budget.
func TestLongSessionIDsWithinDedupBudget(t *testing.T) {
	const budget = 32 << 20
	const n = 5000 // 5000 x 60 KB: about 300 MB of answers to keep
	s := startServer(t, 0, "--dedup", "memory", "--dedup-max-answer", fmt.Sprint(128<<10), "--dedup-max-bytes", fmt.Sprint(budget))
	g := goodClient(t, s, nil)
	pk := s.sample()
	g.run()
	const host = "long.example.net"
	tc := raw(t, s, host)
	pad := strings.Repeat("s", 60<<10)
	answered := 0
	for i := range n {
		m := withSessionID(acr(host, uint32(i)), fmt.Sprintf("%s;%s;%d", host, pad, i))
		wire.SetHopByHop(m, uint32(i))
		wire.SetEndToEnd(m, uint32(i))
		if err := tc.WriteMessages(m); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		ans, err := tc.ReadMessage()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if rc, _ := message.ResultCodeOf(ans); rc == message.Success {
			answered++
		}
	}
	g.halt()
	s.alive()
	rss, gs := pk.end()
	within(t, "long-session-ids", rss, gs)
	g.check(t)
	t.Logf("FIGURES long-session-ids: %d requests with 60 KB Session-Ids answered 2001 (%d MB of answers); --dedup-max-bytes %d MB; server peak RSS %.1f MB",
		answered, n*(60<<10)>>20, budget>>20, float64(rss)/(1<<20))
	if answered != n {
		t.Errorf("%d of %d answered 2001", answered, n)
	}
	// The budget, plus a server at rest (about 15 MB), Go's heap growth
	// over live data (GOGC 100) and the sockets' buffers.
	if limit := int64(2*budget + 64<<20); rss > limit {
		t.Errorf("peak RSS %d MB, over %d MB: the store holds more than its budget", rss>>20, limit>>20)
	}
}

// redisServer is one redis-server process without persistence.
type redisServer struct {
	cmd  *exec.Cmd
	port string
}

func startRedis(t *testing.T, port string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server not found (CI=true)")
		}
		t.Skip("redis-server not found")
	}
	r := &redisServer{port: port}
	r.cmd = exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.kill)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			c.Close()
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("redis-server not listening within 10 s")
	return nil
}

func (r *redisServer) kill() {
	if r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

// Observation 10: after the shared Redis restarted empty, a T-flagged
// replay of an applied request was applied again with no word. Applying it
// again cannot be helped (the store forgot it), but the server now says so:
// a warning in its log, aaatp_dedup_store_lost_total on /metrics, an event
// and dedup_lost in its report.
func TestRedisRestartedEmptyIsReported(t *testing.T) {
	port := strings.TrimPrefix(freePort(t), "127.0.0.1:")
	rd := startRedis(t, port)
	events := t.TempDir() + "/events.jsonl"
	s := startServer(t, 0, "--dedup", "redis://127.0.0.1:"+port+"/0", "--events", events)
	const host = "replayer.example.net"
	tc := raw(t, s, host)
	req := acr(host, 7)
	wire.SetHopByHop(req, 1)
	wire.SetEndToEnd(req, 77)
	if rc := ask(t, tc, req); rc != message.Success {
		t.Fatalf("first request answered %d", rc)
	}

	rd.kill()
	startRedis(t, port) // empty: no persistence

	replay := append([]byte(nil), req...)
	replay[4] |= wire.FlagRetransmit
	var rc uint32
	deadline := time.Now().Add(15 * time.Second)
	for n := uint32(2); time.Now().Before(deadline); n++ {
		// The first tries may meet the store reconnecting (3004).
		wire.SetHopByHop(replay, n)
		if rc = ask(t, tc, replay); rc == message.Success {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rc != message.Success {
		t.Fatalf("the replay was answered %d after Redis came back", rc)
	}
	s.alive()
	body, err := s.scrape()
	if err != nil {
		t.Fatal(err)
	}
	metric := ""
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "aaatp_dedup_store_lost_total ") {
			metric = line
		}
	}
	r := s.stopReport()
	stderr, _ := os.ReadFile(s.stderr)
	warned := strings.Contains(string(stderr), "lost its entries")
	evLine := ""
	if f, err := os.Open(events); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "lost its entries") {
				evLine = sc.Text()
			}
		}
		f.Close()
	}
	t.Logf("FIGURES redis-restarted-empty: replay answered %d; metric %q; report dedup_lost %v; warning logged %v; event %q", rc, metric, r["dedup_lost"], warned, evLine)
	if metric != "aaatp_dedup_store_lost_total 1" {
		t.Errorf("/metrics: %q, want aaatp_dedup_store_lost_total 1", metric)
	}
	if v, _ := r["dedup_lost"].(float64); v != 1 {
		t.Errorf("report dedup_lost %v, want 1", r["dedup_lost"])
	}
	if !warned {
		t.Errorf("no warning in the server's log:\n%s", tail(stderr, 4096))
	}
	if evLine == "" {
		t.Error("no event says the store lost its entries")
	}
}

// ask writes req on tc and returns the answer's Result-Code.
func ask(t *testing.T, tc transport.Conn, req []byte) uint32 {
	t.Helper()
	if err := tc.WriteMessages(req); err != nil {
		t.Fatal(err)
	}
	ans, err := tc.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := message.ResultCodeOf(ans)
	return rc
}
