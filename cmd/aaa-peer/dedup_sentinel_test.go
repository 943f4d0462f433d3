package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDedupSentinelPasswordsFromFile: the review's end-to-end case. A
// master with requirepass behind a sentinel with a requirepass of its
// own; the server's file gives the Sentinel URL, the master's password
// (password-file) and the sentinels' (sentinel-password-file), none on
// the command line. The server opens and probes the store (before the
// fix: "NOAUTH Authentication required", exit 1: the password went to
// the sentinels), and its report and log show neither password.
func TestDedupSentinelPasswordsFromFile(t *testing.T) {
	for _, bin := range []string{"redis-server", "redis-sentinel"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not installed (CI=true: Redis tests must run): %v", bin, err)
			}
			t.Skipf("%s not installed", bin)
		}
	}
	const masterPW, sentinelPW = "m4ster#pw/1", "s3ntinel@pw:2"
	master := spawnRedisConf(t, "redis-server", `requirepass "`+masterPW+`"`)
	sentinel := spawnRedisConf(t, "redis-sentinel",
		fmt.Sprintf("sentinel monitor mymaster 127.0.0.1 %d 1", master),
		`sentinel auth-pass mymaster "`+masterPW+`"`,
		`requirepass "`+sentinelPW+`"`)
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "master.pw"), masterPW+"\n")
	writeTestFile(t, filepath.Join(dir, "sentinel.pw"), sentinelPW+"\n")
	conf := filepath.Join(dir, "server.toml")
	writeTestFile(t, conf, fmt.Sprintf("[dedup]\nurl = \"redis://127.0.0.1:%d/0?master_name=mymaster\"\n"+
		"password-file = \"master.pw\"\nsentinel-password-file = \"sentinel.pw\"\n", sentinel))

	s := startServer(t, "--config", conf)
	if code := s.stop(t); code != 0 {
		t.Fatalf("exit %d: %s", code, s.stderr)
	}
	shown := s.readReport(t).Dedup
	want := fmt.Sprintf("redis://:xxxxx@127.0.0.1:%d/0?master_name=mymaster&password=xxxxx", sentinel)
	if shown != want {
		t.Errorf("the report's dedup %q, want %q", shown, want)
	}
	for _, out := range []string{shown, s.stderr.String()} {
		for _, pw := range []string{masterPW, sentinelPW, "m4ster", "s3ntinel"} {
			if strings.Contains(out, pw) {
				t.Errorf("a password (%q) shown: %s", pw, out)
			}
		}
	}
}

// spawnRedisConf runs bin (redis-server, redis-sentinel) on a free
// loopback port with the configuration lines conf, until the test ends,
// and returns the port once it accepts connections.
func spawnRedisConf(t *testing.T, bin string, conf ...string) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	lines := append([]string{"port " + strconv.Itoa(port), "bind 127.0.0.1", `save ""`, "appendonly no", "dir " + dir}, conf...)
	file := filepath.Join(dir, "redis.conf") // a sentinel rewrites it
	writeTestFile(t, file, strings.Join(lines, "\n")+"\n")
	var out syncBuffer
	cmd := exec.Command(bin, file)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return port
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening after 5s: %v\n%s", bin, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
