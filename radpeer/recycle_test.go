package radpeer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

// dropServer answers Status-Server and every request but those with
// User-Name "drop", which it reads and never answers: the watchdog keeps
// its connections OKAY while their Identifiers leak.
type dropServer struct {
	accepted, closed atomic.Int64
}

func (s *dropServer) serveAll(ln *pipeListener) {
	for {
		tc, err := ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		go s.serve(tc)
	}
}

func (s *dropServer) serve(tc transport.Conn) {
	defer s.closed.Add(1)
	defer tc.Close()
	for {
		b, err := tc.ReadMessage()
		if err != nil {
			return
		}
		if u, _ := radius.Attr(b, radius.AttrUserName); string(u) == "drop" {
			continue
		}
		ans, _ := radius.EncodeResponse(b, lradius.CodeAccessAccept, nil, testSecret)
		if tc.WriteMessages(ans) != nil {
			return
		}
	}
}

// exchangeAll runs n Exchanges of User-Name user at once, each with
// timeout, and returns their errors once all have ended.
func exchangeAll(p *Peer, n int, user string, timeout time.Duration) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_, errs[i] = p.Exchange(ctx, accessReq(user))
		}()
	}
	wg.Wait()
	return errs
}

// dialDropServer starts a dropServer on a pipe listener and dials it with
// Tw 6 s.
func dialDropServer(t *testing.T) (*Peer, *dropServer, *pipeListener) {
	t.Helper()
	ln := newPipeListener()
	srv := &dropServer{}
	go srv.serveAll(ln)
	cfg := testConfig(6 * time.Second)
	cfg.Dialer = ln.dialer()
	p, err := Dial("radius+tcp://server:1812", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, srv, ln
}

// A server that drops some requests but answers Status-Server: after 255
// timeouts every Identifier of the connection is held by a request nobody
// waits for. The next request recycles the connection (counted, with a
// warning event saying why): it is answered on a new connection within
// its deadline, and the old one is closed at once since nothing live is
// left on it. Without recycling that request waits until its deadline.
func TestRecycleConnectionFilledByTimedOutRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, srv, ln := dialDropServer(t)
		var mu sync.Mutex
		var reasons []string
		defer p.Events().Subscribe(func(_ context.Context, e peer.Event) {
			if e.Kind == peer.EventError {
				mu.Lock()
				reasons = append(reasons, e.Reason)
				mu.Unlock()
			}
		})()
		synctest.Wait()
		for i, err := range exchangeAll(p, IDsPerConn, "drop", 20*time.Second) {
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("dropped request %d: %v, want ErrTimeout", i, err)
			}
		}
		st := p.Stats()
		if st.TimedOut != IDsPerConn || len(st.Conns) != 1 || st.Conns[0].Pending != IDsPerConn || st.RecycledConns != 0 {
			t.Fatalf("after the timeouts: %+v", st)
		}
		if st.StatusAnswered == 0 || p.State() != watchdog.Okay {
			t.Fatalf("the watchdog should keep the connection OKAY: %s, %+v", p.State(), st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := p.Exchange(ctx, accessReq("alice"))
		if err != nil || r.Packet.Code != lradius.CodeAccessAccept {
			t.Fatalf("request after the leak: %v", err)
		}
		synctest.Wait()
		st = p.Stats()
		if st.RecycledConns != 1 || len(st.Conns) != 1 || st.Conns[0].Pending != 0 || st.State != "OKAY" {
			t.Fatalf("after the recycle: %+v", st)
		}
		if a, c := srv.accepted.Load(), srv.closed.Load(); a != 2 || c != 1 {
			t.Fatalf("server saw %d connections, %d closed; want 2 and the old one closed", a, c)
		}
		mu.Lock()
		want := fmt.Sprintf("%d Identifiers held by requests that timed out", IDsPerConn)
		if len(reasons) != 1 || !strings.Contains(reasons[0], want) {
			t.Fatalf("events %q, want one saying %q", reasons, want)
		}
		mu.Unlock()
		mustClose(t, p)
		ln.Close()
	})
}

