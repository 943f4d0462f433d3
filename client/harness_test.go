package client

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/internal/fault"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type noJitter struct{}

func (noJitter) Int64N(n int64) int64 { return n / 2 }

var quiet = slog.New(slog.DiscardHandler)

// seen is one request as a fake server received it.
type seen struct {
	e2e   uint32
	tflag bool
	at    time.Time
}

// fakeServer is a server peer reached over net.Pipe whose process can be
// frozen: while frozen it reads nothing (the kernel buffers, as a
// SIGSTOPped process's socket does) and answers nothing.
type fakeServer struct {
	host   string
	handle peer.Handler // default: answer 2001 (see handler)
	// failover, when set, is the failover hook of the server's peers (for
	// the requests a server sends the client).
	failover call.Failover
	applied  map[uint32]int // End-to-End id -> application runs, when counting

	dupAnswers atomic.Bool // write every application answer twice

	faults fault.Switch // freeze, thaw and the RST of a crash
	// thawed is when unfreeze last ended a freeze (UnixNano; 0: never),
	// for frozenWithin.
	thawed atomic.Int64

	// tryWrite: both ends of each connection can write without waiting,
	// as a TCP socket can (tryPipe, tryRecordConn), so that requests go
	// out inline on their caller's goroutine and answers on their
	// handler's; tryLimit, when set, says how much of a message of n
	// bytes the client's socket has room for. Set before the first
	// accept.
	tryWrite bool
	tryLimit func(n int) int
	// tryPause, when set, is how long the client's goroutine stays away
	// after an inline write before it comes back to the outbox (it was
	// descheduled): other goroutines queue meanwhile.
	tryPause func() time.Duration
	// baton: the client's end can also be read by callers, as a TCP
	// socket's (resumePipe): a caller reads its own answer.
	baton bool
	// inlined counts the application answers the server wrote whole on
	// its handlers' goroutines (with tryWrite).
	inlined atomic.Int64
	// overlaps counts writes begun on a connection's end while another
	// write was still under way there (oneWriter), at either end.
	overlaps atomic.Int64
	// badFrames counts the reads, at either end, that found bytes that
	// are not a Diameter message. No fault corrupts bytes, so each is a
	// writer that cut or interleaved a message.
	badFrames atomic.Int64
	// linger, when set, says how long the server's end of a connection
	// stays open after its peer closes it (0: not at all): a server
	// that leaves the close to the client after a DPR/DPA exchange
	// (RFC 6733 5.4 has the DPR's sender close). Set before the first
	// accept.
	linger func() time.Duration
	gone   chan struct{} // closed by close: a lingering end closes then
	// authApps, when set, are the authorization applications the server
	// advertises beside base accounting. Set before the first accept.
	authApps []uint32
	// refuse, when set, refuses every dial (the server is not there).
	refuse atomic.Bool
	// smallReads, when positive, is the most the server's end takes from
	// the pipe in one read: with a small faults.ReadAhead, the client's
	// writes back up while the server is frozen, as over sockets with
	// small buffers. Set before the first accept.
	smallReads int

	mu    sync.Mutex
	reqs  []seen
	peers []*peer.Peer
}

func newFakeServer(host string) *fakeServer {
	return &fakeServer{host: host, gone: make(chan struct{})}
}

func (f *fakeServer) freeze() { f.faults.Freeze() }

func (f *fakeServer) unfreeze() {
	if f.faults.Frozen() {
		f.thawed.Store(time.Now().UnixNano()) // before Thaw: frozenWithin sees one or the other
	}
	f.faults.Thaw()
}

// frozenWithin reports whether the server was frozen at some instant
// from since to now: frozen now, or thawed since (a freeze that began
// and ended within the span, which frozen-at-either-end misses).
func (f *fakeServer) frozenWithin(since time.Time) bool {
	return f.faults.Frozen() || f.thawed.Load() >= since.UnixNano()
}

func (f *fakeServer) received() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.reqs...)
}

func (f *fakeServer) handler(ctx context.Context, p *peer.Peer, req []byte) []byte {
	return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, message.Success).
		String(message.OriginHost, 0, true, f.host).
		String(message.OriginRealm, 0, true, "example.net").Bytes()
}

