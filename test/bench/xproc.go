package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aaatp/aaatp/test/benchcmp"
)

// Cross-process pairs: every server and every client runs in a process of
// its own, so that each one's CPU (from /proc/PID/stat) and RSS are its
// own, as a user measures them. The aaa-peer processes are the real
// binary, built by the harness; the raw and go-diameter ones are this
// binary re-executed in a role (roleEnv), running package benchcmp's code.

// roleEnv, when set, makes the binary (the harness or its test) play one
// process of a cross-process pair:
//
//	server KIND        KIND raw | rawinline | godiameter: listen on
//	                   127.0.0.1:0, print "ADDR host:port", serve until
//	                   stdin closes
//	client KIND ADDR CALLERS DURATION
//	                   KIND raw | godiameter | pingpong: run for DURATION,
//	                   print "t=Ns answered=N failed=N" every second and
//	                   "LAT p50us p99us count" at the end
const roleEnv = "AAATP_BENCH_ROLE"

func runRole(role string, in io.Reader, out io.Writer) error {
	f := strings.Fields(role)
	switch {
	case len(f) == 2 && f[0] == "server":
		return roleServer(f[1], in, out)
	case len(f) == 5 && f[0] == "client":
		callers, err := strconv.Atoi(f[3])
		if err != nil {
			return err
		}
		d, err := time.ParseDuration(f[4])
		if err != nil {
			return err
		}
		return roleClient(f[1], f[2], callers, d, out)
	}
	return fmt.Errorf("bad %s %q", roleEnv, role)
}

func roleServer(kind string, in io.Reader, out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var stop func()
	switch kind {
	case "raw":
		stop = benchcmp.ServeRaw(ln, benchcmp.PerRequest).Close
	case "rawinline":
		stop = benchcmp.ServeRaw(ln, benchcmp.Inline).Close
	case "godiameter":
		stop = benchcmp.ServeGoDiameter(ln).Close
	default:
		ln.Close()
		return fmt.Errorf("unknown server kind %q", kind)
	}
	fmt.Fprintf(out, "ADDR %s\n", ln.Addr())
	io.Copy(io.Discard, in)
	stop()
	return nil
}

// countingEnv counts the round trips its callers complete.
type countingEnv struct {
	benchcmp.Env
	ok, failed *atomic.Int64
}

func (e countingEnv) Caller() func() (benchcmp.Result, error) {
	fn := e.Env.Caller()
	return func() (benchcmp.Result, error) {
		r, err := fn()
		if err == nil && r.Check() == nil {
			e.ok.Add(1)
		} else {
			e.failed.Add(1)
		}
		return r, err
	}
}

func roleClient(kind, addr string, callers int, d time.Duration, out io.Writer) error {
	var e benchcmp.Env
	var err error
	switch kind {
	case "raw":
		e, err = benchcmp.DialRaw(addr, true)
	case "godiameter":
		e, err = benchcmp.DialGoDiameter(addr)
	case "pingpong":
		e, err = benchcmp.DialPingPong(addr)
		callers = 1
	default:
		return fmt.Errorf("unknown client kind %q", kind)
	}
	if err != nil {
		return err
	}
	defer e.Close()
	var ok, failed atomic.Int64
	type res struct {
		lat []time.Duration
		err error
	}
	done := make(chan res, 1)
	go func() {
		lat, _, err := benchcmp.RunFor(countingEnv{e, &ok, &failed}, callers, d, 1<<12)
		done <- res{lat, err}
	}()
	began := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			fmt.Fprintf(out, "t=%ds answered=%d failed=%d\n", int64(now.Sub(began).Round(time.Second)/time.Second), ok.Load(), failed.Load())
		case r := <-done:
			if r.err != nil {
				return r.err
			}
			slices.Sort(r.lat)
			if len(r.lat) == 0 {
				return errors.New("no request completed")
			}
			fmt.Fprintf(out, "LAT %.1f %.1f %d\n", us(r.lat[len(r.lat)/2]), us(r.lat[min(len(r.lat)-1, len(r.lat)*99/100)]), len(r.lat))
			return nil
		}
	}
}