// 255 live requests in flight fill a connection without a recycle: a
// further request waits for an Identifier and is answered when they are.
func TestNoRecycleWhenLiveRequestsFillConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		g := &gate{ch: make(chan struct{})}
		srv, _ := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret, Handler: g.handler, MaxInFlight: 1000})
		go srv.Serve()
		cfg := testConfig(30 * time.Second)
		cfg.Dialer = ln.dialer()
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		calls := make([]*rcall, IDsPerConn+1)
		for i := range calls {
			calls[i] = newCall(accessReq(fmt.Sprint("u", i)))
			if err := p.submit(calls[i]); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			synctest.Wait()
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		st := p.Stats()
		if st.RecycledConns != 0 || len(st.Conns) != 1 || st.Conns[0].Pending != IDsPerConn || st.Waiting != 1 {
			t.Fatalf("a connection full of live requests: %+v", st)
		}
		close(g.ch)
		for i, cl := range calls {
			if _, err := cl.wait(context.Background(), time.Minute); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if st := p.Stats(); st.RecycledConns != 0 {
			t.Fatalf("recycled: %+v", st)
		}
		mustClose(t, p, srv)
	})
}

// At the threshold: with 127 ended requests and 128 live ones holding a
// connection's Identifiers it is not recycled; once 128 have ended it is,
// and it stays open for its live requests, closing when the last of them
// times out.
func TestRecycleThresholdAndDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, srv, ln := dialDropServer(t)
		synctest.Wait()
		var wg sync.WaitGroup
		run := func(n int, timeout time.Duration) {
			wg.Add(1)
			go func() { defer wg.Done(); exchangeAll(p, n, "drop", timeout) }()
			synctest.Wait()
		}
		run(127, 10*time.Second) // stale from 10 s
		run(1, 20*time.Second)   // the 128th stale at 20 s
		run(127, 40*time.Second) // live until 40 s
		time.Sleep(15 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := p.Exchange(ctx, accessReq("alice"))
		cancel()
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("with 127 stale Identifiers: %v, want a wait ending in ErrTimeout", err)
		}
		if st := p.Stats(); st.RecycledConns != 0 {
			t.Fatalf("recycled with 127 stale of 255: %+v", st)
		}
		time.Sleep(5 * time.Second) // 22 s: 128 stale
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		_, err = p.Exchange(ctx, accessReq("alice"))
		cancel()
		if err != nil {
			t.Fatalf("with 128 stale Identifiers: %v", err)
		}
		synctest.Wait()
		if st := p.Stats(); st.RecycledConns != 1 {
			t.Fatalf("not recycled with 128 stale: %+v", st)
		}
		if a, c := srv.accepted.Load(), srv.closed.Load(); a != 2 || c != 0 {
			t.Fatalf("server: %d connections, %d closed; want the old one open for its live requests", a, c)
		}
		wg.Wait() // the live ones time out at 40 s
		synctest.Wait()
		if c := srv.closed.Load(); c != 1 {
			t.Fatalf("old connection not closed after its last live request: %d closed", c)
		}
		// 255 in flight timed out; the waiting request ended off any connection.
		if st := p.Stats(); st.TimedOut != IDsPerConn || st.State != "OKAY" || len(st.Conns) != 1 {
			t.Fatalf("%+v", st)
		}
		mustClose(t, p)
		ln.Close()
	})
}

