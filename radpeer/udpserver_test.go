package radpeer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"
)

// recordConn is a PacketConn that is never read and records what is
// written to it, for tests that hand datagrams to UDPServer.packet.
type recordConn struct {
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	sent   [][]byte
	keep   bool // record the datagrams; else only count them
	n      int
}

func newRecordConn(keep bool) *recordConn {
	return &recordConn{closed: make(chan struct{}), keep: keep}
}

func (c *recordConn) ReadFrom([]byte) (int, net.Addr, error) {
	<-c.closed
	return 0, nil, net.ErrClosed
}

func (c *recordConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.keep {
		c.sent = append(c.sent, append([]byte(nil), b...))
	}
	return len(b), nil
}

func (c *recordConn) written() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *recordConn) last() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sent) == 0 {
		return nil
	}
	return c.sent[len(c.sent)-1]
}

func (c *recordConn) Close() error { c.once.Do(func() { close(c.closed) }); return nil }
func (c *recordConn) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1812}
}
func (c *recordConn) SetDeadline(time.Time) error      { return nil }
func (c *recordConn) SetReadDeadline(time.Time) error  { return nil }
func (c *recordConn) SetWriteDeadline(time.Time) error { return nil }

// lineBuffer collects log lines, safe for concurrent writes.
type lineBuffer struct{ testhelp.SyncBuffer }

func (l *lineBuffer) lines() []string {
	return strings.FieldsFunc(l.String(), func(r rune) bool { return r == '\n' })
}

func (l *lineBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startUDP serves a loopback socket with h and returns the server and a
// client socket connected to it.
func startUDP(t *testing.T, cfg ServerConfig) (*UDPServer, net.Conn) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Secret == nil {
		cfg.Secret = testSecret
	}
	srv, err := NewUDPServer(pc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(); close(done) }()
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		mustClose(t, srv)
		<-done
	})
	return srv, c
}

// readAnswer reads one datagram from c within d.
func readAnswer(c net.Conn, d time.Duration) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 8192)
	n, err := c.Read(buf)
	return buf[:n], err
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 5s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// keyN returns the n-th of distinct keys from one source.
func keyN(n int) dupKey {
	k := dupKey{addr: netip.MustParseAddrPort("192.0.2.1:40000"), id: byte(n)}
	k.auth[0], k.auth[1], k.auth[2] = byte(n>>8), byte(n>>16), byte(n>>24)
	return k
}

// Keeping the cache within its bounds costs the same whatever it holds:
// each new request looks at the front entry and removes at most what it
// pushes over a bound or what expired. (The cache used to rebuild its
// arrival order on every packet, moving every entry it held.)
func TestDupCacheCostIsFlat(t *testing.T) {
	const steady = 1 << 12 // requests measured, once the cache is full
	for _, max := range []int{1 << 10, 1 << 16} {
		c := newDupCache(time.Minute, max, 1<<40)
		t0 := time.Unix(0, 0)
		for i := range max {
			c.seen(keyN(i), t0, true)
		}
		// Steady state at the entry bound: each insert evicts the oldest.
		before := c.examined
		for i := max; i < max+steady; i++ {
			c.seen(keyN(i), t0, true)
		}
		if per := float64(c.examined-before) / steady; per > 2 {
			t.Errorf("%d entries, bound by count: %.1f entries examined per request, want at most 2", max, per)
		}
		if c.len() != max {
			t.Errorf("%d entries cached, bound %d", c.len(), max)
		}
		// Steady state by age: one request per millisecond, a TTL of max
		// milliseconds: each insert expires the one that came max before.
		c = newDupCache(time.Duration(max)*time.Millisecond, 1<<30, 1<<40)
		at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }
		for i := range max {
			c.seen(keyN(i), at(i), true)
		}
		before = c.examined
		for i := max; i < max+steady; i++ {
			c.seen(keyN(i), at(i), true)
		}
		if per := float64(c.examined-before) / steady; per > 2 {
			t.Errorf("%d entries, bound by age: %.1f entries examined per request, want at most 2", max, per)
		}
		if c.len() != max {
			t.Errorf("%d entries cached, TTL of %d requests", c.len(), max)
		}
	}
}

