package hostile

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

const (
	serverHost = "server.example.net"
	realm      = "example.net"
)

// server is one "aaa-peer server --status" process.
type server struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string            // host:port of its Diameter listener
	urls   map[string]string // scheme -> host:port of every listener (--ready)
	pki    *pki              // the radsec:// certificates (startRADIUS)
	status string            // http://host:port/
	stderr string
	report string
	done   chan struct{}
	err    error
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServer runs aaa-peer server with extra flags. fdLimit, when set,
// is the process's RLIMIT_NOFILE.
func startServer(t *testing.T, fdLimit int, extra ...string) *server {
	t.Helper()
	needPeer(t)
	// The --status port is picked free and then bound by the server: an
	// attack of an earlier test (thousands of ephemeral ports) may take it
	// in between, so try again then.
	for range 4 {
		if s := tryServer(t, fdLimit, extra...); s != nil {
			return s
		}
	}
	t.Fatal("the server could not bind its --status port four times")
	return nil
}

func tryServer(t *testing.T, fdLimit int, extra ...string) *server {
	t.Helper()
	dir := t.TempDir()
	s := &server{t: t, stderr: filepath.Join(dir, "stderr"), report: filepath.Join(dir, "report.json"), done: make(chan struct{})}
	st := freePort(t)
	ready := filepath.Join(dir, "ready")
	args := append([]string{"server", "--listen", "tcp://127.0.0.1:0", "--origin-host", serverHost, "--origin-realm", realm,
		"--status", st, "--ready", ready, "--report", s.report, "--log-level", "info"}, extra...)
	name, argv := aaaPeer, args
	if fdLimit > 0 {
		name = "sh"
		argv = append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, fdLimit), aaaPeer}, args...)
	}
	se, err := os.Create(s.stderr)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(name, argv...)
	s.cmd.Stderr = se
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	se.Close()
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(s.stderr)
			if _, ok := firstLine(b, "flag provided but not defined"); !ok { // else said already
				t.Logf("server stderr (last 4 KB):\n%s", tail(b, 4096))
			}
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(ready)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			s.addr = strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "tcp://")
			s.urls = map[string]string{}
			for _, line := range strings.Fields(string(b)) {
				if scheme, hp, ok := strings.Cut(line, "://"); ok {
					s.urls[scheme] = hp
				}
			}
			break
		}
		select {
		case <-s.done:
			if b, _ := os.ReadFile(s.stderr); strings.Contains(string(b), "address already in use") {
				return nil
			}
			b, _ := os.ReadFile(s.stderr)
			if line, ok := firstLine(b, "flag provided but not defined"); ok {
				t.Fatalf("this aaa-peer has no such flag: %s", line)
			}
			t.Fatalf("server exited before listening: %v\n%s", s.err, tail(b, 4096))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("server not ready within 20 s")
		}
	}
	s.status = "http://" + st + "/"
	for time.Now().Before(deadline) {
		if _, err := s.goroutines(); err == nil {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("status page not up within 20 s")
	return nil
}

// firstLine returns the first line of b that holds sub.
func firstLine(b []byte, sub string) (string, bool) {
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, sub) {
			return line, true
		}
	}
	return "", false
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// alive fails the test if the server process has exited.
func (s *server) alive() {
	s.t.Helper()
	select {
	case <-s.done:
		b, _ := os.ReadFile(s.stderr)
		s.t.Fatalf("the server died: %v\n%s", s.err, tail(b, 4096))
	default:
	}
}

// memory returns the server's RSS now and its peak (VmHWM), in bytes.
func (s *server) memory() (rss, peak int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n << 10
		case "VmHWM":
			peak = n << 10
		}
	}
	return rss, peak
}

var httpc = &http.Client{Timeout: 5 * time.Second}

// scrape returns /metrics.
func (s *server) scrape() (string, error) {
	r, err := httpc.Get(s.status + "metrics")
	if err != nil {
		return "", err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return "", err
	}
	if r.StatusCode != 200 {
		return "", fmt.Errorf("/metrics: %s", r.Status)
	}
	return string(b), nil
}

// goroutines reads go_goroutines from /metrics.
func (s *server) goroutines() (int, error) {
	body, err := s.scrape()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, errors.New("no go_goroutines on /metrics")
}

// peaks samples the server's memory and goroutines until stop is called.
type peaks struct {
	mu         sync.Mutex
	rss        int64
	goroutines int
	scrapeErrs int
	stop       chan struct{}
	done       chan struct{}
}

func (s *server) sample() *peaks {
	p := &peaks{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			rss, _ := s.memory()
			g, err := s.goroutines()
			p.mu.Lock()
			p.rss = max(p.rss, rss)
			p.goroutines = max(p.goroutines, g)
			if err != nil {
				p.scrapeErrs++
			}
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-tk.C:
			}
		}
	}()
	return p
}

