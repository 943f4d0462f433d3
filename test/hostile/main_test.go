// Package hostile is the adversarial suite: a live "aaa-peer server
// --status" process on 127.0.0.1 attacked over real sockets the way a
// hostile or broken peer would, one test per attack. Each measures the
// server's peak RSS (VmHWM) and goroutines (go_goroutines on /metrics),
// and the answers and errors of a well-behaved client on another
// connection while the attack runs; each fails if the server crashes,
// grows without bound, or starves the good client.
//
// TestMain builds cmd/aaa-peer once, without -race (the figures are about
// the production binary). AAATP_HOSTILE_PEER (or its older name
// AAATP_PEER_BIN) runs the suite against a prebuilt binary instead (an
// older build, to see the attacks succeed).
// AAATP_FUZZ_TIME sets how long the random-frame fuzzer runs (default 10s;
// the RADIUS fuzzer runs half of it on each of its three listeners).
//
// The RADIUS attacks (radius_*_test.go) run the same server with a
// listener of each RADIUS transport beside the Diameter one: radius://,
// radius+tcp:// and radsec://, with certificates made by the test.
// README.md lists them with what the binary before their fixes did.
package hostile

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
)

var (
	aaaPeer  string
	buildErr error
	buildOut []byte
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "aaatp-hostile-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if bin := cmp.Or(os.Getenv("AAATP_HOSTILE_PEER"), os.Getenv("AAATP_PEER_BIN")); bin != "" {
		aaaPeer = bin
		if _, err := os.Stat(bin); err != nil {
			buildErr = err
		}
	} else {
		buildPeer(dir)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildPeer(dir string) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		buildErr = fmt.Errorf("go env GOMOD: %w", err)
		return
	}
	gomod := strings.TrimSpace(string(out))
	aaaPeer = filepath.Join(dir, "aaa-peer")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", aaaPeer, "./cmd/aaa-peer")
	cmd.Dir = filepath.Dir(gomod)
	buildOut, buildErr = cmd.CombinedOutput()
}

func needPeer(t *testing.T) {
	t.Helper()
	// The outcome depends on aaa-peer as built from the working tree,
	// which go test's result cache cannot see: its sources are read here
	// as the test's inputs, so that a changed source reruns the suite.
	if _, err := testhelp.RecordBuildInputs(); err != nil {
		t.Fatalf("recording aaa-peer's sources for the test cache: %v", err)
	}
	if buildErr != nil {
		t.Fatalf("go build ./cmd/aaa-peer: %v\n%s", buildErr, buildOut)
	}
}