// The cache holds at most maxEntries and maxBytes, oldest out first;
// forgetting a request in the middle leaves the others in order.
func TestDupCacheBounds(t *testing.T) {
	t0 := time.Unix(0, 0)
	c := newDupCache(time.Minute, 3, 1<<40)
	for i := range 5 {
		c.seen(keyN(i), t0, true)
	}
	for i := range 5 {
		_, ok := c.index[keyN(i)]
		if ok != (i >= 2) {
			t.Errorf("entry bound 3: request %d cached %v", i, ok)
		}
	}

	// Byte bound: room for two entries with 1000-byte answers.
	answer := make([]byte, 1000)
	c = newDupCache(time.Minute, 100, 2*(dupEntryBytes+1000))
	for i := range 4 {
		e, _, seen := c.seen(keyN(i), t0, true)
		if seen {
			t.Fatalf("request %d seen before", i)
		}
		c.answer(e, answer)
		if c.size > c.maxBytes {
			t.Fatalf("after %d answers: %d bytes cached, bound %d", i+1, c.size, c.maxBytes)
		}
	}
	if c.len() != 2 || c.size != 2*(dupEntryBytes+1000) {
		t.Fatalf("%d entries, %d bytes; want the last two, %d bytes", c.len(), c.size, 2*(dupEntryBytes+1000))
	}
	if _, resp, seen := c.seen(keyN(3), t0, true); !seen || len(resp) != 1000 {
		t.Fatalf("newest: seen %v, answer of %d bytes", seen, len(resp))
	}
	if _, _, seen := c.seen(keyN(0), t0, true); seen {
		t.Fatal("oldest still cached past the byte bound")
	}

	// Forgetting one in the middle.
	c = newDupCache(time.Minute, 100, 1<<40)
	var middle *dupEntry
	for i := range 3 {
		if e, _, _ := c.seen(keyN(i), t0, true); i == 1 {
			middle = e
		}
	}
	c.forget(middle)
	var order []byte
	for e := c.first; e != nil; e = e.next {
		order = append(order, e.key.id)
	}
	if !bytes.Equal(order, []byte{0, 2}) || c.last.key != keyN(2) || c.size != 2*dupEntryBytes {
		t.Fatalf("after forgetting 1: order %v, %d bytes", order, c.size)
	}
	if _, _, seen := c.seen(keyN(1), t0, true); seen {
		t.Fatal("a forgotten request is still seen")
	}
}

// A request handled past its entry's life (the TTL, or a bound) answers
// and forgets only its own entry, never the one a retransmission made
// meanwhile: forgetting by key let that retransmission's handler run
// again on the next copy, and answering by key cached the old answer for
// the new one.
func TestDupCacheStaleEntryTouchesOnlyItself(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newDupCache(time.Second, 100, 1<<40)
	old, _, _ := c.seen(keyN(1), t0, true)
	// The handler outlives the TTL; the client's retransmission makes a
	// new entry, in progress.
	renewed, _, seen := c.seen(keyN(1), t0.Add(2*time.Second), true)
	if seen || renewed == nil {
		t.Fatal("an expired request still seen")
	}
	c.forget(old) // the first handler gave no answer
	if _, resp, seen := c.seen(keyN(1), t0.Add(2*time.Second), true); !seen || resp != nil {
		t.Fatalf("the retransmission's entry forgotten by the stale one: seen %v", seen)
	}
	c.answer(old, []byte("old"))
	if _, resp, _ := c.seen(keyN(1), t0.Add(2*time.Second), true); resp != nil {
		t.Fatalf("the stale handler's answer %q cached for the retransmission", resp)
	}
	c.answer(renewed, []byte("new"))
	if _, resp, _ := c.seen(keyN(1), t0.Add(2*time.Second), true); string(resp) != "new" {
		t.Fatalf("cached %q, want the retransmission's own answer", resp)
	}
}

