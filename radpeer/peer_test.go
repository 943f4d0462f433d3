package radpeer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"
)

func TestIDRingLeastRecentlyUsed(t *testing.T) {
	r := newIDRing()
	a, b, c := r.pop(), r.pop(), r.pop()
	if a != 1 || b != 2 || c != 3 {
		t.Fatalf("first IDs %d %d %d", a, b, c)
	}
	r.push(b)
	r.push(a)
	var got []byte
	for r.n > 0 {
		got = append(got, r.pop())
	}
	if len(got) != 254 || got[0] != 4 || got[251] != 255 || got[252] != 2 || got[253] != 1 {
		t.Fatalf("order after releasing 2 then 1: starts %v, ends %v (len %d)", got[:3], got[len(got)-3:], len(got))
	}
	if slices.Contains(got, 0) || slices.Contains(got, 3) {
		t.Fatal("handed out ID 0 or an ID in use")
	}
}

// A client Peer and a Server over loopback TCP: Access-Request and
// Accounting-Request answered and verified, Status-Server keeping OKAY.
func TestLoopbackExchange(t *testing.T) {
	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	p, err := Dial("radius+tcp://"+ln.Addr().String(), testConfig(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, p, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	r, err := p.Exchange(ctx, accessReq("alice"))
	if err != nil || r.Packet.Code != lradius.CodeAccessAccept {
		t.Fatalf("Access-Request: %+v, %v", r, err)
	}
	if _, ok := radius.Attr(r.Raw, radius.AttrMessageAuthenticator); !ok {
		t.Fatal("Access-Accept without Message-Authenticator")
	}
	r, err = p.Exchange(ctx, acctReq("s1"))
	if err != nil || r.Packet.Code != lradius.CodeAccountingResponse {
		t.Fatalf("Accounting-Request: %+v, %v", r, err)
	}
	if st := srv.Stats(); st.Received != 2 || st.Answered != 2 {
		t.Fatalf("server stats %+v", st)
	}
	if st := p.Stats(); st.Sent != 2 || st.Answered != 2 || st.BadAuth != 0 {
		t.Fatalf("client stats %+v", st)
	}
}

// With every Identifier of the first connection taken, a second one is
// opened; with MaxConns reached, calls wait up to MaxWaiting and then
// fail with ErrBusy. Released, everything is answered.
func TestIdentifierExhaustion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		g := &gate{ch: make(chan struct{})}
		srv, _ := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret, Handler: g.handler, MaxInFlight: 1000})
		go srv.Serve()
		cfg := testConfig(30 * time.Second)
		cfg.Dialer = ln.dialer()
		cfg.MaxConns = 2
		cfg.MaxWaiting = 10
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		const n = 2*IDsPerConn + 10
		calls := make([]*rcall, n)
		for i := range calls {
			calls[i] = newCall(accessReq(fmt.Sprint("u", i)))
			if err := p.submit(calls[i]); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			synctest.Wait()
		}
		if err := p.submit(newCall(accessReq("one too many"))); !errors.Is(err, ErrBusy) {
			t.Fatalf("beyond the bound: %v, want ErrBusy", err)
		}
		st := p.Stats()
		if len(st.Conns) != 2 || st.Conns[0].Pending != IDsPerConn || st.Conns[1].Pending != IDsPerConn || st.Waiting != 10 {
			t.Fatalf("stats %+v", st)
		}
		if int(g.waiting.Load()) != 2*IDsPerConn {
			t.Fatalf("%d requests reached the server, want %d", g.waiting.Load(), 2*IDsPerConn)
		}
		close(g.ch)
		for i, cl := range calls {
			r, err := cl.wait(context.Background(), time.Minute)
			if err != nil || r.Packet.Code != lradius.CodeAccessAccept {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		mustClose(t, p, srv)
	})
}

// stalledServer reads and answers nothing until unstall; then it answers
// Status-Servers (and counts them) like a Server would.
type scriptServer struct {
	mu       sync.Mutex
	answer   bool
	statuses []byte // Identifiers of Status-Servers received
	auths    [][16]byte
}

// serveAll serves every connection ln accepts, until ln is closed.
func (s *scriptServer) serveAll(t *testing.T, ln *pipeListener) {
	for {
		tc, err := ln.Accept()
		if err != nil {
			return
		}
		go s.serve(t, tc)
	}
}

