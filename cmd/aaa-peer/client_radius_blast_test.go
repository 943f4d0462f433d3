package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// The Message-Authenticator settings (BlastRADIUS) of aaa-peer server and
// client: bad values are usage errors.
func TestMessageAuthenticatorFlagsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"server", "--listen", "radius://127.0.0.1:0", "--require-message-authenticator", "sometimes"},
		{"server", "--listen", "radius://127.0.0.1:0", "--limit-proxy-state", "auto"},
		{"client", "--peer", "radius://127.0.0.1:1812", "--require-message-authenticator", "sometimes"},
		{"client", "--peer", "radius+tcp://127.0.0.1:1812", "--require-message-authenticator", ""},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}

// secretFile writes the test secret to a file and returns its name.
func secretFile(t *testing.T) string {
	t.Helper()
	sf := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return sf
}

// unsignedAccessRequest is an Access-Request without a Message-Authenticator.
func unsignedAccessRequest(t *testing.T, id byte, attrs ...*lradius.AVP) []byte {
	t.Helper()
	p := lradius.New(lradius.CodeAccessRequest, []byte(testRadiusSecret))
	p.Identifier = id
	p.Attributes = attrs
	b, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// udpAsk sends b over c and returns the reply, nil if none came within d.
func udpAsk(t *testing.T, c net.Conn, b []byte, d time.Duration) []byte {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, radius.MaxLength)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// aaa-peer server's radius:// listener: --require-message-authenticator
// always drops the first Access-Request without one; by default (auto,
// --limit-proxy-state always) one with Proxy-State and no
// Message-Authenticator is dropped, and one without both is answered with
// the Message-Authenticator first. A dropped request gets no answer.
func TestServerMessageAuthenticatorFlags(t *testing.T) {
	t.Parallel()
	sf := secretFile(t)
	listen := func(extra ...string) net.Conn {
		srv := startServer(t, append([]string{"--listen", "radius://127.0.0.1:0", "--secret-file", sf}, extra...)...)
		for _, u := range readLines(t, srv) {
			if addr, ok := strings.CutPrefix(u, "radius://"); ok {
				c, err := net.Dial("udp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
		}
		t.Fatal("no radius:// URL")
		return nil
	}
	signed, _, err := radius.EncodeRequest(&radius.Request{Code: lradius.CodeAccessRequest, Attributes: lradius.Attributes{{Type: radius.AttrUserName, Attribute: []byte("alice")}}}, 9, []byte(testRadiusSecret))
	if err != nil {
		t.Fatal(err)
	}

	always := listen("--require-message-authenticator", "always")
	if ans := udpAsk(t, always, unsignedAccessRequest(t, 1), 300*time.Millisecond); ans != nil {
		t.Fatalf("always: an Access-Request without Message-Authenticator answered (%d bytes)", len(ans))
	}
	if ans := udpAsk(t, always, signed, 5*time.Second); ans == nil {
		t.Fatal("always: a signed Access-Request not answered")
	}

	def := listen()
	ps := &lradius.AVP{Type: radius.AttrProxyState, Attribute: []byte("0123456789")}
	if ans := udpAsk(t, def, unsignedAccessRequest(t, 2, ps), 300*time.Millisecond); ans != nil {
		t.Fatalf("default: an Access-Request with Proxy-State and no Message-Authenticator answered (%d bytes)", len(ans))
	}
	ans := udpAsk(t, def, unsignedAccessRequest(t, 3), 5*time.Second)
	if ans == nil || lradius.Type(ans[radius.HeaderLen]) != radius.AttrMessageAuthenticator {
		t.Fatalf("default: first unsigned Access-Request of a client: answer %x, want one with the Message-Authenticator first", ans)
	}

	open := listen("--require-message-authenticator", "never", "--limit-proxy-state", "never")
	if ans := udpAsk(t, open, unsignedAccessRequest(t, 4, ps), 5*time.Second); ans == nil {
		t.Fatal("never/never: not answered")
	}
}

// unsignedAnswer answers req with a right Response Authenticator and no
// Message-Authenticator, and a Proxy-State the request never had: an old
// server's answer, or a forgery's.
func unsignedAnswer(req []byte, code lradius.Code) []byte {
	p := &lradius.Packet{Code: code, Identifier: radius.Identifier(req), Authenticator: radius.Authenticator(req),
		Attributes: lradius.Attributes{{Type: radius.AttrProxyState, Attribute: []byte("collision-blob")}}}
	b, err := p.MarshalBinary()
	if err != nil {
		panic(err)
	}
	h := md5.Sum(append(append([]byte(nil), b...), testRadiusSecret...))
	copy(b[4:radius.HeaderLen], h[:])
	return b
}

// answerCode is what an old server answers req with.
func answerCode(req []byte) lradius.Code {
	if radius.Code(req) == lradius.CodeAccountingRequest {
		return lradius.CodeAccountingResponse
	}
	return lradius.CodeAccessAccept
}

// oldUDPServer answers every request without a Message-Authenticator.
func oldUDPServer(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, radius.MaxLength)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if radius.Validate(buf[:n]) == nil {
				pc.WriteTo(unsignedAnswer(buf[:n], answerCode(buf[:n])), from)
			}
		}
	}()
	return "radius://" + pc.LocalAddr().String()
}