// procTicks is user+system CPU of pid so far (/proc/PID/stat, all threads).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields count from ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	st, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck, nil
}

// procRSS is VmRSS of pid in KiB (0 when unavailable).
func procRSS(pid int) float64 {
	return statusKiB(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
}

// child is one process of a pair.
type child struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
	dir   string // scratch directory (aaa-peer's --ready and --report, freeDiameter's config)
	log   *os.File
	// stop ends a server: closes stdin (benchcmp roles) or sends SIGTERM.
	stop func()
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func startChild(name string, cmd *exec.Cmd, dir string) (*child, error) {
	c := &child{name: name, cmd: cmd, dir: dir}
	var err error
	if c.log, err = os.Create(filepath.Join(dir, "stderr.log")); err != nil {
		return nil, err
	}
	cmd.Stderr = c.log
	// Its own group (so that stop and kill reach what it forks), killed
	// if the harness dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.lines = bufio.NewScanner(out)
	c.stop = func() { c.stdin.Close() }
	return c, nil
}

// wait waits for the process to exit (killing its group after limit) and
// returns its error, with the tail of its stderr.
func (c *child) wait(limit time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(limit):
		syscall.Kill(-c.pid(), syscall.SIGKILL)
		err = fmt.Errorf("still running after %v: killed", limit)
		<-done
	}
	c.log.Close()
	if err != nil {
		return fmt.Errorf("%s: %w%s", c.name, err, c.stderrTail())
	}
	return nil
}

func (c *child) stderrTail() string {
	b, _ := os.ReadFile(c.log.Name())
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(b) == 0 {
		return ""
	}
	return "; stderr: " + strings.TrimSpace(string(b))
}

// kill ends the process group at once (error paths).
func (c *child) kill() {
	syscall.Kill(-c.pid(), syscall.SIGKILL)
	c.cmd.Wait()
	c.log.Close()
}

// Pair is one cross-process configuration.
type Pair struct {
	Name    string
	Client  string // aaa-peer | raw | godiameter | pingpong
	Server  string // aaa-peer | raw | rawinline | godiameter | freediameter
	Callers int
}

// PairResult is one run of a Pair.
type PairResult struct {
	Pair
	AnswersPerS   float64 // answers (any Result-Code) per second in the window
	Failed        uint64  // requests without a 2001 answer over the whole run
	P50us, P99us  float64 // over the whole run, client-side
	ClientCPUus   float64 // per answer in the window
	ServerCPUus   float64
	ClientRSSKiB  float64 // at the end of the window
	ServerRSSKiB  float64
	Window        time.Duration
	Answers       uint64 // in the window
	ResultCodes   string // freeDiameter without test_app: what it answered
	rssAtAnswered []rssSample
}

type rssSample struct {
	answered       uint64
	client, server float64
}

// xprocEnv is what the pairs need: the aaa-peer binary, freeDiameter's.
type xprocEnv struct {
	aaaPeer   string // path of the built aaa-peer binary
	self      string // this binary, for the benchcmp roles
	fd        string // freeDiameterd, "" when not installed
	fdTestApp string // test_app.fdx, "" when not found
	fdExt     string // directory of freeDiameter's extensions
	scratch   string
}