func (s *scriptServer) serve(t *testing.T, tc transport.Conn) {
	defer tc.Close()
	for {
		b, err := tc.ReadMessage()
		if err != nil {
			return
		}
		s.mu.Lock()
		answer := s.answer
		if radius.Code(b) == lradius.CodeStatusServer {
			if err := radius.VerifyRequest(b, testSecret, true); err != nil {
				t.Errorf("Status-Server: %v", err)
			}
			s.statuses = append(s.statuses, radius.Identifier(b))
			s.auths = append(s.auths, radius.Authenticator(b))
		}
		s.mu.Unlock()
		if answer {
			code := lradius.CodeAccessAccept
			if radius.Code(b) == lradius.CodeAccountingRequest {
				code = lradius.CodeAccountingResponse
			}
			ans, _ := radius.EncodeResponse(b, code, nil, testSecret)
			if tc.WriteMessages(ans) != nil {
				return
			}
		}
	}
}

// The watchdog over a connection: Status-Server on ID 0 every Tw while
// idle, fresh authenticators, never retransmitted; a silent server goes
// OKAY -> SUSPECT after 2 Tw and DOWN after 3; reopened, it needs three
// answered Status-Servers to be OKAY again, each one Tw apart.
func TestWatchdogStatusServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		s := &scriptServer{answer: true}
		go s.serveAll(t, ln)
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		cfg.Events = peer.NewBus()
		var rec recorder
		defer rec.watch(cfg.Events)() // before Dial: the first connection's INITIAL > OKAY may come before Dial returns
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !p.InService() {
			t.Fatal("not in service after the first connection")
		}
		start := time.Now()
		time.Sleep(6*time.Second + time.Millisecond)
		synctest.Wait()
		if st := p.Stats(); st.StatusSent != 1 || st.StatusAnswered != 1 {
			t.Fatalf("after one Tw: %+v", st)
		}
		// An answer to a request resets Tw: no Status-Server 6 s after it.
		time.Sleep(3 * time.Second)
		if _, err := p.Exchange(context.Background(), accessReq("a")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second) // 13 s: the Tw armed at 6 s would have fired at 12 s
		synctest.Wait()
		if st := p.Stats(); st.StatusSent != 1 {
			t.Fatalf("a Status-Server went out although an answer reset Tw: %+v", st)
		}
		s.mu.Lock()
		s.answer = false
		s.mu.Unlock()
		// Silent from 13 s: Tw fires at 15 s (Status-Server), 21 s (SUSPECT),
		// 27 s (DOWN).
		time.Sleep(15*time.Second - time.Since(start) + time.Millisecond)
		synctest.Wait()
		if st := p.Stats(); st.StatusSent != 2 {
			t.Fatalf("at 15 s: %+v", st)
		}
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if p.State() != watchdog.Suspect || p.InService() {
			t.Fatalf("at 21 s: %s", p.State())
		}
		if err := p.submit(newCall(accessReq("b"))); !errors.Is(err, ErrNotInService) {
			t.Fatalf("Submit while SUSPECT: %v", err)
		}
		s.mu.Lock()
		s.answer = true // the next connection is answered
		s.mu.Unlock()
		time.Sleep(6 * time.Second)
		synctest.Wait()
		// DOWN at 27 s, reopened at 33 s (AttemptOpen once per Tw) ->
		// REOPEN with a Status-Server at once, then one per Tw.
		time.Sleep(6*time.Second + 12*time.Second)
		synctest.Wait()
		want := []string{"INITIAL>OKAY", "OKAY>SUSPECT", "SUSPECT>DOWN", "DOWN>REOPEN", "REOPEN>OKAY"}
		if got := rec.get(); !slices.Equal(got, want) {
			t.Fatalf("transitions %v, want %v", got, want)
		}
		s.mu.Lock()
		ids, auths := slices.Clone(s.statuses), slices.Clone(s.auths)
		s.mu.Unlock()
		for i, id := range ids {
			if id != 0 {
				t.Fatalf("Status-Server %d on ID %d", i, id)
			}
			for j := range i {
				if auths[j] == auths[i] {
					t.Fatalf("Status-Servers %d and %d share an authenticator", j, i)
				}
			}
		}
		// 1 (6 s) + 1 (15 s, unanswered) + 3 while reopening; none
		// retransmitted while SUSPECT.
		if len(ids) != 5 {
			t.Fatalf("%d Status-Servers, want 5", len(ids))
		}
		mustClose(t, p)
		ln.Close()
	})
}

