package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/transport"
)

// TestOpenLoopSchedule: requests leave at start + n/rate whatever the
// earlier ones do (here: none is ever answered), each with its intended
// time; a scheduler that is late sends what it owes at once, each request
// with its own (past) intended time.
func TestOpenLoopSchedule(t *testing.T) {
	t.Parallel()
	l := newOpenLoop(100, 1000, 0, slog.New(slog.DiscardHandler))
	l.start = time.Now().Add(-300 * time.Millisecond) // late by 30 requests
	release := make(chan struct{})
	var mu sync.Mutex
	intended := map[int64]time.Time{}
	var late time.Duration
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	go func() { <-ctx.Done(); close(release) }()
	l.run(ctx, func(n int64, at time.Time) {
		mu.Lock()
		intended[n] = at
		if n == 0 {
			late = time.Since(at)
		}
		mu.Unlock()
		<-release // no answer until the run ends: a frozen server
	})
	// 300 ms owed plus 500 ms of run at 100/s: about 80.
	if n := len(intended); n < 60 || n > 82 {
		t.Errorf("%d requests sent, want about 80 (30 owed at once, then 10 per 100 ms) whatever the earlier ones do", n)
	}
	for n := int64(1); n < int64(len(intended)); n++ {
		if d := intended[n].Sub(intended[n-1]); d < 9*time.Millisecond || d > 11*time.Millisecond {
			t.Fatalf("request %d intended %v after request %d, want 10ms", n, d, n-1)
		}
	}
	if late < 300*time.Millisecond {
		t.Errorf("the first request left %v after its intended time, want at least 300ms (the scheduler's lateness)", late)
	}
	if d := l.dropped.Load(); d != 0 {
		t.Errorf("%d dropped under the bound", d)
	}
}

// TestOpenLoopBound: past the in-flight bound, requests are not sent but
// counted, and one warning a second says so with the bound and the count.
// In a bubble: 300 ms of virtual time at 1,000/s is 300 requests due.
func TestOpenLoopBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs syncBuffer
		l := newOpenLoop(1000, 5, 0, slog.New(slog.NewTextHandler(&logs, nil)))
		release := make(chan struct{})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		go func() { <-ctx.Done(); close(release) }()
		var peak, in atomic.Int64
		l.run(ctx, func(int64, time.Time) {
			if n := in.Add(1); n > peak.Load() {
				peak.Store(n)
			}
			<-release
			in.Add(-1)
		})
		sent, dropped := l.sent.Load(), l.dropped.Load()
		if sent != 5 || peak.Load() > 5 {
			t.Errorf("sent %d, at most %d at once; want 5 (the bound)", sent, peak.Load())
		}
		if dropped != 295 {
			t.Errorf("dropped %d, want 295: the schedule goes on", dropped)
		}
		warns := strings.Count(logs.String(), "in-flight bound reached")
		if warns != 1 || !strings.Contains(logs.String(), "bound=5 dropped=1 dropped_total=1") {
			t.Errorf("%d warnings, want 1 (at most one a second) naming the bound and the count:\n%s", warns, logs.String())
		}
	})
}

// TestOpenLoopRequests: --requests counts the requests sent, not those
// dropped.
func TestOpenLoopRequests(t *testing.T) {
	t.Parallel()
	l := newOpenLoop(2000, 1000, 25, slog.New(slog.DiscardHandler))
	var calls atomic.Int64
	l.run(context.Background(), func(int64, time.Time) { calls.Add(1) })
	if calls.Load() != 25 || l.sent.Load() != 25 {
		t.Errorf("%d requests, want 25", calls.Load())
	}
}

