package hostile

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BlastRADIUS (CVE-2024-3596): an Access-Request or an answer to one
// without a Message-Authenticator can be forged by a man in the middle
// with an MD5 chosen-prefix collision, the Proxy-State carrying the
// collision blocks. The server and the client side.

// silence reports whether rc gets no answer to req within d: a read
// that ends on the deadline, or the connection closed.
func silence(rc *radConn, req []byte, d time.Duration) (bool, []byte) {
	if rc.write(req) != nil {
		return true, nil
	}
	deadline := time.Now().Add(d)
	for {
		resp, err := rc.read(time.Until(deadline))
		if err != nil {
			return true, nil
		}
		if len(resp) >= radHeaderLen && resp[1] == req[1] {
			return false, resp
		}
	}
}

// Before the change (the server): it answered an Access-Request without a
// Message-Authenticator from anyone (no secret needed: a 20-byte request
// got a 38-byte answer, a reflection). Its defaults now drop an
// Access-Request with Proxy-State and no Message-Authenticator, and, once
// a client sent an Access-Request with a Message-Authenticator, its later
// ones without. RADIUS/TLS is not open to the attack (the TLS session
// protects the packets), so radsec:// is not tested.
func TestRADIUSBlastRADIUSRequestsDropped(t *testing.T) {
	for _, scheme := range []string{schemeUDP, schemeTCP} {
		t.Run(scheme, func(t *testing.T) {
			s := startRADIUS(t, 0)
			// A bare 20-byte Access-Request from an address never seen:
			// not asserted, only shown.
			bare := s.mustDial(t, scheme, "127.0.0.5")
			req := make([]byte, radHeaderLen)
			req[0], req[1], req[3] = codeAccessRequest, 7, radHeaderLen
			copy(req[4:], "0123456789abcdef")
			quiet, resp := silence(bare, req, time.Second)
			t.Logf("FIGURES blastradius %s: a 20-byte Access-Request without the secret from a new address: answered %v (%d bytes)", scheme, !quiet, len(resp))

			// Proxy-State and no Message-Authenticator, no secret.
			ps := s.mustDial(t, scheme, "127.0.0.4")
			req = radRequest(codeAccessRequest, 8, []attr{str(attrUserName, "victim@example.net"), attr{attrProxyState, make([]byte, 64)}}, "not-the-secret", false)
			quietPS, resp := silence(ps, req, time.Second)
			t.Logf("FIGURES blastradius %s: an Access-Request with Proxy-State, without Message-Authenticator: answered %v (%d bytes)", scheme, !quietPS, len(resp))
			if !quietPS {
				t.Errorf("an Access-Request with Proxy-State and no Message-Authenticator was answered (code %d, %d bytes)", resp[0], len(resp))
			}

			// A client that signs its Access-Requests, then one without.
			nas := s.mustDial(t, scheme, "127.0.0.3")
			if _, err := nas.ask(accessRequest(9, "nas@example.net", radiusSecret), radiusSecret, radiusReadTimeout); err != nil {
				t.Fatalf("an Access-Request with a Message-Authenticator: %v", err)
			}
			req = radRequest(codeAccessRequest, 10, []attr{str(attrUserName, "nas@example.net")}, radiusSecret, false)
			quietLearned, resp := silence(nas, req, time.Second)
			t.Logf("FIGURES blastradius %s: after one with a Message-Authenticator, an Access-Request without from the same client: answered %v (%d bytes)", scheme, !quietLearned, len(resp))
			if !quietLearned {
				t.Errorf("a client that sent a Message-Authenticator had its next Access-Request without one answered (code %d)", resp[0])
			}
			s.alive()
		})
	}
}

// fakeRADIUS is a RADIUS server that answers Status-Server properly (with
// a Message-Authenticator) and every Access-Request with an
// Access-Accept without one: what a BlastRADIUS attacker forges.
type fakeRADIUS struct {
	url        string
	unsigned   atomic.Int64 // Access-Accepts sent without Message-Authenticator
	statusSrvs atomic.Int64
	close      func()
}

func (f *fakeRADIUS) answer(req []byte) []byte {
	if len(req) < radHeaderLen {
		return nil
	}
	switch req[0] {
	case codeStatusServer:
		f.statusSrvs.Add(1)
		return radResponse(req, codeAccessAccept, radiusSecret, true)
	case codeAccessRequest:
		f.unsigned.Add(1)
		return radResponse(req, codeAccessAccept, radiusSecret, false)
	case codeAcctRequest:
		return radResponse(req, codeAcctResponse, radiusSecret, false)
	}
	return nil
}

