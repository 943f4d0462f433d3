package hostile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
)

// The attacks on the RADIUS stream listeners, radius+tcp:// (RFC 6613)
// and radsec:// (RFC 6614), run against both.

// Before the change: once accept() failed with EMFILE, a
// RADIUS stream listener's accept loop ended for good: its socket stayed
// open, so new clients connected (the kernel completes the handshake) and
// then hung. The server, at 256 descriptors and with no limit on
// connections not admitted yet, is driven out of descriptors by idle
// connections to the listener; once they are closed, a good client must
// be answered within a few seconds. The Diameter listener (tcp://), which
// backed off already, is held to the same.
func TestListenersAcceptAgainAfterEMFILE(t *testing.T) {
	for _, scheme := range append([]string{"tcp"}, streamSchemes...) {
		t.Run(scheme, func(t *testing.T) {
			const limit = 256
			s := startRADIUS(t, limit, "--max-opening", "-1", "--max-opening-per-addr", "-1", "--cer-timeout", "60s")
			if err := s.askOnce(scheme, 1); err != nil {
				t.Fatalf("no answer before the attack: %v", err)
			}
			base := s.fds()
			// Plain TCP connections: a radsec:// listener's accept takes a
			// descriptor before any TLS handshake.
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			exhausted := false
			for i := 0; i < limit+128 && !exhausted; i++ {
				c, err := net.DialTimeout("tcp", s.urls[scheme], time.Second)
				if err != nil {
					t.Logf("dial %d: %v", i, err)
					break
				}
				conns = append(conns, c)
				if i >= limit-base-8 && i%8 == 0 {
					time.Sleep(20 * time.Millisecond) // let the server accept
					exhausted = s.fds() >= limit
				}
			}
			for end := time.Now().Add(3 * time.Second); !exhausted && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				exhausted = s.fds() >= limit
			}
			peakFDs := s.fds()
			time.Sleep(300 * time.Millisecond) // a few accepts fail now
			log, _ := os.ReadFile(s.stderr)
			emfile := strings.Count(string(log), "too many open files")
			t.Logf("FIGURES emfile %s: %d descriptors at rest, %d with %d idle connections (limit %d); %d log lines name EMFILE",
				scheme, base, peakFDs, len(conns), limit, emfile)
			if !exhausted {
				t.Fatalf("the server never reached its %d descriptors (%d): the test proves nothing", limit, peakFDs)
			}
			for _, c := range conns {
				c.Close()
			}
			conns = nil
			closedAt := time.Now()
			// The good client: a new connection and one request, within
			// a few seconds of the descriptors coming back.
			var lastErr error
			ok := false
			for time.Since(closedAt) < 8*time.Second && !ok {
				lastErr = s.askOnce(scheme, 2)
				ok = lastErr == nil
				if !ok {
					time.Sleep(200 * time.Millisecond)
				}
			}
			s.alive()
			t.Logf("FIGURES emfile %s: good client answered %v, %v after the idle connections closed (last error %v)",
				scheme, ok, time.Since(closedAt).Round(time.Millisecond), lastErr)
			if !ok {
				t.Errorf("the %s listener did not answer a new client within 8 s after the descriptors came back: %v (it stopped accepting after EMFILE)", scheme, lastErr)
			}
		})
	}
}

