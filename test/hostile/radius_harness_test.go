package hostile

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The RADIUS listeners of a server under attack, by --listen scheme.
const (
	schemeUDP    = "radius"
	schemeTCP    = "radius+tcp"
	schemeRadSec = "radsec"
)

var streamSchemes = []string{schemeTCP, schemeRadSec}

// secretOf is the shared secret of a listener's scheme.
func secretOf(scheme string) string {
	if scheme == schemeRadSec {
		return radsecSecret
	}
	return radiusSecret
}

// startRADIUS runs aaa-peer server with, beside its Diameter listener,
// one listener of each RADIUS transport (radius://, radius+tcp://,
// radsec://, in s.urls by scheme), the secret radiusSecret and
// certificates made for the test, the client ones named "nas1.example.net"
// and "nas2.example.net".
func startRADIUS(t *testing.T, fdLimit int, extra ...string) *server {
	t.Helper()
	dir := t.TempDir()
	p := newPKI(t, dir, "nas1.example.net", "nas2.example.net")
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte(radiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--listen", "radius://127.0.0.1:0", "--listen", "radius+tcp://127.0.0.1:0", "--listen", "radsec://127.0.0.1:0",
		"--secret-file", secret, "--tls-cert", p.serverCert, "--tls-key", p.serverKey, "--tls-client-ca", p.caFile,
	}, extra...)
	s := startServer(t, fdLimit, args...)
	s.pki = p
	for _, sc := range []string{schemeUDP, schemeTCP, schemeRadSec} {
		if s.urls[sc] == "" {
			t.Fatalf("no %s:// listener in --ready: %v", sc, s.urls)
		}
	}
	return s
}

// dialRadius connects to the server's listener of scheme from the local
// address local ("" for any): a connected UDP socket, a TCP connection,
// or a TLS connection presenting the client certificate cert after its
// handshake.
func (s *server) dialRadius(scheme, local, cert string) (*radConn, error) {
	addr := s.urls[scheme]
	var lip net.IP
	if local != "" {
		lip = net.ParseIP(local)
	}
	switch scheme {
	case schemeUDP:
		ra, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return nil, err
		}
		c, err := net.DialUDP("udp", &net.UDPAddr{IP: lip}, ra)
		if err != nil {
			return nil, err
		}
		return &radConn{c: c}, nil
	case schemeTCP:
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: lip}, Timeout: 3 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		return &radConn{c: c, stream: true, br: bufio.NewReader(c)}, nil
	case schemeRadSec:
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: lip}, Timeout: 3 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", addr, s.pki.clientTLS(cert))
		if err != nil {
			return nil, err
		}
		return &radConn{c: c, stream: true, br: bufio.NewReader(c)}, nil
	}
	return nil, fmt.Errorf("no scheme %q", scheme)
}

// mustDial is dialRadius with the first client certificate, failing the
// test on an error; the connection is closed at the test's end.
func (s *server) mustDial(t *testing.T, scheme, local string) *radConn {
	t.Helper()
	rc, err := s.dialRadius(scheme, local, "nas1.example.net")
	if err != nil {
		t.Fatalf("dial %s: %v", scheme, err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc
}

// radGood is a well-behaved RADIUS client on one listener, open loop:
// it starts an Access-Request with a Message-Authenticator every 1/rate
// s, whatever became of the earlier ones, on one of conns connections (or
// UDP sockets) of its own from goodIP, dialled before the attack so that
// the attack's limits do not refuse them, and records what became of
// each. Over UDP a request is sent up to 3 times, 1 s apart, the same
// bytes each time (RFC 5080 2.2.1), and fails without a valid answer
// after the third; over a stream it is sent once and fails after 3 s (a
// broken connection is redialled).
type radGood struct {
	s      *server
	scheme string
	rate   float64
	conns  int

	pool     chan *radConn // nil: to redial
	inflight atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
	start    time.Time
	halted   bool

	mu      sync.Mutex
	results []goodResult
}

// goodResult is what became of one request of a good client.
type goodResult struct {
	start time.Time
	took  time.Duration
	err   error
}

// goodIP is the good clients' source address, apart from the attackers'
// (127.0.0.1 and others), so that per-address limits never count them
// together.
const goodIP = "127.0.0.200"

// maxGoodInflight bounds a good client's requests in flight: past it a
// request fails at once (the server is not answering).
const maxGoodInflight = 256

func radiusGood(s *server, scheme string, rate float64) *radGood {
	return &radGood{s: s, scheme: scheme, rate: rate, conns: 8}
}

// run dials the connections and starts sending; it fails the test if the
// connections cannot be opened.
func (g *radGood) run(t *testing.T) {
	t.Helper()
	g.pool = make(chan *radConn, g.conns)
	for range g.conns {
		if g.scheme == schemeUDP {
			g.pool <- nil // unused: a socket per request
			continue
		}
		rc, err := g.s.dialRadius(g.scheme, goodIP, "nas1.example.net")
		if err != nil {
			t.Fatalf("good %s client: %v", g.scheme, err)
		}
		g.pool <- rc
	}
	g.stop = make(chan struct{})
	g.start = time.Now()
	interval := time.Duration(float64(time.Second) / g.rate)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for n := 0; ; n++ {
			var now time.Time
			select {
			case <-g.stop:
				return
			case now = <-tk.C:
			}
			if g.inflight.Load() >= maxGoodInflight {
				g.record(goodResult{start: now, err: errors.New("too many requests unanswered")})
				continue
			}
			g.inflight.Add(1)
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				defer g.inflight.Add(-1)
				g.record(g.one(n, now))
			}()
		}
	}()
}