func (p *peaks) end() (rss int64, goroutines int) {
	close(p.stop)
	<-p.done
	return p.rss, p.goroutines
}

// good is a well-behaved client on its own connection: it sends ACRs on
// 8 callers until stopped and counts answers and failures.
type good struct {
	p        *peer.Peer
	ok, errs atomic.Int64
	lastErr  atomic.Value
	stop     chan struct{}
	wg       sync.WaitGroup
	start    time.Time
	end      time.Time
}

func goodClient(t *testing.T, s *server, mutate func(*peer.Config)) *good {
	t.Helper()
	cfg := peer.Config{
		OriginHost: "good.example.net", OriginRealm: realm,
		Watchdog: watchdog.Config{Twinit: 30 * time.Second},
		Logger:   slog.New(slog.DiscardHandler),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := peer.Dial("tcp://"+s.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatalf("good client: %v", err)
	}
	return &good{p: p}
}

// run sends until halt.
func (g *good) run() {
	g.stop = make(chan struct{})
	g.start = time.Now()
	var seq atomic.Uint32
	for range 8 {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for {
				select {
				case <-g.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				ans, err := g.p.Request(ctx, acr("good.example.net", seq.Add(1)))
				cancel()
				if err == nil {
					if rc, _ := message.ResultCodeOf(ans); rc != message.Success {
						err = fmt.Errorf("result code %d", rc)
					}
				}
				if err != nil {
					g.errs.Add(1)
					g.lastErr.Store(err.Error())
					time.Sleep(10 * time.Millisecond)
					continue
				}
				g.ok.Add(1)
			}
		}()
	}
}

func (g *good) halt() {
	close(g.stop)
	g.wg.Wait()
	g.end = time.Now()
}

func (g *good) rate() float64 { return float64(g.ok.Load()) / g.end.Sub(g.start).Seconds() }

// check fails the test if the good client saw an error or no answer, and
// logs its throughput.
func (g *good) check(t *testing.T) {
	t.Helper()
	t.Logf("good client during the attack: %d answered (%.0f/s), %d failed", g.ok.Load(), g.rate(), g.errs.Load())
	if g.errs.Load() > 0 {
		t.Errorf("the good client had %d failures during the attack (last: %v)", g.errs.Load(), g.lastErr.Load())
	}
	if g.ok.Load() == 0 {
		t.Error("the good client got no answer during the attack")
	}
}

// figures logs the server's peaks during an attack in one line the
// closing note quotes.
func figures(t *testing.T, name string, rss int64, goroutines int) {
	t.Logf("FIGURES %s: peak RSS %.1f MB, peak goroutines %d", name, float64(rss)/(1<<20), goroutines)
}

func acr(host string, n uint32) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, fmt.Sprintf("%s;1;%d", host, n)).
		String(message.OriginHost, 0, true, host).
		String(message.OriginRealm, 0, true, realm).
		String(message.DestinationRealm, 0, true, realm).
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, n).Bytes()
}

func cer(host string) []byte {
	b := message.NewRequest(wire.CmdCapabilitiesExchange, message.AppCommon, 0).
		String(message.OriginHost, 0, true, host).
		String(message.OriginRealm, 0, true, realm).
		Address(message.HostIPAddress, 0, true, netip.MustParseAddr("127.0.0.1")).
		Uint32(message.VendorID, 0, true, 0).
		String(message.ProductName, 0, false, "hostile").
		Uint32(message.AcctApplicationID, 0, true, message.AppAccounting).Bytes()
	wire.SetHopByHop(b, 1)
	wire.SetEndToEnd(b, 1)
	return b
}

// raw opens a connection and, unless host is "", completes a CER with it.
func raw(t *testing.T, s *server, host string) transport.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tc, err := transport.Dial(ctx, "tcp://"+s.addr, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	if host == "" {
		return tc
	}
	if err := tc.WriteMessages(cer(host)); err != nil {
		t.Fatal(err)
	}
	cea, err := tc.ReadMessage()
	if err != nil {
		t.Fatalf("CEA: %v", err)
	}
	if rc, _ := message.ResultCodeOf(cea); rc != message.Success {
		t.Fatalf("CEA result %d", rc)
	}
	return tc
}

// serverReport stops the server (SIGTERM) and returns its --report.
func (s *server) stopReport() map[string]any {
	s.t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		s.t.Fatal("server did not exit on SIGTERM within 15 s")
	}
	b, err := os.ReadFile(s.report)
	if err != nil {
		s.t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		s.t.Fatal(err)
	}
	return r
}

var quietLog = slog.New(slog.DiscardHandler)
