package interop

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"testing"
	"time"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
)

// Both sides connect at once (RFC 6733 5.6.4): freeDiameter has us as a
// ConnectPeer while our client Peer dials it, our Server and client
// sharing one peer.Table. Whichever way the election goes (the higher
// Origin-Host wins and closes the connection it initiated), both sides
// end with one connection, which stays up.
func TestFreeDiameterElection(t *testing.T) {
	for _, ourHost := range []string{"aaa.example.net", "zzz.example.net"} { // below and above freeDiameter's
		t.Run(ourHost, func(t *testing.T) {
			t.Parallel()
			fdID := "fd-elect." + fdRealm
			bus := peer.NewBus()
			rec := record(t, bus)
			cfg := peer.Config{
				OriginHost: ourHost, OriginRealm: ourRealm,
				Watchdog: watchdog.Config{Twinit: 6 * time.Second},
				Events:   bus, Logger: testLogger(t), Table: peer.NewTable(),
				Handler: func(_ context.Context, _ *peer.Peer, req []byte) []byte { return nil },
			}
			srv, err := peer.Listen("tcp://127.0.0.1:0", cfg)
			if err != nil {
				t.Fatalf("Listen: %v", err)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve() }()
			fdPort := freePort(t)
			var p *peer.Peer
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*peer.DefaultDPATimeout)
				defer cancel()
				if p != nil {
					p.Close(ctx)
				}
				srv.Close(ctx)
				if err := <-served; err != nil {
					t.Errorf("Serve: %v", err)
				}
			})
			fd := startFreeDiameter(t, fdOptions{
				Identity: fdID, Port: fdPort, TwTimer: 6, Dumps: true,
				ConnectPeer: ourHost, ConnectPort: srv.Addr().(*net.TCPAddr).Port,
			})
			ccfg := cfg
			ccfg.RemoteHost = fdID
			p, err = peer.Dial(fmt.Sprintf("tcp://127.0.0.1:%d", fdPort), ccfg)
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			// open counts our connections in service: the client's and
			// those of the server's peers.
			open := func() int {
				n := 0
				if p.State() == watchdog.Okay {
					n++
				}
				for _, q := range srv.Peers() {
					if q.State() == watchdog.Okay {
						n++
					}
				}
				return n
			}
			deadline := time.Now().Add(20 * time.Second)
			for open() == 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if open() == 0 {
				t.Fatalf("no connection in service within 20 s; events:\n%s", rec)
			}
			// Longer than freeDiameter's Tc (2 s) and one Tw: a second
			// connection would have been tried and kept by now.
			end := time.Now().Add(10 * time.Second)
			for time.Now().Before(end) {
				if n := open(); n != 1 {
					t.Fatalf("%d connections in service, want 1; events:\n%s", n, rec)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if !fd.waitLog(regexp.MustCompile(`'STATE_[A-Z_]+'\s*->\s*'STATE_OPEN'`), time.Second) {
				t.Errorf("freeDiameter never reached STATE_OPEN (transitions %v)", fd.transitions())
			}
			opens := 0
			for _, tr := range fd.transitions() {
				if regexp.MustCompile(`->STATE_OPEN$`).MatchString(tr) {
					opens++
				}
			}
			if opens != 1 {
				t.Errorf("freeDiameter opened %d times, want 1 (transitions %v)", opens, fd.transitions())
			}
			t.Logf("events:\n%s", rec)
		})
	}
}

// Our Close says DO_NOT_WANT_TO_TALK_TO_YOU, and freeDiameter's own DPR on
// shutdown reaches us with its cause, which decides whether we hold off.
func TestFreeDiameterDPRCauses(t *testing.T) {
	t.Run("ours", func(t *testing.T) {
		t.Parallel()
		fd, p, rec := dialFreeDiameter(t, "fd-dpr1."+fdRealm, "client-dpr1."+ourRealm, 6, 6*time.Second)
		closeClient(t, fd, p, rec) // checks freeDiameter saw DO_NOT_WANT_TO_TALK_TO_YOU
	})
	t.Run("theirs", func(t *testing.T) {
		t.Parallel()
		fd, p, rec := dialFreeDiameter(t, "fd-dpr2."+fdRealm, "client-dpr2."+ourRealm, 6, 6*time.Second)
		fd.stop(t) // SIGTERM: freeDiameter sends DPR to its open peers
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.WaitState(ctx, watchdog.Down); err != nil {
			t.Fatalf("not DOWN after freeDiameter's shutdown: %v; events:\n%s", err, rec)
		}
		var got string
		for _, e := range rec.ofKind(peer.EventConnDown) {
			if m := regexp.MustCompile(`DPR received \(Disconnect-Cause \d+ [A-Z_]+\)`).FindString(e.Reason); m != "" {
				got = e.Reason
			}
		}
		if got == "" {
			t.Fatalf("no DPR from freeDiameter seen; events:\n%s", rec)
		}
		t.Logf("freeDiameter's DPR: %s", got)
		holds := regexp.MustCompile(`BUSY|DO_NOT_WANT`).MatchString(got)
		if held := regexp.MustCompile(`no reconnection for`).MatchString(got); held != holds {
			t.Errorf("hold-off %v for %q", held, got)
		}
	})
}
