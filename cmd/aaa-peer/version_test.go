package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/aaatp/aaatp/status"
)

// TestVersionCommand: "aaa-peer version", --version and -version print the
// same build information and exit 0; under "go test", as under "go run",
// nothing is VCS-stamped, so the version is (devel) and the revision
// unknown; the top-level help lists the command.
func TestVersionCommand(t *testing.T) {
	var first string
	for _, arg := range []string{"version", "--version", "-version"} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{arg}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, stderr.String())
		}
		out := strings.Join(strings.Fields(stdout.String()), " ")
		for _, want := range []string{"module github.com/aaatp/aaatp", "version (devel)", "revision unknown", "dirty unknown", "commit time unknown", "build time unknown", "go " + runtime.Version(), "platform " + runtime.GOOS + "/" + runtime.GOARCH} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: no %q in:\n%s", arg, want, out)
			}
		}
		if first == "" {
			first = out
		} else if out != first {
			t.Errorf("%s prints\n%s\nversion prints\n%s", arg, out, first)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"version", "extra"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `unexpected argument "extra"`) {
		t.Errorf("version extra: exit %d, stderr %q; want 2 and the argument named", code, stderr.String())
	}
	stdout.Reset()
	run(context.Background(), []string{"help"}, &stdout, &stderr)
	if !strings.Contains(stdout.String(), "\n  version ") {
		t.Errorf("help does not list version:\n%s", stdout.String())
	}
}

// TestVersionFrom: every field comes from the build information, and what
// is missing says so.
func TestVersionFrom(t *testing.T) {
	v := versionFrom(&debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Path: "github.com/aaatp/aaatp", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
			{Key: "vcs.modified", Value: "true"},
			{Key: "GOOS", Value: "plan9"}, {Key: "GOARCH", Value: "arm"},
		},
	}, true)
	want := versionInfo{module: "github.com/aaatp/aaatp", version: "v1.2.3", revision: "0123456789abcdef0123456789abcdef01234567",
		vcsTime: "2026-01-02T03:04:05Z", modified: "true", buildTime: "unknown", goVersion: "go1.99.1", platform: "plan9/arm"}
	if v != want {
		t.Errorf("versionFrom = %+v\nwant %+v", v, want)
	}
	v = versionFrom(nil, false)
	if v.version != "(devel)" || v.revision != "unknown" || v.modified != "unknown" || v.goVersion != runtime.Version() {
		t.Errorf("without build information: %+v", v)
	}
}

// buildAaaPeer builds aaa-peer, VCS-stamped when the tree is a Git
// checkout, with a build time, into a temporary directory, and returns its
// path.
func buildAaaPeer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "aaa-peer")
	cmd := exec.Command("go", "build", "-buildvcs=auto", "-ldflags", "-X main.buildTime=2026-01-02T03:04:05Z", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/aaa-peer: %v\n%s", err, out)
	}
	return bin
}

// TestVersionOfABuiltBinary: a binary built by "go build" in a Git
// checkout prints the checkout's commit, and the build time the build set.
func TestVersionOfABuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds aaa-peer")
	}
	head := func() string {
		b, err := exec.Command("git", "rev-parse", "HEAD").Output()
		if err != nil {
			t.Skipf("not in a Git checkout (git rev-parse HEAD: %v): no revision to compare", err)
		}
		return strings.TrimSpace(string(b))
	}
	before := head()
	bin := buildAaaPeer(t)
	after := head() // someone may commit during the build
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("aaa-peer version: %v", err)
	}
	if !strings.Contains(string(out), "revision     "+before) && !strings.Contains(string(out), "revision     "+after) {
		t.Errorf("revision is not HEAD (%s) in:\n%s", after, out)
	}
	for _, want := range []string{"build time   2026-01-02T03:04:05Z", "version      v"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if !strings.Contains(string(out), "dirty        true") && !strings.Contains(string(out), "dirty        false") {
		t.Errorf("no dirty flag in:\n%s", out)
	}
}

// TestServerMetricsBuildInfo: a server's /metrics carries aaatp_build_info
// with the version, revision and Go version that "aaa-peer version" prints.
func TestServerMetricsBuildInfo(t *testing.T) {
	srv := startServer(t, "--status", "127.0.0.1:0")
	web := waitURL(t, srv.stderr, regexp.MustCompile(`msg="status page" url=(http://\S+/)`))
	text := httpGet(t, web+"metrics")
	v := readVersion()
	labels := map[string]string{"version": v.version, "revision": v.revision, "goversion": v.goVersion}
	if got, ok := metricValue(text, status.MetricBuildInfo, labels); !ok || got != 1 {
		t.Errorf("no %s%v = 1 in /metrics:\n%s", status.MetricBuildInfo, labels, grepLines(text, status.MetricBuildInfo))
	}
}
