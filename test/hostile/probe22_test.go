package hostile

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/status"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// Probes of review 22: attacks from a hostile or broken client that the
// suite did not try yet. Each logs FIGURES lines; the checks are the
// suite's (the server lives, stays within maxRSS and maxGoroutines, the
// good client keeps being answered).

// dpr returns a bare DPR: a header and a Disconnect-Cause, no identity.
func dpr(hbh uint32) []byte {
	b := message.NewRequest(wire.CmdDisconnectPeer, message.AppCommon, 0).
		Uint32(message.DisconnectCause, 0, true, message.DisconnectRebooting).Bytes()
	wire.SetHopByHop(b, hbh)
	wire.SetEndToEnd(b, hbh)
	return b
}

// dwr returns a DWR from host.
func dwr(host string, hbh uint32) []byte {
	b := message.NewRequest(wire.CmdDeviceWatchdog, message.AppCommon, 0).
		String(message.OriginHost, 0, true, host).
		String(message.OriginRealm, 0, true, realm).Bytes()
	wire.SetHopByHop(b, hbh)
	wire.SetEndToEnd(b, hbh)
	return b
}

// drain reads and discards what the server sends on tc until it closes;
// it reports when (0 if still open at stop).
func drain(tc transport.Conn) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		for {
			if _, err := tc.ReadMessage(); err != nil {
				ch <- time.Now()
				return
			}
		}
	}()
	return ch
}

// A client that sent a DPR keeps sending DPRs while the server still owes
// it an answer (a slow handler: --answer-delay, as a slow --dedup store
// would be). Each DPR used to start a timer of its own for the held DPA
// (DPATimeout, 5 s), so the timers and DPAs pile up at the rate the
// client sends.
func TestProbeDPRStormWhileAnswersOwed(t *testing.T) {
	s := startServer(t, 0, "--answer-delay", "1s")
	g := goodClient(t, s, nil)
	pk := s.sample()
	rss0, _ := s.memory()
	g.run()
	const conns = 4
	var sent atomic.Int64
	var wg sync.WaitGroup
	var closedAfter []time.Duration
	var mu sync.Mutex
	for c := range conns {
		host := fmt.Sprintf("dprstorm%d.example.net", c)
		tc := raw(t, s, host)
		closed := drain(tc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			batch := make([][]byte, 0, 257)
			var n uint32
			deadline := t0.Add(8 * time.Second)
			var lastACR time.Time
			for time.Now().Before(deadline) {
				batch = batch[:0]
				// An ACR every 200 ms keeps an answer owed (each takes
				// 1 s), and takes few of the handlers the good client
				// needs too.
				if time.Since(lastACR) > 200*time.Millisecond {
					lastACR = time.Now()
					a := acr(host, n)
					wire.SetHopByHop(a, n)
					wire.SetEndToEnd(a, n)
					batch = append(batch, a)
				}
				for range 256 {
					n++
					batch = append(batch, dpr(n))
				}
				if err := tc.WriteMessages(batch...); err != nil {
					break
				}
				sent.Add(256)
				select {
				case at := <-closed:
					mu.Lock()
					closedAfter = append(closedAfter, at.Sub(t0))
					mu.Unlock()
					return
				default:
				}
			}
			select {
			case at := <-closed:
				mu.Lock()
				closedAfter = append(closedAfter, at.Sub(t0))
				mu.Unlock()
			case <-time.After(8 * time.Second):
			}
			tc.Close()
		}()
	}
	wg.Wait()
	g.halt()
	s.alive()
	rss, gs := pk.end()
	t.Logf("FIGURES dpr-storm: %d DPRs written on %d connections; closed after %v; RSS before %.1f MB", sent.Load(), conns, closedAfter, float64(rss0)/(1<<20))
	within(t, "dpr-storm", rss, gs)
	g.check(t)
}

