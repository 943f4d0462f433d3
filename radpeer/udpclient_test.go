package radpeer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/radius"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"
)

// The tests of UDPPeer run inside synctest bubbles over memNet, so that
// every timing (Timeout, the late-reply reservation, deadlines) is exact.

// arrival is one datagram a fake server received.
type arrival struct {
	at   time.Time
	from string
	b    []byte
}

// fakeServer records what it receives and answers as answer says: the
// number of copies of the answer to send (0: none) for the n-th arrival
// (from 1).
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
			ans := f.answer
			f.mu.Unlock()
			copies := 1
			if ans != nil {
				copies = ans(i, b)
			}
			for range copies {
				f.reply(arrival{from: from.String(), b: b})
			}
		}
	}()
	return f
}

// noAnswer is a fakeServer's answer that never answers.
func noAnswer(int, []byte) int { return 0 }

// reply sends the answer to a: Access-Accept, or Accounting-Response to
// an Accounting-Request or a Status-Server.
func (f *fakeServer) reply(a arrival) {
	f.mu.Lock()
	encode, secret := f.encode, f.secret
	f.mu.Unlock()
	code := lradius.CodeAccessAccept
	if c := radius.Code(a.b); c == lradius.CodeAccountingRequest {
		code = lradius.CodeAccountingResponse
	}
	var resp []byte
	if encode != nil {
		resp = encode(a.b, code)
	} else {
		var err error
		if resp, err = radius.EncodeResponse(a.b, code, nil, secret); err != nil {
			panic(err)
		}
	}
	f.end.WriteTo(resp, memAddr(a.from))
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

func (f *fakeServer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.got)
}

func (f *fakeServer) setAnswer(a func(n int, b []byte) int) {
	f.mu.Lock()
	f.answer = a
	f.mu.Unlock()
}

func (f *fakeServer) setEncode(e func(req []byte, code lradius.Code) []byte) {
	f.mu.Lock()
	f.encode = e
	f.mu.Unlock()
}

func (f *fakeServer) setSecret(s []byte) {
	f.mu.Lock()
	f.secret = s
	f.mu.Unlock()
}

func (f *fakeServer) close() { f.end.Close(); f.wg.Wait() }

// unsignedReply answers req with a right Response Authenticator and no
// Message-Authenticator, as a server without the BlastRADIUS fixes does
// (FreeRADIUS before 3.2.5) and as a forgery does, here with a
// Proxy-State the request never had.
func unsignedReply(req []byte, code lradius.Code) []byte {
	return unsignedAnswer(req, code, lradius.Attributes{{Type: radius.AttrProxyState, Attribute: []byte("collision-blob")}})
}

var quietLogger = slog.New(slog.DiscardHandler)

// newTestUDPPeer returns a UDPPeer of radius://addr over n, closed at the
// end of the test (at once: what is in flight then fails).
func newTestUDPPeer(t *testing.T, n *memNet, addr string, cfg UDPConfig) *UDPPeer {
	t.Helper()
	if cfg.Secret == nil {
		cfg.Secret = testSecret
	}
	if cfg.Dial == nil {
		cfg.Dial = n.Dial
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger
	}
	p, err := NewUDPPeer("radius://"+addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeNow(t, p) })
	return p
}

// closeNow closes p without a drain.
func closeNow(t *testing.T, p *UDPPeer) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}

// failoverLog records what a UDPPeer hands to its Failover, and passes it
// on to then when set.
type failoverLog struct {
	mu   sync.Mutex
	got  []handover
	then func(c *call.Call)
}

// handover is one call handed to a Failover.
type handover struct {
	from   call.Carrier
	c      *call.Call
	reason string
	at     time.Time
}

func (l *failoverLog) hook(from call.Carrier, calls []*call.Call, reason string) {
	l.mu.Lock()
	for _, c := range calls {
		l.got = append(l.got, handover{from: from, c: c, reason: reason, at: time.Now()})
	}
	then := l.then
	l.mu.Unlock()
	if then != nil {
		for _, c := range calls {
			then(c)
		}
	}
}

func (l *failoverLog) list() []handover {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]handover(nil), l.got...)
}

func (l *failoverLog) len() int { return len(l.list()) }

// submit submits a call of r to p and fails the test if Submit does.
func submit(t *testing.T, p *UDPPeer, r *radius.Request) *call.Call {
	t.Helper()
	c := NewCall(r)
	if err := p.Submit(c); err != nil {
		t.Fatalf("submit: %v", err)
	}
	return c
}

// resultOf returns how c completed; it must have.
func resultOf(t *testing.T, c *call.Call) error {
	t.Helper()
	if !c.IsDone() {
		t.Fatalf("call not complete (%s)", c.State())
	}
	_, err := c.Wait(context.Background(), time.Nanosecond)
	return err
}

func userOf(b []byte) string {
	v, _ := radius.Attr(b, radius.AttrUserName)
	return string(v)
}

// The same packet, byte for byte from the same source port, every Timeout
// up to Retries attempts; then, without a Failover, a *TimeoutError
// matching ErrNoReply and ErrTimeout at Retries x Timeout.
func TestUDPRetransmitsIdenticalPacketEveryTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", noAnswer)
		defer f.close()
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{})
		start := time.Now()
		_, err := p.Exchange(context.Background(), accessReq("alice"))
		var te *TimeoutError
		if !errors.As(err, &te) || !errors.Is(err, ErrTimeout) || !errors.Is(err, ErrNoReply) || te.Attempts != 3 {
			t.Fatalf("err %v, want a TimeoutError after 3 attempts", err)
		}
		if te.Server != "radius://srv:1812" || te.Timeout != DefaultUDPTimeout || errors.Is(err, radius.ErrNoMessageAuthenticator) {
			t.Errorf("TimeoutError %+v", te)
		}
		if took := time.Since(start); took != 9*time.Second {
			t.Errorf("gave up after %v, want 3 x 3 s", took)
		}
		got := f.arrivals()
		if len(got) != 3 {
			t.Fatalf("%d packets arrived, want 3", len(got))
		}
		for i, a := range got {
			if want := start.Add(time.Duration(i) * DefaultUDPTimeout); !a.at.Equal(want) {
				t.Errorf("attempt %d at +%v, want +%v", i+1, a.at.Sub(start), want.Sub(start))
			}
			if !bytes.Equal(a.b, got[0].b) || a.from != got[0].from {
				t.Errorf("attempt %d differs from the first (same bytes and source port required)", i+1)
			}
		}
		st := p.Stats()
		if st.Sent != 1 || st.Retransmissions != 2 || st.TimedOut != 1 || st.Answered != 0 || st.Sockets != 1 || st.InFlight != 1 {
			t.Errorf("stats %+v, want 1 sent, 2 retransmissions, 1 timed out, its Identifier reserved", st)
		}
		time.Sleep(DefaultUDPTimeout)
		synctest.Wait()
		if st := p.Stats(); st.InFlight != 0 || f.count() != 3 {
			t.Errorf("after the reservation: %+v, %d packets; want the Identifier free and nothing sent", st, f.count())
		}
	})
}