// An answer on an unused Identifier is dropped and counted; an answer
// that fails verification closes the connection (RFC 6613 2.6.4).
func TestBadAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		var forge byte // 1: answer with a wrong authenticator; 2: also on an unused ID
		var mu sync.Mutex
		go func() {
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
						ans, _ := radius.EncodeResponse(b, lradius.CodeAccessAccept, nil, testSecret)
						mu.Lock()
						f := forge
						mu.Unlock()
						if f == 2 && radius.Code(b) == lradius.CodeAccessRequest {
							stray := append([]byte(nil), ans...)
							stray[1] = 77
							tc.WriteMessages(stray)
						}
						if f == 1 && radius.Code(b) == lradius.CodeAccessRequest {
							ans[5] ^= 1
						}
						tc.WriteMessages(ans)
					}
				}()
			}
		}()
		cfg := testConfig(30 * time.Second)
		cfg.Dialer = ln.dialer()
		p, _ := Dial("radius+tcp://server:1812", cfg)
		synctest.Wait()
		mu.Lock()
		forge = 2
		mu.Unlock()
		if _, err := p.Exchange(context.Background(), accessReq("a")); err != nil {
			t.Fatalf("answer after a stray one: %v", err)
		}
		if st := p.Stats(); st.Unmatched != 1 || !p.InService() {
			t.Fatalf("after a stray answer: %+v", st)
		}
		mu.Lock()
		forge = 1
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := p.Exchange(ctx, accessReq("b"))
		cancel()
		if !errors.Is(err, ErrConnectionLost) {
			t.Fatalf("forged answer: %v, want ErrConnectionLost", err)
		}
		synctest.Wait()
		if st := p.Stats(); st.BadAuth != 1 || p.State() != watchdog.Down {
			t.Fatalf("after a forged answer: %s %+v", p.State(), st)
		}
		mustClose(t, p)
		ln.Close()
	})
}

// Calls of a connection that goes SUSPECT are handed to the failover hook in
// send order, and a late answer on the old connection still completes
// them only once.
func TestFailoverHandsOverPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lnA, lnB := newPipeListener(), newPipeListener()
		a := &scriptServer{answer: true}
		go func() {
			tc, err := lnA.Accept()
			if err == nil {
				a.serve(t, tc)
			}
		}()
		srvB, _ := NewServer(lnB, SchemeTCP, ServerConfig{Secret: testSecret})
		go srvB.Serve()
		cfgB := testConfig(30 * time.Second)
		cfgB.Dialer = lnB.dialer()
		pb, _ := Dial("radius+tcp://b:1812", cfgB)
		cfgA := testConfig(6 * time.Second)
		cfgA.Dialer = lnA.dialer()
		var moved []*call.Call
		var reason string
		cfgA.Failover = func(from call.Carrier, calls []*call.Call, why string) {
			moved, reason = append(moved, calls...), why
			for _, cl := range calls {
				if err := pb.submit(rcallOf(cl)); err != nil {
					cl.Fail(err)
				}
			}
		}
		pa, _ := Dial("radius+tcp://a:1812", cfgA)
		synctest.Wait()
		a.mu.Lock()
		a.answer = false
		a.mu.Unlock()
		calls := []*rcall{newCall(acctReq("1")), newCall(acctReq("2")), newCall(acctReq("3"))}
		for _, cl := range calls {
			if err := pa.submit(cl); err != nil {
				t.Fatal(err)
			}
		}
		for _, cl := range calls {
			r, err := cl.wait(context.Background(), time.Minute)
			if err != nil || r.Peer != pb {
				t.Fatalf("after failover: %v, answered by %v", err, r)
			}
			if cl.Sends() != 2 || cl.First() != pa {
				t.Fatalf("sends %d, first %v", cl.Sends(), cl.First())
			}
		}
		if len(moved) != 3 || moved[0] != &calls[0].Call || moved[2] != &calls[2].Call || reason != ReasonStatusTimeout {
			t.Fatalf("moved %d calls, reason %q", len(moved), reason)
		}
		mustClose(t, pa, pb, srvB)
		lnA.Close()
	})
}