// A request handed over from a connection that is then recycled may not
// go on the connection that replaces it while the recycled one is still
// open (RFC 6613 2.6.1: the server may still answer it there, and a copy
// on another connection is a duplicate the server cannot tell); it may
// once the recycled connection has closed, its last live request ended.
func TestRecycledConnectionAvoidedUntilItCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		srv := &dropServer{}
		go srv.serveAll(ln)
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		handed := make(chan *call.Call, 4)
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			for _, cl := range calls {
				handed <- cl
			}
		}
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		x := newCall(accessReq("drop")) // never answered: it keeps its Identifier
		if err := p.submit(x); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		p.HandOver("out of service: no reply within the down-timeout", nil, nil)
		synctest.Wait()
		if got := <-handed; got != &x.Call {
			t.Fatalf("handed over %p, want the request %p", got, &x.Call)
		}
		if !p.avoids(&x.Call) {
			t.Fatal("a request handed over from an OKAY connection may go on another connection of its server")
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); exchangeAll(p, 200, "drop", time.Second) }() // stale from 1 s
		synctest.Wait()
		go func() { defer wg.Done(); exchangeAll(p, IDsPerConn-201, "drop", 40*time.Second) }() // live until 40 s
		synctest.Wait()
		time.Sleep(2 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = p.Exchange(ctx, accessReq("alice")) // no Identifier free: recycles the connection
		cancel()
		if err != nil {
			t.Fatalf("request after 200 stale Identifiers: %v", err)
		}
		synctest.Wait()
		if st := p.Stats(); st.RecycledConns != 1 || srv.closed.Load() != 0 {
			t.Fatalf("want the connection recycled and open for its 54 live requests: %+v, %d closed", st, srv.closed.Load())
		}
		if !p.avoids(&x.Call) {
			t.Fatal("a request sent on a recycled connection, still open, may go on its replacement")
		}
		if err := p.submit(x); !errors.Is(err, ErrAlreadySent) {
			t.Fatalf("submit while the recycled connection is open: %v, want ErrAlreadySent", err)
		}
		wg.Wait() // the live requests time out at 40 s: the recycled connection closes
		synctest.Wait()
		if c := srv.closed.Load(); c != 1 {
			t.Fatalf("%d connections closed, want the recycled one", c)
		}
		if p.avoids(&x.Call) {
			t.Fatal("still avoided after the recycled connection closed")
		}
		if err := p.submit(x); err != nil {
			t.Fatalf("submit once the recycled connection closed: %v", err)
		}
		synctest.Wait()
		if n := x.Sends(); n != 2 {
			t.Fatalf("sent %d times, want twice: once on each connection", n)
		}
		x.Fail(errors.New("test over"))
		mustClose(t, p)
		ln.Close()
	})
}

// gateServer answers Status-Server and every request but "drop" (never
// answered); while hold is set it keeps every answer on its first
// connection, Status-Server's too, and sends them when hold is cleared
// (release).
type gateServer struct {
	mu    sync.Mutex
	n     int
	hold  bool
	first transport.Conn
	held  [][]byte
}

func (s *gateServer) serveAll(ln *pipeListener) {
	for {
		tc, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.n++
		first := s.n == 1
		if first {
			s.first = tc
		}
		s.mu.Unlock()
		go s.serve(tc, first)
	}
}

