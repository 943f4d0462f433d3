package radpeer

import (
	"bufio"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

// unsignedRequest is an Access-Request (or another code with a random
// authenticator) with attrs and no Message-Authenticator: what a NAS
// without the BlastRADIUS fixes sends, or anyone without the secret.
func unsignedRequest(t *testing.T, code lradius.Code, id byte, attrs ...*lradius.AVP) []byte {
	t.Helper()
	p := lradius.New(code, testSecret)
	p.Identifier = id
	p.Attributes = attrs
	b, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signedRequest is an Access-Request for user with a Message-Authenticator.
func signedRequest(t *testing.T, id byte, user string) []byte {
	t.Helper()
	b, _, err := radius.EncodeRequest(accessReq(user), id, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unsignedAnswer is an answer to req with a right Response Authenticator
// and no Message-Authenticator (what FreeRADIUS before 3.2.5 sends, and
// what a BlastRADIUS forgery looks like).
func unsignedAnswer(req []byte, code lradius.Code, attrs lradius.Attributes) []byte {
	p := &lradius.Packet{Code: code, Identifier: radius.Identifier(req), Authenticator: radius.Authenticator(req), Attributes: attrs}
	b, err := p.MarshalBinary()
	if err != nil {
		panic(err)
	}
	h := md5.Sum(append(append([]byte(nil), b...), testSecret...))
	copy(b[4:radius.HeaderLen], h[:])
	return b
}

var proxyState = &lradius.AVP{Type: radius.AttrProxyState, Attribute: []byte("injected-by-the-path")}

// tcpClient is a raw RADIUS/TCP connection to a Server.
type tcpClient struct {
	c net.Conn
	r *bufio.Reader
}

func startMATCP(t *testing.T, cfg ServerConfig) (*Server, *tcpClient) {
	t.Helper()
	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Secret = testSecret
	srv, err := NewServer(ln, SchemeTCP, cfg)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { mustClose(t, srv) })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return srv, &tcpClient{c: c, r: bufio.NewReader(c)}
}

func (tc *tcpClient) send(t *testing.T, b []byte) {
	t.Helper()
	if _, err := tc.c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// next returns the next answer, or nil when none comes within d.
func (tc *tcpClient) next(t *testing.T, d time.Duration) []byte {
	t.Helper()
	tc.c.SetReadDeadline(time.Now().Add(d))
	b, err := radius.ReadFrame(tc.r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// exchange sends req and wants its answer, Message-Authenticator first.
func (tc *tcpClient) exchange(t *testing.T, req []byte) {
	t.Helper()
	tc.send(t, req)
	ans := tc.next(t, 5*time.Second)
	if ans == nil {
		t.Fatalf("no answer to request %d", radius.Identifier(req))
	}
	if radius.Identifier(ans) != radius.Identifier(req) {
		t.Fatalf("answer %d to request %d: an earlier request was answered", radius.Identifier(ans), radius.Identifier(req))
	}
	if err := radius.VerifyResponse(ans, radius.Authenticator(req), testSecret, true); err != nil {
		t.Fatalf("answer to %d: %v", radius.Identifier(req), err)
	}
	if lradius.Type(ans[radius.HeaderLen]) != radius.AttrMessageAuthenticator {
		t.Fatalf("answer to %d: first attribute %d, want Message-Authenticator", radius.Identifier(req), ans[radius.HeaderLen])
	}
}

// dropped sends req, then a signed request, and wants only the latter's
// answer: req is never answered, and the connection stays up.
func (tc *tcpClient) dropped(t *testing.T, req []byte, next byte) {
	t.Helper()
	tc.send(t, req)
	tc.exchange(t, signedRequest(t, next, "after"))
	if extra := tc.next(t, 200*time.Millisecond); extra != nil {
		t.Fatalf("request %d answered (%d bytes)", radius.Identifier(req), len(extra))
	}
}

// The default (RequireMAAuto) over TCP: a client's Access-Request without
// a Message-Authenticator is answered until that client has sent one with
// it; from then on such requests are dropped, never answered, and
// counted, and the connection stays up. Answers carry the
// Message-Authenticator first.
func TestServerRequiresMAOnceSeen(t *testing.T) {
	srv, c := startMATCP(t, ServerConfig{})
	c.exchange(t, unsignedRequest(t, lradius.CodeAccessRequest, 1, &lradius.AVP{Type: radius.AttrUserName, Attribute: []byte("old-nas")}))
	c.exchange(t, signedRequest(t, 2, "alice"))
	c.dropped(t, unsignedRequest(t, lradius.CodeAccessRequest, 3, &lradius.AVP{Type: radius.AttrUserName, Attribute: []byte("forged")}), 4)
	if st, ps := srv.Stats(), srv.MAPolicyStats(); st.Dropped != 1 || st.Answered != 3 || ps.Refused != 1 || ps.Clients != 1 {
		t.Fatalf("stats %+v, policy %+v; want 1 dropped, 3 answered, 1 refused, 1 client", st, ps)
	}
}

// RequireMAAlways drops the first Access-Request without one; Status-Server
// without one is dropped whatever the setting. RequireMANever answers
// them (LimitProxyState still applies).
func TestServerRequireMASettings(t *testing.T) {
	srv, c := startMATCP(t, ServerConfig{RequireMessageAuthenticator: RequireMAAlways})
	c.dropped(t, unsignedRequest(t, lradius.CodeAccessRequest, 1), 2)
	c.dropped(t, unsignedRequest(t, lradius.CodeStatusServer, 3), 4)
	if st, ps := srv.Stats(), srv.MAPolicyStats(); st.Dropped != 2 || ps.Refused != 2 {
		t.Fatalf("always: stats %+v, policy %+v", st, ps)
	}
	srv, c = startMATCP(t, ServerConfig{RequireMessageAuthenticator: RequireMANever})
	c.exchange(t, signedRequest(t, 1, "alice"))
	c.exchange(t, unsignedRequest(t, lradius.CodeAccessRequest, 2))
	c.dropped(t, unsignedRequest(t, lradius.CodeAccessRequest, 3, proxyState), 4)
	if st, ps := srv.Stats(), srv.MAPolicyStats(); st.Dropped != 1 || ps.ProxyState != 1 || ps.Clients != 0 {
		t.Fatalf("never: stats %+v, policy %+v", st, ps)
	}
}

// An Access-Request with Proxy-State and no Message-Authenticator is
// dropped by default, even from a client never seen signing
// (LimitProxyStateAlways); LimitProxyStateNever answers it.
func TestServerLimitsProxyState(t *testing.T) {
	srv, c := startMATCP(t, ServerConfig{})
	c.dropped(t, unsignedRequest(t, lradius.CodeAccessRequest, 1, proxyState), 2)
	if st, ps := srv.Stats(), srv.MAPolicyStats(); st.Dropped != 1 || ps.ProxyState != 1 {
		t.Fatalf("stats %+v, policy %+v", st, ps)
	}
	_, c = startMATCP(t, ServerConfig{LimitProxyState: LimitProxyStateNever})
	c.exchange(t, unsignedRequest(t, lradius.CodeAccessRequest, 1, proxyState))
}

// udpExchange sends b from c and returns the reply, or nil when none
// comes within d.
func udpExchange(t *testing.T, c net.Conn, b []byte, d time.Duration) []byte {
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

func startMAUDP(t *testing.T, cfg ServerConfig) *UDPServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Secret = testSecret
	srv, err := NewUDPServer(pc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { mustClose(t, srv) })
	return srv
}

func dialUDP(t *testing.T, from string, srv *UDPServer) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("udp", srv.Addr().String())
	if err != nil {
		t.Skipf("cannot send from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// No reflection over UDP: once a NAS at 127.0.0.1 signs its requests, a
// sender without the secret at that address (another port) gets nothing
// back for a bare 20-byte Access-Request or a Status-Server without
// Message-Authenticator: not even 1 byte. A client is its IP address: one
// at 127.0.0.2, never seen signing, is still answered (auto), with the
// Message-Authenticator first.
func TestUDPServerNoReflection(t *testing.T) {
	srv := startMAUDP(t, ServerConfig{})
	nas := dialUDP(t, "127.0.0.1", srv)
	if ans := udpExchange(t, nas, signedRequest(t, 1, "alice"), 5*time.Second); ans == nil {
		t.Fatal("the NAS's signed request got no answer")
	}
	attacker := dialUDP(t, "127.0.0.1", srv)
	bare := unsignedRequest(t, lradius.CodeAccessRequest, 2)
	if len(bare) != radius.HeaderLen {
		t.Fatalf("bare request of %d bytes", len(bare))
	}
	for _, req := range [][]byte{bare, unsignedRequest(t, lradius.CodeStatusServer, 3), unsignedRequest(t, lradius.CodeAccessRequest, 4, proxyState)} {
		if ans := udpExchange(t, attacker, req, 300*time.Millisecond); ans != nil {
			t.Fatalf("%s of %d bytes answered with %d bytes", radius.Code(req), len(req), len(ans))
		}
	}
	if st, ps := srv.Stats(), srv.MAPolicyStats(); st.Dropped != 3 || st.Answered != 1 || ps.Refused != 3 {
		t.Fatalf("stats %+v, policy %+v; want 3 dropped and refused, 1 answered", st, ps)
	}
	other := dialUDP(t, "127.0.0.2", srv)
	ans := udpExchange(t, other, unsignedRequest(t, lradius.CodeAccessRequest, 5), 5*time.Second)
	if ans == nil || lradius.Type(ans[radius.HeaderLen]) != radius.AttrMessageAuthenticator {
		t.Fatalf("unsigned request from another client: answer %x, want one with the Message-Authenticator first", ans)
	}
}

// RequireMAAlways over UDP: the first Access-Request without one is
// dropped.
func TestUDPServerRequireMAAlways(t *testing.T) {
	srv := startMAUDP(t, ServerConfig{RequireMessageAuthenticator: RequireMAAlways})
	c := dialUDP(t, "127.0.0.1", srv)
	if ans := udpExchange(t, c, unsignedRequest(t, lradius.CodeAccessRequest, 1), 300*time.Millisecond); ans != nil {
		t.Fatalf("answered with %d bytes", len(ans))
	}
	if ans := udpExchange(t, c, signedRequest(t, 2, "alice"), 5*time.Second); ans == nil {
		t.Fatal("signed request not answered")
	}
	if st, ps := srv.Stats(), srv.MAPolicyStats(); st.Dropped != 1 || ps.Refused != 1 {
		t.Fatalf("stats %+v, policy %+v", st, ps)
	}
}

// The table of clients seen signing is bounded: past its bound the least
// recently seen is forgotten (and trusted again), the others stay.
func TestMAPolicyClientTableBounded(t *testing.T) {
	var p maPolicy
	p.max = 3
	cfg := &ServerConfig{}
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}) }
	for _, i := range []int{1, 2, 3, 1, 4} { // 1 seen again before 4: 2 is the least recent
		if signed, err := p.verify(cfg, signedRequest(t, byte(i), "u"), testSecret, addr(i), false); err != nil || !signed {
			t.Fatal(signed, err)
		}
	}
	if st := p.stats(); st.Clients != 3 || st.Forgotten != 1 {
		t.Fatalf("policy %+v, want 3 clients, 1 forgotten", st)
	}
	for i, want := range map[int]bool{1: true, 2: false, 3: true, 4: true, 5: false} {
		signed, err := p.verify(cfg, unsignedRequest(t, lradius.CodeAccessRequest, 9), testSecret, addr(i), false)
		if signed {
			t.Errorf("client %d: an Access-Request without Message-Authenticator counted as signed", i)
		}
		if refused := errors.Is(err, ErrRefused); refused != want || (err != nil && !refused) {
			t.Errorf("client %d: %v, want refused %v", i, err, want)
		}
	}
	for i := range 1000 {
		p.verify(cfg, signedRequest(t, 1, "u"), testSecret, netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), false)
	}
	if st := p.stats(); st.Clients != 3 || st.Forgotten != 1001 {
		t.Fatalf("after 1000 more clients: %+v", st)
	}
}

func TestMessageAuthenticatorModeText(t *testing.T) {
	for in, want := range map[string]MessageAuthenticatorMode{"auto": RequireMAAuto, "always": RequireMAAlways, "yes": RequireMAAlways, "never": RequireMANever, "no": RequireMANever} {
		var m MessageAuthenticatorMode
		if err := m.UnmarshalText([]byte(in)); err != nil || m != want {
			t.Errorf("%q: %v, %v", in, m, err)
		}
	}
	var m MessageAuthenticatorMode
	if err := m.UnmarshalText([]byte("sometimes")); !errors.Is(err, ErrConfig) {
		t.Errorf("sometimes: %v", err)
	}
	var l ProxyStateLimit
	if err := l.UnmarshalText([]byte("auto")); !errors.Is(err, ErrConfig) {
		t.Errorf("limit auto: %v", err)
	}
	if b, _ := LimitProxyStateNever.MarshalText(); string(b) != "never" {
		t.Errorf("LimitProxyStateNever is %q", b)
	}
	if b, _ := RequireMAAuto.MarshalText(); string(b) != "auto" {
		t.Errorf("RequireMAAuto is %q", b)
	}
}

// oldServer answers like a server without the BlastRADIUS fixes:
// Access-Accept with no Message-Authenticator (here with a Proxy-State
// that the request never had, as a forgery would), Status-Server answered
// without one (FreeRADIUS 3.2.1), accounting as usual; strays sends that
// many answers on an unused Identifier before each Access-Accept.
type oldServer struct {
	strays int
}

func (s *oldServer) serveAll(ln *pipeListener) {
	for {
		tc, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer tc.Close()
			for {
				b, err := tc.ReadMessage()
				if err != nil {
					return
				}
				var out [][]byte
				switch radius.Code(b) {
				case lradius.CodeAccessRequest:
					for i := range s.strays {
						stray := unsignedAnswer(b, lradius.CodeAccessAccept, nil)
						stray[1] = 200 + byte(i%50)
						out = append(out, stray)
					}
					out = append(out, unsignedAnswer(b, lradius.CodeAccessAccept, lradius.Attributes{proxyState}))
				case lradius.CodeStatusServer:
					out = append(out, unsignedAnswer(b, lradius.CodeAccessAccept, nil))
				default:
					ans, _ := radius.EncodeResponse(b, lradius.CodeAccountingResponse, nil, testSecret)
					out = append(out, ans)
				}
				if tc.WriteMessages(out...) != nil {
					return
				}
			}
		}()
	}
}

// By default the client Peer drops an Access-Accept without a
// Message-Authenticator, with or without injected Proxy-State: the call
// fails with ErrNoMessageAuthenticator, counted; the connection stays up
// and the watchdog stays OKAY on Status-Server answers without one
// (FreeRADIUS before 3.2.5 sends them so). RequireMANever accepts the
// Access-Accept.
func TestPeerRequiresMAInAccessAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		go (&oldServer{}).serveAll(ln)
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if _, err := p.Exchange(context.Background(), accessReq("alice")); !errors.Is(err, radius.ErrNoMessageAuthenticator) {
			t.Fatalf("Access-Accept without Message-Authenticator: %v, want ErrNoMessageAuthenticator", err)
		}
		if _, err := p.Exchange(context.Background(), acctReq("s1")); err != nil {
			t.Fatalf("Accounting-Response: %v", err)
		}
		time.Sleep(20 * time.Second) // Status-Servers answered without one
		synctest.Wait()
		if st := p.Stats(); st.NoMA != 1 || st.Answered != 1 || st.BadAuth != 0 || st.StatusAnswered < 2 || p.State() != watchdog.Okay {
			t.Fatalf("%s, stats %+v", p.State(), st)
		}
		mustClose(t, p)

		cfg.RequireMessageAuthenticator = RequireMANever
		p, _ = Dial("radius+tcp://server:1812", cfg)
		synctest.Wait()
		if r, err := p.Exchange(context.Background(), accessReq("alice")); err != nil || r.Packet.Code != lradius.CodeAccessAccept {
			t.Fatalf("RequireMANever: %v", err)
		}
		mustClose(t, p)
		ln.Close()
	})
}