// A request pending on an OKAY connection is never submitted to that
// server again (RFC 6613 2.6.1): avoids says so and submit refuses it
// with ErrAlreadySent, while a fresh request still goes.
func TestNeverResentWhileItsConnectionIsOkay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		s := &scriptServer{answer: false}
		go func() {
			if tc, err := ln.Accept(); err == nil {
				s.serve(t, tc)
			}
		}()
		cfg := testConfig(30 * time.Second)
		cfg.Dialer = ln.dialer()
		p, _ := Dial("radius+tcp://a:1812", cfg)
		synctest.Wait()
		cl := newCall(acctReq("1"))
		if p.avoids(&cl.Call) {
			t.Fatal("a call never sent avoids the server")
		}
		if err := p.submit(cl); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !p.avoids(&cl.Call) {
			t.Fatal("a call pending on an OKAY connection does not avoid its server")
		}
		if err := p.submit(cl); !errors.Is(err, ErrAlreadySent) {
			t.Fatalf("second submit: %v, want ErrAlreadySent", err)
		}
		if cl.Sends() != 1 {
			t.Fatalf("sent %d times", cl.Sends())
		}
		other := newCall(acctReq("2"))
		if err := p.submit(other); err != nil {
			t.Fatalf("another call: %v", err)
		}
		mustClose(t, p)
		ln.Close()
	})
}

// Without a failover hook, a call waiting for an Identifier when the
// server leaves service stays waiting (as moveOut says: "they stay where
// they are"), and goes out once the server is back, instead of being
// forgotten until its deadline.
func TestWaitingCallKeptWhenServiceLostWithoutHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		s := &scriptServer{answer: false}
		go s.serveAll(t, ln)
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		cfg.MaxConns = 1
		cfg.MaxWaiting = 10
		p, err := Dial("radius+tcp://a:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for i := range IDsPerConn {
			if err := p.submit(newCall(acctReq(fmt.Sprint(i)))); err != nil {
				t.Fatal(err)
			}
		}
		waiter := newCall(acctReq("waiter"))
		if err := p.submit(waiter); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if st := p.Stats(); st.Waiting != 1 {
			t.Fatalf("waiting %d, want 1", st.Waiting)
		}
		time.Sleep(12*time.Second + time.Millisecond) // SUSPECT
		synctest.Wait()
		if p.InService() {
			t.Fatal("still in service")
		}
		if st := p.Stats(); st.Waiting != 1 {
			t.Fatalf("SUSPECT without a failover hook: waiting %d, want 1", st.Waiting)
		}
		s.mu.Lock()
		s.answer = true // the reopened connection is answered
		s.mu.Unlock()
		r, err := waiter.wait(context.Background(), 2*time.Minute)
		if err != nil {
			t.Fatalf("the waiting call: %v", err)
		}
		if r.Packet.Code != lradius.CodeAccountingResponse {
			t.Fatalf("answer %v", r.Packet.Code)
		}
		mustClose(t, p)
		ln.Close()
	})
}

// A subscriber that blocks (which peer.Bus forbids, but a slow one is the
// same for a moment) holds up only the delivery of the events after it:
// events run on the Peer's own notice queue, not on its readers, dialers
// or callers, so requests are still answered, and Done waits for the
// events to be delivered.
func TestBlockedSubscriberHoldsNoConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		s := &scriptServer{answer: true}
		go s.serveAll(t, ln)
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		cfg.Events = peer.NewBus()
		release := make(chan struct{})
		var once sync.Once
		defer cfg.Events.Subscribe(func(context.Context, peer.Event) { once.Do(func() { <-release }) })()
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := p.Exchange(ctx, accessReq("a")); err != nil {
			t.Fatalf("with a subscriber blocked: %v", err)
		}
		p.Close(context.Background())
		synctest.Wait()
		select {
		case <-p.Done():
			t.Fatal("Done before the blocked event was delivered")
		default:
		}
		close(release)
		<-p.Done()
		ln.Close()
	})
}