func (g *radGood) record(r goodResult) {
	g.mu.Lock()
	g.results = append(g.results, r)
	g.mu.Unlock()
}

// one sends request n, due at t0, and waits for its answer.
func (g *radGood) one(n int, t0 time.Time) goodResult {
	r := goodResult{start: t0}
	stream := g.scheme != schemeUDP
	attempts, timeout := 3, time.Second
	if stream {
		attempts, timeout = 1, 3*time.Second
	}
	var rc *radConn
	if stream {
		select {
		case rc = <-g.pool:
		case <-time.After(time.Duration(attempts) * timeout):
			r.err = errors.New("no connection free")
			return r
		}
		defer func() { g.pool <- rc }()
	} else {
		// A socket of its own: a datagram lost costs this request its
		// retransmissions, never another's.
		defer func() {
			if rc != nil {
				rc.Close()
			}
		}()
	}
	if rc == nil {
		var err error
		if rc, err = g.s.dialRadius(g.scheme, goodIP, "nas1.example.net"); err != nil {
			r.err = fmt.Errorf("dial: %w", err)
			return r
		}
	}
	secret := secretOf(g.scheme)
	req := accessRequest(byte(n), fmt.Sprintf("good%d@example.net", n), secret)
	for range attempts {
		if _, r.err = rc.ask(req, secret, timeout); r.err == nil || !errors.Is(r.err, os.ErrDeadlineExceeded) {
			break
		}
	}
	r.took = time.Since(t0)
	if r.err != nil && stream {
		rc.Close()
		rc = nil
	}
	return r
}

// halt stops sending, waits for the requests in flight and closes the
// connections.
func (g *radGood) halt() {
	close(g.stop)
	g.wg.Wait()
	g.halted = true
	for range g.conns {
		if rc := <-g.pool; rc != nil {
			rc.Close()
		}
	}
}

// mark is a point in a good client's run.
type mark struct{ at time.Time }

func (g *radGood) mark() mark { return mark{time.Now()} }

// startMark is the mark of the run's start.
func (g *radGood) startMark() mark { return mark{g.start} }

// window is what became of the requests a good client started between two
// marks.
type window struct {
	sent, ok, errs int64
	secs           float64
	p50, p99       time.Duration
	scheme         string
	lastError      error
}

// window returns what became of the requests started between a and b;
// after halt, so that every one of them has ended.
func (g *radGood) window(a, b mark) window {
	if !g.halted {
		panic("window before halt")
	}
	w := window{secs: b.at.Sub(a.at).Seconds(), scheme: g.scheme}
	var lat []time.Duration
	g.mu.Lock()
	for _, r := range g.results {
		if r.start.Before(a.at) || !r.start.Before(b.at) {
			continue
		}
		w.sent++
		if r.err != nil {
			w.errs++
			w.lastError = r.err
			continue
		}
		w.ok++
		lat = append(lat, r.took)
	}
	g.mu.Unlock()
	slices.Sort(lat)
	if len(lat) > 0 {
		w.p50, w.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return w
}

func (w window) rate() float64 { return float64(w.ok) / w.secs }

// share is the part of the requests answered.
func (w window) share() float64 {
	if w.sent == 0 {
		return 0
	}
	return float64(w.ok) / float64(w.sent)
}

func (w window) String() string {
	s := fmt.Sprintf("%d sent (%.1f/s), %d answered (%.1f/s, %.0f%%), %d failed, latency p50 %v p99 %v",
		w.sent, float64(w.sent)/w.secs, w.ok, w.rate(), 100*w.share(), w.errs,
		w.p50.Round(10*time.Microsecond), w.p99.Round(10*time.Microsecond))
	if w.errs > 0 {
		s += fmt.Sprintf(" (last error: %v)", w.lastError)
	}
	return s
}

// log logs the window.
func (w window) log(t *testing.T, name string) {
	t.Helper()
	t.Logf("FIGURES %s: good %s client %s", name, w.scheme, w)
}

// require fails the test unless the good client had at least share of
// the requests it started in the window answered, and logs the window.
func (w window) require(t *testing.T, name string, share float64) {
	t.Helper()
	w.log(t, name)
	if w.share() < share || w.ok == 0 {
		t.Errorf("%s: the good %s client had %.0f%% of its requests answered (%d of %d, %d failed), want at least %.0f%%",
			name, w.scheme, 100*w.share(), w.ok, w.sent, w.errs, 100*share)
	}
}

// stderrLines counts the server's log lines so far.
func (s *server) stderrLines() int {
	b, _ := os.ReadFile(s.stderr)
	return strings.Count(string(b), "\n")
}

// fds returns how many descriptors the server process has open.
func (s *server) fds() int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid))
	return len(ents)
}

// closedWithin reports whether the server closes rc within d: a read
// that ends in EOF or a reset rather than the deadline. Bytes the server
// sends first are skipped.
func closedWithin(rc *radConn, d time.Duration) (bool, error) {
	deadline := time.Now().Add(d)
	buf := make([]byte, 512)
	for {
		rc.c.SetReadDeadline(deadline)
		_, err := rc.c.Read(buf)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false, err
		}
		return true, err
	}
}

var (
	serverHelpOnce sync.Once
	serverHelp     string
)

// hasServerFlag reports whether "aaa-peer server" has the flag --name.
func hasServerFlag(t *testing.T, name string) bool {
	t.Helper()
	needPeer(t)
	serverHelpOnce.Do(func() {
		out, _ := exec.Command(aaaPeer, "server", "-h").CombinedOutput()
		serverHelp = string(out)
	})
	return strings.Contains(serverHelp, "\n  -"+name+" ")
}
