package radpeer

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
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
	for _, max := range []int{1 << 10, 1 << 16} {
		c := newDupCache(time.Minute, max, 1<<40)
		t0 := time.Unix(0, 0)
		for i := range max {
			c.seen(keyN(i), t0)
		}
		// Steady state at the entry bound: each insert evicts the oldest.
		before := c.examined
		for i := max; i < 3*max; i++ {
			c.seen(keyN(i), t0)
		}
		if per := float64(c.examined-before) / float64(2*max); per > 2 {
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
			c.seen(keyN(i), at(i))
		}
		before = c.examined
		for i := max; i < 3*max; i++ {
			c.seen(keyN(i), at(i))
		}
		if per := float64(c.examined-before) / float64(2*max); per > 2 {
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
		c.seen(keyN(i), t0)
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
		if _, seen := c.seen(keyN(i), t0); seen {
			t.Fatalf("request %d seen before", i)
		}
		c.answer(keyN(i), answer)
		if c.size > c.maxBytes {
			t.Fatalf("after %d answers: %d bytes cached, bound %d", i+1, c.size, c.maxBytes)
		}
	}
	if c.len() != 2 || c.size != 2*(dupEntryBytes+1000) {
		t.Fatalf("%d entries, %d bytes; want the last two, %d bytes", c.len(), c.size, 2*(dupEntryBytes+1000))
	}
	if resp, seen := c.seen(keyN(3), t0); !seen || len(resp) != 1000 {
		t.Fatalf("newest: seen %v, answer of %d bytes", seen, len(resp))
	}
	if _, seen := c.seen(keyN(0), t0); seen {
		t.Fatal("oldest still cached past the byte bound")
	}

	// Forgetting one in the middle.
	c = newDupCache(time.Minute, 100, 1<<40)
	for i := range 3 {
		c.seen(keyN(i), t0)
	}
	c.forget(keyN(1))
	var order []byte
	for e := c.first; e != nil; e = e.next {
		order = append(order, e.key.id)
	}
	if !bytes.Equal(order, []byte{0, 2}) || c.last.key != keyN(2) || c.size != 2*dupEntryBytes {
		t.Fatalf("after forgetting 1: order %v, %d bytes", order, c.size)
	}
	if _, seen := c.seen(keyN(1), t0); seen {
		t.Fatal("a forgotten request is still seen")
	}
}

// An answer copies the request's Proxy-State: the server's cache stays
// within its byte bound when answers are large, and still answers the
// newest retransmissions from it.
func TestUDPServerDupCacheByteBound(t *testing.T) {
	pc := newRecordConn(true)
	const bound = 64 << 10
	srv, err := NewUDPServer(pc, ServerConfig{Secret: testSecret}, UDPLimits{DupBytes: bound})
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
		srv.packet(b, from)
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
	srv.packet(reqs[99], from) // the newest: answered from the cache
	if st := srv.Stats(); st.Resent != 1 || !bytes.Equal(pc.last(), first) {
		t.Fatalf("newest retransmitted: stats %+v", st)
	}
	srv.packet(reqs[0], from) // the oldest: forgotten, handled afresh
	if st := srv.Stats(); st.Resent != 1 || st.Received != 101 {
		t.Fatalf("oldest retransmitted: stats %+v", st)
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
			srv, err := NewUDPServer(newRecordConn(false), ServerConfig{Secret: testSecret}, UDPLimits{DupEntries: n, DupBytes: 1 << 40})
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				srv.packet(append([]byte(nil), reqs[i]...), from)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				srv.packet(append([]byte(nil), reqs[(n+i)%len(reqs)]...), from)
			}
			b.StopTimer()
			if st := srv.Stats(); st.Cached != n {
				b.Fatalf("%d cached, want %d", st.Cached, n)
			}
			srv.Close(context.Background())
		})
	}
}