// Drain: the calls in flight get their answers; from the drain on the
// server takes nothing new (not in service), and it closes once they are
// done, not before.
func TestDrainAnswersInFlightThenCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ln := startServer(t, ServerConfig{Handler: func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
			time.Sleep(time.Second)
			return lradius.CodeAccountingResponse, nil
		}})
		p := dialTo(t, ln)
		synctest.Wait()
		calls := []*rcall{newCall(acctReq("1")), newCall(acctReq("2"))}
		for _, cl := range calls {
			require.NoError(t, p.submit(cl))
		}
		drained := make(chan error, 1)
		go func() { drained <- p.Drain(context.Background()) }()
		synctest.Wait()
		require.False(t, p.InService())
		var nis *NotInServiceError
		require.ErrorAs(t, p.submit(newCall(acctReq("3"))), &nis, "nothing new while draining")
		select {
		case <-p.Done():
			t.Fatal("closed with calls in flight")
		default:
		}
		for _, cl := range calls {
			r, err := cl.wait(context.Background(), time.Minute)
			require.NoError(t, err, "a call in flight is answered")
			require.Equal(t, lradius.CodeAccountingResponse, r.Packet.Code)
		}
		require.NoError(t, <-drained)
		<-p.Done()
		mustClose(t, s)
	})
}

// Replied is told of every verified answer before it completes its
// call, and of a late one, whose caller gave up first: each shows the
// server alive.
func TestRepliedToldOfEveryVerifiedAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, ln := startServer(t, ServerConfig{Handler: func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
			if string(req.Get(radius.AttrAcctSessionID)) == "slow" {
				time.Sleep(2 * time.Second)
			}
			return lradius.CodeAccountingResponse, nil
		}})
		var mu sync.Mutex
		var told, doneBefore int
		var cur *rcall
		var p *Peer
		cfg := testConfig(30 * time.Second)
		cfg.Dialer = ln.dialer()
		cfg.Replied = func(from call.Carrier) {
			mu.Lock()
			defer mu.Unlock()
			if from != call.Carrier(p) {
				t.Errorf("Replied from %v, want the peer", from)
			}
			told++
			if cur != nil && cur.IsDone() {
				doneBefore++
			}
		}
		mu.Lock()
		p, err := Dial("radius+tcp://s:1812", cfg)
		mu.Unlock()
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()

		cl := newCall(acctReq("1"))
		mu.Lock()
		cur = cl
		mu.Unlock()
		require.NoError(t, p.submit(cl))
		_, err = cl.wait(context.Background(), time.Minute)
		require.NoError(t, err)
		mu.Lock()
		require.Equal(t, 1, told, "told of the answer")
		require.Equal(t, 0, doneBefore, "before it completed its call")
		cur = nil
		mu.Unlock()

		slow := newCall(acctReq("slow"))
		require.NoError(t, p.submit(slow))
		_, err = slow.wait(context.Background(), time.Second)
		require.Error(t, err, "its caller gives up before the answer")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		mu.Lock()
		require.Equal(t, 2, told, "told of the late answer too")
		mu.Unlock()
		require.Equal(t, uint64(1), p.Stats().Late)
		mustClose(t, s)
	})
}

// A subscriber told of a watchdog transition reads the new InService:
// the Client rebuilds its view on the event and reads it then. The log
// line of the transition, written after the event is queued, is held
// until the subscriber has looked (or a second has passed), so that a
// state changed only after the event is seen stale.
func TestInServiceChangedBeforeTheTransitionIsPublished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		defer ln.Close()
		s := &scriptServer{answer: true}
		go s.serveAll(t, ln)
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		cfg.Events = peer.NewBus()
		looked := make(chan struct{}, 1)
		cfg.Logger = slog.New(holdHandler{msg: "watchdog", to: "SUSPECT", until: looked})
		var mu sync.Mutex
		var seen []string
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer cfg.Events.Subscribe(func(_ context.Context, e peer.Event) {
			if e.Kind != peer.EventWatchdog {
				return
			}
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s:%v", e.To, p.InService()))
			mu.Unlock()
			if e.To == watchdog.Suspect {
				looked <- struct{}{}
			}
		})()
		synctest.Wait()
		s.mu.Lock()
		s.answer = false
		s.mu.Unlock()
		time.Sleep(13 * time.Second) // silent: SUSPECT after 2 Tw
		synctest.Wait()
		p.Close(context.Background())
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(seen, "SUSPECT:false") {
			t.Fatalf("a subscriber told of the move to SUSPECT read InService %v, want false", seen)
		}
	})
}

// holdHandler is a slog handler that holds the log line msg whose "to"
// is to until something is received from until, or a second has passed.
type holdHandler struct {
	msg, to string
	until   <-chan struct{}
}