// newXprocEnv builds cmd/aaa-peer (unless bin is given) into a scratch
// directory and finds freeDiameter.
func newXprocEnv(bin string) (*xprocEnv, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "aaatp-bench-")
	if err != nil {
		return nil, err
	}
	x := &xprocEnv{self: self, scratch: dir, aaaPeer: bin}
	if bin == "" {
		x.aaaPeer = filepath.Join(dir, "aaa-peer")
		root, err := moduleRoot()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command("go", "build", "-o", x.aaaPeer, "./cmd/aaa-peer")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/aaa-peer: %v: %s", err, out)
		}
	}
	if p, err := exec.LookPath("freeDiameterd"); err == nil {
		x.fd = p
		for _, d := range append([]string{"/usr/lib/freeDiameter", "/usr/lib/x86_64-linux-gnu/freeDiameter", "/usr/local/lib/freeDiameter"},
			globDirs("/usr/lib/*/freeDiameter")...) {
			if _, err := os.Stat(filepath.Join(d, "acl_wl.fdx")); err == nil && x.fdExt == "" {
				x.fdExt = d
			}
			if _, err := os.Stat(filepath.Join(d, "test_app.fdx")); err == nil && x.fdTestApp == "" {
				x.fdTestApp = filepath.Join(d, "test_app.fdx")
			}
		}
		if x.fdExt == "" {
			x.fd = "" // cannot admit our client without acl_wl
		}
	}
	return x, nil
}

func globDirs(pat string) []string {
	m, _ := filepath.Glob(pat)
	return m
}

func (x *xprocEnv) close() { os.RemoveAll(x.scratch) }

// moduleRoot is the directory of go.mod above the working directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the aaatp module: run the harness from the repository")
	}
	return filepath.Dir(mod), nil
}

const (
	xServerHost = "server.example.net"
	xClientHost = "client.example.net"
	xRealm      = "example.net"
	fdHost      = "fd.example.net"
)

// startServer starts the server of p and returns it and the address its
// clients dial.
func (x *xprocEnv) startServer(kind string, n int) (*child, string, error) {
	dir, err := os.MkdirTemp(x.scratch, fmt.Sprintf("srv%d-", n))
	if err != nil {
		return nil, "", err
	}
	switch kind {
	case "raw", "rawinline", "godiameter":
		cmd := exec.Command(x.self, "-test.run=^$")
		cmd.Env = append(os.Environ(), roleEnv+"=server "+kind)
		c, err := startChild(kind+" server", cmd, dir)
		if err != nil {
			return nil, "", err
		}
		if !c.lines.Scan() {
			c.kill()
			return nil, "", fmt.Errorf("%s server: no address%s", kind, c.stderrTail())
		}
		addr, ok := strings.CutPrefix(c.lines.Text(), "ADDR ")
		if !ok {
			c.kill()
			return nil, "", fmt.Errorf("%s server: %q", kind, c.lines.Text())
		}
		return c, addr, nil
	case "aaa-peer":
		ready := filepath.Join(dir, "ready")
		cmd := exec.Command(x.aaaPeer, "server", "--listen", "tcp://127.0.0.1:0",
			"--origin-host", xServerHost, "--origin-realm", xRealm, "--ready", ready, "--log-level", "error")
		c, err := startChild("aaa-peer server", cmd, dir)
		if err != nil {
			return nil, "", err
		}
		c.stop = func() { syscall.Kill(c.pid(), syscall.SIGTERM) }
		go drain(c)
		for t0 := time.Now(); time.Since(t0) < 10*time.Second; time.Sleep(10 * time.Millisecond) {
			if b, err := os.ReadFile(ready); err == nil && strings.HasSuffix(string(b), "\n") {
				u := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
				return c, strings.TrimPrefix(u, "tcp://"), nil
			}
		}
		c.kill()
		return nil, "", fmt.Errorf("aaa-peer server not ready in 10 s%s", c.stderrTail())
	case "freediameter":
		if x.fd == "" {
			return nil, "", errors.New("freeDiameterd not installed")
		}
		port, err := freeTCPPort()
		if err != nil {
			return nil, "", err
		}
		conf, err := x.writeFDConfig(dir, port)
		if err != nil {
			return nil, "", err
		}
		cmd := exec.Command(x.fd, "-c", conf)
		cmd.Dir = dir
		c, err := startChild("freeDiameterd", cmd, dir)
		if err != nil {
			return nil, "", err
		}
		c.stop = func() { syscall.Kill(-c.pid(), syscall.SIGTERM) }
		go drain(c)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		for t0 := time.Now(); time.Since(t0) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
			if conn, err := net.Dial("tcp", addr); err == nil {
				conn.Close()
				return c, addr, nil
			}
		}
		c.kill()
		return nil, "", fmt.Errorf("freeDiameterd not listening in 10 s%s", c.stderrTail())
	}
	return nil, "", fmt.Errorf("unknown server %q", kind)
}