// An answer copies the request's Proxy-State: the server's cache stays
// within its byte bound when answers are large, and still answers the
// newest retransmissions from it.
func TestUDPServerDupCacheByteBound(t *testing.T) {
	pc := newRecordConn(true)
	const bound = 64 << 10
	srv, err := NewUDPServer(pc, ServerConfig{Secret: testSecret, DupBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, srv)
	from := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}
	state := bytes.Repeat([]byte{'p'}, 253)
	var attrs lradius.Attributes
	for range 15 { // 15 * 255 bytes: an answer of about 3.9 KB
		attrs = append(attrs, &lradius.AVP{Type: radius.AttrProxyState, Attribute: state})
	}
	var reqs [][]byte
	for i := range 100 {
		b, _, err := radius.EncodeRequest(&radius.Request{Code: lradius.CodeStatusServer, Attributes: attrs}, byte(i), testSecret)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, b)
		srv.packet(b, from, udpLocal{})
		if st := srv.Stats(); st.CachedBytes > bound {
			t.Fatalf("after %d requests: %d bytes cached, bound %d", i+1, st.CachedBytes, bound)
		}
	}
	st := srv.Stats()
	want := bound / (dupEntryBytes + len(pc.last()))
	if st.Cached != want || st.Received != 100 || st.Answered != 100 {
		t.Fatalf("stats %+v; want %d cached", st, want)
	}
	first := pc.last()
	srv.packet(reqs[99], from, udpLocal{}) // the newest: answered from the cache
	if st := srv.Stats(); st.Resent != 1 || !bytes.Equal(pc.last(), first) {
		t.Fatalf("newest retransmitted: stats %+v", st)
	}
	srv.packet(reqs[0], from, udpLocal{}) // the oldest: forgotten, handled afresh
	if st := srv.Stats(); st.Resent != 1 || st.Received != 101 {
		t.Fatalf("oldest retransmitted: stats %+v", st)
	}
}

// Accounting handlers stuck on a slow store fill their own lane: the
// reader goes on reading, Access-Requests are answered at once, and
// accounting requests beyond the lane's handlers and queue are dropped,
// counted, logged and forgotten, so that their retransmissions are
// handled afresh.
func TestUDPServerSlowAccountingDoesNotDelayLogins(t *testing.T) {
	var lines lineBuffer
	var stuck atomic.Int64
	h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		if req.Code == lradius.CodeAccountingRequest {
			stuck.Add(1)
			<-ctx.Done() // a store that never answers
			return 0, nil
		}
		return AcceptAll(ctx, req, raw)
	}
	srv, c := startUDP(t, ServerConfig{Handler: h, MaxInFlight: 2, MaxQueued: 2, Logger: lines.logger()})
	overloads := serve.Count(serve.KindOverload)
	var acct [][]byte
	for i := range 10 {
		b, _, _ := radius.EncodeRequest(acctReq(fmt.Sprint("s", i)), byte(i), testSecret)
		acct = append(acct, b)
		c.Write(b)
	}
	// The reader handles datagrams in order: once the Access-Request is
	// answered, every accounting request before it was handled or dropped.
	for i := range 3 {
		req, _, _ := radius.EncodeRequest(accessReq("alice"), byte(100+i), testSecret)
		start := time.Now()
		c.Write(req)
		ans, err := readAnswer(c, 2*time.Second)
		if err != nil {
			t.Fatalf("Access-Request %d not answered: %v (stats %+v)", i, err, srv.Stats())
		}
		if radius.Code(ans) != lradius.CodeAccessAccept || radius.Identifier(ans) != byte(100+i) {
			t.Fatalf("answer %v ID %d", radius.Code(ans), radius.Identifier(ans))
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Access-Request %d answered in %v", i, d)
		}
	}
	waitFor(t, "2 stuck handlers", func() bool { return stuck.Load() == 2 })
	if st := srv.Stats(); st.Overload != 6 || st.Received != 13 || st.Cached != 7 || st.Answered != 3 {
		t.Fatalf("2 running and 2 waiting of 10 accounting requests: stats %+v", st)
	}
	if n := serve.Count(serve.KindOverload) - overloads; n != 6 {
		t.Errorf("%d overloads logged, want 6", n)
	}
	// A dropped request was forgotten: its retransmission is handled (and
	// dropped again), not taken for a duplicate in progress.
	c.Write(acct[9])
	waitFor(t, "retransmission dropped", func() bool { return srv.Stats().Overload == 7 })
	if st := srv.Stats(); st.InProgress != 0 {
		t.Fatalf("stats %+v", st)
	}
	for _, l := range lines.lines() {
		if strings.Contains(l, "RADIUS request dropped: its handlers and their queue are full") &&
			!strings.Contains(l, "remote="+c.LocalAddr().String()) {
			t.Errorf("log line without the remote: %s", l)
		}
	}
}

