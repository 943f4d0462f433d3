package radudp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

var testSecret = []byte("testing123")

// arrival is one datagram a fake server received.
type arrival struct {
	at   time.Time
	from string
	b    []byte
}

// fakeServer records what it receives and answers as answer says: the
// number of copies of the answer to send (0: none) for the n-th arrival.
type fakeServer struct {
	end    *memEnd
	secret []byte
	mu     sync.Mutex
	got    []arrival
	answer func(n int, b []byte) int
	encode func(req []byte, code lradius.Code) []byte // nil: radius.EncodeResponse
	wg     sync.WaitGroup
}

func startFake(n *memNet, addr string, answer func(n int, b []byte) int) *fakeServer {
	f := &fakeServer{end: n.ListenPacket(addr), secret: testSecret, answer: answer}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		buf := make([]byte, 4096)
		for {
			k, from, err := f.end.ReadFrom(buf)
			if err != nil {
				return
			}
			b := append([]byte(nil), buf[:k]...)
			f.mu.Lock()
			f.got = append(f.got, arrival{at: time.Now(), from: from.String(), b: b})
			i := len(f.got)
			ans, encode := f.answer, f.encode
			f.mu.Unlock()
			copies := 1
			if ans != nil {
				copies = ans(i, b)
			}
			if copies == 0 {
				continue
			}
			code := lradius.CodeAccessAccept
			if radius.Code(b) == lradius.CodeAccountingRequest {
				code = lradius.CodeAccountingResponse
			}
			var resp []byte
			if encode != nil {
				resp = encode(b, code)
			} else if resp, err = radius.EncodeResponse(b, code, nil, f.secret); err != nil {
				panic(err)
			}
			for range copies {
				f.end.WriteTo(resp, from)
			}
		}
	}()
	return f
}

// startHeldFake starts a fake server at addr that answers every request,
// but only once release is called (release may be called again).
func startHeldFake(n *memNet, addr string) (f *fakeServer, release func()) {
	gate := make(chan struct{})
	var once sync.Once
	f = startFake(n, addr, func(int, []byte) int { <-gate; return 1 })
	return f, func() { once.Do(func() { close(gate) }) }
}

func (f *fakeServer) arrivals() []arrival {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]arrival(nil), f.got...)
}

func (f *fakeServer) setAnswer(a func(n int, b []byte) int) {
	f.mu.Lock()
	f.answer = a
	f.mu.Unlock()
}

func (f *fakeServer) close() { f.end.Close(); f.wg.Wait() }

func accessRequest(user string) *radius.Request {
	r := &radius.Request{Code: lradius.CodeAccessRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute(user))
	r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("secret-pw"))
	return r
}

func accountingStop(session string) *radius.Request {
	r := &radius.Request{Code: lradius.CodeAccountingRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute("user-"+session))
	r.Attributes.Add(radius.AttrNASIdentifier, lradius.Attribute("nas1"))
	r.Attributes.Add(radius.AttrAcctSessionID, lradius.Attribute(session))
	r.Attributes.Add(radius.AttrAcctStatusType, lradius.Attribute([]byte{0, 0, 0, 2}))
	return r
}