// A reply to the second attempt completes the exchange; the copies the
// server sends of it, and a reply to a request given up on, are dropped
// and counted.
func TestUDPLateAndDuplicateRepliesDroppedAndCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", func(i int, _ []byte) int {
			if i == 2 {
				return 3 // the answer and two duplicates
			}
			return 0
		})
		defer f.close()
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{})
		resp, err := p.Exchange(context.Background(), accessReq("bob"))
		if err != nil || resp.Attempts != 2 || resp.Packet.Code != lradius.CodeAccessAccept || resp.Server != "radius://srv:1812" {
			t.Fatalf("resp %+v err %v; want an Access-Accept to attempt 2", resp, err)
		}
		synctest.Wait()
		if st := p.Stats(); st.Duplicates != 2 || st.Answered != 1 || st.Late != 0 || st.InFlight != 0 {
			t.Errorf("stats %+v, want 2 duplicates", st)
		}

		// A server that answers only after the client gave up: late, inside
		// the reservation and after it.
		f.setAnswer(noAnswer)
		for i, wait := range []time.Duration{time.Second, 2 * DefaultUDPTimeout} {
			c := NewCall(accessReq("carol"))
			c.SetAttempts(1)
			if err := p.Submit(c); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Wait(context.Background(), time.Minute); !errors.Is(err, ErrNoReply) {
				t.Fatalf("err %v, want ErrNoReply", err)
			}
			time.Sleep(wait)
			got := f.arrivals()
			f.reply(got[len(got)-1])
			synctest.Wait()
			if st := p.Stats(); st.Late != uint64(i+1) || st.Answered != 1 || st.BadReplies != 0 {
				t.Errorf("reply %v after the timeout: stats %+v, want it counted late", wait, st)
			}
		}
	})
}

// Replied is told of every verified reply, each a sign the server is
// alive: the answer, before it completes its call (whoever waits for the
// call then sees what Replied did), its duplicates, and replies that come
// after the call was complete or given up on; not of a reply that fails
// verification.
func TestUDPRepliedToldOfEveryVerifiedReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", func(int, []byte) int { return 2 }) // the answer and a duplicate
		defer f.close()
		var mu sync.Mutex
		var cur *call.Call
		var told, doneBefore int
		var p *UDPPeer
		p = newTestUDPPeer(t, n, "srv:1812", UDPConfig{Replied: func(from call.Carrier) {
			mu.Lock()
			defer mu.Unlock()
			if from != call.Carrier(p) {
				t.Errorf("Replied from %v, want the peer", from)
			}
			told++
			if cur != nil && cur.IsDone() {
				doneBefore++
			}
			cur = nil // the duplicate and later ones: its call is complete
		}})
		c := NewCall(accessReq("bob"))
		mu.Lock()
		cur = c
		mu.Unlock()
		if err := p.Submit(c); err != nil {
			t.Fatal(err)
		}
		if err := resultOfWait(c); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		mu.Lock()
		if told != 2 || doneBefore != 0 {
			t.Errorf("told %d times (%d after the call completed), want 2, the first before", told, doneBefore)
		}
		mu.Unlock()

		// Late: inside the reservation and after it.
		f.setAnswer(noAnswer)
		for i, wait := range []time.Duration{time.Second, 2 * DefaultUDPTimeout} {
			c := NewCall(accessReq("carol"))
			c.SetAttempts(1)
			if err := p.Submit(c); err != nil {
				t.Fatal(err)
			}
			if err := resultOfWait(c); !errors.Is(err, ErrNoReply) {
				t.Fatalf("err %v, want ErrNoReply", err)
			}
			time.Sleep(wait)
			got := f.arrivals()
			f.reply(got[len(got)-1])
			synctest.Wait()
			mu.Lock()
			if told != 3+i {
				t.Errorf("a reply %v after the timeout: told %d times, want %d", wait, told, 3+i)
			}
			mu.Unlock()
		}

		// Signed with another secret: dropped, not told.
		f.setSecret([]byte("other"))
		f.setAnswer(nil)
		c = NewCall(accessReq("dave"))
		c.SetAttempts(1)
		if err := p.Submit(c); err != nil {
			t.Fatal(err)
		}
		if err := resultOfWait(c); !errors.Is(err, ErrNoReply) {
			t.Fatalf("err %v, want ErrNoReply", err)
		}
		synctest.Wait()
		mu.Lock()
		if told != 4 {
			t.Errorf("told %d times after a reply that fails verification, want 4", told)
		}
		mu.Unlock()
	})
}

func resultOfWait(c *call.Call) error {
	_, err := c.Wait(context.Background(), time.Minute)
	return err
}

// A reply signed with another secret, or to an Identifier never used, or
// that is no RADIUS packet, is dropped: the exchange times out.
func TestUDPBadRepliesDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		f.setSecret([]byte("wrong"))
		defer f.close()
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Retries: 2})
		_, err := p.Exchange(context.Background(), accessReq("dave"))
		if !errors.Is(err, ErrNoReply) {
			t.Fatalf("err %v, want ErrNoReply", err)
		}
		// Replies that fail verification name the likely cause.
		if !errors.Is(err, ErrSecretMismatch) || !strings.Contains(err.Error(), "2 failed verification: shared secret mismatch?") {
			t.Errorf("err %v, want a secret mismatch named", err)
		}
		if st := p.Stats(); st.BadReplies != 2 || st.Answered != 0 || st.Late != 0 || st.NoMA != 0 {
			t.Errorf("stats %+v, want 2 bad replies", st)
		}

		// Garbage, a request, and a reply on an Identifier never used.
		f.setSecret(testSecret)
		from := f.arrivals()[0].from
		unused, _, _ := radius.EncodeRequest(accessReq("x"), 200, testSecret)
		unusedReply, _ := radius.EncodeResponse(unused, lradius.CodeAccessAccept, nil, testSecret)
		for _, b := range [][]byte{{1, 2, 3}, unused, unusedReply} {
			f.end.WriteTo(b, memAddr(from))
		}
		synctest.Wait()
		if st := p.Stats(); st.BadReplies != 5 || st.Late != 0 || st.Duplicates != 0 {
			t.Errorf("stats %+v, want 5 bad replies", st)
		}
	})
}

// RFC 2865 section 3: the octets of a datagram past the Length field are
// padding, ignored on reception; a reply that has some is taken.
func TestUDPReplyPaddingIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		f.setEncode(func(req []byte, code lradius.Code) []byte {
			b, err := radius.EncodeResponse(req, code, nil, testSecret)
			if err != nil {
				panic(err)
			}
			return append(b, 0, 0, 0, 0)
		})
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Retries: 1})
		resp, err := p.Exchange(context.Background(), accessReq("padded"))
		if err != nil {
			t.Fatalf("reply with padding: %v", err)
		}
		if resp.Packet.Code != lradius.CodeAccessAccept || len(resp.Raw) != int(resp.Raw[2])<<8|int(resp.Raw[3]) {
			t.Errorf("resp %+v: want the Access-Accept without its padding", resp)
		}
	})
}

// Identifiers are reused least recently first: 256 sequential exchanges
// use 256 different Identifiers, and the 257th reuses the first.
func TestUDPIdentifiersReusedLeastRecently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{})
		for i := range IDsPerSocket + 1 {
			if _, err := p.Exchange(context.Background(), accessReq("u")); err != nil {
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
		if st := p.Stats(); st.Sockets != 1 || st.Answered != IDsPerSocket+1 || st.Sent != IDsPerSocket+1 {
			t.Errorf("stats %+v", st)
		}
	})
}