// The Handler gets the request's source address on its context.
func TestUDPServerSenderOnContext(t *testing.T) {
	got := make(chan Sender, 1)
	h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		s, _ := SenderOf(ctx)
		got <- s
		return AcceptAll(ctx, req, raw)
	}
	_, c := startUDP(t, ServerConfig{Handler: h})
	req, _, _ := radius.EncodeRequest(acctReq("s"), 1, testSecret)
	c.Write(req)
	if _, err := readAnswer(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("sender %+v", s)
	}
}

// Octets past the Length field are padding (RFC 2865 3): the request is
// answered. A datagram shorter than its Length is not.
func TestUDPServerIgnoresPadding(t *testing.T) {
	srv, c := startUDP(t, ServerConfig{})
	req, _, _ := radius.EncodeRequest(accessReq("alice"), 7, testSecret)
	c.Write(append(append([]byte(nil), req...), make([]byte, 13)...))
	ans, err := readAnswer(c, 5*time.Second)
	if err != nil {
		t.Fatalf("padded request not answered: %v (stats %+v)", err, srv.Stats())
	}
	if radius.VerifyResponse(ans, radius.Authenticator(req), testSecret, true) != nil || radius.Identifier(ans) != 7 {
		t.Fatalf("answer %x", ans)
	}
	req2, _, _ := radius.EncodeRequest(accessReq("bob"), 8, testSecret)
	c.Write(req2[:len(req2)-1])
	waitFor(t, "short datagram counted", func() bool { return srv.Stats().BadFrames == 1 })
	if _, err := readAnswer(c, 50*time.Millisecond); err == nil {
		t.Fatal("a datagram shorter than its Length was answered")
	}
	if st := srv.Stats(); st.Received != 1 || st.Answered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// An answer that cannot be encoded (over 4096 bytes) is not sent, and is
// counted and logged with the remote; the request is forgotten, so that a
// retransmission runs the handler again.
func TestUDPServerLogsUnencodableAnswer(t *testing.T) {
	var lines lineBuffer
	var runs atomic.Int64
	h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		runs.Add(1)
		var attrs lradius.Attributes
		for range 20 {
			attrs = append(attrs, &lradius.AVP{Type: 18, Attribute: bytes.Repeat([]byte{'m'}, 250)}) // Reply-Message
		}
		return lradius.CodeAccessAccept, attrs
	}
	srv, c := startUDP(t, ServerConfig{Handler: h, Logger: lines.logger()})
	logged := serve.Count(serve.KindDropped)
	req, _, _ := radius.EncodeRequest(accessReq("alice"), 7, testSecret)
	c.Write(req)
	waitFor(t, "answer counted", func() bool { return srv.Stats().Unencodable == 1 })
	c.Write(req)
	waitFor(t, "retransmission handled", func() bool { return srv.Stats().Unencodable == 2 })
	if st := srv.Stats(); runs.Load() != 2 || st.Answered != 0 || st.Cached != 0 {
		t.Fatalf("handler ran %d times; stats %+v", runs.Load(), st)
	}
	if n := serve.Count(serve.KindDropped) - logged; n != 2 {
		t.Errorf("%d answers logged, want 2", n)
	}
	var found bool
	for _, l := range lines.lines() {
		found = found || strings.Contains(l, "RADIUS answer not sent") && strings.Contains(l, "remote="+c.LocalAddr().String()) &&
			strings.Contains(l, "level=WARN") && strings.Contains(l, "err=")
	}
	// The limiter is the process's: another test in this window may have
	// used up its burst.
	if !found && logged == 0 {
		t.Fatalf("no log line for the answer; log:\n%s", strings.Join(lines.lines(), "\n"))
	}
}

