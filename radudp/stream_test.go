package radudp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

// streamNet connects a Client's stream servers to in-process
// radpeer.Servers over net.Pipe, by URL; a server can be hung: it goes on
// reading (and applying) requests but its answers, Status-Server's too,
// are held back, as with a server stopped after reading.
type streamNet struct {
	mu  sync.Mutex
	lns map[string]*pipeLn
}

type pipeLn struct {
	ch     chan transport.Conn
	closed chan struct{}
	once   sync.Once
	hung   atomic.Bool
	resume chan struct{} // closed and replaced when the server resumes
	rmu    sync.Mutex
}

func (l *pipeLn) Accept() (transport.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}
func (l *pipeLn) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *pipeLn) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func (l *pipeLn) setHung(h bool) {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	if h {
		l.resume = make(chan struct{})
	} else if l.resume != nil {
		close(l.resume)
	}
	l.hung.Store(h)
}

// holdConn is a server side connection whose writes wait while its
// listener is hung.
type holdConn struct {
	transport.Conn
	l      *pipeLn
	done   chan struct{}
	doneMu sync.Once
}

func (c *holdConn) WriteMessages(msgs ...[]byte) error {
	if c.l.hung.Load() {
		c.l.rmu.Lock()
		resume := c.l.resume
		c.l.rmu.Unlock()
		select {
		case <-resume:
		case <-c.done:
			return net.ErrClosed
		}
	}
	return c.Conn.WriteMessages(msgs...)
}

func (c *holdConn) Close() error {
	c.doneMu.Do(func() { close(c.done) })
	return c.Conn.Close()
}

func framedPipe(c net.Conn) transport.Conn {
	return transport.NewStreamConn(c, "tcp", transport.Options{ReadFrame: radius.ReadFrame})
}

func (n *streamNet) listen(url string) *pipeLn {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := &pipeLn{ch: make(chan transport.Conn), closed: make(chan struct{})}
	n.lns[url] = l
	return l
}

func (n *streamNet) dial(ctx context.Context, url string) (transport.Conn, error) {
	n.mu.Lock()
	l := n.lns[url]
	n.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("%s: connection refused", url)
	}
	a, b := net.Pipe()
	select {
	case l.ch <- &holdConn{Conn: framedPipe(b), l: l, done: make(chan struct{})}:
		return framedPipe(a), nil
	case <-l.closed:
	case <-ctx.Done():
	}
	a.Close()
	b.Close()
	return nil, net.ErrClosed
}

// streamServer is one in-process RADIUS/TCP server, applying accounting
// records through a shared store.
type streamServer struct {
	ln      *pipeLn
	srv     *radpeer.Server
	applied atomic.Int64
	ids     sync.Map // Acct-Session-Id -> Identifier it arrived with
	auths   sync.Map // Acct-Session-Id -> Request Authenticator
}

func (n *streamNet) serve(t *testing.T, url string, secret []byte, store dedup.Store) *streamServer {
	s := &streamServer{ln: n.listen(url)}
	apply := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		if req.Code == lradius.CodeAccountingRequest {
			s.applied.Add(1)
		}
		return radpeer.AcceptAll(ctx, req, raw)
	}
	once := radpeer.Dedup(store, apply, nil)
	seen := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		if req.Code == lradius.CodeAccountingRequest {
			sid, _ := radius.Attr(raw, radius.AttrAcctSessionID)
			s.ids.Store(string(sid), radius.Identifier(raw))
			s.auths.Store(string(sid), radius.Authenticator(raw))
		}
		return once(ctx, req, raw)
	}
	srv, err := radpeer.NewServer(s.ln, radpeer.SchemeTCP, radpeer.ServerConfig{Secret: secret, Handler: seen})
	if err != nil {
		t.Fatal(err)
	}
	s.srv = srv
	go srv.Serve()
	return s
}