// TestStallWatch: "no answer for N s from P" while P has requests
// outstanding and answers none, once a second; not for a server that
// answers, nor for one with nothing outstanding.
func TestStallWatch(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	var stats []client.ServerStats
	w := newStallWatch(func() []client.ServerStats { return stats }, slog.New(slog.NewTextHandler(&logs, nil)))
	t0 := time.Now()
	for i := range 16 { // 3.2 s in steps of 200 ms
		stats = []client.ServerStats{
			{Server: "tcp://a:3868", Peer: "a.example.net", Sent: uint64(10 * i), Answered: uint64(10 * i)},  // answers everything
			{Server: "tcp://b:3868", Peer: "b.example.net", Sent: uint64(10*i + 10), Answered: 7, Failed: 3}, // answers nothing
			{Server: "tcp://c:3868", Sent: 5, Answered: 4, Failed: 1},                                        // idle
		}
		w.check(t0.Add(time.Duration(i) * 200 * time.Millisecond))
	}
	out := logs.String()
	for _, want := range []string{`msg="no answer for 1s from tcp://b:3868" server=tcp://b:3868 outstanding=50 peer=b.example.net`,
		"no answer for 2s from tcp://b:3868", "no answer for 3s from tcp://b:3868"} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "no answer for"); n != 3 || strings.Contains(out, "tcp://a") || strings.Contains(out, "tcp://c") {
		t.Errorf("%d lines, want 3, all for tcp://b:\n%s", n, out)
	}
	// An answer resets the count.
	before := len(out)
	stats[1].Answered++
	w.check(t0.Add(3400 * time.Millisecond))
	w.check(t0.Add(4500 * time.Millisecond))
	if out := logs.String()[before:]; !strings.Contains(out, "no answer for 1s from tcp://b:3868") || strings.Count(out, "no answer") != 1 {
		t.Errorf("after an answer, want one line of 1s:\n%s", out)
	}
}

// freezeProxy forwards TCP connections to a server and can freeze them:
// while frozen nothing is forwarded either way, as for a SIGSTOPped
// server process.
type freezeProxy struct {
	ln     net.Listener
	up     string
	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
	down   atomic.Int64 // bytes forwarded from the server
}

func startFreezeProxy(t *testing.T, serverURL string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, up: strings.TrimPrefix(serverURL, "tcp://")}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.up)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(u, c, nil)
			go p.pipe(c, u, &p.down)
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *freezeProxy) url() string { return "tcp://" + p.ln.Addr().String() }

func (p *freezeProxy) pipe(dst, src net.Conn, count *atomic.Int64) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.frozen && !p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
			if count != nil {
				count.Add(int64(n))
			}
		}
		if err != nil {
			src.Close()
			dst.Close()
			return
		}
	}
}