func newTestPeer(t *testing.T, n *memNet, addr string, cfg PeerConfig) *Peer {
	t.Helper()
	if cfg.Secret == nil {
		cfg.Secret = testSecret
	}
	if cfg.Dial == nil {
		cfg.Dial = n.Dial
	}
	p, err := NewPeer(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// The same packet, byte for byte from the same source port, every Timeout
// up to Retries attempts; then ErrTimeout at Retries x Timeout.
func TestRetransmitsIdenticalPacketEveryTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", func(int, []byte) int { return 0 })
		defer f.close()
		p := newTestPeer(t, n, "srv:1812", PeerConfig{})
		start := time.Now()
		_, err := p.Exchange(context.Background(), accessRequest("alice"))
		var te *TimeoutError
		if !errors.As(err, &te) || !errors.Is(err, ErrTimeout) || te.Attempts != 3 {
			t.Fatalf("err %v, want a TimeoutError after 3 attempts", err)
		}
		if took := time.Since(start); took != 9*time.Second {
			t.Errorf("gave up after %v, want 3 x 3 s", took)
		}
		got := f.arrivals()
		if len(got) != 3 {
			t.Fatalf("%d packets arrived, want 3", len(got))
		}
		for i, a := range got {
			if want := start.Add(time.Duration(i) * DefaultTimeout); !a.at.Equal(want) {
				t.Errorf("attempt %d at +%v, want +%v", i+1, a.at.Sub(start), want.Sub(start))
			}
			if !bytes.Equal(a.b, got[0].b) || a.from != got[0].from {
				t.Errorf("attempt %d differs from the first (same bytes and source port required)", i+1)
			}
		}
		st := p.Stats()
		if st.Sent != 1 || st.Retransmissions != 2 || st.TimedOut != 1 || st.Answered != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

// A reply to the second attempt completes the exchange; the copies the
// server sends of it, and a reply to a request given up on, are dropped
// and counted.
func TestLateAndDuplicateRepliesDroppedAndCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", func(i int, _ []byte) int {
			if i == 2 {
				return 3 // the answer and two duplicates
			}
			return 0
		})
		defer f.close()
		var replies int
		var mu sync.Mutex
		p := newTestPeer(t, n, "srv:1812", PeerConfig{OnReply: func(time.Time) { mu.Lock(); replies++; mu.Unlock() }})
		resp, err := p.Exchange(context.Background(), accessRequest("bob"))
		if err != nil || resp.Attempts != 2 || resp.Packet.Code != lradius.CodeAccessAccept {
			t.Fatalf("resp %+v err %v; want an Access-Accept to attempt 2", resp, err)
		}
		synctest.Wait()
		if st := p.Stats(); st.Duplicates != 2 || st.Answered != 1 || st.Late != 0 {
			t.Errorf("stats %+v, want 2 duplicates", st)
		}

		// A server that answers only after the client gave up: late.
		release := make(chan struct{})
		f.setAnswer(func(int, []byte) int { <-release; return 1 })
		_, err = p.ExchangeAttempts(context.Background(), accessRequest("carol"), 1)
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("err %v, want ErrTimeout", err)
		}
		close(release)
		synctest.Wait()
		if st := p.Stats(); st.Late != 1 {
			t.Errorf("stats %+v, want 1 late", st)
		}
		mu.Lock()
		defer mu.Unlock()
		if replies != 4 { // answer, 2 duplicates, 1 late: the server is alive each time
			t.Errorf("OnReply called %d times, want 4", replies)
		}
	})
}

// A reply signed with another secret, or to an Identifier never used, is
// dropped: the exchange times out.
func TestBadRepliesDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		f.secret = []byte("wrong")
		defer f.close()
		p := newTestPeer(t, n, "srv:1812", PeerConfig{Retries: 2})
		if _, err := p.Exchange(context.Background(), accessRequest("dave")); !errors.Is(err, ErrTimeout) {
			t.Fatalf("err %v, want ErrTimeout", err)
		}
		if st := p.Stats(); st.BadReplies != 2 || st.Answered != 0 {
			t.Errorf("stats %+v, want 2 bad replies", st)
		}
	})
}

// Identifiers are reused least recently first: 256 sequential exchanges
// use 256 different Identifiers, and the 257th reuses the first.
func TestIdentifiersReusedLeastRecently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		p := newTestPeer(t, n, "srv:1812", PeerConfig{})
		for i := range IDsPerSocket + 1 {
			if _, err := p.Exchange(context.Background(), accessRequest("u")); err != nil {
				t.Fatalf("exchange %d: %v", i, err)
			}
		}
		seen := make(map[byte]bool)
		got := f.arrivals()
		for _, a := range got[:IDsPerSocket] {
			seen[radius.Identifier(a.b)] = true
		}
		if len(seen) != IDsPerSocket {
			t.Errorf("256 exchanges used %d Identifiers, want 256", len(seen))
		}
		if radius.Identifier(got[IDsPerSocket].b) != radius.Identifier(got[0].b) {
			t.Errorf("exchange 257 used Identifier %d, want the least recently used %d", radius.Identifier(got[IDsPerSocket].b), radius.Identifier(got[0].b))
		}
	})
}