// RequireMAAlways requires one in Status-Server answers too: those of a
// server that sends none do not count, and the watchdog takes it out of
// service.
func TestPeerRequireMAAlwaysStatusServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		go (&oldServer{}).serveAll(ln)
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		cfg.RequireMessageAuthenticator = RequireMAAlways
		p, _ := Dial("radius+tcp://server:1812", cfg)
		synctest.Wait()
		time.Sleep(13 * time.Second)
		synctest.Wait()
		if st := p.Stats(); st.StatusAnswered != 0 || st.NoMA < 1 || p.InService() {
			t.Fatalf("%s, stats %+v; want out of service, Status-Server answers dropped", p.State(), st)
		}
		mustClose(t, p)
		ln.Close()
	})
}

// countHandler counts the log records at or above Warn.
type countHandler struct{ n atomic.Int64 }

func (h *countHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *countHandler) Handle(context.Context, slog.Record) error    { h.n.Add(1); return nil }
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *countHandler) WithGroup(string) slog.Handler                { return h }

// Answers that match no request are counted and logged at a bounded rate:
// a server (or whoever forges its packets) sending thousands of them gets
// neither a log line nor an event each.
func TestUnmatchedAnswersRateLimited(t *testing.T) {
	ln := newPipeListener()
	go (&oldServer{strays: 500}).serveAll(ln)
	cfg := testConfig(30 * time.Second)
	cfg.Dialer = ln.dialer()
	cfg.RequireMessageAuthenticator = RequireMANever
	h := &countHandler{}
	cfg.Logger = slog.New(h)
	cfg.Events = peer.NewBus()
	var events atomic.Int64
	defer cfg.Events.Subscribe(func(_ context.Context, e peer.Event) {
		if e.Kind == peer.EventError {
			events.Add(1)
		}
	})()
	before := serve.Count(serve.KindUnmatched)
	p, err := Dial("radius+tcp://server:1812", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Exchange(ctx, accessReq(fmt.Sprint("u", i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if st := p.Stats(); st.Unmatched != 2000 {
		t.Fatalf("stats %+v, want 2000 unmatched", st)
	}
	if n := serve.Count(serve.KindUnmatched) - before; n < 2000 {
		t.Errorf("%d unmatched counted by the log limiter, want 2000", n)
	}
	if n := h.n.Load(); n > 25 {
		t.Errorf("%d log lines for 2000 unmatched answers", n)
	}
	if n := events.Load(); n != 0 {
		t.Errorf("%d error events for unmatched answers, want none", n)
	}
	mustClose(t, p)
	ln.Close()
}

// A malformed reply over UDP is counted and logged (at the shared
// bounded rate); over TCP a bad frame closes the connection, is logged,
// and the requests lost with it say why.
func TestMalformedRepliesLogged(t *testing.T) {
	t.Run("udp", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := newMemNet()
			f := startFake(n, "srv:1812", noAnswer)
			defer f.close()
			p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{})
			submit(t, p, accessReq("x"))
			synctest.Wait()
			before := serve.Count(serve.KindBadFrame)
			f.end.WriteTo([]byte{2, 1, 0, 5, 0}, memAddr(f.arrivals()[0].from))
			synctest.Wait()
			if st := p.Stats(); st.BadReplies != 1 {
				t.Errorf("BadReplies %d, want 1", st.BadReplies)
			}
			if got := serve.Count(serve.KindBadFrame) - before; got < 1 {
				t.Error("malformed reply not logged")
			}
		})
	})
	t.Run("tcp", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ln := newPipeListener()
			go func() {
				tc, err := ln.Accept()
				if err != nil {
					return
				}
				defer tc.Close()
				for {
					b, err := tc.ReadMessage()
					if err != nil {
						return
					}
					if radius.Code(b) == lradius.CodeStatusServer {
						ans, _ := radius.EncodeResponse(b, lradius.CodeAccessAccept, nil, testSecret)
						tc.WriteMessages(ans)
						continue
					}
					tc.WriteMessages([]byte{2, radius.Identifier(b), 0, 5, 0})
				}
			}()
			cfg := testConfig(30 * time.Second)
			cfg.Dialer = ln.dialer()
			cfg.Logger = quietLogger
			p, err := Dial("radius+tcp://s:1812", cfg)
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			before := serve.Count(serve.KindBadFrame)
			cl := newCall(accessReq("u"))
			if err := p.submit(cl); err != nil {
				t.Fatal(err)
			}
			_, err = cl.wait(context.Background(), time.Minute)
			if !errors.Is(err, ErrConnectionLost) || !errors.Is(err, radius.ErrBadFrame) {
				t.Errorf("err %v, want the connection lost to a bad frame", err)
			}
			if got := serve.Count(serve.KindBadFrame) - before; got < 1 {
				t.Error("bad frame not logged")
			}
			mustClose(t, p)
			ln.Close()
		})
	})
}