// Malformed datagrams and requests failing verification are counted and
// logged at WARN with their source, rate-limited: a flood of 10,000 of
// each writes at most the limiter's burst, plus a line that says how many
// were suppressed.
func TestUDPServerBadPacketFloodLogsRateLimited(t *testing.T) {
	var lines lineBuffer
	srv, err := NewUDPServer(newRecordConn(false), ServerConfig{Secret: testSecret, Logger: lines.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, srv)
	from := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000}
	forged, _, _ := radius.EncodeRequest(accessReq("mallory"), 1, []byte("not the secret"))
	malformed := append([]byte(nil), forged...)
	malformed[radius.HeaderLen+1] = 1 // an attribute of length 1

	const n = 10000
	for _, tc := range []struct {
		kind serve.Kind
		b    []byte
		want string
	}{
		{serve.KindBadAuth, forged, `hint="shared secret mismatch?"`},
		{serve.KindBadFrame, malformed, "malformed"},
	} {
		before, count := len(lines.lines()), serve.Count(tc.kind)
		for range n {
			srv.packet(append([]byte(nil), tc.b...), from, udpLocal{})
		}
		written := lines.lines()[before:]
		if len(written) > 21 {
			t.Errorf("%v: %d lines for %d packets", tc.kind, len(written), n)
		}
		if got := serve.Count(tc.kind) - count; got != n {
			t.Errorf("%v: %d counted, want %d", tc.kind, got, n)
		}
		// The limiter is the process's: another test in this window may
		// have used up its burst.
		if count == 0 && len(written) == 0 {
			t.Errorf("%v: nothing logged", tc.kind)
		}
		for _, l := range written {
			if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "remote=192.0.2.7:40000") || !strings.Contains(l, tc.want) {
				t.Errorf("%v: line %s", tc.kind, l)
			}
		}
	}
	if st := srv.Stats(); st.BadAuth != n || st.BadFrames != n || st.Received != 0 {
		t.Fatalf("stats %+v", st)
	}
	if by := srv.Stats().BadAuthBySource; by["192.0.2.7"] != n || len(by) != 1 {
		t.Errorf("failed authenticators by source %v, want %d from 192.0.2.7", by, n)
	}
}