// More than 256 requests in flight open a second socket; past
// MaxSockets x 256 + MaxWaiting, Submit fails with ErrBusy.
func TestUDPSocketPoolAndBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f, release := startHeldFake(n, "srv:1812")
		defer f.close()
		defer release()
		// The fake answers one at a time after release: hold them all first.
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{MaxSockets: 2, MaxWaiting: 10, Timeout: time.Minute, Retries: 1})
		const total = 2*IDsPerSocket + 10
		errs := make(chan error, total+1)
		for range total {
			go func() { _, err := p.Exchange(context.Background(), accessReq("u")); errs <- err }()
		}
		synctest.Wait()
		st := p.Stats()
		if st.Sockets != 2 || st.InFlight != 2*IDsPerSocket || st.Waiting != 10 {
			t.Fatalf("stats %+v, want 2 sockets, 512 in flight, 10 waiting", st)
		}
		if _, err := p.Exchange(context.Background(), accessReq("u")); !errors.Is(err, ErrBusy) {
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
		if st := p.Stats(); st.Answered != total || st.InFlight != 0 || st.Waiting != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

// A burst that arrives while the first socket is still being opened gets
// the same bound as one that arrives after it: MaxSockets sockets of
// Identifiers and MaxWaiting waiting, no ErrBusy before that.
func TestUDPBurstDuringFirstDialGetsTheWholeBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f, release := startHeldFake(n, "srv:1812")
		defer f.close()
		defer release()
		gate := make(chan struct{})
		open := sync.OnceFunc(func() { close(gate) })
		defer open() // on failure too: the dial blocked there would outlive the bubble
		var dials atomic.Int32
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{MaxSockets: 2, MaxWaiting: 10, Timeout: time.Minute, Retries: 1,
			Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				if dials.Add(1) == 1 {
					<-gate // the first dial takes until every request has arrived
				}
				return n.Dial(ctx, addr)
			}})
		const total = 2*IDsPerSocket + 10
		errs := make(chan error, total)
		for range total {
			go func() { _, err := p.Exchange(context.Background(), accessReq("u")); errs <- err }()
		}
		synctest.Wait()
		if st := p.Stats(); st.Sockets != 0 || st.Waiting != total {
			t.Fatalf("while the first socket opens: %+v, want every request waiting", st)
		}
		open()
		synctest.Wait()
		if st := p.Stats(); st.Sockets != 2 || st.InFlight != 2*IDsPerSocket || st.Waiting != 10 || dials.Load() != 2 {
			t.Fatalf("stats %+v after %d dials, want 2 sockets, 512 in flight, 10 waiting", st, dials.Load())
		}
		release()
		for range total {
			if err := <-errs; err != nil {
				t.Errorf("exchange: %v", err)
			}
		}
	})
}

// Close whose ctx ends before the requests finish fails what is still in
// flight, and what waits for an Identifier, with ErrClosed, at the end of
// ctx; the peer takes no more requests from the start of Close.
func TestUDPCloseFailsInFlightWhenCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", noAnswer)
		defer f.close()
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{MaxSockets: 1, Timeout: time.Minute})
		var calls []*call.Call
		for range IDsPerSocket + 2 {
			calls = append(calls, submit(t, p, accessReq("u")))
		}
		synctest.Wait()
		if st := p.Stats(); st.InFlight != IDsPerSocket || st.Waiting != 2 {
			t.Fatalf("stats %+v", st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- p.Close(ctx) }()
		synctest.Wait()
		if p.InService() {
			t.Error("in service while closing")
		}
		if err := p.Submit(NewCall(accessReq("late"))); !errors.Is(err, ErrClosed) {
			t.Errorf("Submit while closing: %v, want ErrClosed", err)
		}
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 5*time.Second {
			t.Errorf("Close took %v, want the 5 s of its ctx", took)
		}
		for i, c := range calls {
			if err := resultOf(t, c); !errors.Is(err, ErrClosed) {
				t.Fatalf("call %d: %v, want ErrClosed", i, err)
			}
		}
		if n := f.count(); n != IDsPerSocket {
			t.Errorf("%d datagrams sent, want one per Identifier", n)
		}
		// Closed twice: at once.
		if err := p.Close(context.Background()); err != nil {
			t.Error(err)
		}
		if _, err := p.Exchange(context.Background(), accessReq("after")); !errors.Is(err, ErrClosed) {
			t.Errorf("Exchange after Close: %v, want ErrClosed", err)
		}
	})
}

// Close drains: the requests in flight get their replies, those waiting
// for an Identifier are sent as Identifiers come free, and one whose
// replies are lost goes on being retransmitted until it is given up on
// (refused, and handed to Failover); Close returns once none is left,
// before its ctx ends.
func TestUDPCloseDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		gate := make(chan struct{})
		release := sync.OnceFunc(func() { close(gate) })
		f := startFake(n, "srv:1812", func(_ int, b []byte) int {
			if userOf(b) == "lost" {
				return 0 // its replies are lost
			}
			<-gate
			return 1
		})
		defer f.close()
		defer release()
		// The hand-over takes a second: Close does not wait for it (see
		// TestUDPCloseFromFailover), only for the refusal.
		fo := failoverLog{then: func(*call.Call) { time.Sleep(time.Second) }}
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{MaxSockets: 1, Failover: fo.hook})
		lost := submit(t, p, accessReq("lost"))
		var calls []*call.Call
		for range IDsPerSocket + 1 { // 255 in flight, 2 waiting
			calls = append(calls, submit(t, p, accessReq("u")))
		}
		synctest.Wait()
		if st := p.Stats(); st.InFlight != IDsPerSocket || st.Waiting != 2 {
			t.Fatalf("stats %+v", st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- p.Close(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned with requests in flight")
		default:
		}
		release()
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if took, want := time.Since(start), 3*DefaultUDPTimeout; took != want {
			t.Errorf("Close took %v, want until the lost request was given up on (%v)", took, want)
		}
		if !lost.RefusedBy(p) {
			t.Error("Close returned before the lost request was refused")
		}
		time.Sleep(time.Second) // the hand-over
		synctest.Wait()
		for i, c := range calls {
			if err := resultOf(t, c); err != nil || ResponseOf(c) == nil {
				t.Fatalf("call %d: %v, want its answer", i, err)
			}
		}
		if got := fo.list(); len(got) != 1 || got[0].c != lost || !lost.RefusedBy(p) || lost.IsDone() {
			t.Fatalf("failover got %d calls; want the lost one, refused here", fo.len())
		}
		sent := 0
		for _, a := range f.arrivals() {
			if userOf(a.b) == "lost" {
				sent++
			}
		}
		if st := p.Stats(); sent != 3 || st.Answered != IDsPerSocket+1 || st.TimedOut != 1 {
			t.Errorf("lost request sent %d times, stats %+v; want 3 attempts during the drain", sent, st)
		}
	})
}