// A request the server sends on a client connection is dropped, counted
// (Stats.RequestsDropped) and logged at a bounded rate; the connection
// and the request in flight on it go on.
func TestRequestFromTheServerDroppedAndCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		go func() {
			tc, err := ln.Accept()
			if err != nil {
				return
			}
			defer tc.Close()
			for {
				b, err := tc.ReadMessage()
				if err != nil {
					return
				}
				if radius.Code(b) != lradius.CodeStatusServer {
					disconnect := make([]byte, 20)
					disconnect[0], disconnect[1], disconnect[3] = byte(lradius.CodeDisconnectRequest), 9, 20
					tc.WriteMessages(disconnect)
				}
				ans, _ := radius.EncodeResponse(b, lradius.CodeAccessAccept, nil, testSecret)
				tc.WriteMessages(ans)
			}
		}()
		cfg := testConfig(30 * time.Second)
		cfg.Dialer = ln.dialer()
		cfg.Logger = quietLogger
		p, err := Dial("radius+tcp://s:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		before := serve.Count(serve.KindBadRequest)
		cl := newCall(accessReq("u"))
		if err := p.submit(cl); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.wait(context.Background(), time.Minute); err != nil {
			t.Errorf("the request in flight failed: %v", err)
		}
		if st := p.Stats(); st.RequestsDropped != 1 {
			t.Errorf("RequestsDropped %d, want 1", st.RequestsDropped)
		}
		if got := serve.Count(serve.KindBadRequest) - before; got < 1 {
			t.Error("request from the server not logged")
		}
		mustClose(t, p)
		ln.Close()
	})
}