func (h holdHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h holdHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h holdHandler) WithGroup(string) slog.Handler            { return h }
func (h holdHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != h.msg {
		return nil
	}
	hold := false
	r.Attrs(func(a slog.Attr) bool {
		hold = hold || a.Key == "to" && a.Value.String() == h.to
		return true
	})
	if hold {
		select {
		case <-h.until:
		case <-time.After(time.Second):
		}
	}
	return nil
}

// A Logger that does not return holds no lock of the Peer: its lines wait
// on the notice queue while requests are answered and the watchdog goes
// on.
func TestSlowLoggerHoldsNoLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		defer ln.Close()
		go (&scriptServer{answer: true}).serveAll(t, ln)
		var h testhelp.HeldLog
		h.Hold()
		defer h.Release()
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		cfg.Logger = slog.New(&h)
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if h.Waiting() == 0 {
			t.Fatal("the INITIAL > OKAY line is not held")
		}
		// A goroutine waiting on a mutex would keep the bubble from ever
		// being idle: look at the lock itself.
		if !p.mu.TryLock() {
			t.Fatal("the Peer's lock is held while the Logger holds a line")
		}
		p.mu.Unlock()
		if _, err := p.Exchange(context.Background(), accessReq("a")); err != nil {
			t.Fatalf("while the Logger held a line: %v", err)
		}
		time.Sleep(6*time.Second + time.Millisecond)
		synctest.Wait()
		if st := p.Stats(); st.StatusSent != 1 || st.StatusAnswered != 1 {
			t.Fatalf("at Tw while the Logger held a line: %+v", st)
		}
		h.Release()
		synctest.Wait() // the held lines are written on the Peer's queue, after Release
		mustClose(t, p)
		if !slices.Contains(h.Msgs(), "watchdog") {
			t.Fatalf("lines written: %q", h.Msgs())
		}
	})
}

// lateClose is a connection whose reader notices its Close only after a
// while (a socket whose close waits on the kernel): the Peer's Close
// waits for that reader.
type lateClose struct {
	transport.Conn
	after time.Duration
}

func (c lateClose) Close() error {
	time.AfterFunc(c.after, func() { c.Conn.Close() })
	return nil
}

// Close called by a subscriber with the context it got closes the Peer
// and returns without waiting for its goroutines (here a reader that takes
// 3 s to end); a Close from another goroutine waits for them.
func TestCloseWithTheSubscribersContextDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		s := &scriptServer{answer: true}
		go s.serveAll(t, ln)
		defer ln.Close()
		cfg := testConfig(6 * time.Second)
		dial := ln.dialer()
		cfg.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			c, err := dial(ctx, url)
			if err != nil {
				return nil, err
			}
			return lateClose{c, 3 * time.Second}, nil
		}
		cfg.Events = peer.NewBus()
		var pp atomic.Pointer[Peer]
		ready := make(chan struct{})
		took := make(chan time.Duration, 1)
		var once sync.Once
		defer cfg.Events.Subscribe(func(ctx context.Context, e peer.Event) {
			if e.Kind == peer.EventWatchdog && e.To == watchdog.Okay {
				once.Do(func() {
					<-ready
					start := time.Now()
					if err := pp.Load().Close(ctx); err != nil {
						t.Errorf("Close: %v", err)
					}
					took <- time.Since(start)
				})
			}
		})()
		p, err := Dial("radius+tcp://server:1812", cfg)
		require.NoError(t, err)
		pp.Store(p)
		close(ready)
		require.Zero(t, <-took, "Close returned without waiting for the reader")
		start := time.Now()
		require.NoError(t, p.Close(context.Background()))
		require.Equal(t, 3*time.Second, time.Since(start), "Close from another goroutine waits for it")
		<-p.Done()
	})
}

// A Server's subscribers run on its connections' goroutines, which its
// Close waits for: Close called by one with the context it got closes the
// Server and returns.
func TestServerCloseFromSubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		bus := peer.NewBus()
		srv, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret, Handler: AcceptAll, Events: bus})
		require.NoError(t, err)
		served := make(chan error, 1)
		go func() { served <- srv.Serve() }()
		closed := make(chan error, 1)
		subCtx := make(chan context.Context, 1)
		defer bus.Subscribe(func(ctx context.Context, e peer.Event) {
			if e.Kind == peer.EventConnUp {
				closed <- srv.Close(ctx)
				subCtx <- ctx
			}
		})()
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		p, err := Dial("radius+tcp://server:1812", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		require.NoError(t, <-closed)
		require.NoError(t, srv.Close(<-subCtx), "again, with that context")
		<-served
		synctest.Wait()
		require.Zero(t, srv.Stats().Open, "its connection closed")
	})
}