// A storm of DWRs from a client that reads its DWAs, and from one that
// does not: the good client is served, the one that does not read is
// closed (backlog, write deadline).
func TestProbeDWRStorm(t *testing.T) {
	s := startServer(t, 0)
	g := goodClient(t, s, nil)
	pk := s.sample()
	g.run()
	var wg sync.WaitGroup
	var sentReading, sentDeaf atomic.Int64
	var deafClosed atomic.Int64
	for c, reads := range []bool{true, false} {
		host := fmt.Sprintf("dwrstorm%d.example.net", c)
		tc := raw(t, s, host)
		var closed <-chan time.Time
		if reads {
			closed = drain(tc)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			batch := make([][]byte, 256)
			var n uint32
			for time.Since(t0) < 6*time.Second {
				for i := range batch {
					n++
					batch[i] = dwr(host, n)
				}
				if err := tc.WriteMessages(batch...); err != nil {
					if !reads {
						deafClosed.Store(int64(time.Since(t0)))
					}
					break
				}
				if reads {
					sentReading.Add(int64(len(batch)))
				} else {
					sentDeaf.Add(int64(len(batch)))
				}
			}
			tc.Close()
			if closed != nil {
				<-closed
			}
		}()
		time.AfterFunc(20*time.Second, func() { tc.Close() })
	}
	wg.Wait()
	g.halt()
	s.alive()
	rss, gs := pk.end()
	t.Logf("FIGURES dwr-storm: %d DWRs from the reading client, %d from the deaf one (write failed after %v)", sentReading.Load(), sentDeaf.Load(), time.Duration(deafClosed.Load()))
	within(t, "dwr-storm", rss, gs)
	g.check(t)
}

// After a CER, a request trickled a byte at a time (a header that
// declares 60 KB, then a byte every 200 ms), on 40 connections: the
// watchdog (no whole message, no DWA) closes them within about 3 Tw; the
// good client is served meanwhile.
func TestProbeSlowSenderAfterCER(t *testing.T) {
	const tw = 6 * time.Second
	s := startServer(t, 0, "--tw", tw.String())
	g := goodClient(t, s, nil)
	pk := s.sample()
	g.run()
	const conns = 40
	var wg sync.WaitGroup
	closedAt := make([]time.Duration, conns)
	for c := range conns {
		host := fmt.Sprintf("slow%d.example.net", c)
		nc := rawNC(t, s, host)
		msg := acr(host, 1)
		big := make([]byte, 60000)
		copy(big, msg)
		big[1], big[2], big[3] = byte(len(big)>>16), byte(len(big)>>8), byte(len(big))
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			// The header at once, then a byte every 200 ms; read what the
			// server sends (its DWRs) without answering it.
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := nc.Read(buf); err != nil {
						return
					}
				}
			}()
			for i := 0; i < len(big) && time.Since(t0) < 5*tw; i++ {
				n := 1
				if i == 0 {
					n = wire.HeaderLen
				}
				nc.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := nc.Write(big[i : i+n]); err != nil {
					closedAt[c] = time.Since(t0)
					return
				}
				i += n - 1
				time.Sleep(200 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	g.halt()
	s.alive()
	rss, gs := pk.end()
	closed, last := closedCount(closedAt)
	t.Logf("FIGURES slow-sender-after-CER: %d of %d trickling connections closed by the server, the last after %v (--tw %v)", closed, conns, last.Round(time.Millisecond), tw)
	within(t, "slow-sender-after-CER", rss, gs)
	g.check(t)
	if closed != conns {
		t.Errorf("%d of %d trickling connections still open after %v", conns-closed, conns, 5*tw)
	}
}

// rawNC opens a plain TCP connection and completes a CER as host on it.
func rawNC(t *testing.T, s *server, host string) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := nc.Write(cer(host)); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, wire.HeaderLen)
	if _, err := io.ReadFull(nc, hdr); err != nil {
		t.Fatalf("CEA: %v", err)
	}
	n := int(hdr[1])<<16 | int(hdr[2])<<8 | int(hdr[3])
	cea := make([]byte, n)
	copy(cea, hdr)
	if _, err := io.ReadFull(nc, cea[wire.HeaderLen:]); err != nil {
		t.Fatalf("CEA: %v", err)
	}
	nc.SetReadDeadline(time.Time{})
	if rc, _ := message.ResultCodeOf(cea); rc != message.Success {
		t.Fatalf("CEA result %d", rc)
	}
	return nc
}