// A Failover may close the peer that hands it a request, while that
// peer's Close drains or as the first to close it: no deadlock, and the
// request was refused first.
func TestUDPCloseFromFailover(t *testing.T) {
	for _, outer := range []bool{true, false} {
		t.Run(fmt.Sprintf("closing already %v", outer), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newMemNet()
				f := startFake(n, "srv:1812", noAnswer)
				defer f.close()
				var p *UDPPeer
				inner := make(chan error, 1)
				fo := failoverLog{then: func(c *call.Call) {
					if !c.RefusedBy(p) {
						t.Error("handed over before it was refused")
					}
					inner <- p.Close(context.Background())
				}}
				p = newTestUDPPeer(t, n, "srv:1812", UDPConfig{Failover: fo.hook})
				c := submit(t, p, accessReq("alice"))
				start := time.Now()
				if outer {
					if err := p.Close(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				if err := <-inner; err != nil {
					t.Fatal(err)
				}
				if took := time.Since(start); took != 3*DefaultUDPTimeout {
					t.Errorf("closed after %v, want %v", took, 3*DefaultUDPTimeout)
				}
				if p.InService() || !c.RefusedBy(p) || c.IsDone() {
					t.Errorf("in service %v, call %s", p.InService(), c.State())
				}
			})
		})
	}
}

// By default a reply to an Access-Request without a Message-Authenticator
// is dropped and counted: the exchange gets no reply, and its
// TimeoutError says why. A reply to Status-Server without one is taken
// (FreeRADIUS before 3.2.5 sends them so); accounting replies need none.
func TestUDPReplyWithoutMADroppedByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		f.setEncode(unsignedReply)
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Retries: 2})
		_, err := p.Exchange(context.Background(), accessReq("alice"))
		var te *TimeoutError
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, radius.ErrNoMessageAuthenticator) || !errors.As(err, &te) || te.NoMessageAuthenticator != 2 {
			t.Fatalf("Access-Accept without Message-Authenticator: %v, want a timeout matching ErrNoMessageAuthenticator", err)
		}
		if !strings.Contains(err.Error(), "Message-Authenticator") {
			t.Errorf("error %q does not say why", err)
		}
		if st := p.Stats(); st.NoMA != 2 || st.Answered != 0 || st.BadReplies != 0 {
			t.Fatalf("stats %+v, want 2 replies dropped for want of a Message-Authenticator", st)
		}
		if _, err := p.Exchange(context.Background(), &radius.Request{Code: lradius.CodeStatusServer}); err != nil {
			t.Fatalf("Status-Server: %v", err)
		}
		if _, err := p.Exchange(context.Background(), acctReq("s1")); err != nil {
			t.Fatalf("Accounting-Request: %v", err)
		}
	})
}

// RequireMANever takes such replies; RequireMAAlways also drops a reply to
// Status-Server without one.
func TestUDPReplyMASettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		f.setEncode(unsignedReply)
		never := newTestUDPPeer(t, n, "srv:1812", UDPConfig{RequireMessageAuthenticator: RequireMANever})
		if r, err := never.Exchange(context.Background(), accessReq("alice")); err != nil || r.Packet.Code != lradius.CodeAccessAccept {
			t.Fatalf("RequireMANever: %v", err)
		}
		always := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Retries: 1, RequireMessageAuthenticator: RequireMAAlways})
		if _, err := always.Exchange(context.Background(), &radius.Request{Code: lradius.CodeStatusServer}); !errors.Is(err, radius.ErrNoMessageAuthenticator) {
			t.Fatalf("RequireMAAlways, Status-Server: %v", err)
		}
		if _, err := NewUDPPeer("radius://srv:1812", UDPConfig{Secret: testSecret, RequireMessageAuthenticator: 7}); !errors.Is(err, ErrConfig) {
			t.Fatalf("unknown setting: %v", err)
		}
	})
}

// The default with a Failover too: an Access-Accept without a
// Message-Authenticator is no reply; the request is handed over, and the
// error it concludes with says why.
func TestUDPPeerRequiresMAByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		f.setEncode(unsignedReply)
		var fo failoverLog
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Retries: 1, Failover: fo.hook})
		c := submit(t, p, accessReq("alice"))
		time.Sleep(DefaultUDPTimeout)
		synctest.Wait()
		if got := fo.list(); len(got) != 1 || !c.RefusedBy(p) || !strings.Contains(got[0].reason, "no reply") {
			t.Fatalf("failover %+v; want the call refused and handed over", got)
		}
		if !c.Conclude() {
			t.Fatal("Conclude: nothing to conclude with")
		}
		if err := resultOf(t, c); !errors.Is(err, radius.ErrNoMessageAuthenticator) || !errors.Is(err, ErrNoReply) {
			t.Fatalf("concluded with %v, want a TimeoutError matching ErrNoMessageAuthenticator", err)
		}
		if st := p.Stats(); st.NoMA != 1 || st.TimedOut != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// With a Failover, a request that got no reply to Retries attempts is
// refused by the server and handed over with the reason; the peer never
// takes it again (each server at most once), and Conclude ends it with
// the TimeoutError.
func TestUDPNoReplyRefusedAndHandedToFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", noAnswer)
		defer f.close()
		var fo failoverLog
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Failover: fo.hook})
		start := time.Now()
		c := submit(t, p, accessReq("alice"))
		if p.Avoids(c) != true {
			t.Error("Avoids false for a call in flight here")
		}
		time.Sleep(3*DefaultUDPTimeout - time.Millisecond)
		synctest.Wait()
		if fo.len() != 0 || c.State() != call.InFlight {
			t.Fatalf("handed over before its last attempt timed out (%s)", c.State())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		got := fo.list()
		if len(got) != 1 || got[0].c != c || got[0].from != p || !got[0].at.Equal(start.Add(3*DefaultUDPTimeout)) {
			t.Fatalf("failover: %+v; want this call from this peer at +9 s", got)
		}
		if want := "no reply to 3 attempt(s), 3s apart"; got[0].reason != want {
			t.Errorf("reason %q, want %q", got[0].reason, want)
		}
		if !c.RefusedBy(p) || c.State() != call.Moved || c.IsDone() {
			t.Fatalf("call %s, refused by the peer %v; want it moved and refused here", c.State(), c.RefusedBy(p))
		}
		if !p.Avoids(c) {
			t.Error("Avoids false for a call refused here")
		}
		if err := p.Submit(c); !errors.Is(err, ErrAlreadySent) {
			t.Errorf("Submit again: %v, want ErrAlreadySent", err)
		}
		if refused, err := p.SubmitAll([]*call.Call{c}); err != nil || len(refused) != 1 || refused[0] != c {
			t.Errorf("SubmitAll again: %v %v, want it refused", refused, err)
		}
		if f.count() != 3 {
			t.Errorf("%d datagrams, want 3", f.count())
		}
		if st := p.Stats(); st.TimedOut != 1 || st.Sent != 1 || st.Retransmissions != 2 || st.InFlight != 1 {
			t.Errorf("stats %+v", st)
		}
		if !c.Conclude() {
			t.Fatal("Conclude: nothing to conclude with")
		}
		var te *TimeoutError
		if err := resultOf(t, c); !errors.As(err, &te) || !errors.Is(err, ErrNoReply) || te.Attempts != 3 {
			t.Errorf("concluded with %v, want the TimeoutError", err)
		}
	})
}