// accept returns the client end of a new connection to this server.
func (f *fakeServer) accept() (transport.Conn, error) {
	if f.refuse.Load() {
		return nil, errors.New("connection refused")
	}
	pa, pb := net.Pipe()
	var a, b net.Conn = &oneWriter{Conn: pa, n: &f.overlaps}, &oneWriter{Conn: pb, n: &f.overlaps}
	if f.smallReads > 0 {
		b = smallReader{b, f.smallReads}
	}
	var fc transport.Conn = &recordConn{Conn: f.faults.Wrap(transport.NewStreamConn(b, "pipe", transport.Options{}), nil), f: f}
	if f.tryWrite {
		fc = tryRecordConn{fc.(*recordConn), b}
	}
	h := f.handle
	if h == nil {
		h = f.handler
	}
	p, err := peer.Accept(fc, peer.Config{
		OriginHost: f.host, OriginRealm: "example.net", Handler: h, Logger: quiet, Failover: f.failover,
		Watchdog: watchdog.Config{Twinit: 30 * time.Second, Rand: noJitter{}},
		AuthApps: f.authApps, AcctApps: acctWith(f.authApps),
	})
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.peers = append(f.peers, p)
	f.mu.Unlock()
	var cc transport.Conn = frameCount{transport.NewStreamConn(a, "pipe", transport.Options{}), &f.badFrames}
	switch {
	case f.baton:
		return &resumePipe{tryPipe: tryPipe{cc, a, f.tryLimit, f.tryPause}, bad: &f.badFrames}, nil
	case f.tryWrite:
		return tryPipe{cc, a, f.tryLimit, f.tryPause}, nil
	}
	return cc, nil
}

// smallReader reads at most n bytes at a time from its connection.
type smallReader struct {
	net.Conn
	n int
}

func (r smallReader) Read(b []byte) (int, error) { return r.Conn.Read(b[:min(len(b), r.n)]) }

// tryPipe is a connection over net.Pipe that can write without waiting
// (transport.TryWriter), as a TCP socket with room in its send buffer
// can: TryWrite gives the far end's reader a nanosecond to take msg and
// reports what it took. Inside a synctest bubble that nanosecond passes
// only once every goroutine waits, so what a reader ready now would take
// is taken. limit, when set, offers only part of msg, as a send buffer
// with little room takes only part.
type tryPipe struct {
	transport.Conn
	raw   net.Conn
	limit func(n int) int
	pause func() time.Duration
}

func (t tryPipe) TryWrite(msg []byte) (int, error) {
	if t.limit != nil {
		msg = msg[:t.limit(len(msg))]
	}
	t.raw.SetWriteDeadline(time.Now().Add(time.Nanosecond))
	n, err := t.raw.Write(msg)
	t.raw.SetWriteDeadline(time.Time{})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil
	}
	if t.pause != nil {
		time.Sleep(t.pause())
	}
	return n, err
}

// oneWriter is an end of a pipe on which a write begun while another is
// under way fails, and is counted: a stream's messages must leave one
// writer at a time (the outbox hands the connection to one), or two
// frames can interleave on a socket. Over net.Pipe the second write would
// instead wait for the first, which inside the bubble can wait forever
// (an inline write's deadline cannot pass while a goroutine waits on the
// pipe's mutex), so a schedule with the bug would hang, not fail.
type oneWriter struct {
	net.Conn
	busy atomic.Bool
	n    *atomic.Int64
}

var errTwoWriters = errors.New("sim: a write began while another was under way on this connection")

func (o *oneWriter) Write(b []byte) (int, error) {
	if !o.busy.CompareAndSwap(false, true) {
		o.n.Add(1)
		return 0, errTwoWriters
	}
	defer o.busy.Store(false)
	return o.Conn.Write(b)
}

// frameCount is the client's end of a connection, counting in n the
// reads that found no Diameter message.
type frameCount struct {
	transport.Conn
	n *atomic.Int64
}

func (c frameCount) ReadMessage() ([]byte, error) {
	m, err := c.Conn.ReadMessage()
	if errors.Is(err, wire.ErrBadFrame) {
		c.n.Add(1)
	}
	return m, err
}

// dropConnections closes every connection, as a crashed server's kernel
// does (RST), without the DPR of a graceful close.
func (f *fakeServer) dropConnections() { f.faults.Reset() }

func (f *fakeServer) close() {
	close(f.gone)
	f.unfreeze()
	f.mu.Lock()
	ps := f.peers
	f.mu.Unlock()
	f.faults.Reset()
	for _, p := range ps {
		p.Close(context.Background())
	}
	f.faults.Wait()
}

// recordConn records the application requests the server reads, in
// arrival order (handlers run concurrently), and writes each application
// answer twice while dupAnswers is set.
type recordConn struct {
	*fault.Conn
	f *fakeServer
	// tail: an inline write left part of a message to the writer, which
	// writes that part first (not a message: never doubled).
	tail atomic.Bool
}

func (rc *recordConn) ReadMessage() ([]byte, error) {
	m, err := rc.Conn.ReadMessage()
	if errors.Is(err, wire.ErrBadFrame) {
		rc.f.badFrames.Add(1)
	}
	if err == nil && wire.IsRequest(m) && wire.AppID(m) != 0 {
		rc.f.mu.Lock()
		rc.f.reqs = append(rc.f.reqs, seen{e2e: wire.EndToEnd(m), tflag: wire.Flags(m)&wire.FlagRetransmit != 0, at: time.Now()})
		rc.f.mu.Unlock()
	}
	return m, err
}