// drain reads and drops the child's stdout until it closes.
func drain(c *child) {
	for c.lines.Scan() {
	}
}

func freeTCPPort() (int, error) {
	// freeDiameter 1.2.1 binds 0.0.0.0 whatever ListenOn says.
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// writeFDConfig writes freeDiameter's configuration (clear-text TCP, no
// SCTP, acl_wl admitting *.example.net, test_app as a server when found).
func (x *xprocEnv) writeFDConfig(dir string, port int) (string, error) {
	wl := filepath.Join(dir, "acl_wl.conf")
	if err := os.WriteFile(wl, []byte("ALLOW_IPSEC *."+xRealm+"\n"), 0o644); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Identity = %q;\nRealm = %q;\nPort = %d;\nSecPort = 0;\nNo_SCTP;\nNo_IPv6;\nTwTimer = 30;\nTcTimer = 2;\n", fdHost, xRealm, port)
	b.WriteString("ListenOn = \"127.0.0.1\";\n")
	fmt.Fprintf(&b, "LoadExtension = %q : %q;\n", filepath.Join(x.fdExt, "acl_wl.fdx"), wl)
	if x.fdTestApp != "" {
		ta := filepath.Join(dir, "test_app.conf")
		// test_app's own syntax: the ids aaa-peer's --app test uses.
		if err := os.WriteFile(ta, []byte("vendor-id = 999999;\nappli-id = 16777214;\ncmd-id = 16777214;\navp-id = 345678;\nmode = server;\n"), 0o644); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "LoadExtension = %q : %q;\n", x.fdTestApp, ta)
	}
	path := filepath.Join(dir, "freeDiameter.conf")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

var progressRE = regexp.MustCompile(`^t=(\d+)s .*answered=(\d+) failed=(\d+)`)

// aaaPeerReport is the part of aaa-peer client's --report the harness reads.
type aaaPeerReport struct {
	Answered  uint64                     `json:"answered"`
	Failed    uint64                     `json:"failed"`
	LatencyUS struct{ P50, P99 float64 } `json:"latency_us"`
	FailedBy  map[string]uint64          `json:"failed_by"`
}

// runPair runs p once for d: server, then client; CPU of both processes
// sampled at the client's progress lines, from its first (t=1s: connected
// and warmed up) to its last. With rssAt, RSS of both is also sampled at
// the first progress line past each answered count in it.
func (x *xprocEnv) runPair(p Pair, d time.Duration, n int, rssAt []uint64) (res PairResult, err error) {
	res.Pair = p
	srv, addr, err := x.startServer(p.Server, n)
	if err != nil {
		return res, err
	}
	defer func() {
		srv.stop()
		if werr := srv.wait(15 * time.Second); err == nil && werr != nil && p.Server != "freediameter" {
			err = werr
		}
	}()
	dir, err := os.MkdirTemp(x.scratch, fmt.Sprintf("cli%d-", n))
	if err != nil {
		return res, err
	}
	var cmd *exec.Cmd
	report := filepath.Join(dir, "report.json")
	if p.Client == "aaa-peer" {
		realm, app := xRealm, "acct"
		if p.Server == "freediameter" && x.fdTestApp != "" {
			app = "test"
		}
		cmd = exec.Command(x.aaaPeer, "client", "--peer", "tcp://"+addr,
			"--origin-host", xClientHost, "--origin-realm", xRealm, "--destination-realm", realm,
			"--concurrency", strconv.Itoa(p.Callers), "--duration", d.String(), "--app", app,
			"--report", report, "--log-level", "error",
			"--max-failed", "1") // a throughput run: answers are counted, not judged (freeDiameter without test_app refuses ACRs)
	} else {
		cmd = exec.Command(x.self, "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=client %s %s %d %s", roleEnv, p.Client, addr, p.Callers, d))
	}
	cli, err := startChild(p.Client+" client", cmd, dir)
	if err != nil {
		return res, err
	}
	type sample struct {
		t                time.Time
		answered, failed uint64
		cc, sc           time.Duration
	}
	var samples []sample
	var lat string
	next := 0
	for cli.lines.Scan() {
		line := cli.lines.Text()
		if m := progressRE.FindStringSubmatch(line); m != nil {
			a, _ := strconv.ParseUint(m[2], 10, 64)
			f, _ := strconv.ParseUint(m[3], 10, 64)
			cc, err1 := procCPU(cli.pid())
			sc, err2 := procCPU(srv.pid())
			if err1 != nil || err2 != nil {
				continue // the client is exiting
			}
			samples = append(samples, sample{time.Now(), a, f, cc, sc})
			if rss := procRSS(cli.pid()); rss > 0 { // 0: exiting
				res.ClientRSSKiB = rss
			}
			if rss := procRSS(srv.pid()); rss > 0 {
				res.ServerRSSKiB = rss
			}
			for next < len(rssAt) && a+f >= rssAt[next] {
				res.rssAtAnswered = append(res.rssAtAnswered, rssSample{a + f, res.ClientRSSKiB, res.ServerRSSKiB})
				next++
			}
		} else if rest, ok := strings.CutPrefix(line, "LAT "); ok {
			lat = rest
		}
	}
	if err := cli.wait(d + 30*time.Second); err != nil {
		return res, err
	}
	if len(samples) < 2 {
		return res, fmt.Errorf("%s: %d progress lines, want at least 2 (run longer than 2 s)", p.Name, len(samples))
	}
	first, last := samples[0], samples[len(samples)-1]
	res.Window = last.t.Sub(first.t)
	res.Answers = (last.answered + last.failed) - (first.answered + first.failed)
	if res.Answers == 0 {
		return res, fmt.Errorf("%s: no answer in the window", p.Name)
	}
	res.AnswersPerS = round(float64(res.Answers)/res.Window.Seconds(), 0)
	res.ClientCPUus = round(us(last.cc-first.cc)/float64(res.Answers), 2)
	res.ServerCPUus = round(us(last.sc-first.sc)/float64(res.Answers), 2)
	if p.Client == "aaa-peer" {
		b, err := os.ReadFile(report)
		if err != nil {
			return res, err
		}
		var r aaaPeerReport
		if err := json.Unmarshal(b, &r); err != nil {
			return res, fmt.Errorf("aaa-peer report: %w", err)
		}
		res.P50us, res.P99us, res.Failed = r.LatencyUS.P50, r.LatencyUS.P99, r.Failed
		var codes []string
		for k, v := range r.FailedBy {
			codes = append(codes, fmt.Sprintf("%s: %d", k, v))
		}
		slices.Sort(codes)
		res.ResultCodes = strings.Join(codes, ", ")
	} else {
		if _, err := fmt.Sscan(lat, &res.P50us, &res.P99us); err != nil {
			return res, fmt.Errorf("%s: latency line %q", p.Name, lat)
		}
		res.Failed = last.failed
	}
	if res.Failed > 0 && p.Server != "freediameter" {
		return res, fmt.Errorf("%s: %d requests failed (%s)", p.Name, res.Failed, res.ResultCodes)
	}
	return res, nil
}