// Failed authenticators are counted by source for at most
// maxCountedSources addresses; the rest under "other".
func TestBadAuthBySourceBounded(t *testing.T) {
	srv, err := NewUDPServer(newRecordConn(false), ServerConfig{Secret: testSecret, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, srv)
	forged, _, _ := radius.EncodeRequest(accessReq("mallory"), 1, []byte("not the secret"))
	for i := range maxCountedSources + 10 {
		from := &net.UDPAddr{IP: net.IPv4(10, 9, byte(i>>8), byte(i)), Port: 40000}
		srv.packet(append([]byte(nil), forged...), from, udpLocal{})
	}
	by := srv.Stats().BadAuthBySource
	if len(by) != maxCountedSources+1 || by["other"] != 10 || by["10.9.0.0"] != 1 {
		t.Errorf("%d sources, other %d; want %d sources and 10 other", len(by), by["other"], maxCountedSources)
	}
}

// Status-Server is answered by the server itself, never by the Handler
// (RFC 5997: it is not a login).
func TestUDPServerAnswersStatusServer(t *testing.T) {
	h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		t.Errorf("Handler called for %v", req.Code)
		return 0, nil
	}
	srv, c := startUDP(t, ServerConfig{Handler: h})
	req, auth, _ := radius.EncodeRequest(&radius.Request{Code: lradius.CodeStatusServer}, 3, testSecret)
	c.Write(req)
	ans, err := readAnswer(c, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if radius.Code(ans) != lradius.CodeAccessAccept || radius.VerifyResponse(ans, auth, testSecret, true) != nil {
		t.Fatalf("answer %x", ans)
	}
	if st := srv.Stats(); st.Received != 1 || st.Answered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// On an accounting port, Status-Server is answered Accounting-Response
// (RFC 5997 section 3), signed and with a Message-Authenticator; other
// requests are answered as on any port. A stream server refuses the
// setting.
func TestUDPServerAccountingPortAnswersStatusServer(t *testing.T) {
	_, c := startUDP(t, ServerConfig{AccountingPort: true})
	req, auth, _ := radius.EncodeRequest(&radius.Request{Code: lradius.CodeStatusServer}, 3, testSecret)
	c.Write(req)
	ans, err := readAnswer(c, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if radius.Code(ans) != lradius.CodeAccountingResponse || radius.VerifyResponse(ans, auth, testSecret, true) != nil {
		t.Fatalf("answer %x: want a verified Accounting-Response with a Message-Authenticator", ans)
	}
	req, auth, _ = radius.EncodeRequest(acctReq("s"), 4, testSecret)
	c.Write(req)
	if ans, err = readAnswer(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if radius.Code(ans) != lradius.CodeAccountingResponse || radius.VerifyResponse(ans, auth, testSecret, false) != nil {
		t.Fatalf("answer to an Accounting-Request %x", ans)
	}

	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret, AccountingPort: true}); !errors.Is(err, ErrConfig) {
		t.Fatalf("NewServer with AccountingPort: %v, want ErrConfig", err)
	}
}

// Close ends the reader and the handlers, those of the requests still
// queued included, which are not handled.
func TestUDPServerCloseWithQueuedRequests(t *testing.T) {
	var runs atomic.Int64
	h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		runs.Add(1)
		<-ctx.Done()
		return 0, nil
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewUDPServer(pc, ServerConfig{Secret: testSecret, Handler: h, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 5 {
		b, _, _ := radius.EncodeRequest(acctReq("s"), byte(i), testSecret)
		c.Write(b)
	}
	waitFor(t, "5 requests read, 1 handled", func() bool { return srv.Stats().Received == 5 && runs.Load() == 1 })
	mustClose(t, srv)
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1 (the others were queued at Close)", runs.Load())
	}
}

// BenchmarkDupCache measures a request through the duplicate cache at its
// entry bound (each one evicts the oldest), with 1,024 and 65,536 cached:
// Status-Server, answered on the reader, so that no handler goroutine
// blurs the figure.
func BenchmarkDupCache(b *testing.B) {
	reqs := make([][]byte, 1<<17) // each new to a cache of 65,536
	for i := range reqs {
		r, _, err := radius.EncodeRequest(&radius.Request{Code: lradius.CodeStatusServer}, byte(i), testSecret)
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = r
	}
	from := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}
	for _, n := range []int{1 << 10, 1 << 16} {
		b.Run(fmt.Sprintf("entries=%dk", n>>10), func(b *testing.B) {
			srv, err := NewUDPServer(newRecordConn(false), ServerConfig{Secret: testSecret, DupEntries: n, DupBytes: 1 << 40})
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				srv.packet(append([]byte(nil), reqs[i]...), from, udpLocal{})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				srv.packet(append([]byte(nil), reqs[(n+i)%len(reqs)]...), from, udpLocal{})
			}
			b.StopTimer()
			if st := srv.Stats(); st.Cached != n {
				b.Fatalf("%d cached, want %d", st.Cached, n)
			}
			srv.Close(context.Background())
		})
	}
}

// The server counts each client's requests, answers (a duplicate's
// resent answer included; by Code too) and failed authenticators by its
// address.
func TestUDPServerCountsByNAS(t *testing.T) {
	srv, c := startUDP(t, ServerConfig{})
	req, _, _ := radius.EncodeRequest(accessReq("nas-user"), 1, testSecret)
	for range 2 { // the second is a retransmission: answered from the cache
		c.Write(req)
		if _, err := readAnswer(c, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	forged, _, _ := radius.EncodeRequest(accessReq("mallory"), 2, []byte("not the secret"))
	c.Write(forged)
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().BadAuth == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	nas := srv.Stats().NAS
	if len(nas) != 1 || nas[0].Addr != "127.0.0.1" || nas[0].Received != 1 || nas[0].Answered != 2 || nas[0].BadAuth != 1 || nas[0].LastSeen.IsZero() {
		t.Errorf("by NAS %+v, want 127.0.0.1 with 1 received, 2 answered, 1 failed", nas)
	}
	if len(nas) == 1 && nas[0].Answers != (NASAnswers{Accept: 2}) {
		t.Errorf("answers by Code %+v, want the 2 Access-Accepts", nas[0].Answers)
	}
}

// A sender without the secret cannot flush the duplicate cache: its
// Access-Requests without Message-Authenticator, each a new entry, hold
// at most half of it, oldest out first among them, so an Accounting-
// Request's answer stays cached and its retransmission is not handled
// twice. Before, they pushed every entry out, oldest first, signed or
// not.
func TestUDPServerUnsignedFloodKeepsSignedDuplicates(t *testing.T) {
	var acct atomic.Int32
	srv := startMAUDP(t, ServerConfig{DupEntries: 100, Handler: func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		if req.Code == lradius.CodeAccountingRequest {
			acct.Add(1)
		}
		return AcceptAll(ctx, req, raw)
	}})
	nas := dialUDP(t, "127.0.0.1", srv)
	b, _, err := radius.EncodeRequest(acctReq("s1"), 7, testSecret)
	require.NoError(t, err)
	first := udpExchange(t, nas, b, 5*time.Second)
	require.NotNil(t, first, "the Accounting-Request is answered")

	flood := dialUDP(t, "127.0.0.2", srv)
	for i := range 300 {
		require.NotNil(t, udpExchange(t, flood, unsignedRequest(t, lradius.CodeAccessRequest, byte(i)), 5*time.Second),
			"unsigned Access-Request %d is answered (the policy allows it from a client never seen signing)", i)
	}
	again := udpExchange(t, nas, b, 5*time.Second)
	assert.Equal(t, first, again, "the retransmission gets the cached answer")
	assert.Equal(t, int32(1), acct.Load(), "the accounting handler ran once")
	assert.Equal(t, uint64(1), srv.Stats().Resent)
	assert.LessOrEqual(t, srv.Stats().Cached, 100)
}

// The unsigned requests' half of the cache: they are deduplicated as any
// request, the oldest of them goes first past the half, the signed ones
// stay, and the cost per request stays flat.
func TestDupCacheUnsignedHalf(t *testing.T) {
	t0 := time.Unix(0, 0)
	c := newDupCache(time.Minute, 100, 1<<40)
	for i := range 10 {
		c.seen(keyN(i), t0, true)
	}
	before := c.examined
	for i := 10; i < 10+1000; i++ {
		if _, _, seen := c.seen(keyN(i), t0, false); seen {
			t.Fatalf("request %d seen before", i)
		}
	}
	if per := float64(c.examined-before) / 1000; per > 2 {
		t.Errorf("%.1f entries examined per unsigned request, want at most 2", per)
	}
	for i := range 10 {
		if _, _, seen := c.seen(keyN(i), t0, true); !seen {
			t.Errorf("signed request %d pushed out by unsigned ones", i)
		}
	}
	if c.nU != 50 || c.len() != 60 {
		t.Errorf("%d unsigned of %d entries, want the newest 50 of 60", c.nU, c.len())
	}
	if _, _, seen := c.seen(keyN(1009), t0, false); !seen {
		t.Error("the newest unsigned request is not deduplicated")
	}
	if _, _, seen := c.seen(keyN(959), t0, false); seen {
		t.Error("an unsigned request older than the newest 50 is still cached")
	}

	// Bytes: their answers count against half of the byte bound.
	c = newDupCache(time.Minute, 100, 4*(dupEntryBytes+1000))
	s, _, _ := c.seen(keyN(0), t0, true)
	c.answer(s, make([]byte, 1000))
	for i := 1; i < 10; i++ {
		e, _, _ := c.seen(keyN(i), t0, false)
		c.answer(e, make([]byte, 1000))
	}
	if c.sizeU > c.maxBytes/2 || c.index[keyN(0)] != s {
		t.Errorf("unsigned bytes %d over half of %d, or the signed entry went", c.sizeU, c.maxBytes)
	}
}

// A Serve that comes after Shutdown returns at once: it does not start
// reading a socket being shut down, nor add to what Shutdown waits for.
func TestUDPServerServeAfterShutdownReturns(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	srv, err := NewUDPServer(pc, ServerConfig{Secret: testSecret, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx))
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	select {
	case err := <-served:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve after Shutdown is still running")
	}
}
