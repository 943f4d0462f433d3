package hostile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// The attacks on the client side: "aaa-peer client" against servers that
// answer with Hop-by-Hop ids it never sent, or refuse it for good.

const clientHost = "client.example.net"

// wrongIDServer is a Diameter server that completes the capabilities
// exchange and answers DWRs and DPRs correctly, but answers every other
// request with a Hop-by-Hop id nobody sent.
type wrongIDServer struct {
	ln       net.Listener
	conns    atomic.Int64 // connections accepted
	answered atomic.Int64 // requests answered with a wrong id
	wg       sync.WaitGroup
	mu       sync.Mutex
	open     []net.Conn
}

func startWrongIDServer(t *testing.T) *wrongIDServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &wrongIDServer{ln: ln}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			w.conns.Add(1)
			w.mu.Lock()
			w.open = append(w.open, nc)
			w.mu.Unlock()
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				w.serve(transport.NewStreamConn(nc, transport.SchemeTCP, transport.Options{}))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		w.mu.Lock()
		for _, c := range w.open {
			c.Close()
		}
		w.mu.Unlock()
		w.wg.Wait()
	})
	return w
}

func (w *wrongIDServer) url() string { return "tcp://" + w.ln.Addr().String() }

func (w *wrongIDServer) serve(c transport.Conn) {
	defer c.Close()
	const host = "wrong-ids.example.net"
	for {
		msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		if !wire.IsRequest(msg) {
			continue
		}
		b := message.NewAnswer(msg).ResultCode(message.Success).
			String(message.OriginHost, 0, true, host).
			String(message.OriginRealm, 0, true, realm)
		switch wire.CommandCode(msg) {
		case wire.CmdCapabilitiesExchange:
			b.Address(message.HostIPAddress, 0, true, netip.MustParseAddr("127.0.0.1")).
				Uint32(message.VendorID, 0, true, 0).
				String(message.ProductName, 0, false, "wrong-ids").
				Uint32(message.AcctApplicationID, 0, true, message.AppAccounting)
		case wire.CmdDeviceWatchdog, wire.CmdDisconnectPeer:
		default:
			ans := b.Bytes()
			wire.SetHopByHop(ans, ^wire.HopByHop(msg))
			w.answered.Add(1)
			if c.WriteMessages(ans) != nil {
				return
			}
			continue
		}
		if c.WriteMessages(b.Bytes()) != nil {
			return
		}
	}
}

// clientRun is one "aaa-peer client" process's outcome.
type clientRun struct {
	code   int
	took   time.Duration
	stderr string
	report struct {
		Sent     uint64            `json:"sent"`
		Answered uint64            `json:"answered"`
		Failed   uint64            `json:"failed"`
		FailedBy map[string]uint64 `json:"failed_by"`
		Peers    []struct {
			Peer      string `json:"peer"`
			Answered  uint64 `json:"answered"`
			Unmatched uint64 `json:"unmatched"`
		} `json:"peers"`
	}
}