// A refused request's Identifier stays reserved for one more Timeout: a
// reply inside that window is counted late and, the call having no answer
// yet, completes it as this server's answer.
func TestUDPLateReplyInWindowCompletesRefusedCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", noAnswer)
		defer f.close()
		var fo failoverLog
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Failover: fo.hook})
		c := submit(t, p, accessReq("alice"))
		time.Sleep(3*DefaultUDPTimeout + DefaultUDPTimeout - time.Millisecond) // the end of the window
		synctest.Wait()
		if fo.len() != 1 || c.IsDone() {
			t.Fatalf("failover %d, done %v", fo.len(), c.IsDone())
		}
		if st := p.Stats(); st.InFlight != 1 {
			t.Fatalf("stats %+v, want the Identifier reserved", st)
		}
		f.reply(f.arrivals()[0]) // a reply to the first attempt
		synctest.Wait()
		if err := resultOf(t, c); err != nil || c.AnsweredBy() != p {
			t.Fatalf("call: %v, answered by %v; want this server's answer", err, c.AnsweredBy())
		}
		resp := ResponseOf(c)
		if resp == nil || resp.Server != "radius://srv:1812" || resp.Attempts != 3 || resp.Packet.Code != lradius.CodeAccessAccept || resp.Peer != nil {
			t.Fatalf("response %+v", resp)
		}
		if st := p.Stats(); st.Late != 1 || st.Answered != 1 || st.InFlight != 0 || st.Duplicates != 0 {
			t.Errorf("stats %+v, want 1 late and answered, the Identifier free", st)
		}
		f.reply(f.arrivals()[1]) // and a copy: a duplicate
		synctest.Wait()
		if st := p.Stats(); st.Duplicates != 1 || st.Late != 1 {
			t.Errorf("stats %+v, want the copy counted a duplicate", st)
		}
	})
}

// After the window the Identifier is free again: a request that found
// none in the window gets it.
func TestUDPIdentifierReservedOneTimeoutAfterRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", noAnswer)
		defer f.close()
		var fo failoverLog
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{MaxSockets: 1, Failover: fo.hook})
		c0 := NewCall(accessReq("first"))
		c0.SetAttempts(1)
		if err := p.Submit(c0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultUDPTimeout) // refused now; reserved until +6 s
		synctest.Wait()
		if fo.len() != 1 {
			t.Fatalf("failover %d", fo.len())
		}
		for range IDsPerSocket - 1 {
			submit(t, p, accessReq("u"))
		}
		waiter := submit(t, p, accessReq("waiter"))
		synctest.Wait()
		if st := p.Stats(); st.InFlight != IDsPerSocket || st.Waiting != 1 {
			t.Fatalf("inside the window: %+v, want every Identifier held and one request waiting", st)
		}
		time.Sleep(DefaultUDPTimeout - time.Millisecond)
		synctest.Wait()
		if st := p.Stats(); st.Waiting != 1 {
			t.Fatalf("before the end of the window: %+v, want one request waiting", st)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if st := p.Stats(); st.InFlight != IDsPerSocket || st.Waiting != 0 || st.Sockets != 1 {
			t.Fatalf("after the window: %+v, want the waiter on the freed Identifier", st)
		}
		var first, w []byte
		for _, a := range f.arrivals() {
			switch userOf(a.b) {
			case "first":
				first = a.b
			case "waiter":
				w = a.b
			}
		}
		if w == nil || radius.Identifier(w) != radius.Identifier(first) || !waiter.InFlightOn(&p.h) {
			t.Fatalf("the waiter was not sent on the refused request's Identifier")
		}
		// A reply to the refused request now fails verification against
		// the waiter's authenticator, but verifies against the
		// Identifier's previous use: dropped as late, completing neither
		// and not counted against the waiter. Inside the window it was
		// recognised (see TestUDPLateReplyInWindowCompletesRefusedCall).
		f.reply(arrival{from: f.arrivals()[0].from, b: first})
		synctest.Wait()
		if st := p.Stats(); st.BadReplies != 0 || st.Late != 1 || st.Answered != 0 || c0.IsDone() || waiter.IsDone() {
			t.Errorf("stats %+v, refused done %v, waiter done %v; want the reply dropped as late", st, c0.IsDone(), waiter.IsDone())
		}
	})
}

// A late reply to a request answered meanwhile by the server it failed
// over to is dropped and counted late; one that comes while the request
// is in flight at that server completes it there, and that server stops
// retransmitting it.
func TestUDPLateReplyAndTheNextServer(t *testing.T) {
	for _, answered := range []bool{true, false} {
		t.Run(fmt.Sprintf("answered elsewhere %v", answered), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newMemNet()
				f1 := startFake(n, "srv1:1812", noAnswer)
				defer f1.close()
				answer2 := noAnswer
				if answered {
					answer2 = nil
				}
				f2 := startFake(n, "srv2:1812", answer2)
				defer f2.close()
				p2 := newTestUDPPeer(t, n, "srv2:1812", UDPConfig{})
				fo := failoverLog{then: func(c *call.Call) {
					if err := p2.Submit(c); err != nil {
						t.Errorf("failover to p2: %v", err)
					}
				}}
				p1 := newTestUDPPeer(t, n, "srv1:1812", UDPConfig{Failover: fo.hook})
				c := submit(t, p1, accessReq("alice"))
				time.Sleep(3 * DefaultUDPTimeout)
				synctest.Wait()
				if fo.len() != 1 || c.Sends() != 2 || c.IsDone() != answered {
					t.Fatalf("failover %d, sends %d, done %v", fo.len(), c.Sends(), c.IsDone())
				}
				time.Sleep(time.Second)
				f1.reply(f1.arrivals()[2])
				synctest.Wait()
				if err := resultOf(t, c); err != nil {
					t.Fatal(err)
				}
				want, late := call.Carrier(p1), p1.Stats().Late
				if answered {
					want = p2
				}
				if c.AnsweredBy() != want || ResponseOf(c).Server != want.Name() || late != 1 {
					t.Fatalf("answered by %v (%s), p1 late %d; want %s", c.AnsweredBy(), ResponseOf(c).Server, late, want.Name())
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				st2 := p2.Stats()
				if answered && (st2.Answered != 1 || f2.count() != 1) {
					t.Errorf("p2 %+v", st2)
				}
				if !answered && (st2.Answered != 0 || f2.count() != 1 || st2.Retransmissions != 0 || st2.TimedOut != 0 || st2.InFlight != 0) {
					t.Errorf("p2 %+v, %d datagrams; want it to stop at the answer from p1", st2, f2.count())
				}
			})
		})
	}
}

// A call whose caller's deadline ends while it is in flight is not
// retransmitted any more; its Identifier is free one Timeout later.
func TestUDPCallerDeadlineStopsRetransmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", noAnswer)
		defer f.close()
		var fo failoverLog
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Failover: fo.hook})
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		if _, err := p.Exchange(ctx, accessReq("alice")); !errors.Is(err, ErrTimeout) {
			t.Fatalf("err %v, want ErrTimeout", err)
		}
		synctest.Wait()
		if st := p.Stats(); st.InFlight != 1 {
			t.Errorf("stats %+v, want the Identifier reserved", st)
		}
		time.Sleep(DefaultUDPTimeout)
		synctest.Wait()
		if st := p.Stats(); st.InFlight != 0 {
			t.Errorf("stats %+v, want the Identifier free", st)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := f.count(); got != 2 {
			t.Errorf("%d datagrams, want 2 (at 0 and 3 s, none after the 4 s deadline)", got)
		}
		if st := p.Stats(); st.Sent != 1 || st.Retransmissions != 1 || st.TimedOut != 0 || fo.len() != 0 {
			t.Errorf("stats %+v, failover %d", st, fo.len())
		}
	})
}