// RADIUS/TCP failover through the Client's one dispatch path: server a
// reads and applies the records but its answers stop (as a process
// stopped after reading); its watchdog goes SUSPECT after two Tw and its
// pending requests go, in order, to server b, each re-signed with b's
// secret and a new Identifier on b's connection. Every caller gets one
// answer, and the shared store makes b answer the records a applied
// without applying them again. The failover table records the move.
func TestStreamFailoverAppliedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &streamNet{lns: map[string]*pipeLn{}}
		store := dedup.NewMemory()
		defer store.Close()
		a := n.serve(t, "radius+tcp://a:1813", []byte("secret-a"), store)
		b := n.serve(t, "radius+tcp://b:1813", []byte("secret-b"), store)
		c, err := NewClient(Config{
			Servers: []ServerSpec{
				{Name: "a", URL: "radius+tcp://a:1813", Secret: []byte("secret-a")},
				{Name: "b", URL: "radius+tcp://b:1813", Secret: []byte("secret-b")},
			},
			Algorithm: loadbalance.Direct,
			Stream:    StreamConfig{Watchdog: watchdog.Config{Twinit: 6 * time.Second}, Dialer: n.dial},
		})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for i := range 2 {
			if c.servers[i].stream.State() != watchdog.Okay {
				t.Fatalf("server %d is %v", i, c.servers[i].stream.State())
			}
		}
		var moves []client.FailoverRecord
		cancel := c.Events().Subscribe(func(e client.Event) {
			if e.Kind == client.EventFailover {
				moves = append(moves, *e.Failover)
			}
		})
		defer cancel()
		a.ln.setHung(true)
		const N = 20
		var wg sync.WaitGroup
		errs := make([]error, N)
		resps := make([]*Response, N)
		for i := range N {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec := accountingStop(fmt.Sprintf("sess-%d", i))
				rec.Attributes.Add(radius.AttrEventTimestamp, lradius.Attribute([]byte{0x66, 1, 2, byte(i)}))
				resps[i], errs[i] = c.Exchange(context.Background(), rec)
			}()
		}
		synctest.Wait()
		if a.applied.Load() != N {
			t.Fatalf("a applied %d records before hanging, want %d", a.applied.Load(), N)
		}
		start := time.Now()
		wg.Wait()
		took := time.Since(start)
		if max := client.FailoverDetection(6 * time.Second); took > max {
			t.Errorf("answers took %v, more than failover detection %v", took, max)
		}
		for i := range N {
			if errs[i] != nil || resps[i].Server != "radius+tcp://b:1813" || resps[i].Packet.Code != lradius.CodeAccountingResponse {
				t.Fatalf("request %d: %+v, %v; want b's Accounting-Response", i, resps[i], errs[i])
			}
			if resps[i].Attempts != 2 {
				t.Errorf("request %d sent %d times, want 2 (a, then b)", i, resps[i].Attempts)
			}
			sid := fmt.Sprintf("sess-%d", i)
			aa, _ := a.auths.Load(sid)
			ba, ok := b.auths.Load(sid)
			if !ok || aa == ba {
				t.Errorf("request %d: not re-signed for b (authenticator %x at a, %x at b)", i, aa, ba)
			}
		}
		if got := b.applied.Load(); got != 0 {
			t.Errorf("b applied %d records a had applied; want 0 (answered from the shared store)", got)
		}
		moved := 0
		for _, r := range moves {
			if r.From != "a" || r.Outcome != client.Moved {
				t.Errorf("failover record %+v", r)
			}
			moved += r.Moved
		}
		if recs, total := c.FailoverLog(); moved != N || total == 0 || len(recs) != len(moves) {
			t.Errorf("moved %d in %d records (table %d of %d), want %d", moved, len(moves), len(recs), total, N)
		}
		if st := c.Stats(); st.Answered != N || st.Failed != 0 || st.Servers[1].Stream == nil || st.Servers[1].Stream.Answered != N {
			t.Errorf("stats %+v", st)
		}
		a.ln.setHung(false)
		c.Close()
		for _, s := range []*streamServer{a, b} {
			s.srv.Close(context.Background())
		}
	})
}

// With one stream server that stops answering, a pending request waits
// (parked): not re-sent on the connection it was sent on, neither while
// that one is SUSPECT nor when it is OKAY again; after the watchdog closed
// it, the request goes on the new connection once that one is in service
// (three answered Status-Servers), and the server applies it once. With no
// server in service before the caller's deadline, the caller gets one
// error.
func TestStreamRequestsWaitForAServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &streamNet{lns: map[string]*pipeLn{}}
		store := dedup.NewMemory()
		defer store.Close()
		a := n.serve(t, "radius+tcp://a:1812", []byte("s"), store)
		c, err := NewClient(Config{
			Servers: []ServerSpec{{URL: "radius+tcp://a:1812"}}, Secret: []byte("s"),
			Stream: StreamConfig{Watchdog: watchdog.Config{Twinit: 6 * time.Second}, Dialer: n.dial},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		synctest.Wait()
		a.ln.setHung(true)
		done := make(chan error, 1)
		var resp *Response
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var err error
			rec := accountingStop("wait-1")
			rec.Attributes.Add(radius.AttrEventTimestamp, lradius.Attribute([]byte{0x66, 1, 2, 3}))
			resp, err = c.Exchange(ctx, rec)
			done <- err
		}()
		time.Sleep(25 * time.Second) // past SUSPECT (2 Tw) and DOWN (3 Tw)
		synctest.Wait()
		if st := c.Stats(); st.Parked+st.Queued != 1 || st.Servers[0].Stream.State == "OKAY" {
			t.Fatalf("waiting %d+%d, server %s; want 1 waiting, the server out of service", st.Parked, st.Queued, st.Servers[0].Stream.State)
		}
		if a.applied.Load() != 1 {
			t.Fatalf("applied %d before the failure, want 1", a.applied.Load())
		}
		a.ln.setHung(false)
		if err := <-done; err != nil {
			t.Fatalf("after the server came back: %v", err)
		}
		if resp.Attempts != 2 || a.applied.Load() != 1 {
			t.Errorf("sent %d times, applied %d; want 2 sends (old and new connection), applied once", resp.Attempts, a.applied.Load())
		}
		// No server at all before the deadline: one error.
		a.ln.setHung(true)
		time.Sleep(20 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = c.Exchange(ctx, accountingStop("wait-2"))
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, throttle.ErrExpired) {
			t.Errorf("no server before the deadline: %v, want the deadline", err)
		}
		a.ln.setHung(false)
		a.srv.Close(context.Background())
	})
}

// Stream servers' throttle places are bounded by their Identifiers: at
// most 255 per connection.
func TestStreamMaxOutstandingCapped(t *testing.T) {
	c := &Client{stream: true, cfg: Config{Stream: StreamConfig{MaxConns: 2}}}
	for _, tc := range []struct{ in, want int }{{0, 256}, {100, 100}, {1000, 510}, {-1, 510}} {
		if got := c.limits(throttleLimits(tc.in)).MaxOutstanding; got != tc.want {
			t.Errorf("MaxOutstanding %d -> %d, want %d", tc.in, got, tc.want)
		}
	}
	c.cfg.Stream.MaxConns = 1
	if got := c.limits(throttleLimits(0)).MaxOutstanding; got != 255 {
		t.Errorf("one connection: default %d, want 255", got)
	}
}

func throttleLimits(out int) throttle.Limits { return throttle.Limits{MaxOutstanding: out} }