// Before the change (connections not admitted yet): RADIUS
// stream connections that never send a valid request (silent, or
// dribbling a frame a byte at a time) stayed open forever and were not
// limited. They are now counted
// like Diameter's before their CER: at most --max-opening per listener and
// --max-opening-per-addr from one address (a new one over either limit
// closes the oldest that holds a place it needs, so that a peer without
// the secret cannot keep a NAS out), and each closed after --cer-timeout
// without a valid request (--first-request-timeout, where the binary has
// that flag for RADIUS, is given the same value).
func TestRADIUSStreamUnadmittedConnectionsLimitedAndTimedOut(t *testing.T) {
	for _, scheme := range streamSchemes {
		t.Run(scheme, func(t *testing.T) {
			const perAddr, total, cerTimeout = 16, 48, 2 * time.Second
			flags := []string{"--cer-timeout", cerTimeout.String(), "--max-opening", fmt.Sprint(total), "--max-opening-per-addr", fmt.Sprint(perAddr)}
			if hasServerFlag(t, "first-request-timeout") {
				// The RADIUS twin of --cer-timeout, where the binary has
				// one.
				flags = append(flags, "--first-request-timeout", cerTimeout.String())
			}
			s := startRADIUS(t, 0, flags...)
			g := radiusGood(s, scheme, 100)
			g.run(t)
			time.Sleep(time.Second)
			m0 := g.mark()
			pk := s.sample()
			type held struct {
				kind   string
				local  string
				opened time.Time
				closed atomic.Int64 // ns after opened; 0 while open
			}
			var hs []*held
			var wg sync.WaitGroup
			open := func(kind, local string, dribble bool) {
				rc, err := s.dialRadius(scheme, local, "nas1.example.net")
				if err != nil {
					t.Fatalf("%s connection from %s: %v", kind, local, err)
				}
				t.Cleanup(func() { rc.Close() })
				h := &held{kind: kind, local: local, opened: time.Now()}
				hs = append(hs, h)
				wg.Add(1)
				go func() {
					defer wg.Done()
					// A long Access-Request, a byte every 250 ms: it would
					// take a minute to complete.
					frame := radRequest(codeAccessRequest, 1, []attr{str(attrUserName, strings.Repeat("s", 240))}, secretOf(scheme), true)
					for i := 0; time.Since(h.opened) < cerTimeout+5*time.Second; i++ {
						if dribble && i < len(frame) {
							if rc.write(frame[i:i+1]) != nil {
								h.closed.Store(int64(time.Since(h.opened)))
								return
							}
						}
						if c, _ := closedWithin(rc, 250*time.Millisecond); c {
							h.closed.Store(int64(time.Since(h.opened)))
							return
						}
					}
				}()
			}
			for range perAddr {
				open("idle", "127.0.0.1", false)
				open("slowloris", "127.0.0.2", true)
				open("idle", "127.0.0.3", false)
			}
			time.Sleep(200 * time.Millisecond) // every one accepted and counted
			// Over the per-address limit, then over the listener's: the
			// new connection stays, and an older one of the address (over
			// the listener's limit, of any) is closed at once to make room.
			closedOf := func(from string) int {
				n := 0
				for _, h := range hs {
					if (from == "" || h.local == from) && h.closed.Load() != 0 {
						n++
					}
				}
				return n
			}
			makesRoom := func(local, of string) (bool, time.Duration, error) {
				before := closedOf(of)
				t0 := time.Now()
				rc, err := s.dialRadius(scheme, local, "nas1.example.net")
				if err != nil {
					return false, time.Since(t0), err
				}
				t.Cleanup(func() { rc.Close() })
				for closedOf(of) == before && time.Since(t0) < radiusRefusedWithin+500*time.Millisecond {
					time.Sleep(10 * time.Millisecond)
				}
				took := time.Since(t0)
				if closedOf(of) == before {
					return false, took, errors.New("no older connection closed")
				}
				if c, _ := closedWithin(rc, 100*time.Millisecond); c {
					return false, took, errors.New("the new connection was closed")
				}
				return true, took, nil
			}
			overAddr, tAddr, errAddr := makesRoom("127.0.0.1", "127.0.0.1")
			overAll, tAll, errAll := makesRoom("127.0.0.4", "")
			wg.Wait()
			m1 := g.mark()
			g.halt()
			s.alive()
			rss, gs := pk.end()
			within(t, "unadmitted "+scheme, rss, gs)
			var closedIdle, closedSlow int
			var slowest time.Duration
			for _, h := range hs {
				d := time.Duration(h.closed.Load())
				if d == 0 {
					continue
				}
				slowest = max(slowest, d)
				if h.kind == "idle" {
					closedIdle++
				} else {
					closedSlow++
				}
			}
			t.Logf("FIGURES unadmitted %s: %d idle and %d slowloris connections held, closed by the server: %d idle, %d slowloris, the last %v after opening (--cer-timeout %v); one over the per-address limit made room at once: %v (%v, %v); one over the listener's: %v (%v, %v)",
				scheme, 2*perAddr, perAddr, closedIdle, closedSlow, slowest.Round(time.Millisecond), cerTimeout,
				overAddr, tAddr.Round(time.Millisecond), errAddr, overAll, tAll.Round(time.Millisecond), errAll)
			if closedIdle != 2*perAddr || closedSlow != perAddr {
				t.Errorf("%d of %d idle and %d of %d slowloris connections closed within --cer-timeout + 5 s", closedIdle, 2*perAddr, closedSlow, perAddr)
			}
			if slowest > cerTimeout+3*time.Second {
				t.Errorf("the last connection without a valid request closed %v after opening; --cer-timeout %v", slowest, cerTimeout)
			}
			if !overAddr {
				t.Errorf("a connection over --max-opening-per-addr %d did not make room at once: %v", perAddr, errAddr)
			}
			if !overAll {
				t.Errorf("a connection over --max-opening %d did not make room at once: %v", total, errAll)
			}
			g.window(g.startMark(), m0).log(t, "unadmitted "+scheme+" before")
			g.window(m0, m1).require(t, "unadmitted "+scheme, 0.9)
		})
	}
}