func (p *freezeProxy) freeze(on bool) {
	p.mu.Lock()
	p.frozen = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *freezeProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// freezeWhenUp freezes p as soon as the server's CEA went through it,
// before the client's first request, and thaws it after d.
func (p *freezeProxy) freezeWhenUp(t *testing.T, d time.Duration) (done chan struct{}) {
	done = make(chan struct{})
	go func() {
		defer close(done)
		for p.down.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		p.freeze(true)
		time.Sleep(d)
		p.freeze(false)
	}()
	return done
}

// serverStats returns the report's statistics of the server url.
func serverStats(t *testing.T, servers []client.ServerStats, url string) client.ServerStats {
	t.Helper()
	for _, s := range servers {
		if s.Server == url {
			return s
		}
	}
	t.Fatalf("no server %s in %+v", url, servers)
	return client.ServerStats{}
}

// TestClientOpenLoopFrozenPeer: of two servers, one frozen for 1.5 s
// from the start of the run: --rate 100 --duration 3s still sends its
// 300 requests on schedule (a closed loop of --concurrency callers waits
// on the frozen server instead), the healthy server gets its half all
// along, "no answer for 1s from P" names the frozen one, and the latency,
// measured from the intended send times, shows the stall.
func TestClientOpenLoopFrozenPeer(t *testing.T) {
	t.Parallel()
	healthy, frozen := startServer(t), startServer(t, "--origin-host", "server2.example.net")
	px := startFreezeProxy(t, frozen.url)
	thawed := px.freezeWhenUp(t, 1500*time.Millisecond)
	r := runTestClient(t, context.Background(), healthy.url, "--peer", px.url(), "--algorithm", "round-robin", "--wait-peers", "0",
		"--rate", "100", "--duration", "3s", "--timeout", "10s", "--tw", "6s")
	<-thawed
	rep := r.report
	t.Logf("sent %d answered %d failed %d dropped %d latency %+v", rep.Sent, rep.Answered, rep.Failed, rep.DroppedInFlight, rep.LatencyUS)
	if r.code != 0 || rep.Loop != "open" {
		t.Fatalf("exit %d, loop %q\n%s", r.code, rep.Loop, r.stderr)
	}
	if rep.Sent < 270 || rep.Sent > 302 || rep.Answered != rep.Sent || rep.DroppedInFlight != 0 {
		t.Errorf("sent %d answered %d dropped %d; want about 300 sent on schedule and answered, none dropped", rep.Sent, rep.Answered, rep.DroppedInFlight)
	}
	if h := serverStats(t, rep.Servers, healthy.url); h.Sent < 130 {
		t.Errorf("the healthy server got %d requests, want about 150 (its half)", h.Sent)
	}
	if !regexp.MustCompile(`level=WARN msg="no answer for 1s from ` + regexp.QuoteMeta(px.url()) + `" server=\S+ outstanding=\d+ peer=server2.example.net`).MatchString(r.stderr) {
		t.Errorf("no 'no answer for 1s from %s' line:\n%s", px.url(), r.stderr)
	}
	if strings.Contains(r.stderr, "no answer for 1s from "+healthy.url) {
		t.Errorf("the healthy server named as not answering:\n%s", r.stderr)
	}
	// About 75 requests (a quarter) waited up to 1.5 s from their
	// intended time: p99 over 1 s, the median a few ms.
	if rep.LatencyUS.P99 < 1_000_000 || rep.LatencyUS.Count != rep.Answered {
		t.Errorf("latency %+v; want p99 over 1s (the stall, from the intended send times), every answer counted", rep.LatencyUS)
	}
}

// TestClientOpenLoopBoundWarning: with a server frozen and a small
// --concurrency, the in-flight bound is reached: the requests of the
// schedule that find it full are not sent but counted and warned about,
// the others leave on schedule.
func TestClientOpenLoopBoundWarning(t *testing.T) {
	t.Parallel()
	healthy, frozen := startServer(t), startServer(t, "--origin-host", "server2.example.net")
	px := startFreezeProxy(t, frozen.url)
	thawed := px.freezeWhenUp(t, 3500*time.Millisecond)
	r := runTestClient(t, context.Background(), healthy.url, "--peer", px.url(), "--algorithm", "round-robin", "--wait-peers", "0",
		"--rate", "100", "--duration", "3s", "--concurrency", "20", "--timeout", "1s", "--tw", "6s", "--max-failed", "1")
	<-thawed
	rep := r.report
	t.Logf("sent %d answered %d failed %d dropped %d", rep.Sent, rep.Answered, rep.Failed, rep.DroppedInFlight)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if rep.DroppedInFlight < 50 || rep.Sent+rep.DroppedInFlight < 270 || rep.Sent+rep.DroppedInFlight > 302 {
		t.Errorf("sent %d + dropped %d; want about 300 in the schedule, many dropped at the bound", rep.Sent, rep.DroppedInFlight)
	}
	warns := regexp.MustCompile(`level=WARN msg="in-flight bound reached: requests not sent on schedule \(dropped\)" bound=20 dropped=\d+ dropped_total=\d+`).FindAllString(r.stderr, -1)
	if len(warns) == 0 || len(warns) > 5 {
		t.Errorf("%d bound warnings, want 1 to 5 (at most one a second):\n%s", len(warns), r.stderr)
	}
	if !strings.Contains(r.stderr, "no answer for 1s from "+px.url()) {
		t.Errorf("no 'no answer' line for %s:\n%s", px.url(), r.stderr)
	}
}

// TestRadiusClientOpenLoop: the RADIUS client's load is the same open
// loop: with one of two radius:// servers silent, --rate 100 --duration
// 3s sends about 300 requests on schedule, the live server answers them
// all (its own and, after the retries, the silent one's), "no answer for
// 1s" names the silent server, and the latency from the intended times
// shows the wait; a small --concurrency drops requests with a warning.
func TestRadiusClientOpenLoop(t *testing.T) {
	t.Parallel()
	sf := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, live := startRADIUSUDPServer(t, sf)
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go io.Copy(io.Discard, packetReader{silent})
	silentURL := "radius://" + silent.LocalAddr().String()
	runRadius := func(extra ...string) (int, clientReport, string) {
		var stdout, stderr syncBuffer
		args := append([]string{"client", "--peer", live, "--peer", silentURL, "--secret-file", sf, "--app", "acct",
			"--algorithm", "round-robin", "--timeout", "700ms", "--retries", "2", "--hold-down", "60s",
			"--rate", "100", "--duration", "3s", "--max-failed", "1"}, extra...)
		code := run(context.Background(), args, &stdout, &stderr)
		var rep clientReport
		if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
			t.Fatalf("report: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
		return code, rep, stderr.String()
	}

	code, rep, stderr := runRadius()
	t.Logf("sent %d answered %d failed %d dropped %d latency %+v", rep.Sent, rep.Answered, rep.Failed, rep.DroppedInFlight, rep.LatencyUS)
	if code != 0 || rep.Sent < 270 || rep.Sent > 302 || rep.Answered != rep.Sent || rep.DroppedInFlight != 0 {
		t.Errorf("exit %d: sent %d answered %d dropped %d; want about 300 sent on schedule, all answered\n%s", code, rep.Sent, rep.Answered, rep.DroppedInFlight, stderr)
	}
	if s := rep.Servers[0]; s.Sent < 130 {
		t.Errorf("live server %+v: want its half at least", s)
	}
	if !strings.Contains(stderr, `msg="no answer for 1s from `+silentURL+`"`) || strings.Contains(stderr, "no answer for 1s from "+live) {
		t.Errorf("want 'no answer for 1s from %s', and none for the live server:\n%s", silentURL, stderr)
	}
	// A progress line a second on stderr, its counts within the report's.
	lines := regexp.MustCompile(`(?m)^t=([0-9]+)s sent=([0-9]+) answered=([0-9]+) failed=([0-9]+) pending=[0-9]+ servers=\S+:(in-service|out-of-service|probing),\S+$`).FindAllStringSubmatch(stderr, -1)
	if len(lines) < 2 || lines[0][1] != "1" {
		t.Errorf("progress lines %q; want one a second from t=1s:\n%s", lines, stderr)
	}
	for _, l := range lines {
		if sent, _ := strconv.ParseUint(l[2], 10, 64); sent > rep.Sent || sent == 0 {
			t.Errorf("progress line %q: want 0 < sent <= %d", l[0], rep.Sent)
		}
	}
	// The silent server's requests waited two attempts of 700 ms.
	if rep.LatencyUS.Count != rep.Answered || rep.LatencyUS.Max < 1_300_000 {
		t.Errorf("latency %+v; want every answer, the slowest after 1.4s", rep.LatencyUS)
	}

	code, rep, stderr = runRadius("--concurrency", "10")
	t.Logf("--concurrency 10: sent %d answered %d dropped %d", rep.Sent, rep.Answered, rep.DroppedInFlight)
	if code != 0 || rep.DroppedInFlight == 0 || rep.Sent+rep.DroppedInFlight < 270 || rep.Sent+rep.DroppedInFlight > 302 {
		t.Errorf("exit %d: sent %d + dropped %d; want about 300 in the schedule, some dropped at the bound", code, rep.Sent, rep.DroppedInFlight)
	}
	if n := strings.Count(stderr, "in-flight bound reached"); n == 0 || n > 5 || !strings.Contains(stderr, "bound=10") {
		t.Errorf("%d bound warnings, want 1 to 5 naming bound=10:\n%s", n, stderr)
	}
}

// packetReader reads a PacketConn's datagrams as a stream, to drain it.
type packetReader struct{ c net.PacketConn }

func (r packetReader) Read(b []byte) (int, error) {
	n, _, err := r.c.ReadFrom(b)
	return n, err
}

// TestLatencyFromIntendedTime: each client records a request's latency
// from the time the open loop meant it to leave, not from when it left: a
// request 300 ms late, answered at once, counts 300 ms.
func TestLatencyFromIntendedTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	late := 300 * time.Millisecond

	t.Run("diameter", func(t *testing.T) {
		srv := startServer(t)
		var o clientOptions
		fs := clientFlags(&o, io.Discard)
		if err := fs.Parse([]string{"--peer", srv.url, "--origin-host", "client1.example.net", "--origin-realm", "example.net",
			"--destination-realm", "example.net", "--rate", "10"}); err != nil {
			t.Fatal(err)
		}
		if err := o.validate(); err != nil {
			t.Fatal(err)
		}
		c, _ := newDiameterLoad(o, log, nil)
		c.epoch = c.epoch.Add(-time.Second) // so that the intended time is after it
		ccfg := o.clientConfig(log, transport.Options{}, client.NewBus())
		var err error
		if ccfg.Peers, err = o.peerSpecs(nil); err != nil {
			t.Fatal(err)
		}
		if c.cl, err = client.New(ccfg); err != nil {
			t.Fatal(err)
		}
		c.peers = c.cl.Peers()
		defer c.closeClient()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := c.cl.WaitReady(wctx, 1); err != nil {
			t.Fatal(err)
		}
		dl := newDeadlines(ctx, o.timeout)
		defer dl.close()
		began := time.Now()
		c.one(ctx, dl, 1, &c.tallies[0], nil, time.Since(c.epoch)-late)
		took := time.Since(began)
		if s := c.lat.Summary(); s.Count != 1 || s.Max < uint64(late.Microseconds()) || s.Max > uint64((late+took).Microseconds())+1000 {
			t.Errorf("latency %+v (the exchange took %v); want 300ms more than the exchange", s, took)
		}
	})

	t.Run("radius", func(t *testing.T) {
		sf := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		srv := startServer(t, "--listen", "radius://127.0.0.1:0", "--secret-file", sf)
		var live string
		for _, u := range readLines(t, srv) {
			if strings.HasPrefix(u, "radius://") {
				live = u
			}
		}
		var o radiusClientOptions
		fs := radiusClientFlags(&o, io.Discard)
		if err := fs.Parse([]string{"--peer", live, "--app", "acct"}); err != nil {
			t.Fatal(err)
		}
		if err := o.validate(); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.clientConfig([]byte(testRadiusSecret), client.NewBus(), log)
		if err != nil {
			t.Fatal(err)
		}
		g := newLoadgen(&o.loadOptions, 0, "radius/udp", &radiusRequests{o: &o}, log, nil)
		if g.cl, err = client.New(cfg); err != nil {
			t.Fatal(err)
		}
		defer g.closeClient()
		g.epoch = g.epoch.Add(-time.Second) // so that the intended time is after it
		began := time.Now()
		g.one(ctx, nil, 1, &g.tallies[0], nil, time.Since(g.epoch)-late)
		took := time.Since(began)
		s := g.lat.Summary()
		if _, answered, _ := g.counts(); answered != 1 || s.Max < uint64(late.Microseconds()) || s.Max > uint64((late+took).Microseconds())+1000 {
			t.Errorf("latency %+v (the exchange took %v, failed %v); want 300ms more than the exchange", s, took, g.failedKinds())
		}
	})
}

// TestOpenLoopDuration: with --duration, the open loop sends the
// requests whose intended time is before the run's end, not one more:
// --rate 50 --duration 2s is 100 requests. It sent 101 when the timer of
// the request due at the end woke the loop before the run's context was
// cancelled (its timer's function runs on a goroutine of its own);
// lateCtx plays that cancel coming late, 500ms after its deadline. In a
// bubble, the request due at 2s is due exactly at the end.
func TestOpenLoopDuration(t *testing.T) {
	for _, late := range []time.Duration{0, 500 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			l := newOpenLoop(50, 1000, 0, slog.New(slog.DiscardHandler))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second+late)
			defer cancel()
			var calls atomic.Int64
			began := time.Now()
			l.run(lateCtx{ctx, time.Now().Add(2 * time.Second)}, func(int64, time.Time) { calls.Add(1) })
			if n := calls.Load(); n != 100 {
				t.Errorf("context cancelled %v after its deadline: %d requests, want 100 (50/s for 2s)", late, n)
			}
			// The run lasts until its context ends, not until its last
			// request: at --rate 0.1 --duration 9s it watches its peers
			// for 9s.
			if took := time.Since(began); took != 2*time.Second+late {
				t.Errorf("the run took %v, want %v (until its context ended)", took, 2*time.Second+late)
			}
		})
	}
}

// lateCtx is a context whose deadline comes before it is done.
type lateCtx struct {
	context.Context
	deadline time.Time
}

func (c lateCtx) Deadline() (time.Time, bool) { return c.deadline, true }