func startFakeRADIUS(t *testing.T, scheme string) *fakeRADIUS {
	t.Helper()
	f := &fakeRADIUS{}
	var wg sync.WaitGroup
	switch scheme {
	case schemeUDP:
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f.url, f.close = "radius://"+pc.LocalAddr().String(), func() { pc.Close() }
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, radMaxLen)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				if resp := f.answer(buf[:n]); resp != nil {
					pc.WriteTo(resp, from)
				}
			}
		}()
	case schemeTCP:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var conns []net.Conn
		f.url = "radius+tcp://" + ln.Addr().String()
		f.close = func() {
			ln.Close()
			mu.Lock()
			for _, c := range conns {
				c.Close()
			}
			mu.Unlock()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					br := bufio.NewReader(c)
					for {
						req, err := readRadiusFrame(br)
						if err != nil {
							c.Close()
							return
						}
						if resp := f.answer(req); resp != nil {
							if _, err := c.Write(resp); err != nil {
								return
							}
						}
					}
				}()
			}
		}()
	}
	t.Cleanup(func() { f.close(); wg.Wait() })
	return f
}

// radiusClientRun is one "aaa-peer client" run against RADIUS servers.
type radiusClientRun struct {
	code   int
	took   time.Duration
	stderr string
	report struct {
		Sent     uint64            `json:"sent"`
		Answered uint64            `json:"answered"`
		Failed   uint64            `json:"failed"`
		FailedBy map[string]uint64 `json:"failed_by"`
	}
}

// runRadiusClient runs "aaa-peer client" with args (RADIUS peers) and
// the secret radiusSecret to its end, killing it after limit.
func runRadiusClient(t *testing.T, limit time.Duration, args ...string) radiusClientRun {
	t.Helper()
	needPeer(t)
	dir := t.TempDir()
	report, secret := filepath.Join(dir, "report.json"), filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte(radiusSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"client", "--secret-file", secret, "--report", report, "--log-level", "info"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, aaaPeer, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	t0 := time.Now()
	err := cmd.Run()
	r := radiusClientRun{took: time.Since(t0), stderr: stderr.String()}
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
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("no client report: %v\n%s", err, tail([]byte(r.stderr), 4096))
	}
	if err := json.Unmarshal(b, &r.report); err != nil {
		t.Fatalf("client report: %v\n%s", err, b)
	}
	return r
}

// Before the change (the client): "aaa-peer client" took an Access-Accept
// without a Message-Authenticator (what a BlastRADIUS forgery is) as an
// answer. By default it now refuses such answers: the requests fail.
func TestRADIUSBlastRADIUSClientRefusesUnsignedAnswers(t *testing.T) {
	for _, scheme := range []string{schemeUDP, schemeTCP} {
		t.Run(scheme, func(t *testing.T) {
			f := startFakeRADIUS(t, scheme)
			const n = 10
			args := []string{"--peer", f.url, "--app", "auth", "--requests", fmt.Sprint(n), "--rate", "50", "--concurrency", "4"}
			if scheme == schemeUDP {
				args = append(args, "--timeout", "500ms", "--retries", "2")
			} else {
				args = append(args, "--tw", "6s", "--request-timeout", "3s")
			}
			r := runRadiusClient(t, 60*time.Second, args...)
			t.Logf("FIGURES blastradius client %s: exit %d in %v: %d sent, %d answered, %d failed %v; the fake server sent %d Access-Accepts without Message-Authenticator (%d Status-Server answered)",
				scheme, r.code, r.took.Round(time.Millisecond), r.report.Sent, r.report.Answered, r.report.Failed, r.report.FailedBy, f.unsigned.Load(), f.statusSrvs.Load())
			if f.unsigned.Load() == 0 {
				t.Fatalf("the fake server got no Access-Request: the test proves nothing\n%s", tail([]byte(r.stderr), 4096))
			}
			if r.report.Answered != 0 || r.code == 0 {
				t.Errorf("exit %d, %d of %d requests answered by Access-Accepts without Message-Authenticator; want none taken and a non-zero exit",
					r.code, r.report.Answered, n)
			}
		})
	}
}