func (s *gateServer) serve(tc transport.Conn, first bool) {
	defer tc.Close()
	for {
		b, err := tc.ReadMessage()
		if err != nil {
			return
		}
		u, _ := radius.Attr(b, radius.AttrUserName)
		if string(u) == "drop" {
			continue
		}
		ans, _ := radius.EncodeResponse(b, lradius.CodeAccessAccept, nil, testSecret)
		s.mu.Lock()
		if first && s.hold {
			s.held = append(s.held, ans)
		} else if tc.WriteMessages(ans) != nil {
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

// release sends what the first connection held; from then on it answers.
func (s *gateServer) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = false
	for _, b := range s.held {
		s.first.WriteMessages(b)
	}
	s.held = nil
}

// avoidAhead sets up a server with maxConns connections: x, sent on the
// first, which the server never answers, is handed over when that
// connection goes SUSPECT (the server holds its Status-Server answers),
// and submitted again behind y; both wait, the second connection full.
// The caller then has the first connection OKAY again (srv.release) and
// reads x's hand-overs from handed; end ends the test's calls and peer.
func avoidAhead(t *testing.T, maxConns int) (p *Peer, srv *gateServer, x, y *rcall, handed chan *call.Call, end func()) {
	t.Helper()
	ln := newPipeListener()
	srv = &gateServer{}
	go srv.serveAll(ln)
	cfg := testConfig(6 * time.Second)
	cfg.Dialer = ln.dialer()
	cfg.MaxConns = maxConns
	x = newCall(accessReq("drop")) // never answered
	handed = make(chan *call.Call, 2)
	cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
		for _, cl := range calls {
			if cl == &x.Call {
				handed <- cl
			}
			// The others wait for their deadlines, holding their
			// Identifiers: no recycle.
		}
	}
	p, err := Dial("radius+tcp://server:1812", cfg)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	if err := p.submit(x); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	run := func(n int) {
		wg.Add(1)
		go func() { defer wg.Done(); exchangeAll(p, n, "drop", time.Minute) }()
		synctest.Wait()
	}
	run(IDsPerConn - 1) // the first connection full
	run(IDsPerConn)     // a second one opens for them, full
	if st := p.Stats(); len(st.Conns) != 2 || st.Waiting != 0 {
		t.Fatalf("want two full connections, nothing waiting: %+v", st)
	}
	srv.mu.Lock()
	srv.hold = true
	srv.mu.Unlock()
	time.Sleep(13 * time.Second) // two Tw: the first connection SUSPECT
	synctest.Wait()
	select {
	case <-handed:
	default:
		t.Fatal("the request was not handed over when its connection went SUSPECT")
	}
	y = newCall(accessReq("alice"))
	if err := p.submit(y); err != nil {
		t.Fatal(err)
	}
	if err := p.submit(x); err != nil {
		t.Fatalf("x, its connection SUSPECT: %v, want it to wait for an Identifier", err)
	}
	if st := p.Stats(); st.Waiting != 2 || x.Sends() != 1 {
		t.Fatalf("want y and x waiting (x sent %d times): %+v", x.Sends(), st)
	}
	return p, srv, x, y, handed, func() {
		x.Fail(errors.New("test over"))
		y.Fail(errors.New("test over"))
		mustClose(t, p)
		wg.Wait()
		ln.Close()
	}
}

// A request waiting for an Identifier of its server, which it was allowed
// to wait for (the connection it was sent on SUSPECT, another OKAY), may
// not take one once that connection is OKAY again (RFC 6613 2.6.1): when
// a further connection opens with every Identifier free, the request
// waiting ahead of it takes one and it goes back to the failover layer.
func TestWaitingRequestAvoidsItsConnectionOkayAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, srv, x, y, handed, end := avoidAhead(t, 3)
		defer end()
		srv.release() // the first connection OKAY again; a third one opens
		synctest.Wait()
		if st := p.Stats(); len(st.Conns) != 3 || st.RecycledConns != 0 {
			t.Fatalf("want a third connection and no recycle (a close would lift x's avoidance): %+v", st)
		}
		if n := x.Sends(); n != 1 {
			t.Fatalf("x sent %d times: on another connection while the one it was sent on is OKAY", n)
		}
		select {
		case <-handed:
		default:
			t.Fatal("x neither sent nor handed back")
		}
		if y.Sends() != 1 {
			t.Fatalf("y sent %d times, want once", y.Sends())
		}
	})
}

// As TestWaitingRequestAvoidsItsConnectionOkayAgain with MaxConns 2: no
// further connection opens when x's connection is OKAY again, and the
// request waiting ahead of x (y) keeps the head of the queue, finding no
// Identifier. x, which may not go on this server now, goes back to the
// failover layer (where another server may take it) when its connection
// is OKAY again, not when an Identifier frees for the requests ahead of
// it.
func TestAvoidedRequestBehindBlockedHeadHandedBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, srv, _, _, handed, end := avoidAhead(t, 2)
		defer end()
		srv.release() // x's connection OKAY again; no connection may be added
		synctest.Wait()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case <-handed:
		default:
			t.Errorf("x, which may not go on this server, still waits in its queue behind y 10 s after its connection was OKAY again: %d waiting", p.Stats().Waiting)
		}
	})
}
