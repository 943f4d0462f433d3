// Package failover runs multi-process failure scenarios of RFC 3539 over
// real TCP on 127.0.0.1: two "aaa-peer server" processes sharing one
// redis-server for duplicate detection, and one "aaa-peer client --mode
// failover" in front of them. The tests freeze (SIGSTOP), stall, kill and
// restart the primary and check, from the processes' --report and
// --events files and from the Redis store, that every request got exactly
// one outcome, that none was applied twice, that the T flag marks replays
// only, and that the watchdog detects a silent peer within 2 Tw (+ jitter).
//
// TestMain builds cmd/aaa-peer once (with -race when this binary has it)
// and starts one redis-server on a free loopback port. Without
// redis-server the tests skip, unless CI=true, where they fail.
package failover

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
)

var (
	aaaPeer  string // the built binary
	buildErr error
	buildOut []byte

	redisURL  string // redis://127.0.0.1:PORT/0
	redisAddr string
	redisSkip string // why the scenarios cannot run (no redis-server)
	redisErr  error
	redisCmd  *exec.Cmd
	redisLog  bytes.Buffer
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The scenarios spend nearly all their time waiting for watchdog
	// timers: run all five at once unless -parallel was given (the default
	// is GOMAXPROCS, often 2 on CI machines).
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if f := flag.Lookup("test.parallel"); f != nil && !explicit {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < 5 {
			_ = flag.Set("test.parallel", "5")
		}
	}
	dir, err := os.MkdirTemp("", "aaatp-failover-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if !testing.Short() {
		buildPeer(dir)
		startRedis()
	}
	startStallMeter()
	code := m.Run()
	stopStallMeter()
	stopRedis()
	printTable()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildPeer builds cmd/aaa-peer from the module root into dir.
func buildPeer(dir string) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		buildErr = fmt.Errorf("go env GOMOD: %w", err)
		return
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		buildErr = fmt.Errorf("not inside a module (go env GOMOD = %q)", gomod)
		return
	}
	aaaPeer = filepath.Join(dir, "aaa-peer")
	args := []string{"build", "-o", aaaPeer}
	if raceBuild {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/aaa-peer")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Dir(gomod)
	buildOut, buildErr = cmd.CombinedOutput()
}

// startRedis runs redis-server on a free loopback port for every scenario.
func startRedis() {
	if _, err := exec.LookPath("redis-server"); err != nil {
		redisSkip = "redis-server not installed (apt-get install redis-server): the failover scenarios need a shared --dedup store"
		return
	}
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			redisErr = err
			return
		}
		redisLog.Reset()
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--protected-mode", "yes")
		cmd.Stdout, cmd.Stderr = &redisLog, &redisLog
		// The kernel kills redis-server if this binary dies first.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if redisErr = cmd.Start(); redisErr != nil {
			return
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if redisErr = redisPing(addr); redisErr == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if redisErr == nil {
			redisCmd, redisAddr = cmd, addr
			redisURL = "redis://" + addr + "/0"
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
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// need skips or fails t when the binary or Redis is missing.
func need(t *testing.T) {
	t.Helper()
	// The outcome depends on aaa-peer as built from the working tree,
	// which go test's result cache cannot see: its sources are read here
	// as the test's inputs, so that a changed source reruns the suite.
	if _, err := testhelp.RecordBuildInputs(); err != nil {
		t.Fatalf("recording aaa-peer's sources for the test cache: %v", err)
	}
	if testing.Short() {
		t.Skip("multi-process failover scenarios take about a minute; not in -short")
	}
	if buildErr != nil {
		t.Fatalf("go build ./cmd/aaa-peer: %v\n%s", buildErr, buildOut)
	}
	if redisSkip != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: these tests must run)", redisSkip)
		}
		t.Skip(redisSkip)
	}
	if redisErr != nil {
		t.Fatalf("start redis-server: %v\n%s", redisErr, redisLog.String())
	}
}

// row is one line of the summary table.
type row struct {
	scenario  string
	detection string // fault -> client's primary leaves OKAY
	moved     int    // requests replayed by the client's failovers
	lost      uint64 // client requests that failed
	twice     string // requests applied twice
	note      string
}

var (
	tableMu sync.Mutex
	table   []row
)

func addRow(r row) {
	tableMu.Lock()
	defer tableMu.Unlock()
	table = append(table, r)
}

func printTable() {
	tableMu.Lock()
	defer tableMu.Unlock()
	if len(table) == 0 {
		return
	}
	sort.Slice(table, func(i, j int) bool { return table[i].scenario < table[j].scenario })
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-22s %-10s %-6s %-5s %-16s %s\n", "scenario", "detection", "moved", "lost", "applied twice", "note")
	for _, r := range table {
		fmt.Fprintf(&b, "%-22s %-10s %-6d %-5d %-16s %s\n", r.scenario, r.detection, r.moved, r.lost, r.twice, r.note)
	}
	fmt.Print(b.String())
	// go test ./... shows a passing package's output only with -v:
	// .ci/run sets AAATP_TABLES to collect the table for the CI log.
	if dir := os.Getenv("AAATP_TABLES"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "failover.txt"), []byte(b.String()), 0o644)
	}
}