// Before the change (admitted connections): a client that sent a valid
// request and then nothing kept its connection forever. --idle-timeout
// closes it; a client that keeps sending is not affected.
func TestRADIUSStreamIdleAdmittedConnectionsClosed(t *testing.T) {
	for _, scheme := range streamSchemes {
		t.Run(scheme, func(t *testing.T) {
			const idle = 2 * time.Second
			s := startRADIUS(t, 0, "--idle-timeout", idle.String())
			g := radiusGood(s, scheme, 40)
			g.run(t)
			m0 := g.mark()
			secret := secretOf(scheme)
			var conns []*radConn
			for i := range 8 {
				rc := s.mustDial(t, scheme, "127.0.0.1")
				if _, err := rc.ask(accessRequest(byte(i), "idle@example.net", secret), secret, radiusReadTimeout); err != nil {
					t.Fatalf("connection %d: no answer to its first request: %v", i, err)
				}
				conns = append(conns, rc)
			}
			t0 := time.Now()
			closed := 0
			var slowest time.Duration
			for _, rc := range conns {
				if c, _ := closedWithin(rc, idle+5*time.Second-time.Since(t0)); c {
					closed++
					slowest = max(slowest, time.Since(t0))
				}
			}
			m1 := g.mark()
			g.halt()
			s.alive()
			t.Logf("FIGURES idle-timeout %s: %d of %d admitted idle connections closed, the last %v after its answer (--idle-timeout %v)",
				scheme, closed, len(conns), slowest.Round(time.Millisecond), idle)
			if closed != len(conns) {
				t.Errorf("%d of %d admitted connections idle for %v were closed (--idle-timeout %v)", closed, len(conns), idle+5*time.Second, idle)
			}
			// The good client sends on each connection every 100 ms: never
			// idle, never closed.
			w := g.window(m0, m1)
			w.require(t, "idle-timeout "+scheme, 0.9)
			if w.errs > 0 {
				t.Errorf("the busy good client failed %d times: were its connections closed as idle? (%v)", w.errs, w.lastError)
			}
		})
	}
}

// Before the change: a client holding the secret that pipelines requests and
// never reads the answers made the server queue every answer (RSS 22 ->
// 547 MB). --max-unanswered now bounds each RADIUS stream connection
// too: the reader pauses, memory stays bounded, and a good client on
// another connection keeps its answers.
func TestRADIUSStreamPipelineWithoutReadingBounded(t *testing.T) {
	for _, scheme := range streamSchemes {
		t.Run(scheme, func(t *testing.T) {
			const bound = 120 << 20
			s := startRADIUS(t, 0, "--max-unanswered", "256")
			g := radiusGood(s, scheme, 200)
			g.run(t)
			time.Sleep(2 * time.Second)
			m0 := g.mark()
			pk := s.sample()
			secret := secretOf(scheme)
			// Access-Requests of 4 KB: the answers echo the Proxy-State.
			var batch []byte
			for id := range 256 {
				attrs := []attr{str(attrUserName, "greedy@example.net")}
				for range 15 {
					attrs = append(attrs, attr{attrProxyState, make([]byte, 253)})
				}
				batch = append(batch, radRequest(codeAccessRequest, byte(id), attrs, secret, true)...)
			}
			var sent atomic.Int64
			var wg sync.WaitGroup
			stop := time.Now().Add(8 * time.Second)
			var tooBig atomic.Bool
			for range 2 {
				rc := s.mustDial(t, scheme, "127.0.0.1")
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(stop) && !tooBig.Load() {
						rc.c.SetWriteDeadline(stop)
						if _, err := rc.c.Write(batch); err != nil {
							return // the server stopped reading and the deadline came, or it closed us
						}
						sent.Add(256)
					}
				}()
			}
			// Stop the attack past 1 GB: the point is made.
			go func() {
				for time.Now().Before(stop) {
					if rss, _ := s.memory(); rss > 1<<30 {
						tooBig.Store(true)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}()
			wg.Wait()
			m1 := g.mark()
			g.halt()
			s.alive()
			rss, gs := pk.end()
			within(t, "pipeline-without-reading "+scheme, rss, gs)
			t.Logf("FIGURES pipeline-without-reading %s: %d requests of 4 KB written by 2 connections that never read; peak RSS %.1f MB",
				scheme, sent.Load(), float64(rss)/(1<<20))
			if rss > bound {
				t.Errorf("peak RSS %d MB, over %d MB: the answers to a client that does not read are not bounded", rss>>20, bound>>20)
			}
			g.window(g.startMark(), m0).log(t, "pipeline-without-reading "+scheme+" before")
			g.window(m0, m1).require(t, "pipeline-without-reading "+scheme, 0.9)
		})
	}
}

// askOnce opens a connection from goodIP to the listener of scheme (tcp:
// Diameter, with its CER) and has one request answered on it, within
// about 3 s.
func (s *server) askOnce(scheme string, n byte) error {
	if scheme == "tcp" {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(goodIP)}, Timeout: 2 * time.Second}
		return tryClient(s, func(c *peer.Config) {
			c.CEATimeout = 2 * time.Second
			c.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
				nc, err := d.DialContext(ctx, "tcp", s.addr)
				if err != nil {
					return nil, err
				}
				return transport.NewStreamConn(nc, transport.SchemeTCP, transport.Options{}), nil
			}
		})
	}
	rc, err := s.dialRadius(scheme, goodIP, "nas1.example.net")
	if err != nil {
		return err
	}
	defer rc.Close()
	secret := secretOf(scheme)
	_, err = rc.ask(accessRequest(n, fmt.Sprintf("once%d@example.net", n), secret), secret, 2*time.Second)
	return err
}
