package failover

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aaatp/aaatp/internal/dedupcount"
)

const (
	tw        = 6 * time.Second // Twinit everywhere: the RFC 3539 minimum
	jitter    = 2 * time.Second
	schedSlop = time.Second
	// maxDetect: a silent peer goes SUSPECT at most two jittered Tw after
	// the last message it sent (RFC 3539 3.4.1), plus scheduling slack.
	maxDetect = 2*(tw+jitter) + schedSlop
	realm     = "example.net"
)

// proc is one aaa-peer subprocess in its own process group.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout string // file
	stderr string // file
	done   chan struct{}
	err    error // of Wait, once done is closed
}

// start runs aaa-peer args with stdout and stderr in files of dir. The
// process group is SIGKILLed by t.Cleanup if still running, and the
// kernel kills it if this test binary dies.
func start(t *testing.T, dir, name string, args ...string) *proc {
	t.Helper()
	p := &proc{
		name:   name,
		stdout: filepath.Join(dir, name+".stdout"),
		stderr: filepath.Join(dir, name+".stderr"),
		done:   make(chan struct{}),
	}
	so, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	se, err := os.Create(p.stderr)
	if err != nil {
		so.Close()
		t.Fatal(err)
	}
	p.cmd = exec.Command(aaaPeer, args...)
	p.cmd.Stdout, p.cmd.Stderr = so, se
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = p.cmd.Start()
	so.Close()
	se.Close()
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			p.signal(syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stderr (tail):\n%s", name, tail(p.stderr, 40))
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to p's process group.
func (p *proc) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// wait waits at most d for p to exit and returns its exit code (-1: a
// signal ended it).
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.signal(syscall.SIGKILL)
		<-p.done
		t.Fatalf("%s still running after %v; killed\nstderr:\n%s", p.name, d, tail(p.stderr, 40))
	}
	if p.err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	t.Fatalf("%s: %v", p.name, p.err)
	return -1
}

