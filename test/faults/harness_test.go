package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/internal/dedupcount"
	"github.com/aaatp/aaatp/peer"
)

// Topology of one scenario (names are per scenario; addresses are the
// same in every scenario, each in its own namespaces):
//
//	client ns  --veth sK/c  10.231.K.1 <-> 10.231.K.2--  server K ns
//	server K ns --veth r/sK  10.232.K.2 <-> 10.232.K.1--  store ns (redis-server)
//
// Faults go on the client <-> server links only; the store links never
// fail, so every server always reaches the shared duplicate store.
const (
	tw         = 6 * time.Second
	twText     = "6s"
	serverPort = 3868
	proxyPort  = 3869
	redisPort  = 6379
	realm      = "example.net"
	clientHost = "c1." + realm // the client's Origin-Host, which starts its Session-Ids
	// detectBound is RFC 3539's bound for OKAY -> SUSPECT under traffic:
	// two watchdog intervals of at most Twinit + 2 s each.
	detectBound = 2 * (tw + 2*time.Second)
)

type harness struct {
	t       *testing.T
	sc      *scenario
	dir     string
	cns     string // client namespace
	store   string // redis namespace
	servers []*server
	redis   *proc
	client  *proc
	began   time.Time // client started
	faultAt time.Time // first fault applied (zero: none)
	notes   []string
}

type server struct {
	k       int // 1-based
	ns      string
	addr    string // 10.231.K.2
	url     string // what the client dials: the server, or the delay proxy before it
	host    string // Origin-Host
	inc     int    // incarnations started
	proc    *proc
	reports []string // one per incarnation
	proxy   *proc
}

func (s *server) clientIf() string { return "s" + strconv.Itoa(s.k) } // in the client ns

// newHarness builds the namespaces and starts redis and the servers.
func newHarness(t *testing.T, sc *scenario) *harness {
	dir, err := os.MkdirTemp("", nsPrefix+sc.tag+"-")
	if err != nil {
		t.Fatal(err)
	}
	// Kept when the scenario fails, for the processes' logs and reports.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs, reports and events kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	h := &harness{t: t, sc: sc, dir: dir}
	pre := nsPrefix + sc.tag + "-"
	h.cns, h.store = pre+"c", pre+"r"
	addNamespace(t, h.cns)
	addNamespace(t, h.store)
	for k := 1; k <= sc.servers; k++ {
		s := &server{k: k, ns: pre + "s" + strconv.Itoa(k), addr: fmt.Sprintf("10.231.%d.2", k),
			host: fmt.Sprintf("s%d.%s", k, realm)}
		addNamespace(t, s.ns)
		link(t, h.cns, s.clientIf(), fmt.Sprintf("10.231.%d.1/30", k), s.ns, "c", s.addr+"/30")
		link(t, h.store, s.clientIf(), fmt.Sprintf("10.232.%d.1/30", k), s.ns, "r", fmt.Sprintf("10.232.%d.2/30", k))
		s.url = fmt.Sprintf("tcp://%s:%d", s.addr, serverPort)
		h.servers = append(h.servers, s)
	}
	h.startRedis()
	for _, s := range h.servers {
		h.startServer(s)
		if sc.proxy && s.k == 1 {
			h.startProxy(s)
		}
	}
	return h
}

