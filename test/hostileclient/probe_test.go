// Package hostileclient turns the adversarial suite around: the client
// side (client.Client, the Diameter peer, the RADIUS stream peer) in
// front of hostile or broken servers. Each server here is raw: written
// in the test, it completes the capabilities exchange by hand and then
// misbehaves. Each probe logs a "FIGURES probe-client ..." line and fails
// when the client does not hold: callers answered or failed with a clear
// error by their deadlines, only the bad connection closed, no redial
// storm, memory and goroutines bounded. Two of them found defects, since
// fixed: an answer with malformed AVPs was a success, and the requests
// pending on a server that answers DWRs but no request waited out their
// deadlines even with a server policy. The suite has its own package so
// that its time (about five minutes) is not added to test/hostile's.
package hostileclient

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"

	lradius "layeh.com/radius"
)

// clientHost and realm are the client's identity in every probe.
const (
	clientHost = "client.example.net"
	realm      = "example.net"
)

// rawSrv is a Diameter server written by hand: it accepts, answers the
// CER with a CEA (Success, acct app 3) and hands the connection to
// behave, which misbehaves as the probe wants. conns counts connections
// accepted, ceas the CEAs sent, reqs the application requests read (by
// behaviours that read).
type rawSrv struct {
	t      *testing.T
	host   string
	ln     net.Listener
	behave func(s *rawSrv, n int, nc net.Conn, tc transport.Conn, cer []byte)
	conns  atomic.Int64
	ceas   atomic.Int64
	reqs   atomic.Int64
	sent   atomic.Int64 // answers written
	mu     sync.Mutex
	open   []net.Conn
	times  []time.Time // when each connection was accepted
	wg     sync.WaitGroup
	quit   chan struct{}
}

func startRaw(t *testing.T, host string, behave func(s *rawSrv, n int, nc net.Conn, tc transport.Conn, cer []byte)) *rawSrv {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawSrv{t: t, host: host, ln: ln, behave: behave, quit: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(s.conns.Add(1))
			s.mu.Lock()
			s.open = append(s.open, nc)
			s.times = append(s.times, time.Now())
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer nc.Close()
				tc := transport.NewStreamConn(nc, transport.SchemeTCP, transport.Options{WriteTimeout: 30 * time.Second})
				cer, err := tc.ReadMessage()
				if err != nil || wire.CommandCode(cer) != wire.CmdCapabilitiesExchange {
					return
				}
				if tc.WriteMessages(rawCEA(cer, host)) != nil {
					return
				}
				s.ceas.Add(1)
				s.behave(s, n, nc, tc, cer)
			}()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *rawSrv) stop() {
	select {
	case <-s.quit:
		return
	default:
	}
	close(s.quit)
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *rawSrv) url() string { return "tcp://" + s.ln.Addr().String() }

func (s *rawSrv) acceptTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...)
}

func rawCEA(cer []byte, host string) []byte {
	return message.NewAnswer(cer).ResultCode(message.Success).
		String(message.OriginHost, 0, true, host).
		String(message.OriginRealm, 0, true, realm).
		Address(message.HostIPAddress, 0, true, netip.MustParseAddr("127.0.0.1")).
		Uint32(message.VendorID, 0, true, 0).
		String(message.ProductName, 0, false, "raw").
		Uint32(message.AcctApplicationID, 0, true, message.AppAccounting).Bytes()
}

func rawAnswer(req []byte, host string, rc uint32) []byte {
	return message.NewAnswer(req).ResultCode(rc).
		String(message.OriginHost, 0, true, host).
		String(message.OriginRealm, 0, true, realm).Bytes()
}

var rawHbh atomic.Uint32

func rawDPR(host string, cause uint32) []byte {
	b := message.NewRequest(wire.CmdDisconnectPeer, message.AppCommon, 0).
		String(message.OriginHost, 0, true, host).
		String(message.OriginRealm, 0, true, realm).
		Uint32(message.DisconnectCause, 0, true, cause).Bytes()
	wire.SetHopByHop(b, rawHbh.Add(1))
	wire.SetEndToEnd(b, rawHbh.Load())
	return b
}

func rawDWR(host string) []byte {
	b := message.NewRequest(wire.CmdDeviceWatchdog, message.AppCommon, 0).
		String(message.OriginHost, 0, true, host).
		String(message.OriginRealm, 0, true, realm).Bytes()
	wire.SetHopByHop(b, rawHbh.Add(1))
	wire.SetEndToEnd(b, rawHbh.Load())
	return b
}

// serveGood answers everything correctly: DWR, DPR (then closes), and
// every application request with 2001.
func serveGood(s *rawSrv, _ int, _ net.Conn, tc transport.Conn, _ []byte) {
	for {
		msg, err := tc.ReadMessage()
		if err != nil {
			return
		}
		if !wire.IsRequest(msg) {
			continue
		}
		switch wire.CommandCode(msg) {
		case wire.CmdDeviceWatchdog:
		case wire.CmdDisconnectPeer:
			tc.WriteMessages(rawAnswer(msg, s.host, message.Success))
			return
		default:
			s.reqs.Add(1)
		}
		if tc.WriteMessages(rawAnswer(msg, s.host, message.Success)) != nil {
			return
		}
		s.sent.Add(1)
	}
}

// logCount is a slog handler that counts records (and keeps the last
// few) so that a probe can tell whether the client's warnings are rate
// limited.
type logCount struct {
	n    *atomic.Int64
	mu   *sync.Mutex
	last *[]string
}

func newLogCount() logCount {
	return logCount{n: new(atomic.Int64), mu: new(sync.Mutex), last: new([]string)}
}

func (l logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l logCount) Handle(_ context.Context, r slog.Record) error {
	l.n.Add(1)
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.mu.Lock()
	if len(*l.last) < 400 {
		*l.last = append(*l.last, b.String())
	}
	l.mu.Unlock()
	return nil
}
func (l logCount) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logCount) WithGroup(string) slog.Handler      { return l }
func (l logCount) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), *l.last...)
}

const probeTw = 6 * time.Second // watchdog.MinTwinit

// newProbeClient makes a client.Client of the urls with Twinit 6 s.
func newProbeClient(t *testing.T, mode client.Mode, lc logCount, mutate func(*client.Config), urls ...string) *client.Client {
	t.Helper()
	cfg := client.Config{
		Mode: mode,
		Peer: peer.Config{
			OriginHost: clientHost, OriginRealm: realm,
			Watchdog: watchdog.Config{Twinit: probeTw},
			Logger:   slog.New(lc),
		},
	}
	for _, u := range urls {
		cfg.Peers = append(cfg.Peers, client.PeerSpec{URL: u})
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, len(urls)); err != nil {
		t.Fatalf("WaitReady(%d): %v", len(urls), err)
	}
	return c
}