// More than 256 requests in flight open a second socket; past
// MaxSockets x 256 + MaxWaiting, exchanges fail with ErrBusy.
func TestSocketPoolAndBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f, release := startHeldFake(n, "srv:1812")
		defer f.close()
		defer release()
		// The fake answers one at a time after release: hold them all first.
		p := newTestPeer(t, n, "srv:1812", PeerConfig{MaxSockets: 2, MaxWaiting: 10, Timeout: time.Minute, Retries: 1})
		const total = 2*IDsPerSocket + 10
		errs := make(chan error, total+1)
		for range total {
			go func() { _, err := p.Exchange(context.Background(), accessRequest("u")); errs <- err }()
		}
		synctest.Wait()
		st := p.Stats()
		if st.Sockets != 2 || st.InFlight != 2*IDsPerSocket || st.Waiting != 10 {
			t.Fatalf("stats %+v, want 2 sockets, 512 in flight, 10 waiting", st)
		}
		if _, err := p.Exchange(context.Background(), accessRequest("u")); !errors.Is(err, ErrBusy) {
			t.Fatalf("one more: err %v, want ErrBusy", err)
		}
		release()
		for range total {
			if err := <-errs; err != nil {
				t.Errorf("exchange: %v", err)
			}
		}
		froms := make(map[string]bool)
		for _, a := range f.arrivals() {
			froms[a.from] = true
		}
		if len(froms) != 2 {
			t.Errorf("requests came from %d source ports, want 2", len(froms))
		}
	})
}

// With UpdateAcctDelayTime a retransmitted Accounting-Request carries the
// delay: a changed packet, so a new Identifier and authenticator.
func TestAcctDelayTimeUpdateMeansNewIdentifier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1813", func(i int, _ []byte) int {
			if i == 3 {
				return 1
			}
			return 0
		})
		defer f.close()
		p := newTestPeer(t, n, "srv:1813", PeerConfig{UpdateAcctDelayTime: true})
		resp, err := p.Exchange(context.Background(), accountingStop("s1"))
		if err != nil || resp.Attempts != 3 {
			t.Fatalf("resp %+v err %v", resp, err)
		}
		got := f.arrivals()
		ids := map[byte]bool{}
		for i, a := range got {
			ids[radius.Identifier(a.b)] = true
			v, ok := radius.Attr(a.b, radius.AttrAcctDelayTime)
			want := uint32(i * 3)
			if i == 0 {
				if ok {
					t.Errorf("first send has Acct-Delay-Time")
				}
				continue
			}
			if !ok || binary.BigEndian.Uint32(v) != want {
				t.Errorf("attempt %d: Acct-Delay-Time %v, want %d", i+1, v, want)
			}
		}
		if len(ids) != 3 {
			t.Errorf("3 different packets used %d Identifiers, want 3", len(ids))
		}
		if st := p.Stats(); st.Sent != 3 || st.Retransmissions != 0 {
			t.Errorf("stats %+v: each changed packet is a new send", st)
		}
	})
}

// Close fails the exchanges in progress with ErrClosed.
func TestCloseFailsExchanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", func(int, []byte) int { return 0 })
		defer f.close()
		p := newTestPeer(t, n, "srv:1812", PeerConfig{})
		errc := make(chan error, 1)
		go func() { _, err := p.Exchange(context.Background(), accessRequest("u")); errc <- err }()
		synctest.Wait()
		p.Close()
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Fatalf("err %v, want ErrClosed", err)
		}
	})
}

// A burst that arrives while the first socket is still being opened gets
// the same bound as one that arrives after it: MaxSockets sockets of
// Identifiers and MaxWaiting waiting, no ErrBusy before that. The waiting
// bound once counted only the socket being opened, so that the requests
// beyond one socket and MaxWaiting failed when the first dial was slow.
func TestBurstDuringFirstDialGetsTheWholeBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f, release := startHeldFake(n, "srv:1812")
		defer f.close()
		defer release()
		gate := make(chan struct{})
		var dials atomic.Int32
		p := newTestPeer(t, n, "srv:1812", PeerConfig{MaxSockets: 2, MaxWaiting: 10, Timeout: time.Minute, Retries: 1,
			Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				if dials.Add(1) == 1 {
					<-gate // the first dial takes until every request has arrived
				}
				return n.Dial(ctx, addr)
			}})
		const total = 2*IDsPerSocket + 10
		errs := make(chan error, total)
		for range total {
			go func() { _, err := p.Exchange(context.Background(), accessRequest("u")); errs <- err }()
		}
		synctest.Wait()
		if st := p.Stats(); st.Sockets != 0 || st.Waiting != total-1 {
			t.Fatalf("while the first socket opens: %+v, want every request but the dialer's waiting", st)
		}
		close(gate)
		synctest.Wait()
		if st := p.Stats(); st.Sockets != 2 || st.InFlight != 2*IDsPerSocket || st.Waiting != 10 {
			t.Fatalf("stats %+v, want 2 sockets, 512 in flight, 10 waiting", st)
		}
		release()
		for range total {
			if err := <-errs; err != nil {
				t.Errorf("exchange: %v", err)
			}
		}
	})
}