// oldTCPServer is oldUDPServer over RADIUS/TCP: its Status-Server answers
// have no Message-Authenticator either, as FreeRADIUS 3.2.1's.
func oldTCPServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					b, err := radius.ReadFrame(r)
					if err != nil {
						return
					}
					if _, err := c.Write(unsignedAnswer(b, answerCode(b))); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "radius+tcp://" + ln.Addr().String()
}

// runRadiusClientReport runs aaa-peer client with args and returns its exit code and
// report.
func runRadiusClientReport(t *testing.T, args ...string) (int, clientReport) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"client"}, args...), &stdout, &stderr)
	var rep clientReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d, report: %v\n%s\n%s", code, err, stdout.String(), stderr.String())
	}
	return code, rep
}

// aaa-peer client, over UDP and TCP, refuses an Access-Accept without a
// Message-Authenticator (with Proxy-State in it, as a forgery would have)
// by default: no request is answered (exit 3: they reached the server and
// failed), each failure says why and is
// counted in no_ma. Over TCP the Status-Server answers without one (as
// FreeRADIUS 3.2.1 sends them) keep the server in service. With
// --require-message-authenticator never they are accepted.
func TestClientRefusesAnswersWithoutMA(t *testing.T) {
	t.Parallel()
	sf := secretFile(t)
	for _, tc := range []struct {
		name string
		peer string
		args []string
	}{
		{"udp", oldUDPServer(t), []string{"--timeout", "100ms", "--retries", "1"}},
		{"tcp", oldTCPServer(t), []string{"--tw", "6s", "--request-timeout", "5s"}},
	} {
		base := append([]string{"--peer", tc.peer, "--secret-file", sf, "--app", "auth", "--requests", "4", "--rate", "100", "--log-level", "error"}, tc.args...)
		code, rep := runRadiusClientReport(t, base...)
		if code != 3 || rep.Answered != 0 || rep.Failed != 4 {
			t.Errorf("%s: exit %d, report %+v; want exit 3, 4 failed", tc.name, code, rep)
			continue
		}
		for reason := range rep.FailedBy {
			if !strings.Contains(reason, "Message-Authenticator") {
				t.Errorf("%s: failed by %q, want a reason naming the Message-Authenticator", tc.name, reason)
			}
		}
		var noMA uint64
		if len(rep.Stream) == 1 {
			noMA = rep.Stream[0].NoMA
			// A run past the first watchdog Status-Server (Tw 6s, jittered
			// by up to 2s): the watchdog's answers, without
			// Message-Authenticator too, keep the one connection OKAY
			// (answered, no reopen). One Status-Server of load, then the
			// connection idle: no refused Access-Accept to log (such lines
			// share one budget a process: other tests' would be dropped).
			_, long := runRadiusClientReport(t, "--peer", tc.peer, "--secret-file", sf, "--app", "status", "--duration", "9s",
				"--rate", "0.1", "--tw", "6s", "--request-timeout", "5s", "--log-level", "error")
			if st := long.Stream[0]; st.StatusSent == 0 || st.StatusAnswered != st.StatusSent || st.OpenFailed != 0 || st.Transitions > 2 {
				t.Errorf("tcp: %d of %d Status-Server answered, %d transitions, %d failed opens: those without Message-Authenticator must keep the watchdog OKAY",
					st.StatusAnswered, st.StatusSent, st.Transitions, st.OpenFailed)
			}
		} else if len(rep.UDP) == 1 {
			noMA = rep.UDP[0].NoMA
		}
		if noMA < 4 {
			t.Errorf("%s: %d answers counted without Message-Authenticator, want 4 or more", tc.name, noMA)
		}
		code, rep = runRadiusClientReport(t, append(base, "--require-message-authenticator", "never")...)
		if code != 0 || rep.Answered != 4 {
			t.Errorf("%s, never: exit %d, report %+v; want 4 answered", tc.name, code, rep)
		}
	}
}