// checkRace fails t if p's stderr reports a data race.
func (p *proc) checkRace(t *testing.T) {
	t.Helper()
	if b, _ := os.ReadFile(p.stderr); bytes.Contains(b, []byte("WARNING: DATA RACE")) {
		t.Errorf("%s: data race:\n%s", p.name, b)
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// server is one "aaa-peer server" process.
type server struct {
	*proc
	host   string // Origin-Host
	url    string // tcp://127.0.0.1:PORT
	report string
	events string
}

// startServer runs a server listening on listen (tcp://127.0.0.1:0 for any
// port) with the shared Redis store and Tw 6 s, and waits for its --ready
// file.
func startServer(t *testing.T, dir, name, host, listen string, extra ...string) *server {
	t.Helper()
	s := &server{
		host:   host,
		report: filepath.Join(dir, name+".report.json"),
		events: filepath.Join(dir, name+".events.jsonl"),
	}
	ready := filepath.Join(dir, name+".ready")
	args := append([]string{"server",
		"--listen", listen, "--origin-host", host, "--origin-realm", realm,
		"--tw", tw.String(), "--dedup", redisURL,
		"--report", s.report, "--events", s.events, "--ready", ready,
	}, extra...)
	s.proc = start(t, dir, name, args...)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			s.url = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
			return s
		}
		if s.exited() || time.Now().After(deadline) {
			t.Fatalf("%s not ready (exited %v):\n%s", name, s.exited(), tail(s.stderr, 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop thaws s (in case it is frozen), sends SIGTERM and waits for its
// report: DPR to every peer takes at most 5 s.
func (s *server) stop(t *testing.T) serverReport {
	t.Helper()
	s.signal(syscall.SIGCONT)
	s.signal(syscall.SIGTERM)
	if code := s.wait(t, 20*time.Second); code != 0 {
		t.Errorf("%s exited %d:\n%s", s.name, code, tail(s.stderr, 40))
	}
	s.checkRace(t)
	var r serverReport
	readJSON(t, s.report, &r)
	return r
}

// serverReport is the part of the server's --report the tests read.
type serverReport struct {
	Received      uint64 `json:"received"`
	Retransmitted uint64 `json:"retransmitted"`
	Applied       uint64 `json:"applied"`
	Answered      uint64 `json:"answered"`
	Duplicates    uint64 `json:"duplicates"`
	StoreErrors   uint64 `json:"store_errors"`
	Dedup         string `json:"dedup"`
}

// clientReport is the part of the client's --report the tests read.
type clientReport struct {
	Sent          uint64            `json:"sent"`
	Answered      uint64            `json:"answered"`
	Failed        uint64            `json:"failed"`
	Retransmitted uint64            `json:"retransmitted"`
	Mode          string            `json:"mode"`
	FailedBy      map[string]uint64 `json:"failed_by"`
	Failovers     []struct {
		Time     time.Time `json:"time"`
		From     string    `json:"from_peer"`
		To       string    `json:"to_peer"`
		Reason   string    `json:"reason"`
		Moved    int       `json:"moved"`
		EndToEnd []uint32  `json:"end_to_end"`
	} `json:"failovers"`
	FailoversTotal uint64 `json:"failovers_total"`
	Servers        []struct {
		Server     string `json:"server"`
		Peer       string `json:"peer"`
		State      string `json:"state"`
		Sent       uint64 `json:"sent"`
		Answered   uint64 `json:"answered"`
		Failed     uint64 `json:"failed"`
		FailedOver uint64 `json:"failed_over"`
	} `json:"servers"`
	Peers []struct {
		Peer          string `json:"peer"`
		Sent          uint64 `json:"sent"`
		Retransmitted uint64 `json:"retransmitted"`
		Answered      uint64 `json:"answered"`
		Late          uint64 `json:"late"`
		Unmatched     uint64 `json:"unmatched"`
		TimedOut      uint64 `json:"timed_out"`
		Lost          uint64 `json:"lost"`
		DWRSent       uint64 `json:"dwr_sent"`
		DWAReceived   uint64 `json:"dwa_received"`
		DWRReceived   uint64 `json:"dwr_received"`
	} `json:"peers"`
	EventsDropped uint64 `json:"events_dropped"`
	ElapsedMS     int64  `json:"elapsed_ms"`
}

// moved is how many requests the client's failovers replayed.
func (r *clientReport) moved() int {
	n := 0
	for _, f := range r.Failovers {
		if f.To != "" {
			n += f.Moved
		}
	}
	return n
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
}

// client is one "aaa-peer client --mode failover" process.
type client struct {
	*proc
	host   string
	report string
	events string
	began  time.Time
}

// startClient runs the client over peers (primary first) with Tw 6 s.
func startClient(t *testing.T, dir, host string, peers []string, extra ...string) *client {
	t.Helper()
	c := &client{
		host:   host,
		report: filepath.Join(dir, "client.report.json"),
		events: filepath.Join(dir, "client.events.jsonl"),
	}
	args := []string{"client", "--mode", "failover",
		"--origin-host", host, "--origin-realm", realm, "--destination-realm", realm,
		"--tw", tw.String(), "--report", c.report, "--events", c.events}
	for _, p := range peers {
		args = append(args, "--peer", p)
	}
	args = append(args, extra...)
	c.began = time.Now()
	c.proc = start(t, dir, "client", args...)
	return c
}

// finish waits for the client to exit by itself, with 0 (no request
// failed), and reads its report.
func (c *client) finish(t *testing.T, d time.Duration) clientReport {
	t.Helper()
	return c.finishExit(t, d, 0)
}

// finishExit is finish for a run that must exit with want: 3 when
// requests fail by design (the client's --max-failed is 0: any failure).
func (c *client) finishExit(t *testing.T, d time.Duration, want int) clientReport {
	t.Helper()
	if code := c.wait(t, d); code != want {
		t.Errorf("client exited %d, want %d:\n%s", code, want, tail(c.stderr, 40))
	}
	c.checkRace(t)
	var r clientReport
	readJSON(t, c.report, &r)
	return r
}

// event is one --events line.
type event struct {
	Time     time.Time `json:"time"`
	Peer     string    `json:"peer"`
	Type     string    `json:"type"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	Reason   string    `json:"reason"`
	FromPeer string    `json:"from_peer"`
	ToPeer   string    `json:"to_peer"`
	Moved    int       `json:"moved"`
}

func (e event) String() string {
	if e.Type == "failover" {
		return fmt.Sprintf("%s failover %s -> %s moved %d (%s)", e.Time.Format("15:04:05.000"), e.FromPeer, e.ToPeer, e.Moved, e.Reason)
	}
	return fmt.Sprintf("%s %s %s %s->%s (%s)", e.Time.Format("15:04:05.000"), e.Peer, e.Type, e.From, e.To, e.Reason)
}

// readEvents parses the complete lines of an --events file.
func readEvents(t *testing.T, path string) []event {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		return nil
	}
	var out []event
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: bad event line %q: %v", path, sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// is reports whether e is about the server s (the client names a peer by
// its Origin-Host once known, else by its address or URL).
func (s *server) is(name string) bool {
	return name == s.host || name == s.url || name == strings.TrimPrefix(s.url, "tcp://")
}

// transition is a predicate on watchdog events of s from -> to ("" = any).
func transition(s *server, from, to string) func(event) bool {
	return func(e event) bool {
		return e.Type == "watchdog" && s.is(e.Peer) && (from == "" || e.From == from) && (to == "" || e.To == to)
	}
}

// firstAfter returns the first event at or after since matching pred.
func firstAfter(evs []event, since time.Time, pred func(event) bool) (event, bool) {
	for _, e := range evs {
		if !e.Time.Before(since) && pred(e) {
			return e, true
		}
	}
	return event{}, false
}

// waitEvent polls the client's events until one at or after since
// matches pred, the client exits, or d passes.
func (c *client) waitEvent(t *testing.T, since time.Time, d time.Duration, what string, pred func(event) bool) event {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		exited := c.exited()
		if e, ok := firstAfter(readEvents(t, c.events), since, pred); ok {
			return e
		}
		if exited || time.Now().After(deadline) {
			t.Fatalf("no %s in the client's events within %v (client exited: %v):\n%s", what, d, exited, dumpEvents(readEvents(t, c.events)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func dumpEvents(evs []event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

var progressRE = regexp.MustCompile(`(?m)^t=(\d+)s sent=(\d+) answered=(\d+) failed=(\d+) pending=(\d+)`)

// progress is one of the client's once-a-second progress lines.
type progress struct {
	t, sent, answered, failed, pending int
}

// lastProgress returns the client's latest progress line.
func (c *client) lastProgress() (progress, bool) {
	b, _ := os.ReadFile(c.stdout)
	m := progressRE.FindAllSubmatch(b, -1)
	if len(m) == 0 {
		return progress{}, false
	}
	last := m[len(m)-1]
	var v [5]int
	for i := range v {
		v[i], _ = strconv.Atoi(string(last[i+1]))
	}
	return progress{v[0], v[1], v[2], v[3], v[4]}, true
}

// waitSent waits until the client's progress shows at least n requests
// sent; it returns the moment that line was seen.
func (c *client) waitSent(t *testing.T, n int, d time.Duration) (progress, time.Time) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if p, ok := c.lastProgress(); ok && p.sent >= n {
			return p, time.Now()
		}
		if c.exited() || time.Now().After(deadline) {
			t.Fatalf("client never reported %d sent within %v (exited %v):\n%s", n, d, c.exited(), tail(c.stdout, 10))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitTick waits for the next progress line after the one with t=after and
// returns it with the moment it was seen (within 10 ms of the tick).
func (c *client) waitTick(t *testing.T, after int, d time.Duration) (progress, time.Time) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if p, ok := c.lastProgress(); ok && p.t > after {
			return p, time.Now()
		}
		if c.exited() || time.Now().After(deadline) {
			t.Fatalf("no client progress after t=%ds within %v", after, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// applied is what the shared Redis store holds for one client: the
// answers stored (one per request applied and completed), by the
// Origin-Host of the server that applied it.
type applied struct {
	total  int
	byHost map[string]int
	marks  int // in-flight marks (no answer yet)
}

// redisApplied counts the requests of clientHost that the Redis store
// remembers (every scenario's client has its own Origin-Host, and the
// client's Session-Ids start with it): one per Session-Id, whatever the
// number of keys each is stored under (see internal/dedupcount).
func redisApplied(t *testing.T, clientHost string) applied {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: redisAddr, DB: 0})
	defer rc.Close()
	c, err := dedupcount.Scan(ctx, rc, clientHost+";")
	if err != nil {
		t.Fatal(err)
	}
	if c.Conflicts != 0 {
		t.Errorf("%d requests of %s stored with different answers under their keys: applied more than once", c.Conflicts, clientHost)
	}
	return applied{total: c.Requests, byHost: c.ByHost, marks: c.Marks}
}

// redisPing checks that a Redis server answers on addr.
func redisPing(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rc.Close()
	return rc.Ping(ctx).Err()
}

var runSeq atomic.Uint64

// scenario holds one test's processes and what it measured.
type scenario struct {
	t         *testing.T
	name      string
	dir       string
	client    string // the client's Origin-Host
	primary   *server
	secondary *server
	mu        sync.Mutex
}

func newScenario(t *testing.T, name string, primaryExtra ...string) *scenario {
	t.Helper()
	need(t)
	t.Parallel()
	// The client's Origin-Host starts its Session-Ids, by which Redis
	// entries are attributed: unique per run (-count, shared Redis).
	host := fmt.Sprintf("%s.r%d-%d.client.example.net", name, os.Getpid(), runSeq.Add(1))
	sc := &scenario{t: t, name: name, dir: t.TempDir(), client: host}
	sc.primary = startServer(t, sc.dir, "primary", "primary.example.net", "tcp://127.0.0.1:0", primaryExtra...)
	sc.secondary = startServer(t, sc.dir, "secondary", "secondary.example.net", "tcp://127.0.0.1:0")
	return sc
}

func (sc *scenario) startClient(extra ...string) *client {
	return startClient(sc.t, sc.dir, sc.client, []string{sc.primary.url, sc.secondary.url}, extra...)
}

// checkOutcomes: every request got exactly one outcome.
func checkOutcomes(t *testing.T, r clientReport, n uint64, lossless bool) {
	t.Helper()
	if r.Sent != n || r.Answered+r.Failed != r.Sent {
		t.Errorf("client sent %d answered %d failed %d (%v); want %d sent, each answered or failed once", r.Sent, r.Answered, r.Failed, r.FailedBy, n)
	}
	if lossless && r.Failed != 0 {
		t.Errorf("client lost %d requests: %v", r.Failed, r.FailedBy)
	}
	if r.Mode != "failover" {
		t.Errorf("client mode %q, want failover", r.Mode)
	}
	if r.EventsDropped != 0 {
		t.Errorf("client dropped %d events", r.EventsDropped)
	}
}

// checkServers: the servers' counters add up, with no store errors
// beyond tolerated[name] (see knownStoreErrors).
func checkServers(t *testing.T, reps map[string]serverReport, tolerated map[string]uint64) {
	t.Helper()
	for name, r := range reps {
		// A handler still running at shutdown (--answer-delay) was
		// received but neither applied nor answered.
		if r.Applied+r.Duplicates+r.StoreErrors > r.Received {
			t.Errorf("%s: received %d < applied %d + duplicates %d + store errors %d", name, r.Received, r.Applied, r.Duplicates, r.StoreErrors)
		}
		if r.StoreErrors != 0 {
			t.Errorf("%s: %d store errors", name, r.StoreErrors)
		}
		if r.Dedup != redisURL {
			t.Errorf("%s: dedup %q, want %q", name, r.Dedup, redisURL)
		}
	}
}

func sumApplied(reps map[string]serverReport) (applied, dups, received, withT uint64) {
	for _, r := range reps {
		applied += r.Applied
		dups += r.Duplicates
		received += r.Received
		withT += r.Retransmitted
	}
	return
}

func fmtDur(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return d.Round(10 * time.Millisecond).String()
}
