package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is a process started in a namespace with "ip netns exec", which
// execs it: the pid is the program's own, so signals reach it directly.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout string // file paths
	stderr string
	done   chan struct{}
	err    error
}

// startProc runs argv in ns, stdout and stderr to files in dir. t.Cleanup
// kills it if it still runs.
func startProc(t testing.TB, ns, dir, name string, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{
		name:   name,
		stdout: filepath.Join(dir, name+".out"),
		stderr: filepath.Join(dir, name+".err"),
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
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	p.cmd.Stdout, p.cmd.Stderr = so, se
	p.cmd.Env = append(os.Environ(), env...)
	if err := p.cmd.Start(); err != nil {
		so.Close()
		se.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		so.Close()
		se.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) signal(s syscall.Signal) error { return p.cmd.Process.Signal(s) }

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the process (continuing it first) and waits for it.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGKILL)
	<-p.done
}

// wait waits at most d for the process to exit; false on timeout.
func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// stop sends SIGTERM and waits at most d, then kills; it returns the exit
// code (-1 if it had to be killed).
func (p *proc) stop(d time.Duration) int {
	if p.running() {
		_ = p.signal(syscall.SIGCONT)
		_ = p.signal(syscall.SIGTERM)
		if !p.wait(d) {
			p.kill()
			return -1
		}
	}
	return p.exitCode()
}

func (p *proc) exitCode() int {
	if p.running() {
		return -1
	}
	if p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// tail returns the last n bytes of the process's stderr.
func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.stderr)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// raceReport returns the race detector's or the runtime's complaint in
// the process's stderr, if any.
func (p *proc) raceReport() string {
	b, _ := os.ReadFile(p.stderr)
	s := string(b)
	for _, mark := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
		if i := strings.Index(s, mark); i >= 0 {
			end := min(len(s), i+3000)
			return s[i:end]
		}
	}
	return ""
}

// waitFile waits at most d for path to exist and be non-empty.
func waitFile(path string, d time.Duration, p *proc) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if st, err := os.Stat(path); err == nil && st.Size() > 0 {
			return nil
		}
		if p != nil && !p.running() {
			return fmt.Errorf("%s exited (%v) before writing %s: %s", p.name, p.err, filepath.Base(path), p.tail(2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not written within %v", filepath.Base(path), d)
}