func (h *harness) startRedis() {
	t := h.t
	h.redis = startProc(t, h.store, h.dir, "redis", nil, suite.redis,
		"--port", strconv.Itoa(redisPort), "--bind", "0.0.0.0", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", h.dir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := sh("ip", "netns", "exec", h.store, suite.redisCLI, "-p", strconv.Itoa(redisPort), "ping")
		if err == nil && strings.Contains(out, "PONG") {
			return
		}
		if time.Now().After(deadline) || !h.redis.running() {
			t.Fatalf("redis-server not up: %v %s", err, h.redis.tail(2000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startServer starts a new incarnation of server s and waits until it
// listens.
func (h *harness) startServer(s *server) {
	t := h.t
	s.inc++
	name := fmt.Sprintf("s%d-%d", s.k, s.inc)
	report := filepath.Join(h.dir, name+".json")
	ready := filepath.Join(h.dir, name+".ready")
	s.reports = append(s.reports, report)
	s.proc = startProc(t, s.ns, h.dir, name, nil, suite.bin, "server",
		"--listen", fmt.Sprintf("tcp://%s:%d", s.addr, serverPort),
		"--origin-host", s.host, "--origin-realm", realm, "--tw", twText,
		"--dedup", fmt.Sprintf("redis://10.232.%d.1:%d/0", s.k, redisPort),
		"--report", report, "--events", filepath.Join(h.dir, name+".jsonl"), "--ready", ready)
	if err := waitFile(ready, 15*time.Second, s.proc); err != nil {
		t.Fatalf("server %s: %v", name, err)
	}
}

// startProxy puts the userspace delay proxy in front of server s, in its
// namespace: the client dials the proxy's port on the same address.
func (h *harness) startProxy(s *server) {
	t := h.t
	ready := filepath.Join(h.dir, fmt.Sprintf("proxy%d.ready", s.k))
	d := h.sc.delay
	spec := fmt.Sprintf("%s:%d %s:%d %v %v %s", s.addr, proxyPort, s.addr, serverPort, d.delay, d.jitter, ready)
	s.proxy = startProc(t, s.ns, h.dir, fmt.Sprintf("proxy%d", s.k), []string{proxyEnv + "=" + spec}, suite.self)
	if err := waitFile(ready, 10*time.Second, s.proxy); err != nil {
		t.Fatalf("proxy: %v", err)
	}
	s.url = fmt.Sprintf("tcp://%s:%d", s.addr, proxyPort)
}

// startClient starts the load generator and waits until every server is
// OKAY on it.
func (h *harness) startClient() {
	t := h.t
	sc := h.sc
	args := []string{suite.bin, "client", "--mode", "failover", "--tw", twText,
		"--origin-host", clientHost, "--origin-realm", realm, "--destination-realm", realm,
		"--rate", strconv.Itoa(sc.rate), "--concurrency", strconv.Itoa(sc.concurrency),
		"--duration", sc.duration.String(), "--timeout", sc.timeout.String(),
		"--connect-timeout", "15s", "--wait-peers", "0",
		"--events", h.path("client.jsonl"), "--report", h.path("client.json")}
	for _, s := range h.servers {
		args = append(args, "--peer", s.url)
	}
	h.began = time.Now()
	h.client = startProc(t, h.cns, h.dir, "client", nil, args...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		up := map[int]bool{}
		for _, e := range h.events() {
			if e.Kind == "watchdog" && e.To == "OKAY" {
				if k := h.serverOf(e.Peer); k > 0 {
					up[k] = true
				}
			}
		}
		if len(up) == len(h.servers) {
			return
		}
		if time.Now().After(deadline) || !h.client.running() {
			t.Fatalf("servers not all OKAY on the client (%v): %s", up, h.client.tail(3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *harness) path(name string) string { return filepath.Join(h.dir, name) }

// fault records the time of the first fault (call it just before
// applying the fault: detection is measured from here) and logs it.
func (h *harness) fault(what string) {
	now := time.Now()
	if h.faultAt.IsZero() {
		h.faultAt = now
	}
	h.logf("%s", what)
}

func (h *harness) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.t.Logf("t=%5.1fs %s", time.Since(h.began).Seconds(), msg)
	h.notes = append(h.notes, msg)
}

// sleep waits d, or fails the test if the client exits first when the
// scenario still needs it.
func (h *harness) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-h.client.done:
		h.t.Fatalf("client exited early (%v): %s", h.client.err, h.client.tail(3000))
	}
}

// signalServer sends sig to server s's current incarnation.
func (h *harness) signalServer(s *server, sig syscall.Signal) {
	if err := s.proc.signal(sig); err != nil {
		h.t.Fatalf("signal %v to %s: %v", sig, s.host, err)
	}
}

// serverOf maps an event's peer label (Origin-Host, address or URL) to a
// server number, 0 if none.
func (h *harness) serverOf(label string) int {
	for _, s := range h.servers {
		if label == s.host || label == s.url || strings.Contains(label, s.addr+":") || label == s.addr {
			return s.k
		}
	}
	return 0
}

// event is one line of aaa-peer's --events (documented in cmd/aaa-peer).
type event struct {
	Time     time.Time `json:"time"`
	Peer     string    `json:"peer"`
	Type     string    `json:"type"`
	Kind     string    `json:"kind"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	Reason   string    `json:"reason"`
	FromPeer string    `json:"from_peer"`
	ToPeer   string    `json:"to_peer"`
	Moved    int       `json:"moved"`
	Outcome  string    `json:"outcome"`
	DPR      bool      `json:"dpr"` // connection_down: the client sent a DPR first
}

// events reads the client's --events so far.
func (h *harness) events() []event {
	return readEvents(h.path("client.jsonl"))
}

func readEvents(path string) []event {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// clientReport is the part of aaa-peer client's --report the suite reads.
type clientReport struct {
	Sent          uint64 `json:"sent"`
	Answered      uint64 `json:"answered"`
	Failed        uint64 `json:"failed"`
	Retransmitted uint64 `json:"retransmitted"`
	LatencyUS     struct {
		P50 int64 `json:"p50"`
		P99 int64 `json:"p99"`
		Max int64 `json:"max"`
	} `json:"latency_us"`
	Peers          []peer.Stats            `json:"peers"`
	Servers        []client.ServerStats    `json:"servers"`
	Failovers      []client.FailoverRecord `json:"failovers"`
	FailoversTotal uint64                  `json:"failovers_total"`
	FailedBy       map[string]uint64       `json:"failed_by"`
	EventsDropped  uint64                  `json:"events_dropped"`
}

// serverReport is aaa-peer server's --report.
type serverReport struct {
	Received      uint64       `json:"received"`
	Retransmitted uint64       `json:"retransmitted"`
	Applied       uint64       `json:"applied"`
	Duplicates    uint64       `json:"duplicates"`
	StoreErrors   uint64       `json:"store_errors"`
	EventsDropped uint64       `json:"events_dropped"`
	Peers         []peer.Stats `json:"peers"`
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// storeCountEnv: the test binary, re-executed in the store's namespace
// with it set to "ADDR SESSION-PREFIX", counts the shared store's entries
// at ADDR (internal/dedupcount, as test/failover does) and prints the
// counts as JSON.
const storeCountEnv = "AAATPF_STORE_COUNT"

func storeCountMain(spec string) int {
	addr, prefix, ok := strings.Cut(spec, " ")
	if !ok {
		fmt.Fprintf(os.Stderr, "store count: bad %s %q\n", storeCountEnv, spec)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	c, err := dedupcount.Scan(ctx, rc, prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "store count:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(c); err != nil {
		fmt.Fprintln(os.Stderr, "store count:", err)
		return 1
	}
	return 0
}

// storeCounts counts what the shared store remembers of the client's
// requests: one per Session-Id, whatever the number of keys each request
// is stored under.
func (h *harness) storeCounts() (dedupcount.Counts, error) {
	var c dedupcount.Counts
	cmd := exec.Command("ip", "netns", "exec", h.store, suite.self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=127.0.0.1:%d %s;", storeCountEnv, redisPort, clientHost))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return c, fmt.Errorf("store count: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(out, &c); err != nil {
		return c, fmt.Errorf("store count: %v: %q", err, out)
	}
	return c, nil
}
