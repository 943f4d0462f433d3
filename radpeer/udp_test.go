package radpeer

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// rawUDP is a UDP server that records what it receives and answers as
// the test says.
type rawUDP struct {
	pc   net.PacketConn
	mu   sync.Mutex
	got  [][]byte
	from []string
	ch   chan []byte
}

func newRawUDP(t *testing.T) *rawUDP {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &rawUDP{pc: pc, ch: make(chan []byte, 100)}
	go func() {
		buf := make([]byte, 5000)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			b := append([]byte(nil), buf[:n]...)
			r.mu.Lock()
			r.got, r.from = append(r.got, b), append(r.from, from.String())
			r.mu.Unlock()
			r.ch <- b
		}
	}()
	t.Cleanup(func() { pc.Close() })
	return r
}

func (r *rawUDP) url() string { return "radius://" + r.pc.LocalAddr().String() }

func (r *rawUDP) reply(t *testing.T, req []byte, mutate func([]byte)) {
	t.Helper()
	ans, err := radius.EncodeResponse(req, lradius.CodeAccessAccept, nil, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(ans)
	}
	r.mu.Lock()
	to := r.from[len(r.from)-1]
	r.mu.Unlock()
	addr, _ := net.ResolveUDPAddr("udp", to)
	if _, err := r.pc.WriteTo(ans, addr); err != nil {
		t.Fatal(err)
	}
}

func (r *rawUDP) next(t *testing.T) []byte {
	t.Helper()
	select {
	case b := <-r.ch:
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("no packet within 5 s")
		return nil
	}
}

func udpPeer(t *testing.T, url string, timeout time.Duration, sends int) *UDPPeer {
	t.Helper()
	p, err := DialUDP(url, UDPConfig{Secret: testSecret, Timeout: timeout, Sends: sends})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mustClose(t, p) })
	return p
}

// A request is retransmitted byte for byte from the same source port
// until answered; a second answer is a counted duplicate, a stray one is
// unmatched, and the next request takes the next Identifier.
func TestUDPRetransmitsIdenticalCopies(t *testing.T) {
	srv := newRawUDP(t)
	p := udpPeer(t, srv.url(), 100*time.Millisecond, 3)
	cl := NewCall(accessReq("alice"))
	if err := p.Submit(cl); err != nil {
		t.Fatal(err)
	}
	first, second, third := srv.next(t), srv.next(t), srv.next(t)
	if !bytes.Equal(first, second) || !bytes.Equal(first, third) {
		t.Fatal("retransmissions differ from the first send")
	}
	srv.mu.Lock()
	if srv.from[0] != srv.from[2] {
		t.Fatalf("source ports %s and %s", srv.from[0], srv.from[2])
	}
	srv.mu.Unlock()
	srv.reply(t, third, nil)
	r, err := cl.Wait(context.Background(), 5*time.Second)
	if err != nil || r.Packet.Code != lradius.CodeAccessAccept || cl.Sends() != 3 {
		t.Fatalf("answer %v after %d sends", err, cl.Sends())
	}
	srv.reply(t, third, nil)                                     // the answer again
	srv.reply(t, third, func(b []byte) { b[1]++; b[4] ^= 0xff }) // a stray
	cl2 := NewCall(accessReq("bob"))
	if err := p.Submit(cl2); err != nil {
		t.Fatal(err)
	}
	b := srv.next(t)
	if radius.Identifier(b) == radius.Identifier(first) {
		t.Fatalf("Identifier %d reused at once", radius.Identifier(b))
	}
	srv.reply(t, b, nil)
	if _, err := cl2.Wait(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Sent != 2 || st.Retransmitted != 2 || st.Answered != 2 || st.Duplicates != 1 || st.Unmatched != 1 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Unanswered, a request fails after Sends x Timeout; an answer after that
// is counted late.
func TestUDPGivesUp(t *testing.T) {
	srv := newRawUDP(t)
	p := udpPeer(t, srv.url(), 50*time.Millisecond, 3)
	start := time.Now()
	_, err := p.Exchange(context.Background(), accessReq("alice"))
	if !errors.Is(err, ErrTimeout) || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	var last []byte
	for range 3 {
		last = srv.next(t)
	}
	srv.reply(t, last, nil)
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Late != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", p.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := p.Stats(); st.TimedOut != 1 || st.Sent != 1 || st.Retransmitted != 2 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// The RFC 5080 duplicate cache: a copy of a request being handled is
// dropped, a copy of one answered gets the same answer, and the handler
// runs once.
func TestUDPServerDuplicateCache(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ch: make(chan struct{})}
	srv, err := NewUDPServer(pc, ServerConfig{Secret: testSecret, Handler: g.handler})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer mustClose(t, srv)
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, _, _ := radius.EncodeRequest(accessReq("alice"), 9, testSecret)
	c.Write(req)
	for g.waiting.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	c.Write(req) // while the first is handled
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().InProgress != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", srv.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	close(g.ch)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	first := append([]byte(nil), buf[:n]...)
	c.Write(req) // after the answer
	n, err = c.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], first) {
		t.Fatalf("cached answer %x, %v; first %x", buf[:n], err, first)
	}
	if st := srv.Stats(); g.waiting.Load() != 1 || st.Received != 1 || st.Resent != 1 || st.Answered != 2 || st.Cached != 1 {
		t.Fatalf("handler ran %d times, stats %+v", g.waiting.Load(), st)
	}
	// Entries expire after the TTL, and the cache holds at most max.
	srv.mu.Lock()
	srv.now = func() time.Time { return time.Now().Add(DefaultDupTTL) }
	srv.max = 2
	srv.mu.Unlock()
	for i := range 5 {
		r, _, _ := radius.EncodeRequest(acctReq("s"), byte(i), testSecret)
		c.Write(r)
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	srv.mu.Lock()
	cached := len(srv.cache)
	srv.mu.Unlock()
	if cached > 3 {
		t.Fatalf("%d entries cached, bound 2 (+1 being added)", cached)
	}
}

// A UDPPeer against a UDPServer.
func TestUDPExchange(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := NewUDPServer(pc, ServerConfig{Secret: testSecret})
	go srv.Serve()
	defer mustClose(t, srv)
	p := udpPeer(t, "radius://"+pc.LocalAddr().String(), time.Second, 3)
	ctx := context.Background()
	for _, r := range []*radius.Request{accessReq("a"), acctReq("s1"), {Code: lradius.CodeStatusServer}} {
		resp, err := p.Exchange(ctx, r)
		if err != nil || !radius.Answers(r.Code, resp.Packet.Code) {
			t.Fatalf("%s: %v", r.Code, err)
		}
	}
}