// Close closes the server's end, linger later when set.
func (rc *recordConn) Close() error {
	if rc.f.linger != nil {
		if d := rc.f.linger(); d > 0 {
			go func() {
				select {
				case <-time.After(d):
				case <-rc.f.gone:
				}
				rc.Conn.Close()
			}()
			return nil
		}
	}
	return rc.Conn.Close()
}

func (rc *recordConn) WriteMessages(msgs ...[]byte) error {
	tail := rc.tail.Swap(false)
	if rc.f.dupAnswers.Load() {
		var out [][]byte
		for i, m := range msgs {
			out = append(out, m)
			if !(tail && i == 0) && !wire.IsRequest(m) && wire.AppID(m) != 0 {
				out = append(out, m)
			}
		}
		msgs = out
	}
	return rc.Conn.WriteMessages(msgs...)
}

// tryRecordConn is the server's end of a connection that writes without
// waiting, as a TCP socket can: the answer to the only request in a
// handler goes out on the handler's goroutine (the peer's inline
// answer). The Switch's faults hold it as they hold WriteMessages:
// nothing leaves a frozen or muted process inline (the writer then waits
// in WriteMessages), and while answers are doubled or DWAs dropped the
// writer takes every message, so that it alone applies the fault.
type tryRecordConn struct {
	*recordConn
	raw net.Conn
}

func (t tryRecordConn) TryWrite(msg []byte) (int, error) {
	f := t.f
	if f.faults.Frozen() || f.faults.Muted() || f.faults.DropDWA || f.dupAnswers.Load() {
		return 0, nil
	}
	n, err := tryPipe{raw: t.raw}.TryWrite(msg)
	switch {
	case err != nil:
	case n < len(msg):
		t.tail.Store(true)
	case !wire.IsRequest(msg) && wire.AppID(msg) != 0:
		f.inlined.Add(1)
	}
	return n, err
}

// network routes the client's dials to fake servers by URL.
type network map[string]*fakeServer

func (n network) dialer(ctx context.Context, url string) (transport.Conn, error) {
	return n[url].accept()
}

func (n network) close() {
	for _, f := range n {
		f.close()
	}
}

func clientConfig(n network, mode Mode, urls ...string) Config {
	cfg := Config{
		Mode: mode,
		Peer: peer.Config{
			OriginHost: "client.example.net", OriginRealm: "example.net",
			Watchdog: watchdog.Config{Twinit: 30 * time.Second, Rand: noJitter{}},
			Dialer:   n.dialer, Logger: quiet,
			RequestTimeout: time.Hour,
		},
		RequestTimeout: time.Hour,
	}
	for _, u := range urls {
		cfg.Peers = append(cfg.Peers, PeerSpec{URL: u, Name: n[u].host})
	}
	return cfg
}

// acctWith is the accounting applications a side advertises beside
// authApps: base accounting, which the default gives when none is set.
func acctWith(authApps []uint32) []uint32 {
	if len(authApps) == 0 {
		return nil
	}
	return []uint32{message.AppAccounting}
}

func acr(n int, nai string) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "client.example.net;1;"+itoa(n)).
		String(message.OriginHost, 0, true, "client.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").
		String(message.UserName, 0, true, nai).
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, uint32(n)).Bytes()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// resumePipe is a tryPipe whose reads a read deadline interrupts without
// losing a byte (transport.ReadInterrupter), as the raw reader of a TCP
// socket: the bytes read so far of a message stay for the next
// ReadMessage. Its reads are one goroutine's at a time (the reading
// baton); SetReadDeadline may come from any.
type resumePipe struct {
	tryPipe
	buf []byte
	bad *atomic.Int64 // reads that found no Diameter message
}

func (r *resumePipe) ReadMessage() ([]byte, error) {
	for {
		if n, ok := r.whole(); ok {
			msg := slices.Clone(r.buf[:n])
			r.buf = r.buf[n:]
			return msg, nil
		} else if n < 0 {
			r.bad.Add(1)
			return nil, wire.ErrBadFrame
		}
		var b [4096]byte
		k, err := r.raw.Read(b[:])
		r.buf = append(r.buf, b[:k]...)
		if err != nil {
			return nil, err
		}
	}
}

// whole returns the length of the message at the head of buf and whether
// it is all there; a length below a header's is -1.
func (r *resumePipe) whole() (int, bool) {
	if len(r.buf) < 4 {
		return 0, false
	}
	n := int(r.buf[1])<<16 | int(r.buf[2])<<8 | int(r.buf[3])
	if n < wire.HeaderLen {
		return -1, false
	}
	return n, len(r.buf) >= n
}

func (r *resumePipe) MessageBuffered() bool             { _, ok := r.whole(); return ok }
func (r *resumePipe) SetReadDeadline(t time.Time) error { return r.raw.SetReadDeadline(t) }
func (r *resumePipe) ReadResumes() bool                 { return true }