// bigACR is an ACR carrying pad bytes of an opaque AVP.
func bigACR(n uint32, pad int) []byte {
	b := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, fmt.Sprintf("%s;probe;%d", clientHost, n)).
		String(message.OriginHost, 0, true, clientHost).
		String(message.OriginRealm, 0, true, realm).
		String(message.DestinationRealm, 0, true, realm).
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, n)
	if pad > 0 {
		b.Octets(9999, 0, false, make([]byte, pad))
	}
	return b.Bytes()
}

// heapPeak samples HeapInuse until stopped.
type heapPeak struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func sampleHeap() *heapPeak {
	h := &heapPeak{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > h.peak.Load() {
				h.peak.Store(ms.HeapInuse)
			}
			select {
			case <-h.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return h
}

func (h *heapPeak) end() uint64 { close(h.stop); <-h.done; return h.peak.Load() }

func heapNow() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// sendLoad sends ACRs on workers callers until stop closes; each Send has
// the deadline given. It records each Send's outcome and its overrun past
// its own deadline.
type loadResult struct {
	ok, failed  atomic.Int64
	maxTook     atomic.Int64 // ns
	maxOverrun  atomic.Int64 // ns past the deadline
	errs        sync.Map     // error text -> *atomic.Int64
	nonSuccess  atomic.Int64 // answered but not 2001
	lastNonCode atomic.Uint32
}

func (r *loadResult) errSummary() string {
	var b strings.Builder
	r.errs.Range(func(k, v any) bool {
		fmt.Fprintf(&b, "[%dx %s] ", v.(*atomic.Int64).Load(), k)
		return true
	})
	return b.String()
}

func sendLoad(c *client.Client, workers int, deadline time.Duration, pad int, stop <-chan struct{}, pace time.Duration) (*loadResult, *sync.WaitGroup) {
	r := &loadResult{}
	var wg sync.WaitGroup
	var seq atomic.Uint32
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				t0 := time.Now()
				ans, err := c.Send(ctx, bigACR(seq.Add(1), pad))
				took := time.Since(t0)
				cancel()
				for {
					old := r.maxTook.Load()
					if int64(took) <= old || r.maxTook.CompareAndSwap(old, int64(took)) {
						break
					}
				}
				if over := took - deadline; over > 0 {
					for {
						old := r.maxOverrun.Load()
						if int64(over) <= old || r.maxOverrun.CompareAndSwap(old, int64(over)) {
							break
						}
					}
				}
				if err != nil {
					r.failed.Add(1)
					k := err.Error()
					if len(k) > 120 {
						k = k[:120]
					}
					v, _ := r.errs.LoadOrStore(k, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				if rc, _ := message.ResultCodeOf(ans); rc != message.Success {
					r.nonSuccess.Add(1)
					r.lastNonCode.Store(rc)
				} else {
					r.ok.Add(1)
				}
				if pace > 0 {
					time.Sleep(pace)
				}
			}
		}()
	}
	return r, &wg
}

// peerByName returns the client's peer whose label or URL names the server.
func peerStats(c *client.Client, addr string) (peer.Stats, bool) {
	for _, p := range c.Peers() {
		if p == nil {
			continue
		}
		st := p.Stats()
		if strings.Contains(st.Peer, addr) || strings.Contains(p.Name(), addr) {
			return st, true
		}
	}
	return peer.Stats{}, false
}

func statesOf(c *client.Client) string {
	var b strings.Builder
	for _, p := range c.Peers() {
		if p != nil {
			fmt.Fprintf(&b, "%s=%s ", p.Name(), p.State())
		}
	}
	return b.String()
}

// Probe 1: a server that, after the CEA, never reads its socket again
// while the client keeps sending (large requests, so that the kernel's
// buffers fill in a second). Expected: the writer's WriteTimeout (10 s)
// or the watchdog (no DWA: SUSPECT after at most 2 Tw) takes the server
// out of service, its pending requests fail over to the good server with
// the T flag, no Send outlives its deadline, the client's heap stays
// bounded, and Close returns at once.
func TestProbeClientServerStopsReading(t *testing.T) {
	good := startRaw(t, "good.example.net", serveGood)
	mute := startRaw(t, "mute.example.net", func(s *rawSrv, _ int, _ net.Conn, _ transport.Conn, _ []byte) {
		<-s.quit // holds the socket open, never reads
	})
	lc := newLogCount()
	g0 := runtime.NumGoroutine()
	h0 := heapNow()
	c := newProbeClient(t, client.Balance, lc, nil, mute.url(), good.url())
	hp := sampleHeap()
	stop := make(chan struct{})
	const deadline = 40 * time.Second
	t0 := time.Now()
	res, wg := sendLoad(c, 32, deadline, 16<<10, stop, 0)
	m := watchPeer(c, t0, 25*time.Second, "mute")
	suspectAt, downAt, peakPending := m.suspectAt, m.downAt, m.peakPending
	close(stop)
	wg.Wait()
	peak := hp.end()
	cs := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := c.Close(ctx)
	cancel()
	closeTook := time.Since(cs)
	time.Sleep(200 * time.Millisecond)
	g1 := runtime.NumGoroutine()
	ms := m.stats
	t.Logf("FIGURES probe-client stops-reading: %d ok, %d failed %s, max Send %v (deadline %v), max overrun %v; mute server SUSPECT at %v, DOWN at %v, its peak pending %d, moved out %d, lost %d, failovers %d; good server answered %d; heap before %.1f MB, peak %.1f MB; Close %v (err %v); goroutines %d before, %d after; %d log lines",
		res.ok.Load(), res.failed.Load(), res.errSummary(), time.Duration(res.maxTook.Load()).Round(time.Millisecond), deadline,
		time.Duration(res.maxOverrun.Load()).Round(time.Millisecond), suspectAt.Round(time.Millisecond), downAt.Round(time.Millisecond),
		peakPending, ms.MovedOut, ms.Lost, ms.Failovers, good.reqs.Load(), float64(h0)/(1<<20), float64(peak)/(1<<20), closeTook.Round(time.Millisecond), err, g0, g1, lc.n.Load())
	if res.failed.Load() > 0 {
		t.Errorf("%d requests failed although a good server was there all along: %s", res.failed.Load(), res.errSummary())
	}
	if res.maxOverrun.Load() > int64(time.Second) {
		t.Errorf("a Send returned %v after its deadline", time.Duration(res.maxOverrun.Load()))
	}
	if suspectAt == 0 && downAt == 0 {
		t.Errorf("the mute server was never taken out of service in 25 s")
	}
	if closeTook > 6*time.Second {
		t.Errorf("Close took %v", closeTook)
	}
	if peak > h0+256<<20 {
		t.Errorf("heap peaked at %.0f MB", float64(peak)/(1<<20))
	}
}

// isMute reports whether p is the peer of the server at addr.
func nameHas(p *peer.Peer, subs ...string) bool {
	for _, s := range subs {
		if strings.Contains(p.Name(), s) {
			return true
		}
	}
	return false
}

// muteState watches the state of the peer whose name has sub: when it
// first left OKAY (SUSPECT) and first went DOWN, relative to t0.
type muteState struct {
	suspectAt, downAt time.Duration
	peakPending       int
	stats             peer.Stats
}

func watchPeer(c *client.Client, t0 time.Time, until time.Duration, subs ...string) *muteState {
	m := &muteState{}
	for time.Since(t0) < until {
		time.Sleep(50 * time.Millisecond)
		for _, p := range c.Peers() {
			if p == nil || !nameHas(p, subs...) {
				continue
			}
			m.stats = p.Stats()
			m.peakPending = max(m.peakPending, m.stats.Pending)
			switch p.State() {
			case watchdog.Suspect:
				if m.suspectAt == 0 {
					m.suspectAt = time.Since(t0)
				}
			case watchdog.Down, watchdog.Reopen:
				if m.downAt == 0 {
					m.downAt = time.Since(t0)
				}
			}
		}
	}
	return m
}

// muteSendingDWRs reads nothing after the CEA and sends a DWR every 2 s.
func muteSendingDWRs(s *rawSrv, _ int, _ net.Conn, tc transport.Conn, _ []byte) {
	for {
		select {
		case <-s.quit:
			return
		case <-time.After(2 * time.Second):
		}
		if tc.WriteMessages(rawDWR(s.host)) != nil {
			return
		}
	}
}

// Probe 1b: the same mute server (never reads), but it sends a DWR every
// 2 s. RFC 3539's watchdog resets its timer on every message received, so
// the client never sends a DWR of its own and the server stays OKAY; the
// loopback socket buffers (megabytes) absorb the requests, so no write
// blocks for WriteTimeout. Without a server policy the requests that go
// there wait out their deadlines (the probe found 16 of 26 timed out
// beside a good server). With one, the down-timeout (1 s x 2) takes the
// server out of service and the requests pending there go to the good
// server: none fails.
func TestProbeClientMuteServerSendsDWRs(t *testing.T) {
	good := startRaw(t, "good.example.net", serveGood)
	mute := startRaw(t, "mute.example.net", muteSendingDWRs)
	lc := newLogCount()
	c := newProbeClient(t, client.Balance, lc, func(cfg *client.Config) {
		cfg.Policy = &policy.Config{RequestTimeout: time.Second, Retries: 2}
	}, mute.url(), good.url())
	stop := make(chan struct{})
	const deadline = 20 * time.Second
	t0 := time.Now()
	res, wg := sendLoad(c, 8, deadline, 0, stop, 10*time.Millisecond)
	m := watchPeer(c, t0, 15*time.Second, "mute")
	close(stop)
	wg.Wait()
	t.Logf("FIGURES probe-client mute-with-DWRs: %d ok, %d failed %s, max Send %v (deadline %v); mute server SUSPECT at %v, DOWN at %v, peak pending %d, sent %d, moved out %d, timed out %d, DWR received %d, DWR sent %d; good server answered %d; %d log lines",
		res.ok.Load(), res.failed.Load(), res.errSummary(), time.Duration(res.maxTook.Load()).Round(time.Millisecond), deadline,
		m.suspectAt.Round(time.Millisecond), m.downAt.Round(time.Millisecond), m.peakPending, m.stats.Sent, m.stats.MovedOut, m.stats.TimedOut,
		m.stats.DWRReceived, m.stats.DWRSent, good.reqs.Load(), lc.n.Load())
	if m.stats.MovedOut == 0 {
		t.Errorf("no request moved off the mute server")
	}
	if res.failed.Load() > 0 {
		t.Errorf("%d requests failed: %s", res.failed.Load(), res.errSummary())
	}
}

// Probe 2: a server that dribbles an answer one byte every 100 ms (a
// 300-byte answer: 30 s without a whole frame), while draining its
// socket. Expected: the watchdog sees no complete message for Tw, sends
// a DWR, declares SUSPECT about Tw later (at most 2 x (Tw + 2 s) = 16 s)
// and fails the pending requests over to the good server; DOWN and the
// connection closed a Tw later. Two subtests: one caller (its request is
// alone on the connection: the caller reads the socket itself, the
// baton) and 16 callers.
func TestProbeClientSlowlorisAnswer(t *testing.T) {
	for _, callers := range []int{1, 16} {
		t.Run(fmt.Sprintf("callers=%d", callers), func(t *testing.T) {
			good := startRaw(t, "good.example.net", serveGood)
			slow := startRaw(t, "slow.example.net", func(s *rawSrv, _ int, nc net.Conn, tc transport.Conn, _ []byte) {
				first := make(chan []byte, 1)
				go func() { // drain, remembering the first request
					for {
						msg, err := tc.ReadMessage()
						if err != nil {
							return
						}
						if wire.IsRequest(msg) && wire.CommandCode(msg) == message.CmdAccounting {
							s.reqs.Add(1)
							select {
							case first <- msg:
							default:
							}
						}
					}
				}()
				var req []byte
				select {
				case req = <-first:
				case <-s.quit:
					return
				}
				ans := message.NewAnswer(req).ResultCode(message.Success).
					String(message.OriginHost, 0, true, s.host).
					String(message.OriginRealm, 0, true, realm).
					Octets(9999, 0, false, make([]byte, 240)).Bytes()
				for i := range ans {
					select {
					case <-s.quit:
						return
					case <-time.After(100 * time.Millisecond):
					}
					if _, err := nc.Write(ans[i : i+1]); err != nil {
						return
					}
				}
				<-s.quit
			})
			lc := newLogCount()
			c := newProbeClient(t, client.PrimarySecondary, lc, nil, slow.url(), good.url())
			stop := make(chan struct{})
			const deadline = 40 * time.Second
			t0 := time.Now()
			res, wg := sendLoad(c, callers, deadline, 0, stop, 20*time.Millisecond)
			m := watchPeer(c, t0, 26*time.Second, "slow")
			close(stop)
			wg.Wait()
			t.Logf("FIGURES probe-client slowloris callers=%d: %d ok, %d failed %s, max Send %v; slow server SUSPECT at %v, DOWN at %v, peak pending %d, moved out %d, DWR sent %d; slow server connections %d; good answered %d",
				callers, res.ok.Load(), res.failed.Load(), res.errSummary(), time.Duration(res.maxTook.Load()).Round(time.Millisecond),
				m.suspectAt.Round(time.Millisecond), m.downAt.Round(time.Millisecond), m.peakPending, m.stats.MovedOut, m.stats.DWRSent,
				slow.conns.Load(), good.reqs.Load())
			if m.suspectAt == 0 && m.downAt == 0 {
				t.Errorf("the dribbling server was never taken out of service")
			}
			if m.suspectAt > 17*time.Second {
				t.Errorf("SUSPECT only at %v", m.suspectAt)
			}
			if res.failed.Load() > 0 {
				t.Errorf("%d requests failed: %s", res.failed.Load(), res.errSummary())
			}
			if res.ok.Load() == 0 {
				t.Errorf("no request answered")
			}
		})
	}
}

// Probe 3: a server that answers the first application request with a
// broken frame. Expected: a bad-frame error, only that connection
// closed, the request replayed at the good server, a redial at about Tw
// (not a storm), nothing allocated for an announced length.
func TestProbeClientBadFrames(t *testing.T) {
	hdr := func(version byte, length uint32, req []byte) []byte {
		b := make([]byte, 20)
		copy(b, req[:20])
		b[0] = version
		b[1], b[2], b[3] = byte(length>>16), byte(length>>8), byte(length)
		b[4] &^= wire.FlagRequest
		return b
	}
	cases := []struct {
		name  string
		frame func(req []byte, host string) []byte
	}{
		{"length 16 MiB", func(req []byte, _ string) []byte { return hdr(1, 0xFFFFFC, req) }},
		{"version 2", func(req []byte, host string) []byte {
			a := rawAnswer(req, host, message.Success)
			a[0] = 2
			return a
		}},
		{"length 12", func(req []byte, _ string) []byte { return hdr(1, 12, req) }},
		{"length not a multiple of 4", func(req []byte, host string) []byte {
			a := rawAnswer(req, host, message.Success)
			a[3]++
			return append(a, 0)
		}},
		{"AVP overruns the message", func(req []byte, host string) []byte {
			a := rawAnswer(req, host, message.Success)
			// The Result-Code AVP is first: claim 4000 bytes.
			binary.BigEndian.PutUint32(a[20+4:], uint32(0x40)<<24|4000)
			return a
		}},
		{"AVP length 0", func(req []byte, host string) []byte {
			a := rawAnswer(req, host, message.Success)
			binary.BigEndian.PutUint32(a[20+4:], uint32(0x40)<<24|0)
			return a
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each mostly waits, watching its own servers
			good := startRaw(t, "good.example.net", serveGood)
			bad := startRaw(t, "bad.example.net", func(s *rawSrv, _ int, _ net.Conn, c transport.Conn, _ []byte) {
				for {
					msg, err := c.ReadMessage()
					if err != nil {
						return
					}
					if !wire.IsRequest(msg) {
						continue
					}
					if wire.CommandCode(msg) == wire.CmdDeviceWatchdog {
						c.WriteMessages(rawAnswer(msg, s.host, message.Success))
						continue
					}
					if wire.CommandCode(msg) == wire.CmdDisconnectPeer {
						c.WriteMessages(rawAnswer(msg, s.host, message.Success))
						return
					}
					s.reqs.Add(1)
					c.WriteMessages(tc.frame(msg, s.host))
					s.sent.Add(1)
				}
			})
			lc := newLogCount()
			c := newProbeClient(t, client.PrimarySecondary, lc, nil, bad.url(), good.url())
			h0 := heapNow()
			t0 := time.Now()
			var outcomes []string
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					ts := time.Now()
					ans, err := c.Send(ctx, bigACR(uint32(i+1), 0))
					var o string
					if err != nil {
						o = "error: " + err.Error()
					} else {
						rc, rerr := message.ResultCodeOf(ans)
						o = fmt.Sprintf("answer rc %d (%v) from %s", rc, rerr, originOf(ans))
					}
					mu.Lock()
					outcomes = append(outcomes, fmt.Sprintf("%s after %v", o, time.Since(ts).Round(time.Millisecond)))
					mu.Unlock()
				}()
			}
			wg.Wait()
			h1 := heapNow()
			// Watch the redials for 15 s.
			time.Sleep(15*time.Second - time.Since(t0))
			var bs peer.Stats
			for _, p := range c.Peers() {
				if p != nil && nameHas(p, "bad") {
					bs = p.Stats()
				}
			}
			var errLines int
			for _, l := range lc.lines() {
				if strings.Contains(l, "bad frame") {
					errLines++
				}
			}
			t.Logf("FIGURES probe-client bad-frame %q: outcomes %v; bad server got %d requests over %d connections in 15 s; client bad frames %d, moved out %d, state %s; heap %.1f -> %.1f MB; %d log lines mention a bad frame",
				tc.name, outcomes, bad.reqs.Load(), bad.conns.Load(), bs.BadFrames, bs.MovedOut, statesOf(c), float64(h0)/(1<<20), float64(h1)/(1<<20), errLines)
			if strings.HasPrefix(tc.name, "AVP") {
				// Well framed, so the connection stays; each request fails
				// with an error that names the AVP, counted and logged.
				var logged int
				for _, l := range lc.lines() {
					if strings.Contains(l, "malformed answer") {
						logged++
					}
				}
				for _, o := range outcomes {
					if !strings.Contains(o, "malformed answer from bad.example.net: AVP") {
						t.Errorf("not failed as a malformed answer: %s", o)
					}
				}
				if bs.BadAnswers != 4 || logged == 0 {
					t.Errorf("bad answers counted %d, logged %d times; want 4, and logged", bs.BadAnswers, logged)
				}
			} else {
				for _, o := range outcomes {
					if !strings.Contains(o, "rc 2001") || !strings.Contains(o, "good.example.net") {
						t.Errorf("a request was not answered by the good server: %s", o)
					}
				}
			}
			if bad.conns.Load() > 4 {
				t.Errorf("%d connections to the bad server in 15 s: a redial storm", bad.conns.Load())
			}
			if h1 > h0+8<<20 {
				t.Errorf("heap grew %d bytes", h1-h0)
			}
		})
	}
}