// slowClose is a connection whose Close returns a second after the
// socket is closed (a TLS close_notify): its reader has ended by then.
type slowClose struct{ transport.Conn }

func (c slowClose) Close() error {
	err := c.Conn.Close()
	time.Sleep(time.Second)
	return err
}

// A Close called while another is closing the socket does not return
// before every request pending on the connection has been failed,
// although the connection's reader, whose end a later Close once waited
// for alone, ended as the socket closed, before the requests were failed.
func TestConcurrentCloseReturnsAfterPendingFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		s := &scriptServer{}
		go s.serveAll(t, ln)
		defer ln.Close()
		cfg := testConfig(30 * time.Second)
		dial := ln.dialer()
		cfg.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			c, err := dial(ctx, url)
			if err != nil {
				return nil, err
			}
			return slowClose{c}, nil
		}
		p, err := Dial("radius+tcp://server:1812", cfg)
		require.NoError(t, err)
		require.NoError(t, p.WaitState(context.Background(), watchdog.Okay))
		calls := make([]*rcall, 50)
		for i := range calls {
			calls[i] = newCall(accessReq(fmt.Sprint("u", i)))
			require.NoError(t, p.submit(calls[i]))
		}
		synctest.Wait()
		check := func(who string) {
			left := 0
			for _, cl := range calls {
				if !cl.IsDone() {
					left++
				}
			}
			require.Zero(t, left, "requests not failed yet when the %s Close returned", who)
		}
		first := make(chan error, 1)
		go func() { first <- p.Close(context.Background()) }()
		synctest.Wait() // the first is closing the socket
		require.NoError(t, p.Close(context.Background()))
		check("second")
		require.NoError(t, <-first)
		check("first")
	})
}

// A connection that cannot be opened is logged at warn, as a Diameter
// peer's is, naming the server by its RADIUS URL (not the tcp:// the
// transport dialed) and the reason.
func TestOpenFailedLoggedWithURL(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "radius+tcp://" + l.Addr().String()
	l.Close() // nothing listens there now
	var out testhelp.SyncBuffer
	cfg := testConfig(6 * time.Second)
	cfg.Logger = slog.New(slog.NewTextHandler(&out, nil))
	p, err := Dial(url, cfg)
	require.NoError(t, err)
	defer p.Close(context.Background())
	for i := 0; !strings.Contains(out.String(), "open failed"); i++ {
		if i == 500 {
			t.Fatalf("no open failed line in 5 s:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var line string
	for _, s := range strings.Split(out.String(), "\n") {
		if strings.Contains(s, "open failed") {
			line = s
		}
	}
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "err=\""+url+": ") || !strings.Contains(line, "refused") {
		t.Errorf("open failed line %q: want a warning naming %s and the refusal", line, url)
	}
}

// A dial that Close cuts short is no failure to report: nothing is
// logged or published after Close, whose notice queue has ended (a line
// delivered then would come after Done).
func TestCloseDuringDialReportsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out testhelp.SyncBuffer
		cfg := testConfig(6 * time.Second)
		cfg.Logger = slog.New(slog.NewTextHandler(&out, nil))
		cfg.Dialer = func(ctx context.Context, _ string) (transport.Conn, error) {
			<-ctx.Done() // a server that never answers the SYN
			return nil, ctx.Err()
		}
		var opens atomic.Int32
		cfg.Events = peer.NewBus()
		defer cfg.Events.Subscribe(func(_ context.Context, e peer.Event) {
			if e.Kind == peer.EventOpenFailed {
				opens.Add(1)
			}
		})()
		p, err := Dial("radius+tcp://server:1812", cfg)
		require.NoError(t, err)
		synctest.Wait() // dialing
		require.NoError(t, p.Close(context.Background()))
		<-p.Done()
		synctest.Wait()
		if strings.Contains(out.String(), "open failed") || opens.Load() != 0 {
			t.Errorf("a dial cut short by Close reported: %d events, log:\n%s", opens.Load(), out.String())
		}
	})
}
