package faults

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/aaatp/aaatp/internal/testhelp"
)

// suite is what TestMain found and built.
var suite struct {
	skip     string // why the suite cannot run here ("" if it can)
	netem    bool   // the kernel has sch_netem
	bin      string // aaa-peer, built once
	self     string // this test binary, re-executed as the delay proxy and to count the store
	redis    string // redis-server
	redisCLI string
	noRedis  string // why there is no shared store ("" if there is)
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(proxyEnv); spec != "" {
		os.Exit(proxyMain(spec))
	}
	if spec := os.Getenv(storeCountEnv); spec != "" {
		os.Exit(storeCountMain(spec))
	}
	flag.Parse()
	// The scenarios mostly wait on timers (Tw = 6 s): run them all at once
	// unless -parallel was given.
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(max(len(scenarios), runtime.GOMAXPROCS(0))))
	}
	code := setup()
	if code == 0 {
		code = m.Run()
		printTable(os.Stdout)
		// go test ./... shows a passing package's output only with -v:
		// .ci/run sets AAATP_TABLES to collect the table for the CI log.
		if dir := os.Getenv("AAATP_TABLES"); dir != "" {
			if f, err := os.Create(filepath.Join(dir, "faults.txt")); err == nil {
				printTable(f)
				f.Close()
			}
		}
	}
	if suite.bin != "" {
		os.RemoveAll(filepath.Dir(suite.bin))
	}
	os.Exit(code)
}

func setup() int {
	ci := os.Getenv("CI") == "true"
	reason, netem := probeNetns()
	if reason != "" {
		if ci && os.Geteuid() == 0 {
			fmt.Fprintf(os.Stderr, "faults: CI=true and root, but: %s\n", reason)
			return 1
		}
		suite.skip = reason
		return 0
	}
	suite.netem = netem
	if swept := sweepNamespaces(); len(swept) > 0 {
		fmt.Printf("faults: removed %d namespaces left by an earlier run: %s\n", len(swept), strings.Join(swept, " "))
	}
	if netem {
		fmt.Println("faults: kernel has sch_netem: delay and jitter come from tc netem")
	} else {
		fmt.Println("faults: kernel has no sch_netem (tc qdisc netem fails): delay and jitter come from the userspace delay proxy in the server's namespace")
	}
	var err error
	if suite.self, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	suite.redis, err = exec.LookPath("redis-server")
	if err == nil {
		suite.redisCLI, err = exec.LookPath("redis-cli")
	}
	if err != nil {
		if ci {
			fmt.Fprintf(os.Stderr, "faults: CI=true but no redis-server/redis-cli: %v\n", err)
			return 1
		}
		suite.noRedis = "redis-server or redis-cli not installed (apt-get install redis-server): the servers need a shared duplicate store"
	}
	dir, err := os.MkdirTemp("", "aaatpf-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	suite.bin = filepath.Join(dir, "aaa-peer")
	args := []string{"build", "-o", suite.bin}
	if raceEnabled {
		args = append(args, "-race") // races in aaa-peer under faults fail the scenario
	}
	args = append(args, "github.com/aaatp/aaatp/cmd/aaa-peer")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "faults: go %s: %v\n%s", strings.Join(args, " "), err, out)
		return 1
	}
	return 0
}

// requireSuite skips t when the suite cannot run here.
func requireSuite(t *testing.T) {
	t.Helper()
	// The outcome depends on aaa-peer as built from the working tree,
	// which go test's result cache cannot see: its sources are read here
	// as the test's inputs, so that a changed source reruns the suite.
	if _, err := testhelp.RecordBuildInputs(); err != nil {
		t.Fatalf("recording aaa-peer's sources for the test cache: %v", err)
	}
	if suite.skip != "" {
		t.Skip("fault suite skipped: " + suite.skip)
	}
	if suite.noRedis != "" {
		t.Skip("fault suite skipped: " + suite.noRedis)
	}
}
