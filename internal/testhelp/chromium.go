//go:build unix

package testhelp

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// FindChromium returns the path of a Chromium binary, or "".
func FindChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// DumpDOM runs headless Chromium bin on url with its profile in dir, lets
// the page run for budget of virtual time (Chromium holds virtual time
// still while a fetch is in flight), and returns the serialized DOM and
// Chromium's stderr. The run is bounded by limit of wall clock; Chromium
// and its children are killed as a process group.
func DumpDOM(bin, dir, url string, budget, limit time.Duration) (dom, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--disable-extensions", "--disable-default-apps",
		"--disable-breakpad", "--disable-crash-reporter",
		"--user-data-dir="+dir,
		"--virtual-time-budget="+strconv.FormatInt(budget.Milliseconds(), 10),
		"--dump-dom", url)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // leftovers (zygote, utility processes)
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return out.String(), errb.String(), err
}

// Chromium returns FindChromium's binary, or skips t without one, failing
// it instead when CI=true (CI installs Debian's chromium package).
func Chromium(t testing.TB) string {
	t.Helper()
	bin := FindChromium()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed; CI must install Debian's chromium package")
		}
		t.Skip("chromium is not installed (Debian: apt-get install chromium); this test fails instead when CI=true")
	}
	return bin
}