// SetAttempts(1): one send, no retransmission, given up on after one
// Timeout.
func TestUDPSetAttemptsOne(t *testing.T) {
	for _, withFailover := range []bool{false, true} {
		t.Run(fmt.Sprintf("failover %v", withFailover), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newMemNet()
				f := startFake(n, "srv:1812", noAnswer)
				defer f.close()
				var fo failoverLog
				cfg := UDPConfig{}
				if withFailover {
					cfg.Failover = fo.hook
				}
				p := newTestUDPPeer(t, n, "srv:1812", cfg)
				c := NewCall(accessReq("probe"))
				c.SetAttempts(1)
				if err := p.Submit(c); err != nil {
					t.Fatal(err)
				}
				time.Sleep(DefaultUDPTimeout)
				synctest.Wait()
				if withFailover {
					if got := fo.list(); len(got) != 1 || got[0].reason != "no reply to 1 attempt(s), 3s apart" {
						t.Fatalf("failover %+v", got)
					}
					c.Conclude()
				}
				var te *TimeoutError
				if err := resultOf(t, c); !errors.As(err, &te) || te.Attempts != 1 {
					t.Fatalf("err %v, want a TimeoutError after 1 attempt", err)
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				if st := p.Stats(); f.count() != 1 || st.Retransmissions != 0 || st.Sent != 1 {
					t.Errorf("%d datagrams, stats %+v; want one send", f.count(), st)
				}
			})
		})
	}
}

// An Accounting-Request goes to AccountingAddr when set, from a socket of
// its own; the others go to the peer's address.
func TestUDPAccountingAddr(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		auth := startFake(n, "srv:1812", nil)
		defer auth.close()
		acct := startFake(n, "srv:1813", nil)
		defer acct.close()
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{AccountingAddr: "srv:1813"})
		if _, err := p.Exchange(context.Background(), accessReq("alice")); err != nil {
			t.Fatal(err)
		}
		if r, err := p.Exchange(context.Background(), acctReq("s1")); err != nil || r.Packet.Code != lradius.CodeAccountingResponse || r.Server != "radius://srv:1813" {
			t.Fatalf("accounting: %+v %v; want an Accounting-Response from radius://srv:1813", r, err)
		}
		if _, err := p.Exchange(context.Background(), &radius.Request{Code: lradius.CodeStatusServer}); err != nil {
			t.Fatal(err)
		}
		if a, b := auth.arrivals(), acct.arrivals(); len(a) != 2 || len(b) != 1 || radius.Code(b[0].b) != lradius.CodeAccountingRequest || a[0].from == b[0].from {
			t.Fatalf("authentication server got %d, accounting server %d", len(a), len(b))
		}
		if st := p.Stats(); st.Sockets != 2 {
			t.Errorf("stats %+v, want a socket per address", st)
		}

		// Without AccountingAddr, everything goes to the peer's address.
		one := newTestUDPPeer(t, n, "srv:1812", UDPConfig{})
		if _, err := one.Exchange(context.Background(), acctReq("s2")); err != nil {
			t.Fatal(err)
		}
		if len(auth.arrivals()) != 3 || len(acct.arrivals()) != 1 {
			t.Errorf("without AccountingAddr: %d and %d", len(auth.arrivals()), len(acct.arrivals()))
		}
	})
}

// A request that cannot be encoded (an attribute too long) fails at once
// without being sent, whether it found a free Identifier or waited for a
// socket; it is not handed to Failover (no server could take it), and
// its Identifier is free again.
func TestUDPUnencodableRequestFailsUnsent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		var fo failoverLog
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Failover: fo.hook})
		bad := func() *radius.Request {
			r := accessReq("bad")
			r.Attributes.Add(radius.AttrNASIdentifier, make([]byte, 300))
			return r
		}
		for i := range 2 { // the first waits for the first socket; the second finds it
			c := submit(t, p, bad())
			synctest.Wait()
			err := resultOf(t, c)
			if err == nil || errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "radius://srv:1812") {
				t.Fatalf("request %d: %v, want an encoding error", i, err)
			}
		}
		if _, err := p.Exchange(context.Background(), accessReq("good")); err != nil {
			t.Fatal(err)
		}
		if got := f.arrivals(); len(got) != 1 || userOf(got[0].b) != "good" {
			t.Errorf("%d datagrams sent, want only the good one", len(got))
		}
		if st := p.Stats(); st.Sent != 1 || st.InFlight != 0 || st.TimedOut != 0 || fo.len() != 0 {
			t.Errorf("stats %+v, failover %d", st, fo.len())
		}
	})
}

// A socket that cannot be opened: the requests waiting for it are refused
// and handed over with the reason (or fail without a Failover), and the
// next request dials again.
func TestUDPDialFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		var fail atomic.Bool
		fail.Store(true)
		dial := func(ctx context.Context, addr string) (net.Conn, error) {
			if fail.Load() {
				return nil, errors.New("no route")
			}
			return n.Dial(ctx, addr)
		}
		var fo failoverLog
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Dial: dial, Failover: fo.hook})
		c := submit(t, p, accessReq("alice"))
		synctest.Wait()
		if got := fo.list(); len(got) != 1 || !c.RefusedBy(p) || !strings.Contains(got[0].reason, "no route") {
			t.Fatalf("failover %+v, want the call refused with the dial error", got)
		}
		if err := p.Submit(c); !errors.Is(err, ErrAlreadySent) {
			t.Errorf("Submit again: %v", err)
		}
		noFo := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Dial: dial})
		if _, err := noFo.Exchange(context.Background(), accessReq("bob")); err == nil || !strings.Contains(err.Error(), "no route") {
			t.Errorf("without Failover: %v, want the dial error", err)
		}
		fail.Store(false)
		if _, err := p.Exchange(context.Background(), accessReq("carol")); err != nil {
			t.Fatalf("after the network came back: %v", err)
		}
		if st := p.Stats(); st.Sockets != 1 || st.Waiting != 0 || st.InFlight != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

// Submit: a complete call is not sent, a call of another protocol is
// refused.
func TestUDPSubmitCompleteAndForeignCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", nil)
		defer f.close()
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{})
		c := NewCall(accessReq("done"))
		c.Fail(errors.New("gone"))
		if err := p.Submit(c); err != nil {
			t.Errorf("complete call: %v", err)
		}
		var other call.Call
		other.Init()
		if err := p.Submit(&other); !errors.Is(err, ErrOtherProtocol) {
			t.Errorf("foreign call: %v, want ErrOtherProtocol", err)
		}
		if refused, err := p.SubmitAll([]*call.Call{&other}); !errors.Is(err, ErrOtherProtocol) || refused != nil {
			t.Errorf("SubmitAll of a foreign call: %v %v", refused, err)
		}
		synctest.Wait()
		if f.count() != 0 || p.Stats().Sent != 0 {
			t.Errorf("%d datagrams sent", f.count())
		}
		if p.Name() != "radius://srv:1812" || !p.InService() || p.Avoids(NewCall(accessReq("new"))) {
			t.Errorf("Name %q, InService %v", p.Name(), p.InService())
		}
	})
}

