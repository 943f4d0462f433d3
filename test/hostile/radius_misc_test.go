package hostile

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Before the change: every connection that failed its authenticator wrote a
// WARN line (no secret needed to send one): 159,648 lines in 20 s. The
// lines are rate-limited now: 5,000 bad-authenticator connections (500
// over TLS, whose handshakes cost more) or datagrams add at most 100
// lines to the server's log.
func TestRADIUSBadAuthenticatorLogRateLimited(t *testing.T) {
	for _, scheme := range []string{schemeUDP, schemeTCP, schemeRadSec} {
		t.Run(scheme, func(t *testing.T) {
			n := 5000
			if scheme == schemeRadSec {
				n = 500
			}
			s := startRADIUS(t, 0)
			before := s.stderrLines()
			pk := s.sample()
			// An Accounting-Request signed with another secret: its
			// Request Authenticator fails.
			bad := func(i int) []byte {
				return acctRecord(byte(i), "nas1", fmt.Sprintf("bad-%d", i), 1, "not-the-secret")
			}
			t0 := time.Now()
			var sent, closed atomic.Int64
			if scheme == schemeUDP {
				rc := s.mustDial(t, scheme, "127.0.0.1")
				for i := range n {
					if rc.write(bad(i)) == nil {
						sent.Add(1)
					}
					if i%64 == 0 {
						time.Sleep(time.Millisecond) // within the socket's buffer
					}
				}
			} else {
				var wg sync.WaitGroup
				var next atomic.Int64
				var lastErr atomic.Value
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
							rc, err := s.dialRadius(scheme, "127.0.0.1", "nas1.example.net")
							if err != nil {
								lastErr.Store(err.Error())
								continue
							}
							if rc.write(bad(i)) == nil {
								sent.Add(1)
								if c, _ := closedWithin(rc, time.Second); c {
									closed.Add(1)
								}
							}
							rc.Close()
						}
					}()
				}
				wg.Wait()
				if v := lastErr.Load(); v != nil {
					t.Logf("last dial error: %v", v)
				}
			}
			took := time.Since(t0)
			time.Sleep(500 * time.Millisecond)
			s.alive()
			rss, gs := pk.end()
			within(t, "bad-authenticator "+scheme, rss, gs)
			lines := s.stderrLines() - before
			t.Logf("FIGURES bad-authenticator %s: %d bad packets sent in %v (%d connections closed by the server); the server's log grew by %d lines",
				scheme, sent.Load(), took.Round(time.Millisecond), closed.Load(), lines)
			if sent.Load() < int64(n)*9/10 {
				t.Fatalf("only %d of %d bad packets sent: the test proves nothing", sent.Load(), n)
			}
			if lines > 100 {
				b, _ := os.ReadFile(s.stderr)
				t.Errorf("%d log lines for %d bad-authenticator packets: not rate-limited; last lines:\n%s", lines, sent.Load(), tail(b, 1024))
			}
		})
	}
}

// Before the change: a client holding the shared secret sent another NAS's
// accounting record (its NAS-Identifier, Acct-Session-Id and
// Event-Timestamp) first; the NAS's own record was then answered as a
// duplicate and never applied. The content key is now bound to the
// sender: the attacker sends from 127.0.0.2 (over radsec:// with another
// client certificate), the NAS from 127.0.0.1, and both records are
// applied.
func TestRADIUSAccountingRecordBoundToSender(t *testing.T) {
	for _, scheme := range []string{schemeUDP, schemeTCP, schemeRadSec} {
		t.Run(scheme, func(t *testing.T) {
			s := startRADIUS(t, 0)
			secret := secretOf(scheme)
			ts := uint32(time.Now().Unix())
			attacker, err := s.dialRadius(scheme, "127.0.0.2", "nas2.example.net")
			if err != nil {
				t.Fatal(err)
			}
			defer attacker.Close()
			forged := acctRecord(1, "victim-nas", "victim-session-1", ts, secret)
			if _, err := attacker.ask(forged, secret, radiusReadTimeout); err != nil {
				t.Logf("the forged record was not answered: %v", err)
			}
			victim, err := s.dialRadius(scheme, "127.0.0.1", "nas1.example.net")
			if err != nil {
				t.Fatal(err)
			}
			defer victim.Close()
			real := acctRecord(1, "victim-nas", "victim-session-1", ts, secret)
			resp, err := victim.ask(real, secret, radiusReadTimeout)
			if err != nil {
				t.Fatalf("the victim's record was not answered: %v", err)
			}
			if resp[0] != codeAcctResponse {
				t.Errorf("the victim's record answered with code %d", resp[0])
			}
			r := s.stopReport()
			t.Logf("FIGURES accounting-preemption %s: report applied %v, duplicates %v, received %v", scheme, r["applied"], r["duplicates"], r["received"])
			if applied, _ := r["applied"].(float64); applied != 2 {
				t.Errorf("applied %v, want 2: the forged record and the victim's own", r["applied"])
			}
			if dups, _ := r["duplicates"].(float64); dups != 0 {
				t.Errorf("duplicates %v, want 0: the victim's record was taken for the attacker's", r["duplicates"])
			}
		})
	}
}
