package radpeer

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

// dialLogged dials url with testConfig and secret, logging into buf.
func dialLogged(t *testing.T, url string, secret []byte, buf *testhelp.SyncBuffer) *Peer {
	t.Helper()
	cfg := testConfig(30 * time.Second)
	cfg.Secret = secret
	cfg.Logger = slog.New(slog.NewTextHandler(buf, nil))
	p, err := Dial(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkMismatch checks that err, p's stats and log name a shared secret
// mismatch with the server at addr.
func checkMismatch(t *testing.T, p *Peer, err error, addr string, log *testhelp.SyncBuffer) {
	t.Helper()
	if !errors.Is(err, ErrSecretMismatch) || !errors.Is(err, ErrConnectionLost) ||
		!strings.Contains(err.Error(), "shared secret mismatch?") || !strings.Contains(err.Error(), addr) {
		t.Errorf("call's error %v: want a lost connection, a shared secret mismatch? and %s", err, addr)
	}
	st := p.Stats()
	if st.SecretMismatch < 1 || !strings.HasSuffix(st.SecretMismatchReason, "shared secret mismatch?") || !strings.Contains(st.SecretMismatchReason, addr) {
		t.Errorf("stats: secret_mismatch %d, reason %q; want counted, naming %s", st.SecretMismatch, st.SecretMismatchReason, addr)
	}
	deadline := time.Now().Add(2 * time.Second) // the line is written after the lock
	for !strings.Contains(log.String(), "shared secret mismatch?") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if out := log.String(); !strings.Contains(out, "shared secret mismatch?") || !strings.Contains(out, addr) {
		t.Errorf("log does not name the mismatch and %s:\n%s", addr, out)
	}
}

// A server with another secret closes the connection at the first request
// (RFC 6613 2.6.4), as radpeer.Server and FreeRADIUS do: the client says
// why it probably did.
func TestSecretMismatchServerCloses(t *testing.T) {
	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	var log testhelp.SyncBuffer
	addr := ln.Addr().String()
	p := dialLogged(t, "radius+tcp://"+addr, []byte("not the secret"), &log)
	defer mustClose(t, p, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = p.Exchange(ctx, accessReq("alice"))
	checkMismatch(t, p, err, addr, &log)
}

// scriptedServer accepts connections on a loopback RADIUS listener and
// answers every request with answer(n, req), n counting the requests of
// the connection from 1; nil closes the connection.
func scriptedServer(t *testing.T, answer func(n int, req []byte) []byte) string {
	t.Helper()
	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			tc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer tc.Close()
				for n := 1; ; n++ {
					b, err := tc.ReadMessage()
					if err != nil {
						return
					}
					ans := answer(n, b)
					if ans == nil {
						return
					}
					if err := tc.WriteMessages(ans); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// signed answers req with Access-Accept signed with secret.
func signed(req []byte, secret string) []byte {
	ans, _ := radius.EncodeResponse(req, lradius.CodeAccessAccept, nil, []byte(secret))
	return ans
}

// A server with another secret that answers: every answer fails
// verification, the first one on the connection already.
func TestSecretMismatchEveryAnswerFails(t *testing.T) {
	addr := scriptedServer(t, func(_ int, req []byte) []byte { return signed(req, "another secret") })
	var log testhelp.SyncBuffer
	p := dialLogged(t, "radius+tcp://"+addr, testSecret, &log)
	defer mustClose(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.Exchange(ctx, accessReq("alice"))
	checkMismatch(t, p, err, addr, &log)
	if st := p.Stats(); st.BadAuth != 1 {
		t.Errorf("bad_auth %d, want 1", st.BadAuth)
	}
}

// Once the server's answers have passed verification on a connection, a
// forged answer there, or the server closing it, is no sign of a wrong
// secret: counted as before, not named a mismatch.
func TestSecretMismatchNotAfterVerifiedAnswers(t *testing.T) {
	for name, answer := range map[string]func(n int, req []byte) []byte{
		"forged": func(n int, req []byte) []byte {
			if n == 1 {
				return signed(req, string(testSecret))
			}
			return signed(req, "forger")
		},
		"closed": func(n int, req []byte) []byte {
			if n == 1 {
				return signed(req, string(testSecret))
			}
			return nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			addr := scriptedServer(t, answer)
			var log testhelp.SyncBuffer
			p := dialLogged(t, "radius+tcp://"+addr, testSecret, &log)
			defer mustClose(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := p.Exchange(ctx, accessReq("alice")); err != nil {
				t.Fatal(err)
			}
			_, err := p.Exchange(ctx, accessReq("bob"))
			if !errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrSecretMismatch) || strings.Contains(err.Error(), "mismatch") {
				t.Errorf("second call: %v, want a lost connection and no mismatch", err)
			}
			if st := p.Stats(); st.SecretMismatch != 0 || st.SecretMismatchReason != "" {
				t.Errorf("secret_mismatch %d %q, want none", st.SecretMismatch, st.SecretMismatchReason)
			}
			if strings.Contains(log.String(), "mismatch") {
				t.Errorf("log names a mismatch:\n%s", log.String())
			}
		})
	}
}