func TestUDPConfig(t *testing.T) {
	p, err := NewUDPPeer("radius://srv:1812", UDPConfig{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer closeNow(t, p)
	cfg := p.Config()
	if cfg.Timeout != DefaultUDPTimeout || cfg.Retries != DefaultUDPRetries || cfg.MaxSockets != DefaultUDPSockets ||
		cfg.MaxWaiting != DefaultMaxWaiting || cfg.Logger == nil || cfg.Dial == nil {
		t.Errorf("defaults %+v", cfg)
	}
	for name, c := range map[string]UDPConfig{
		"no secret":        {},
		"negative timeout": {Secret: testSecret, Timeout: -1},
		"negative retries": {Secret: testSecret, Retries: -1},
		"too many sockets": {Secret: testSecret, MaxSockets: MaxUDPSocketsLimit + 1},
		"negative waiting": {Secret: testSecret, MaxWaiting: -1},
	} {
		if _, err := NewUDPPeer("radius://srv:1812", c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	for _, u := range []string{"radsec://srv:2083", "radius://srv", "srv:1812"} {
		if _, err := NewUDPPeer(u, UDPConfig{Secret: testSecret}); !errors.Is(err, ErrConfig) {
			t.Errorf("URL %q: %v, want ErrConfig", u, err)
		}
	}
}

// Over real UDP on loopback (the default Dial), against this package's
// UDPServer.
func TestUDPPeerLoopback(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewUDPServer(pc, ServerConfig{Secret: testSecret, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(); close(done) }()
	defer func() { mustClose(t, srv); <-done }()
	p, err := NewUDPPeer("radius://"+pc.LocalAddr().String(), UDPConfig{Secret: testSecret, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range []*radius.Request{accessReq("alice"), acctReq("s1"), {Code: lradius.CodeStatusServer}} {
		resp, err := p.Exchange(ctx, r)
		if err != nil || resp.Server != p.Name() {
			t.Fatalf("%s: %+v %v", r.Code, resp, err)
		}
	}
}

// A second Close while the first drains the requests in flight waits for
// that drain, or returns its own ctx's error at its deadline, the drain
// going on.
func TestUDPSecondCloseHonoursItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		gate := make(chan struct{})
		release := sync.OnceFunc(func() { close(gate) })
		f := startFake(n, "srv:1812", func(_ int, b []byte) int { <-gate; return 1 })
		defer f.close()
		defer release()
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{})
		cl := submit(t, p, accessReq("u"))
		synctest.Wait()
		first := make(chan error, 1)
		go func() { first <- p.Close(context.Background()) }()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		require.ErrorIs(t, p.Close(ctx), context.DeadlineExceeded)
		require.Equal(t, 200*time.Millisecond, time.Since(start))
		require.False(t, cl.IsDone(), "the drain goes on")
		release()
		require.NoError(t, <-first)
		require.True(t, cl.IsDone())
		require.NoError(t, p.Close(context.Background()), "a Close after the end returns at once")
	})
}

// An Accounting-Request re-sent to another server says how late it is:
// its Acct-Delay-Time is the caller's value plus the whole seconds since
// the call was made (added when the caller left it out), while the
// retransmissions to the first server repeat the first packet byte for
// byte.
func TestUDPAcctDelayTimeOnTheNextServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		a := startFake(n, "a:1813", noAnswer)
		defer a.close()
		b := startFake(n, "b:1813", nil)
		defer b.close()
		pb := newTestUDPPeer(t, n, "b:1813", UDPConfig{})
		fo := failoverLog{then: func(c *call.Call) {
			if err := pb.Submit(c); err != nil {
				c.Fail(err)
			}
		}}
		pa := newTestUDPPeer(t, n, "a:1813", UDPConfig{Failover: fo.hook})
		with := acctReq("with")
		with.Attributes.Add(radius.AttrAcctDelayTime, lradius.NewInteger(5))
		c1 := submit(t, pa, with)
		time.Sleep(1500 * time.Millisecond)
		c2 := submit(t, pa, acctReq("without"))
		time.Sleep(20 * time.Second)
		synctest.Wait()
		for _, c := range []*call.Call{c1, c2} {
			if err := resultOf(t, c); err != nil {
				t.Fatalf("call: %v", err)
			}
		}
		delay := func(pkt []byte) (uint32, bool) {
			v, ok := radius.Attr(pkt, radius.AttrAcctDelayTime)
			if !ok {
				return 0, false
			}
			d, err := lradius.Integer(v)
			if err != nil {
				t.Fatalf("Acct-Delay-Time %x", v)
			}
			return d, true
		}
		sess := func(pkt []byte) string {
			v, _ := radius.Attr(pkt, radius.AttrAcctSessionID)
			return string(v)
		}
		first := map[string][]byte{}
		for _, ar := range a.arrivals() {
			s := sess(ar.b)
			if first[s] == nil {
				first[s] = ar.b
			} else if !bytes.Equal(first[s], ar.b) {
				t.Errorf("%s: a retransmission to the same server differs from the first send", s)
			}
		}
		if d, ok := delay(first["with"]); !ok || d != 5 {
			t.Errorf("first send of 'with': Acct-Delay-Time %d (%v), want the caller's 5", d, ok)
		}
		if _, ok := delay(first["without"]); !ok && first["without"] == nil {
			t.Fatal("'without' never reached a")
		} else if ok {
			t.Errorf("first send of 'without', on time: Acct-Delay-Time added")
		}
		want := map[string]uint32{"with": 5 + 9, "without": 9} // handed over at +9 s
		got := map[string]uint32{}
		for _, ar := range b.arrivals() {
			d, ok := delay(ar.b)
			if !ok {
				t.Errorf("%s at b: no Acct-Delay-Time", sess(ar.b))
			}
			got[sess(ar.b)] = d
		}
		for s, w := range want {
			if got[s] != w {
				t.Errorf("%s at b: Acct-Delay-Time %d, want %d", s, got[s], w)
			}
		}
	})
}

// HandOver gives the Failover the requests waiting for an Identifier at
// a server that does not answer, at once and not refused there; those in
// flight go on with their retransmissions and are handed over when they
// run out, and nothing is sent to that server later.
func TestUDPHandOverTakesTheWaitingRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", noAnswer)
		defer f.close()
		var fo failoverLog
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{Failover: fo.hook, MaxSockets: 1})
		start := time.Now()
		var calls []*call.Call
		for i := range IDsPerSocket + 10 {
			calls = append(calls, submit(t, p, accessReq(fmt.Sprint("u", i))))
		}
		synctest.Wait()
		if w := p.Stats().Waiting; w != 10 {
			t.Fatalf("%d waiting, want 10", w)
		}
		kept := calls[IDsPerSocket]
		doneSaw := -1
		p.HandOver("down-timeout", func(c *call.Call) bool { return c == kept }, func() { doneSaw = fo.len() })
		synctest.Wait()
		if doneSaw != 9 {
			t.Errorf("HandOver's done saw %d requests handed over, want 9: called after them", doneSaw)
		}
		got := fo.list()
		if len(got) != 9 || p.Stats().Waiting != 1 {
			t.Fatalf("after HandOver: %d handed over, %d waiting; want 9 and the one kept", len(got), p.Stats().Waiting)
		}
		for i, h := range got {
			if want := calls[IDsPerSocket+1+i]; h.c != want || h.reason != "down-timeout" {
				t.Errorf("hand-over %d: %v (%q), want the waiting requests in order", i, h.c.Ref, h.reason)
			}
			if h.c.RefusedBy(p) || p.Avoids(h.c) || h.c.IsDone() {
				t.Errorf("a request never sent here is refused here, avoided or complete (%s)", h.c.State())
			}
		}
		p.HandOver("down-timeout", nil, nil)
		synctest.Wait()
		if n := fo.len(); n != 10 || p.Stats().Waiting != 0 {
			t.Fatalf("second HandOver: %d handed over, %d waiting", n, p.Stats().Waiting)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		got = fo.list()
		if len(got) != IDsPerSocket+10 {
			t.Fatalf("%d handed over, want %d", len(got), IDsPerSocket+10)
		}
		if last := got[len(got)-1].at.Sub(start); last != 3*DefaultUDPTimeout {
			t.Errorf("the last hand-over at +%v, want +9s (the in-flight requests' retransmissions)", last)
		}
		if c := f.count(); c != 3*IDsPerSocket {
			t.Errorf("%d datagrams at the server, want %d: the waiting requests were sent there", c, 3*IDsPerSocket)
		}
	})
}