// Before its CER a client sends an application request, a DWR, a CER
// trickled byte by byte, and a header that declares 16 MB: each
// connection is closed (the first two at once), nothing is allocated for
// the declared length.
func TestProbeBeforeCER(t *testing.T) {
	s := startServer(t, 0, "--cer-timeout", "3s")
	g := goodClient(t, s, nil)
	pk := s.sample()
	g.run()
	huge := acr("huge.example.net", 1)[:wire.HeaderLen]
	huge[1], huge[2], huge[3] = 0xff, 0xff, 0xfc
	cases := []struct {
		name    string
		frames  [][]byte
		trickle bool
	}{
		{"ACR before CER", [][]byte{acr("early.example.net", 1)}, false},
		{"DWR before CER", [][]byte{dwr("early.example.net", 1)}, false},
		{"CER a byte every 100 ms", [][]byte{cer("trickle.example.net")}, true},
		{"16 MB header", [][]byte{huge}, false},
	}
	for _, c := range cases {
		d := net.Dialer{Timeout: 3 * time.Second}
		nc, err := d.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		go func() {
			for _, f := range c.frames {
				if !c.trickle {
					nc.Write(f)
					continue
				}
				for i := range f {
					if _, err := nc.Write(f[i : i+1]); err != nil {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(nc)
		took := time.Since(t0)
		nc.Close()
		what := "closed"
		if errors.Is(err, os.ErrDeadlineExceeded) {
			what = "STILL OPEN"
		}
		var rc uint32
		if len(b) >= wire.HeaderLen {
			rc, _ = message.ResultCodeOf(b)
		}
		t.Logf("FIGURES before-CER %s: %s after %v, %d bytes back (result %d)", c.name, what, took.Round(time.Millisecond), len(b), rc)
		if what != "closed" {
			t.Errorf("%s: connection not closed within 10 s", c.name)
		}
	}
	g.halt()
	s.alive()
	rss, gs := pk.end()
	within(t, "before-CER", rss, gs)
	g.check(t)
}

// A CER with its Origin-Host twice, of two different values, or its
// Origin-Realm twice: RFC 6733 5.3.1 has exactly one of each, and the
// server refuses a request with either twice (5009).
func TestProbeCERDuplicateIdentity(t *testing.T) {
	s := startServer(t, 0, "--allow", "good.example.net", "--allow", "dup*.example.net")
	for _, c := range []struct{ name, first, second string }{
		{"same Origin-Host twice", "dup1.example.net", "dup1.example.net"},
		{"allowed then disallowed Origin-Host", "dup2.example.net", "evil.example.org"},
		{"disallowed then allowed Origin-Host", "evil.example.org", "dup3.example.net"},
	} {
		tc := raw(t, s, "")
		m := cer(c.first)
		m = appendAVP(m, wire.AVP{Code: message.OriginHost, Data: []byte(c.second)})
		if err := tc.WriteMessages(m); err != nil {
			t.Fatal(err)
		}
		cea, err := tc.ReadMessage()
		if err != nil {
			t.Fatalf("%s: no CEA: %v", c.name, err)
		}
		rc, _ := message.ResultCodeOf(cea)
		t.Logf("FIGURES cer-duplicate %s: CEA result %d", c.name, rc)
		if rc != message.AVPOccursTooManyTimes {
			t.Errorf("%s: CEA result %d, want %d (DIAMETER_AVP_OCCURS_TOO_MANY_TIMES)", c.name, rc, message.AVPOccursTooManyTimes)
		}
		tc.Close()
	}
	s.alive()
}

// 600 connections from one address that each complete a CER under a name
// of their own and then stay silent (never answer a DWR): under
// --max-connections (1,024) and with --max-connections-per-addr lifted,
// all are admitted; the watchdog closes them after about 3 Tw. Past the
// bounds a connection is closed at once (TestAdmittedConnectionsBounded).
func TestProbeManyIdleAdmitted(t *testing.T) {
	const tw = 6 * time.Second
	s := startServer(t, 0, "--tw", tw.String(), "--max-connections-per-addr", "-1")
	g := goodClient(t, s, nil)
	pk := s.sample()
	g.run()
	const conns = 600
	var ncs []net.Conn
	for c := range conns {
		ncs = append(ncs, rawNC(t, s, fmt.Sprintf("idle%d.example.net", c)))
	}
	t0 := time.Now()
	g0, _ := s.goroutines()
	rssHeld, _ := s.memory()
	var closed atomic.Int64
	var last atomic.Int64
	var wg sync.WaitGroup
	for _, nc := range ncs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc.SetReadDeadline(time.Now().Add(5 * tw))
			buf := make([]byte, 4096)
			for {
				if _, err := nc.Read(buf); err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						closed.Add(1)
						last.Store(int64(time.Since(t0)))
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	g.halt()
	s.alive()
	rss, gs := pk.end()
	t.Logf("FIGURES idle-admitted: %d admitted connections held: %d goroutines, RSS %.1f MB; %d closed by the server, the last %v after (--tw %v)",
		conns, g0, float64(rssHeld)/(1<<20), closed.Load(), time.Duration(last.Load()).Round(time.Millisecond), tw)
	within(t, "idle-admitted", rss, gs)
	g.check(t)
}

// Slowloris on the --status page: 300 connections that send a partial
// request header a byte at a time, and 50 that ask for /metrics and never
// read: the page still answers.
func TestProbeStatusPageSlowClients(t *testing.T) {
	s := startServer(t, 0)
	host := strings.TrimSuffix(strings.TrimPrefix(s.status, "http://"), "/")
	var wg sync.WaitGroup
	var closedLoris atomic.Int64
	var lastLoris atomic.Int64
	t0 := time.Now()
	for range 300 {
		nc, err := net.DialTimeout("tcp", host, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer nc.Close()
			req := "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 1000)
			for i := range len(req) {
				nc.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := nc.Write([]byte{req[i]}); err != nil {
					closedLoris.Add(1)
					lastLoris.Store(int64(time.Since(t0)))
					return
				}
				time.Sleep(100 * time.Millisecond)
				if time.Since(t0) > 15*time.Second {
					return
				}
			}
		}()
	}
	for range 50 {
		nc, err := net.DialTimeout("tcp", host, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		// Many requests in one write, none of the answers read.
		nc.Write([]byte(strings.Repeat("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200)))
	}
	time.Sleep(2 * time.Second)
	okScrapes := 0
	for range 5 {
		if _, err := s.goroutines(); err == nil {
			okScrapes++
		}
	}
	g, _ := s.goroutines()
	wg.Wait()
	s.alive()
	t.Logf("FIGURES status-slow: %d of 300 slowloris closed by the server (the last after %v); %d of 5 scrapes answered during; goroutines %d",
		closedLoris.Load(), time.Duration(lastLoris.Load()).Round(time.Millisecond), okScrapes, g)
	if okScrapes < 5 {
		t.Errorf("the status page answered %d of 5 scrapes", okScrapes)
	}
}

// A TLS client that stalls in the middle of its handshake (a ClientHello
// record header, then nothing), 40 from one address on radsec://: each is
// closed within the handshake's bound, and a good radsec client from
// another address is served.
func TestProbeRadSecStalledHandshake(t *testing.T) {
	s := startRADIUS(t, 0)
	g := radiusGood(s, schemeRadSec, 50)
	g.run(t)
	m0 := g.mark()
	pk := s.sample()
	const conns = 40
	var wg sync.WaitGroup
	closedAt := make([]time.Duration, conns)
	for i := range conns {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 5)}, Timeout: 3 * time.Second}
		nc, err := d.Dial("tcp", s.urls[schemeRadSec])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			// A handshake record of 512 bytes, of which 9 are sent.
			nc.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc})
			nc.SetReadDeadline(time.Now().Add(75 * time.Second))
			buf := make([]byte, 512)
			for {
				if _, err := nc.Read(buf); err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						closedAt[i] = time.Since(t0)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	m1 := g.mark()
	g.halt()
	s.alive()
	rss, gs := pk.end()
	closed, last := closedCount(closedAt)
	t.Logf("FIGURES radsec-stalled-handshake: %d of %d closed, the last after %v", closed, conns, last.Round(time.Millisecond))
	within(t, "radsec-stalled-handshake", rss, gs)
	g.window(m0, m1).require(t, "radsec-stalled-handshake", 0.99)
	if closed != conns {
		t.Errorf("%d of %d stalled handshakes still open after 75 s", conns-closed, conns)
	}
}

// Four admitted connections each pipeline ACRs up to --max-unanswered
// (1024) while the handler is slow (--answer-delay 1s, as a slow --dedup
// store would be): the accounting handlers (--max-handlers 256) and their
// queue (--max-queued 4096) are shared by every connection. Before, they
// were one queue in arrival order: the attackers' requests filled it and
// the good client's waited behind them (8 answered, 16 failed in 13 s).
// The connections now take turns, so the good client's requests wait for
// about one of the attackers' each.
func TestProbeHandlerLaneShare(t *testing.T) {
	s := startServer(t, 0, "--answer-delay", "1s")
	g := goodClient(t, s, nil)
	pk := s.sample()
	g.run()
	var wg sync.WaitGroup
	var sent atomic.Int64
	for c := range 4 {
		host := fmt.Sprintf("greedy%d.example.net", c)
		tc := raw(t, s, host)
		closed := drain(tc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			var n uint32
			for time.Since(t0) < 8*time.Second {
				batch := make([][]byte, 64)
				for i := range batch {
					n++
					batch[i] = acr(host, n)
					wire.SetHopByHop(batch[i], n)
					wire.SetEndToEnd(batch[i], n)
				}
				if err := tc.WriteMessages(batch...); err != nil {
					break
				}
				sent.Add(int64(len(batch)))
			}
			tc.Close()
			<-closed
		}()
	}
	wg.Wait()
	g.halt()
	s.alive()
	rss, gs := pk.end()
	t.Logf("FIGURES handler-lane-share: %d ACRs written by 4 connections", sent.Load())
	within(t, "handler-lane-share", rss, gs)
	g.check(t)
}

// 50 connections to the --status page that pipeline 3,000 requests for
// /metrics each and never read: the server's writes block once the
// socket buffers are full. Before status's fix a blocked scrape held the
// Metrics lock, and every other scrape timed out. Before the page had a
// write timeout, each such connection held its goroutine for as long as
// the client kept it open; now status.WriteTimeout (30 s) closes them.
func TestProbeStatusPageNonReaders(t *testing.T) {
	s := startServer(t, 0)
	host := strings.TrimSuffix(strings.TrimPrefix(s.status, "http://"), "/")
	g0, _ := s.goroutines()
	rss0, _ := s.memory()
	for range 50 {
		nc, err := net.DialTimeout("tcp", host, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		go nc.Write([]byte(strings.Repeat("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 3000)))
	}
	time.Sleep(5 * time.Second)
	g1, err1 := s.goroutines()
	rss1, _ := s.memory()
	// Each blocked write ends WriteTimeout after its request's header was
	// read; the server reads pipelined requests for a while before the
	// socket buffers fill, so look until about twice that.
	var g2 int
	var err2 error
	var closedAfter time.Duration
	for t1 := time.Now(); time.Since(t1) < 3*status.WriteTimeout; time.Sleep(2 * time.Second) {
		if g2, err2 = s.goroutines(); err2 != nil || g2 <= g0+10 {
			closedAfter = 5*time.Second + time.Since(t1)
			break
		}
	}
	rss2, _ := s.memory()
	s.alive()
	for _, err := range []error{err1, err2} {
		if err != nil {
			t.Errorf("a scrape of /metrics failed while clients did not read theirs: %v", err)
		}
	}
	t.Logf("FIGURES status-non-readers: goroutines %d before, %d after 5 s, %d after %v; RSS %.1f, %.1f, %.1f MB",
		g0, g1, g2, closedAfter.Round(time.Second), float64(rss0)/(1<<20), float64(rss1)/(1<<20), float64(rss2)/(1<<20))
	if g1 < g0+40 {
		t.Errorf("goroutines %d with 50 blocked scrapes, %d before: the clients did not block the page's writes", g1, g0)
	}
	if g2 > g0+10 {
		t.Errorf("goroutines %d, %d before: the connections that do not read were not closed by the write timeout", g2, g0)
	}
}

// After a request that passed verification (admitted), a client trickles
// the next one a byte every 200 ms, and another sends only packets that
// are not requests (an Access-Accept, which needs no secret) every
// 500 ms: --idle-timeout closes both (before radpeer's fix the second
// kept its connection: every packet re-armed the idle deadline).
func TestProbeRADIUSAdmittedDribbleAndNonRequests(t *testing.T) {
	for _, scheme := range streamSchemes {
		t.Run(scheme, func(t *testing.T) {
			const idle = 2 * time.Second
			s := startRADIUS(t, 0, "--idle-timeout", idle.String())
			secret := secretOf(scheme)
			dribbler := s.mustDial(t, scheme, "127.0.0.1")
			talker := s.mustDial(t, scheme, "127.0.0.1")
			for i, rc := range []*radConn{dribbler, talker} {
				if _, err := rc.ask(accessRequest(byte(i), "probe@example.net", secret), secret, radiusReadTimeout); err != nil {
					t.Fatalf("no answer to the first request: %v", err)
				}
			}
			t0 := time.Now()
			frame := radRequest(codeAccessRequest, 9, []attr{str(attrUserName, strings.Repeat("d", 200))}, secret, true)
			var dribbleClosed, talkerClosed time.Duration
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				for i := range frame {
					if dribbler.write(frame[i:i+1]) != nil {
						break
					}
					if c, _ := closedWithin(dribbler, 200*time.Millisecond); c {
						break
					}
				}
				dribbleClosed = time.Since(t0)
			}()
			go func() {
				defer wg.Done()
				accept := radResponse(frame, codeAccessAccept, secret, false)
				for time.Since(t0) < 3*idle {
					if talker.write(accept) != nil {
						talkerClosed = time.Since(t0)
						return
					}
					if c, _ := closedWithin(talker, 500*time.Millisecond); c {
						talkerClosed = time.Since(t0)
						return
					}
				}
			}()
			wg.Wait()
			s.alive()
			t.Logf("FIGURES admitted-dribble %s: the dribbling connection closed after %v (--idle-timeout %v); the one sending Access-Accepts every 500 ms: closed after %v (0: still open after %v)",
				scheme, dribbleClosed.Round(time.Millisecond), idle, talkerClosed.Round(time.Millisecond), 3*idle)
			if dribbleClosed > idle+2*time.Second {
				t.Errorf("the dribbling admitted connection was closed %v after its last answer (--idle-timeout %v)", dribbleClosed, idle)
			}
			if talkerClosed == 0 || talkerClosed > idle+2*time.Second {
				t.Errorf("the admitted connection sending only Access-Accepts was closed after %v (0: not within %v; --idle-timeout %v)", talkerClosed, 3*idle, idle)
			}
		})
	}
}

// closedCount returns how many of closedAt (the time each connection was
// seen closed, 0 if never) closed, and the latest of those times.
func closedCount(closedAt []time.Duration) (closed int, last time.Duration) {
	for _, d := range closedAt {
		if d > 0 {
			closed++
			last = max(last, d)
		}
	}
	return closed, last
}