func originOf(msg []byte) string {
	if len(msg) < 20 {
		return "?"
	}
	var host string
	wire.WalkAVPs(msg, func(a wire.AVP) bool {
		if a.Code == message.OriginHost {
			host = string(a.Data)
			return false
		}
		return true
	})
	return host
}

// lockedConn serialises writes of two goroutines on one transport.Conn.
type lockedConn struct {
	mu sync.Mutex
	tc transport.Conn
}

func (l *lockedConn) write(msgs ...[]byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tc.WriteMessages(msgs...)
}

// Probe 4: a server that floods the client with DWRs and unsolicited
// requests (ACRs of the accounting application the client advertised,
// and ULRs of S6a, which it did not), while answering the client's own
// requests. Expected: every request answered (DWA 2001; ACR with an
// error such as 3001 COMMAND_UNSUPPORTED, the client has no Handler;
// ULR 3007 APPLICATION_UNSUPPORTED), the client's memory and goroutines
// bounded (its reader stops at MaxUnanswered), the client's own requests
// still answered.
func TestProbeClientUnsolicitedFlood(t *testing.T) {
	var dwas, acas, ulas, others atomic.Int64
	var codes sync.Map // "cmd rc" -> *atomic.Int64
	count := func(k string) {
		v, _ := codes.LoadOrStore(k, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	var flooded atomic.Int64
	srv := startRaw(t, "flood.example.net", func(s *rawSrv, _ int, _ net.Conn, tc transport.Conn, _ []byte) {
		lc := &lockedConn{tc: tc}
		done := make(chan struct{})
		// The answers to the client's requests go out with the flood's
		// batches: written here, they would wait for the connection's
		// lock while the flood's write waits for the client to read, and
		// this reader, stopped, would leave the client's answers unread,
		// which stops the client reading: a deadlock of the test's own,
		// which only the client's write timeout ends.
		owed := make(chan []byte, 4096)
		go func() {
			defer close(done)
			for {
				msg, err := tc.ReadMessage()
				if err != nil {
					return
				}
				if wire.IsRequest(msg) {
					switch wire.CommandCode(msg) {
					case wire.CmdDisconnectPeer:
						lc.write(rawAnswer(msg, s.host, message.Success))
						return
					case wire.CmdDeviceWatchdog:
					default:
						s.reqs.Add(1)
					}
					owed <- rawAnswer(msg, s.host, message.Success)
					continue
				}
				rc, _ := message.ResultCodeOf(msg)
				switch wire.CommandCode(msg) {
				case wire.CmdDeviceWatchdog:
					dwas.Add(1)
				case message.CmdAccounting:
					acas.Add(1)
				case 316:
					ulas.Add(1)
				default:
					others.Add(1)
				}
				count(fmt.Sprintf("%s %d", message.CommandName(msg), rc))
			}
		}()
		var n uint32
		batch := make([][]byte, 0, 300)
		for {
			select {
			case <-s.quit:
				return
			case <-done:
				return
			default:
			}
			batch = batch[:0]
			for len(owed) > 0 {
				batch = append(batch, <-owed)
			}
			for range 100 {
				n++
				batch = append(batch, rawDWR(s.host))
				acr := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
					String(message.SessionID, 0, true, fmt.Sprintf("%s;flood;%d", s.host, n)).
					String(message.OriginHost, 0, true, s.host).
					String(message.OriginRealm, 0, true, realm).
					String(message.DestinationRealm, 0, true, realm).
					Uint32(message.AccountingRecordType, 0, true, 2).
					Uint32(message.AccountingRecordNumber, 0, true, n).Bytes()
				wire.SetHopByHop(acr, n<<1)
				wire.SetEndToEnd(acr, n<<1)
				ulr := message.NewRequest(316, 16777251, wire.FlagProxiable).
					String(message.SessionID, 0, true, fmt.Sprintf("%s;ulr;%d", s.host, n)).
					Uint32(277, 0, true, 1). // Auth-Session-State NO_STATE_MAINTAINED
					String(message.OriginHost, 0, true, s.host).
					String(message.OriginRealm, 0, true, realm).
					String(message.DestinationRealm, 0, true, realm).Bytes()
				wire.SetHopByHop(ulr, n<<1|1)
				wire.SetEndToEnd(ulr, n<<1|1)
				batch = append(batch, acr, ulr)
			}
			if lc.write(batch...) != nil {
				return
			}
			flooded.Add(int64(len(batch)))
		}
	})
	good := startRaw(t, "good.example.net", serveGood)
	lc := newLogCount()
	g0 := runtime.NumGoroutine()
	h0 := heapNow()
	c := newProbeClient(t, client.Balance, lc, nil, srv.url(), good.url())
	hp := sampleHeap()
	var gPeak atomic.Int64
	stopG := make(chan struct{})
	go func() {
		for {
			select {
			case <-stopG:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if g := int64(runtime.NumGoroutine()); g > gPeak.Load() {
				gPeak.Store(g)
			}
		}
	}()
	stop := make(chan struct{})
	res, wg := sendLoad(c, 4, 10*time.Second, 0, stop, 5*time.Millisecond)
	time.Sleep(10 * time.Second)
	close(stop)
	wg.Wait()
	close(stopG)
	peak := hp.end()
	var fs peer.Stats
	for _, p := range c.Peers() {
		if p != nil && nameHas(p, "flood") {
			fs = p.Stats()
		}
	}
	var cs strings.Builder
	codes.Range(func(k, v any) bool { fmt.Fprintf(&cs, "%s x%d; ", k, v.(*atomic.Int64).Load()); return true })
	srv.stop()
	t.Logf("FIGURES probe-client unsolicited-flood: server sent %d DWR/ACR/ULR in 10 s; the client answered %d DWA, %d ACA, %d ULA, %d other (%s); client's own: %d ok, %d failed %s, %d answered by the flooder, %d by the good server; flooder peer stats: received %d, answers sent %d, refused %d, overload %d, paused %d, discarded %d, unanswered %d, state at end %s; heap %.1f -> peak %.1f MB; goroutines %d -> peak %d; %d log lines",
		flooded.Load(), dwas.Load(), acas.Load(), ulas.Load(), others.Load(), cs.String(), res.ok.Load(), res.failed.Load(), res.errSummary(),
		srv.reqs.Load(), good.reqs.Load(), fs.Received, fs.AnswersSent, fs.Refused, fs.Overload, fs.Paused, fs.Discarded, fs.Unanswered, fs.State,
		float64(h0)/(1<<20), float64(peak)/(1<<20), g0, gPeak.Load(), lc.n.Load())
	if res.failed.Load() > 0 {
		t.Errorf("%d of the client's requests failed: %s", res.failed.Load(), res.errSummary())
	}
	if acas.Load() == 0 || ulas.Load() == 0 {
		t.Errorf("unsolicited requests not answered: %d ACA, %d ULA", acas.Load(), ulas.Load())
	}
	if peak > h0+128<<20 {
		t.Errorf("heap peaked at %.0f MB", float64(peak)/(1<<20))
	}
	if lc.n.Load() > 200 {
		t.Errorf("%d log lines in 10 s: not rate limited", lc.n.Load())
	}
}

// Probe 5: servers that answer wrongly. Each subtest has its own pair.
func TestProbeClientWrongAnswers(t *testing.T) {
	// answerWith reads requests and writes what mk returns for each
	// application request (nil: nothing); DWR and DPR are answered.
	answerWith := func(mk func(s *rawSrv, req []byte) [][]byte) func(*rawSrv, int, net.Conn, transport.Conn, []byte) {
		return func(s *rawSrv, _ int, _ net.Conn, tc transport.Conn, _ []byte) {
			for {
				msg, err := tc.ReadMessage()
				if err != nil {
					return
				}
				if !wire.IsRequest(msg) {
					continue
				}
				switch wire.CommandCode(msg) {
				case wire.CmdDeviceWatchdog:
					tc.WriteMessages(rawAnswer(msg, s.host, message.Success))
					continue
				case wire.CmdDisconnectPeer:
					tc.WriteMessages(rawAnswer(msg, s.host, message.Success))
					return
				}
				s.reqs.Add(1)
				if out := mk(s, msg); len(out) > 0 {
					if tc.WriteMessages(out...) != nil {
						return
					}
					s.sent.Add(int64(len(out)))
				}
			}
		}
	}
	one := func(c *client.Client, n int, deadline time.Duration) (ok, failed int, errs map[string]int, maxTook time.Duration) {
		errs = map[string]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				t0 := time.Now()
				ans, err := c.Send(ctx, bigACR(uint32(1000+i), 0))
				took := time.Since(t0)
				mu.Lock()
				defer mu.Unlock()
				maxTook = max(maxTook, took)
				if err != nil {
					failed++
					errs[err.Error()]++
					return
				}
				rc, _ := message.ResultCodeOf(ans)
				if rc == message.Success {
					ok++
				} else {
					failed++
					errs[fmt.Sprintf("answer %d from %s", rc, originOf(ans))]++
				}
			}()
		}
		wg.Wait()
		return
	}

	t.Run("every answer twice", func(t *testing.T) {
		twice := startRaw(t, "twice.example.net", answerWith(func(s *rawSrv, req []byte) [][]byte {
			a := rawAnswer(req, s.host, message.Success)
			return [][]byte{a, a}
		}))
		good := startRaw(t, "good.example.net", serveGood)
		lc := newLogCount()
		c := newProbeClient(t, client.PrimarySecondary, lc, nil, twice.url(), good.url())
		ok, failed, errs, took := one(c, 200, 5*time.Second)
		st, _ := peerStats(c, "twice")
		t.Logf("FIGURES probe-client answers-twice: %d ok, %d failed %v, max %v; twice server got %d, wrote %d answers; client counted answered %d, late %d, unmatched %d, state %s; %d log lines",
			ok, failed, errs, took.Round(time.Millisecond), twice.reqs.Load(), twice.sent.Load(), st.Answered, st.Late, st.Unmatched, statesOf(c), lc.n.Load())
		if ok != 200 {
			t.Errorf("%d of 200 answered", ok)
		}
	})

	t.Run("answers with the R flag", func(t *testing.T) {
		var back atomic.Int64
		var backCodes sync.Map
		rflag := startRaw(t, "rflag.example.net", func(s *rawSrv, _ int, _ net.Conn, tc transport.Conn, _ []byte) {
			for {
				msg, err := tc.ReadMessage()
				if err != nil {
					return
				}
				if !wire.IsRequest(msg) {
					back.Add(1)
					rc, _ := message.ResultCodeOf(msg)
					v, _ := backCodes.LoadOrStore(rc, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
					continue
				}
				switch wire.CommandCode(msg) {
				case wire.CmdDeviceWatchdog:
					tc.WriteMessages(rawAnswer(msg, s.host, message.Success))
					continue
				case wire.CmdDisconnectPeer:
					tc.WriteMessages(rawAnswer(msg, s.host, message.Success))
					return
				}
				s.reqs.Add(1)
				a := rawAnswer(req2(msg), s.host, message.Success)
				wire.SetFlags(a, wire.Flags(a)|wire.FlagRequest)
				tc.WriteMessages(a)
			}
		})
		good := startRaw(t, "good.example.net", serveGood)
		lc := newLogCount()
		// Its "answers" are requests, which the client answers, so its
		// watchdog stays OKAY (as for probe 1b); the policy's down-timeout
		// takes it out of service and hands its requests to the good one.
		c := newProbeClient(t, client.PrimarySecondary, lc, func(cfg *client.Config) {
			cfg.Policy = &policy.Config{RequestTimeout: time.Second, Retries: 2}
		}, rflag.url(), good.url())
		ok, failed, errs, took := one(c, 20, 8*time.Second)
		st, _ := peerStats(c, "rflag")
		var bc strings.Builder
		backCodes.Range(func(k, v any) bool { fmt.Fprintf(&bc, "%v x%d ", k, v.(*atomic.Int64).Load()); return true })
		t.Logf("FIGURES probe-client answers-with-R-flag: %d ok, %d failed %v, max %v; server got %d requests, the client sent back %d answers to its R-flag answers (result codes %s); client stats refused %d, answers sent %d, timed out %d; state %s",
			ok, failed, errs, took.Round(time.Millisecond), rflag.reqs.Load(), back.Load(), bc.String(), st.Refused, st.AnswersSent, st.TimedOut, statesOf(c))
		if failed > 0 {
			t.Errorf("%d of 20 requests failed beside a good server: %v", failed, errs)
		}
	})

	t.Run("3004 from both servers", func(t *testing.T) {
		busy := func(s *rawSrv, req []byte) [][]byte { return [][]byte{rawAnswer(req, s.host, message.TooBusy)} }
		a := startRaw(t, "busy-a.example.net", answerWith(busy))
		b := startRaw(t, "busy-b.example.net", answerWith(busy))
		lc := newLogCount()
		c := newProbeClient(t, client.Balance, lc, nil, a.url(), b.url())
		const n = 50
		ok, failed, errs, took := one(c, n, 10*time.Second)
		t.Logf("FIGURES probe-client 3004-both: %d ok, %d failed %v, max %v; server a got %d, b got %d (for %d requests); states %s; %d log lines",
			ok, failed, errs, took.Round(time.Millisecond), a.reqs.Load(), b.reqs.Load(), n, statesOf(c), lc.n.Load())
		if got := a.reqs.Load() + b.reqs.Load(); got > 2*n {
			t.Errorf("%d sends for %d requests: a request went to a server more than once", got, n)
		}
		if took > 5*time.Second {
			t.Errorf("a refused request took %v to return", took)
		}
	})

	t.Run("3004 from one, good other", func(t *testing.T) {
		busy := startRaw(t, "busy.example.net", answerWith(func(s *rawSrv, req []byte) [][]byte {
			return [][]byte{rawAnswer(req, s.host, message.TooBusy)}
		}))
		good := startRaw(t, "good.example.net", serveGood)
		lc := newLogCount()
		c := newProbeClient(t, client.PrimarySecondary, lc, nil, busy.url(), good.url())
		const n = 200
		ok, failed, errs, took := one(c, n, 10*time.Second)
		t.Logf("FIGURES probe-client 3004-one: %d ok, %d failed %v, max %v; busy got %d, good %d; %d log lines",
			ok, failed, errs, took.Round(time.Millisecond), busy.reqs.Load(), good.reqs.Load(), lc.n.Load())
		if ok != n {
			t.Errorf("%d of %d answered", ok, n)
		}
	})
}

// req2 returns req unchanged (a hook for the R-flag subtest's answer).
func req2(req []byte) []byte { return req }

// Probe 6: a server that sends DPR right after every CEA. Expected: the
// client answers DPA, and redials at Tw (RFC 3539), not in a storm; with
// Disconnect-Cause BUSY or DO_NOT_WANT_TO_TALK_TO_YOU not before
// DPRHoldOff (5 min). Also a server that closes the socket right after
// every CEA. The good second server answers everything meanwhile.
func TestProbeClientDisconnectStorm(t *testing.T) {
	cases := []struct {
		name string
		then func(s *rawSrv, tc transport.Conn)
	}{
		{"DPR REBOOTING", func(s *rawSrv, tc transport.Conn) {
			tc.WriteMessages(rawDPR(s.host, message.DisconnectRebooting))
			drainAll(tc)
		}},
		{"DPR BUSY", func(s *rawSrv, tc transport.Conn) {
			tc.WriteMessages(rawDPR(s.host, message.DisconnectBusy))
			drainAll(tc)
		}},
		{"close after CEA", func(s *rawSrv, tc transport.Conn) {}},
		{"three DPRs at once", func(s *rawSrv, tc transport.Conn) {
			tc.WriteMessages(rawDPR(s.host, message.DisconnectRebooting), rawDPR(s.host, message.DisconnectRebooting), rawDPR(s.host, message.DisconnectRebooting))
			drainAll(tc)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each mostly waits, watching its own servers
			bad := startRaw(t, "dpr.example.net", func(s *rawSrv, _ int, _ net.Conn, c transport.Conn, _ []byte) { tc.then(s, c) })
			good := startRaw(t, "good.example.net", serveGood)
			lc := newLogCount()
			cfg := client.Config{
				Mode:  client.PrimarySecondary,
				Peer:  peer.Config{OriginHost: clientHost, OriginRealm: realm, Watchdog: watchdog.Config{Twinit: probeTw}, Logger: slog.New(lc)},
				Peers: []client.PeerSpec{{URL: bad.url()}, {URL: good.url()}},
			}
			c, err := client.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				c.Close(ctx)
			}()
			stop := make(chan struct{})
			res, wg := sendLoad(c, 4, 10*time.Second, 0, stop, 10*time.Millisecond)
			time.Sleep(20 * time.Second)
			close(stop)
			wg.Wait()
			times := bad.acceptTimes()
			var gaps []string
			for i := 1; i < len(times); i++ {
				gaps = append(gaps, times[i].Sub(times[i-1]).Round(10*time.Millisecond).String())
			}
			st, _ := peerStats(c, "dpr")
			t.Logf("FIGURES probe-client disconnect-storm %q: %d connections in 20 s (gaps %v), %d CEAs; client: %d ok, %d failed %s, good answered %d; bad peer open failures %d, transitions %d, state %s; %d log lines",
				tc.name, len(times), gaps, bad.ceas.Load(), res.ok.Load(), res.failed.Load(), res.errSummary(), good.reqs.Load(), st.OpenFailed, st.Transitions, statesOf(c), lc.n.Load())
			if len(times) > 6 {
				t.Errorf("%d connections in 20 s: a reconnection storm (Tw %v)", len(times), probeTw)
			}
			if tc.name == "DPR BUSY" && len(times) > 1 {
				t.Errorf("redialed %d times within DPRHoldOff after DPR BUSY", len(times)-1)
			}
			if res.failed.Load() > 0 {
				t.Errorf("%d requests failed: %s", res.failed.Load(), res.errSummary())
			}
		})
	}
}

func drainAll(tc transport.Conn) {
	for {
		if _, err := tc.ReadMessage(); err != nil {
			return
		}
	}
}

// radSrv is a radius+tcp server written by hand: it reads frames and
// hands each to behave with a writer.
type radSrv struct {
	ln    net.Listener
	conns atomic.Int64
	reqs  atomic.Int64
	quit  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  []net.Conn
	times []time.Time
}

func startRad(t *testing.T, behave func(s *radSrv, nc net.Conn, write func([]byte) error)) *radSrv {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &radSrv{ln: ln, quit: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.mu.Lock()
			s.open = append(s.open, nc)
			s.times = append(s.times, time.Now())
			s.mu.Unlock()
			var wmu sync.Mutex
			write := func(b []byte) error {
				wmu.Lock()
				defer wmu.Unlock()
				nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
				_, err := nc.Write(b)
				return err
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer nc.Close()
				behave(s, nc, write)
			}()
		}
	}()
	t.Cleanup(func() {
		close(s.quit)
		ln.Close()
		s.mu.Lock()
		for _, c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *radSrv) url() string { return "radius+tcp://" + s.ln.Addr().String() }

// radAnswerGood answers Status-Server with a signed Access-Accept and
// Accounting-Request with a signed Accounting-Response.
func radAnswerGood(req []byte) []byte {
	switch req[0] {
	case codeStatusServer:
		return radResponse(req, codeAccessAccept, radiusSecret, true)
	case codeAcctRequest:
		return radResponse(req, codeAcctResponse, radiusSecret, false)
	}
	return nil
}

func radServeGood(s *radSrv, nc net.Conn, write func([]byte) error) {
	for {
		req, err := readRadiusFrame(nc)
		if err != nil {
			return
		}
		if req[0] == codeAcctRequest {
			s.reqs.Add(1)
		}
		if a := radAnswerGood(req); a != nil && write(a) != nil {
			return
		}
	}
}

func acctReq(n int) *radius.Request {
	r := &radius.Request{Code: lradius.CodeAccountingRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute(fmt.Sprint("u", n)))
	r.Attributes.Add(radius.AttrAcctSessionID, lradius.Attribute(fmt.Sprint("probe-", n)))
	r.Attributes.Add(radius.AttrAcctStatusType, lradius.NewInteger(1))
	return r
}

// Probe 7: RADIUS over TCP (radius+tcp://) against a broken server, a
// good one beside it, in primary/secondary order with the broken one
// first. Expected: a clear error and only that connection closed, the
// requests replayed at the good server, the watchdog (Status-Server)
// taking a server that sends no whole frame out of service, redials at
// Tw, no storm, logs rate limited.
func TestProbeClientRADIUSStream(t *testing.T) {
	cases := []struct {
		name   string
		watch  time.Duration
		behave func(s *radSrv, nc net.Conn, write func([]byte) error)
	}{
		{"wrong authenticator", 12 * time.Second, func(s *radSrv, nc net.Conn, write func([]byte) error) {
			for {
				req, err := readRadiusFrame(nc)
				if err != nil {
					return
				}
				a := radAnswerGood(req)
				if req[0] == codeAcctRequest {
					s.reqs.Add(1)
					a[5] ^= 0xff // the Response Authenticator
				}
				if a != nil && write(a) != nil {
					return
				}
			}
		}},
		{"length 4096, 20 bytes sent", 26 * time.Second, func(s *radSrv, nc net.Conn, write func([]byte) error) {
			req, err := readRadiusFrame(nc)
			if err != nil {
				return
			}
			s.reqs.Add(1)
			a := radAnswerGood(req)
			binary.BigEndian.PutUint16(a[2:4], 4096)
			write(a[:20])
			go io_discard(nc)
			<-s.quit
		}},
		{"unsolicited Access-Challenge flood", 10 * time.Second, func(s *radSrv, nc net.Conn, write func([]byte) error) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				radServeGood(s, nc, write)
			}()
			var id byte
			for {
				select {
				case <-done:
					return
				case <-s.quit:
					return
				default:
				}
				var batch []byte
				for range 200 {
					id++
					b := make([]byte, 20)
					b[0], b[1] = 11, id // Access-Challenge
					binary.BigEndian.PutUint16(b[2:4], 20)
					batch = append(batch, b...)
				}
				if write(batch) != nil {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := startRad(t, tc.behave)
			good := startRad(t, radServeGood)
			lc := newLogCount()
			c, err := client.New(client.Config{
				Mode:   client.PrimarySecondary,
				Peers:  []client.PeerSpec{{URL: bad.url()}, {URL: good.url()}},
				RADIUS: radpeer.Config{Secret: []byte(radiusSecret), Watchdog: watchdog.Config{Twinit: probeTw}, Logger: slog.New(lc)},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				c.Close(ctx)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = c.WaitReady(ctx, 2)
			cancel()
			if err != nil {
				t.Fatalf("WaitReady: %v", err)
			}
			t0 := time.Now()
			var ok, failed atomic.Int64
			var maxTook atomic.Int64
			errs := sync.Map{}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var seq atomic.Int64
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
						ts := time.Now()
						r, err := c.Exchange(ctx, acctReq(int(seq.Add(1))))
						cancel()
						if d := int64(time.Since(ts)); d > maxTook.Load() {
							maxTook.Store(d)
						}
						if err != nil {
							failed.Add(1)
							v, _ := errs.LoadOrStore(err.Error(), new(atomic.Int64))
							v.(*atomic.Int64).Add(1)
							time.Sleep(10 * time.Millisecond)
							continue
						}
						if r.Packet == nil || r.Packet.Code != lradius.CodeAccountingResponse {
							failed.Add(1)
						} else {
							ok.Add(1)
						}
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			var suspectAt, downAt time.Duration
			var bs radpeer.Stats
			for time.Since(t0) < tc.watch {
				time.Sleep(50 * time.Millisecond)
				for _, p := range c.RADIUSPeers() {
					if p == nil || !strings.Contains(p.Name(), bad.ln.Addr().String()) {
						continue
					}
					bs = p.Stats()
					switch p.State() {
					case watchdog.Suspect:
						if suspectAt == 0 {
							suspectAt = time.Since(t0)
						}
					case watchdog.Down, watchdog.Reopen:
						if downAt == 0 {
							downAt = time.Since(t0)
						}
					}
				}
			}
			close(stop)
			wg.Wait()
			var es strings.Builder
			errs.Range(func(k, v any) bool { fmt.Fprintf(&es, "[%dx %s] ", v.(*atomic.Int64).Load(), k); return true })
			t.Logf("FIGURES probe-client RADIUS %q: %d ok, %d failed %s, max Exchange %v; bad server: %d requests over %d connections in %v, SUSPECT at %v, DOWN at %v; client's stats of it: bad auth %d, bad frames %d, unmatched %d, answered %d, state %s; good answered %d; %d log lines",
				tc.name, ok.Load(), failed.Load(), es.String(), time.Duration(maxTook.Load()).Round(time.Millisecond), bad.reqs.Load(), bad.conns.Load(), tc.watch,
				suspectAt.Round(time.Millisecond), downAt.Round(time.Millisecond), bs.BadAuth, bs.BadFrames, bs.Unmatched, bs.Answered, bs.State, good.reqs.Load(), lc.n.Load())
			if failed.Load() > 0 {
				t.Errorf("%d exchanges failed: %s", failed.Load(), es.String())
			}
			if ok.Load() == 0 {
				t.Errorf("no exchange answered")
			}
			if bad.conns.Load() > int64(tc.watch/probeTw)+2 {
				t.Errorf("%d connections to the bad server in %v: a reconnection storm", bad.conns.Load(), tc.watch)
			}
			if lc.n.Load() > 200 {
				t.Errorf("%d log lines: not rate limited", lc.n.Load())
			}
		})
	}
}

func io_discard(nc net.Conn) {
	b := make([]byte, 4096)
	for {
		if _, err := nc.Read(b); err != nil {
			return
		}
	}
}

// Probe 1d: probe 1b in process with the binary's settings (deadline 5
// s, RequestTimeout 5 s, 8 callers in a closed loop): does every Send
// return by its deadline? (It does: the callers are not stuck, they lose
// 5 s on every request that hashes to the mute server; on failure the
// test dumps the stacks of the Sends still running.)
func TestProbeClientMuteServerSendsDWRsShortDeadline(t *testing.T) {
	good := startRaw(t, "good.example.net", serveGood)
	mute := startRaw(t, "mute.example.net", muteSendingDWRs)
	lc := newLogCount()
	c := newProbeClient(t, client.Balance, lc, func(cfg *client.Config) {
		cfg.RequestTimeout = 5 * time.Second
		cfg.Peer.RequestTimeout = 5 * time.Second
	}, mute.url(), good.url())
	stop := make(chan struct{})
	const deadline = 5 * time.Second
	res, wg := sendLoad(c, 8, deadline, 0, stop, 0)
	time.Sleep(20 * time.Second)
	close(stop)
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	var stuck bool
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		stuck = true
	}
	st, _ := peerStats(c, "mute")
	var stacks string
	if stuck {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var keep []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "client.(*Client).Send") {
				keep = append(keep, g)
				if len(keep) == 2 {
					break
				}
			}
		}
		stacks = strings.Join(keep, "\n\n")
	}
	t.Logf("FIGURES probe-client mute-with-DWRs deadline 5s: %d ok, %d failed %s, max Send %v (so far), stuck %v; mute peer: sent %d, pending %d, timed out %d, state %s; good answered %d",
		res.ok.Load(), res.failed.Load(), res.errSummary(), time.Duration(res.maxTook.Load()).Round(time.Millisecond), stuck,
		st.Sent, st.Pending, st.TimedOut, st.State, good.reqs.Load())
	if stuck {
		t.Logf("stacks of Sends still running 10 s after the load stopped:\n%s", stacks)
		t.Errorf("Sends with a 5 s deadline still running 10 s after the load stopped (30 s after the start)")
	}
}