// A Failover may close the peer when the requests come from a failed
// socket dial too: the hand-over runs outside what Close waits for, and
// the requests that waited for that socket are all refused before it.
func TestUDPCloseFromFailoverAfterDialFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p *UDPPeer
		inner := make(chan error, 1)
		fo := failoverLog{then: func(c *call.Call) {
			if !c.RefusedBy(p) {
				t.Error("handed over before it was refused")
			}
			select {
			case inner <- p.Close(context.Background()):
			default: // the second call of the batch: closed already
			}
		}}
		release := make(chan struct{})
		dial := func(ctx context.Context, addr string) (net.Conn, error) {
			<-release
			return nil, errors.New("no route")
		}
		var err error
		p, err = NewUDPPeer("radius://srv:1812", UDPConfig{Secret: testSecret, Dial: dial, Failover: fo.hook, Logger: quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		a, b := submit(t, p, accessReq("alice")), submit(t, p, accessReq("bob"))
		close(release)
		select {
		case err := <-inner:
			if err != nil {
				t.Errorf("Close from Failover: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Close from Failover (dial failure) still blocked after a minute")
		}
		synctest.Wait()
		if got := fo.list(); len(got) != 2 || got[0].c != a || got[1].c != b {
			t.Errorf("handed over %d calls, want both in order", len(got))
		}
		if p.InService() {
			t.Error("in service after Close")
		}
	})
}

// Close's ctx bounds its wait for a socket still being opened.
func TestUDPCloseHonoursCtxDuringADial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		dial := func(ctx context.Context, addr string) (net.Conn, error) {
			<-release
			return nil, errors.New("no route")
		}
		p, err := NewUDPPeer("radius://srv:1812", UDPConfig{Secret: testSecret, Dial: dial, Logger: quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		c := submit(t, p, accessReq("alice"))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close: %v, want its ctx's error", err)
		}
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("Close took %v, want its ctx's 2s", took)
		}
		if err := resultOf(t, c); !errors.Is(err, ErrClosed) {
			t.Errorf("the waiting request: %v, want ErrClosed", err)
		}
		close(release)
		synctest.Wait()
	})
}

// A duplicate reply that comes once its Identifier went to the next
// request is counted as a duplicate, not as a reply failing that
// request's verification: the next request's error does not blame the
// shared secret.
func TestUDPDuplicateReplyAfterTheIdentifierWasReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		gate := make(chan struct{})
		f := startFake(n, "srv:1812", func(i int, b []byte) int {
			if i == 1 {
				<-gate
				return 2 // the reply and a duplicate of it
			}
			return 0
		})
		defer f.close()
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{MaxSockets: 1, Timeout: time.Second, Retries: 2})
		first := submit(t, p, accessReq("first"))
		synctest.Wait()
		var rest []*call.Call
		for i := range IDsPerSocket {
			rest = append(rest, submit(t, p, accessReq(fmt.Sprint("u", i))))
		}
		synctest.Wait()
		close(gate)
		synctest.Wait()
		if st := p.Stats(); st.Duplicates != 1 || st.BadReplies != 0 {
			t.Errorf("Duplicates %d, BadReplies %d; want the duplicate counted as one", st.Duplicates, st.BadReplies)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if err := resultOf(t, first); err != nil {
			t.Fatalf("first: %v", err)
		}
		err := resultOf(t, rest[len(rest)-1])
		var te *TimeoutError
		if !errors.As(err, &te) || te.FailedVerification != 0 || errors.Is(err, ErrSecretMismatch) {
			t.Errorf("the next request on the Identifier: %v, want a timeout that blames no secret", err)
		}
	})
}

// A record as large as a packet may be goes to the next server as its
// caller made it when Acct-Delay-Time would take it past the largest
// packet, rather than nowhere.
func TestUDPAcctDelayTimeNeverMakesARecordTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		a := startFake(n, "a:1813", noAnswer)
		defer a.close()
		b := startFake(n, "b:1813", nil)
		defer b.close()
		pb := newTestUDPPeer(t, n, "b:1813", UDPConfig{})
		fo := failoverLog{then: func(c *call.Call) {
			if err := pb.Submit(c); err != nil {
				c.Fail(err)
			}
		}}
		pa := newTestUDPPeer(t, n, "a:1813", UDPConfig{Failover: fo.hook})
		big := acctReq("big") // 31 octets
		for range 15 {
			big.Attributes.Add(lradius.Type(25), make([]byte, 253))
		}
		big.Attributes.Add(lradius.Type(25), make([]byte, 238)) // 4,096 octets in all
		c := submit(t, pa, big)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if err := resultOf(t, c); err != nil {
			t.Fatalf("call: %v", err)
		}
		got := b.arrivals()
		if len(got) != 1 {
			t.Fatalf("%d arrivals at b, want 1", len(got))
		}
		if len(got[0].b) != 4096 {
			t.Errorf("%d octets at b, want 4096", len(got[0].b))
		}
		if _, ok := radius.Attr(got[0].b, radius.AttrAcctDelayTime); ok {
			t.Error("Acct-Delay-Time added past the largest packet")
		}
	})
}

// A duplicate reply to a request whose Identifier went to the next
// request, answered since, the Identifier free again, is a duplicate too,
// not a bad reply.
func TestUDPDuplicateReplyWhenTheIdentifierIsFreeAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		f := startFake(n, "srv:1812", func(i int, b []byte) int {
			if userOf(b) == "Y" {
				return 1
			}
			return 0
		})
		defer f.close()
		p := newTestUDPPeer(t, n, "srv:1812", UDPConfig{MaxSockets: 1, Timeout: time.Second, Retries: 2})
		first := submit(t, p, accessReq("first"))
		synctest.Wait()
		for i := range IDsPerSocket - 1 {
			submit(t, p, accessReq(fmt.Sprint("u", i)))
		}
		y := submit(t, p, accessReq("Y")) // waits for first's Identifier
		synctest.Wait()
		arr := f.arrivals()[0]
		f.reply(arr) // first answered: its Identifier goes to Y, answered at once
		synctest.Wait()
		if err := resultOf(t, y); err != nil {
			t.Fatalf("Y: %v", err)
		}
		f.reply(arr) // the server's duplicate of first's reply
		synctest.Wait()
		if st := p.Stats(); st.Duplicates != 1 || st.BadReplies != 0 {
			t.Errorf("Duplicates %d, BadReplies %d; want the duplicate counted as one", st.Duplicates, st.BadReplies)
		}
		if err := resultOf(t, first); err != nil {
			t.Errorf("first: %v", err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
	})
}