// runClient runs "aaa-peer client" with args to its end, killing it after
// limit, and reads its report.
func runClient(t *testing.T, limit time.Duration, args ...string) clientRun {
	t.Helper()
	needPeer(t)
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	args = append([]string{"client", "--origin-host", clientHost, "--origin-realm", realm, "--destination-realm", realm,
		"--report", report, "--log-level", "info"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, aaaPeer, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	err := cmd.Run()
	r := clientRun{took: time.Since(t0), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("aaa-peer client: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("aaa-peer client still running after %v: killed\n%s", limit, tail([]byte(r.stderr), 4096))
	}
	if b, err := os.ReadFile(report); err == nil {
		if err := json.Unmarshal(b, &r.report); err != nil {
			t.Fatalf("client report: %v\n%s", err, b)
		}
	}
	return r
}

// Observation 8: a server answering with wrong Hop-by-Hop ids stayed in
// service (its requests failed on the deadline) and the client exited 0
// even when every request failed. Its connection is now closed after
// MaxUnmatched such answers in a row, its requests fail over to the good
// server, and a client with no good server exits 3.
func TestWrongHopByHopAnswers(t *testing.T) {
	t.Run("beside a good server", func(t *testing.T) {
		s := startServer(t, 0)
		bad := startWrongIDServer(t)
		pk := s.sample()
		const n = 400
		r := runClient(t, 90*time.Second, "--peer", "tcp://"+s.addr, "--peer", bad.url(), "--wait-peers", "0",
			"--requests", fmt.Sprint(n), "--concurrency", "16", "--timeout", "2s", "--tw", "6s")
		s.alive()
		rss, gs := pk.end()
		within(t, "wrong-hop-by-hop (good server)", rss, gs)
		var unmatched uint64
		for _, p := range r.report.Peers {
			if p.Peer == "wrong-ids.example.net" {
				unmatched = p.Unmatched
			}
		}
		t.Logf("FIGURES wrong-hop-by-hop: client exit %d in %v: %d sent, %d answered, %d failed %v; the wrong-id server answered %d requests over %d connections, the client counted %d unmatched",
			r.code, r.took.Round(time.Millisecond), r.report.Sent, r.report.Answered, r.report.Failed, r.report.FailedBy, bad.answered.Load(), bad.conns.Load(), unmatched)
		if r.code != 0 || r.report.Answered != n || r.report.Failed != 0 {
			t.Errorf("exit %d, %d of %d answered, %d failed %v; want every request answered through the good server\n%s",
				r.code, r.report.Answered, n, r.report.Failed, r.report.FailedBy, tail([]byte(r.stderr), 4096))
		}
		if bad.answered.Load() == 0 {
			t.Fatal("the wrong-id server got no request: the test proves nothing")
		}
		if !strings.Contains(r.stderr, "answers in a row matched no pending request") {
			t.Errorf("no warning that the server's answers match nothing:\n%s", tail([]byte(r.stderr), 4096))
		}
	})
	t.Run("alone", func(t *testing.T) {
		bad := startWrongIDServer(t)
		const n = 20
		r := runClient(t, 60*time.Second, "--peer", bad.url(),
			"--requests", fmt.Sprint(n), "--concurrency", "20", "--timeout", "2s", "--tw", "6s")
		t.Logf("FIGURES wrong-hop-by-hop alone: client exit %d in %v: %d sent, %d answered, %d failed %v",
			r.code, r.took.Round(time.Millisecond), r.report.Sent, r.report.Answered, r.report.Failed, r.report.FailedBy)
		if r.code != 3 || r.report.Failed != n {
			t.Errorf("exit %d with %d of %d failed; want exit 3 (requests failed)\n%s", r.code, r.report.Failed, n, tail([]byte(r.stderr), 4096))
		}
	})
}

// Observation 9's last sentence: a client whose only peer refused it with
// DIAMETER_UNKNOWN_PEER (3010) waited the whole --connect-timeout before
// exiting. It now exits 1 at once, naming the refusal.
func TestRefusedClientExitsAtOnce(t *testing.T) {
	s := startServer(t, 0, "--allow", "someone-else.example.net")
	r := runClient(t, 90*time.Second, "--peer", "tcp://"+s.addr, "--connect-timeout", "30s")
	s.alive()
	t.Logf("FIGURES refused-client: exit %d after %v (--connect-timeout 30s)", r.code, r.took.Round(time.Millisecond))
	if r.code != 1 || !strings.Contains(r.stderr, "3010") {
		t.Errorf("exit %d; want 1 with the refusal (3010) named\n%s", r.code, tail([]byte(r.stderr), 4096))
	}
	if r.took > 15*time.Second {
		t.Errorf("the client took %v to exit; its only peer refused it for good at the first attempt", r.took)
	}
}
