package radpeer

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"go.uber.org/goleak"
	lradius "layeh.com/radius"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testSecret = []byte("s3cr3t")

func framed(c net.Conn) transport.Conn {
	return transport.NewStreamConn(c, "tcp", transport.Options{ReadFrame: radius.ReadFrame})
}

// pipeListener is a transport.Listener fed by pipeDialer.
type pipeListener struct {
	ch     chan transport.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan transport.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (transport.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close closes l; again, it fails as a net.Listener's does.
func (l *pipeListener) Close() error {
	first := false
	l.once.Do(func() { close(l.closed); first = true })
	if !first {
		return &net.OpError{Op: "close", Net: "pipe", Err: net.ErrClosed}
	}
	return nil
}
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// dialer returns a Config.Dialer whose connections go to l.
func (l *pipeListener) dialer() func(ctx context.Context, url string) (transport.Conn, error) {
	return func(ctx context.Context, url string) (transport.Conn, error) {
		a, b := net.Pipe()
		select {
		case l.ch <- framed(b):
			return framed(a), nil
		case <-l.closed:
			a.Close()
			b.Close()
			return nil, net.ErrClosed
		case <-ctx.Done():
			a.Close()
			b.Close()
			return nil, ctx.Err()
		}
	}
}

// recorder collects watchdog transitions.
type recorder struct {
	mu  sync.Mutex
	seq []string
}

func (r *recorder) watch(b *peer.Bus) func() {
	return b.Subscribe(func(_ context.Context, e peer.Event) {
		if e.Kind == peer.EventWatchdog {
			r.mu.Lock()
			r.seq = append(r.seq, e.From.String()+">"+e.To.String())
			r.mu.Unlock()
		}
	})
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seq...)
}

// fixedRand makes Tw exactly Twinit: jitter = 2 s - 2 s.
type fixedRand struct{}

func (fixedRand) Int64N(n int64) int64 { return n / 2 }

func testConfig(tw time.Duration) Config {
	return Config{Secret: testSecret, Watchdog: watchdog.Config{Twinit: tw, Rand: fixedRand{}}}
}

func accessReq(user string) *radius.Request {
	return &radius.Request{Code: lradius.CodeAccessRequest, Attributes: lradius.Attributes{
		{Type: radius.AttrUserName, Attribute: []byte(user)},
		{Type: radius.AttrUserPassword, Attribute: []byte("pw")},
	}}
}

func acctReq(session string) *radius.Request {
	return &radius.Request{Code: lradius.CodeAccountingRequest, Attributes: lradius.Attributes{
		{Type: radius.AttrAcctSessionID, Attribute: []byte(session)},
		{Type: radius.AttrAcctStatusType, Attribute: lradius.NewInteger(1)},
	}}
}

// gate blocks handlers until opened.
type gate struct {
	ch      chan struct{}
	waiting atomic.Int64
}

func (g *gate) handler(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
	g.waiting.Add(1)
	select {
	case <-g.ch:
	case <-ctx.Done():
		return 0, nil
	}
	return AcceptAll(ctx, req, raw)
}

func mustClose(t *testing.T, closers ...interface{ Close(context.Context) error }) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range closers {
		if err := c.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	}
}
