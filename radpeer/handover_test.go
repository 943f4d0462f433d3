package radpeer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	lradius "layeh.com/radius"
)

// The server policy's hand-over takes the requests still live on a
// connection being recycled (its Identifiers held by requests that timed
// out; it closes once its live requests end) as well as those on the
// current one: they end at the hand-over, not at their deadlines, and the
// recycled connection, with nothing live left, closes.
func TestHandOverTakesTheRecycledConnectionsRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		srv := &dropServer{}
		go srv.serveAll(ln)
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		errHanded := errors.New("handed over")
		var mu sync.Mutex
		handed := 0
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			mu.Lock()
			handed += len(calls)
			mu.Unlock()
			for _, cl := range calls {
				cl.Fail(errHanded)
			}
		}
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		var wg sync.WaitGroup
		var live []error
		wg.Add(2)
		go func() { defer wg.Done(); exchangeAll(p, 128, "drop", 10*time.Second) }() // stale from 10 s
		synctest.Wait()
		go func() { defer wg.Done(); live = exchangeAll(p, 127, "drop", 40*time.Second) }()
		synctest.Wait()
		time.Sleep(15 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = p.Exchange(ctx, accessReq("alice")) // recycles the connection
		cancel()
		if err != nil {
			t.Fatalf("request after 128 stale Identifiers: %v", err)
		}
		synctest.Wait()
		if st := p.Stats(); st.RecycledConns != 1 || srv.closed.Load() != 0 {
			t.Fatalf("want the old connection recycled and open for its 127 live requests: %+v, %d closed", st, srv.closed.Load())
		}
		start := time.Now()
		dones, doneSaw := 0, 0 // under mu
		p.HandOver("out of service: no reply within the down-timeout", nil, func() {
			mu.Lock()
			dones, doneSaw = dones+1, handed
			mu.Unlock()
		})
		wg.Wait()
		synctest.Wait()
		mu.Lock()
		if dones != 1 || doneSaw != 127 {
			t.Errorf("HandOver's done called %d times, the first after %d requests were handed over; want once, after all 127", dones, doneSaw)
		}
		mu.Unlock()
		if d := time.Since(start); d != 0 {
			t.Errorf("the live requests ended %v after the hand-over, want at once", d)
		}
		for i, err := range live {
			if !errors.Is(err, errHanded) {
				t.Fatalf("live request %d: %v, want it handed over", i, err)
			}
		}
		mu.Lock()
		if handed != 127 {
			t.Errorf("%d requests handed over, want the 127 live ones", handed)
		}
		mu.Unlock()
		if c := srv.closed.Load(); c != 1 {
			t.Errorf("%d connections closed, want the recycled one, nothing live left on it", c)
		}
		mustClose(t, p)
		ln.Close()
	})
}

// An answer without a required Message-Authenticator, late on the
// connection a request was handed over from, ends nothing: the request is
// in flight at another server, whose answer it gets.
func TestLateAnswerWithoutMAOnAConnectionTheCallLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lnA, lnB := newPipeListener(), newPipeListener()
		var mu sync.Mutex
		var held [][]byte
		var tcA transport.Conn
		release := make(chan struct{})
		go func() { // A answers Status-Server and holds Access-Requests ...
			tc, err := lnA.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			tcA = tc
			mu.Unlock()
			defer tc.Close()
			for {
				b, err := tc.ReadMessage()
				if err != nil {
					return
				}
				if radius.Code(b) == lradius.CodeStatusServer {
					ans, _ := radius.EncodeResponse(b, lradius.CodeAccessAccept, nil, testSecret)
					tc.WriteMessages(ans)
					continue
				}
				mu.Lock()
				held = append(held, b)
				mu.Unlock()
			}
		}()
		go func() { // ... then answers them without a Message-Authenticator
			<-release
			mu.Lock()
			defer mu.Unlock()
			for _, b := range held {
				tcA.WriteMessages(unsignedAnswer(b, lradius.CodeAccessAccept, nil))
			}
		}()
		gB := &gate{ch: make(chan struct{})}
		srvB, err := NewServer(lnB, SchemeTCP, ServerConfig{Secret: testSecret, Handler: gB.handler})
		if err != nil {
			t.Fatal(err)
		}
		go srvB.Serve()
		cfgB := testConfig(30 * time.Second)
		cfgB.Dialer = lnB.dialer()
		pb, err := Dial("radius+tcp://b:1812", cfgB)
		if err != nil {
			t.Fatal(err)
		}
		cfgA := testConfig(30 * time.Second)
		cfgA.Dialer = lnA.dialer()
		cfgA.Logger = quietLogger
		cfgA.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			for _, cl := range calls {
				if err := pb.Submit(cl); err != nil {
					cl.Fail(err)
				}
			}
		}
		pa, err := Dial("radius+tcp://a:1812", cfgA)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		cl := newCall(accessReq("u"))
		if err := pa.submit(cl); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		pa.HandOver("down-timeout", nil, nil)
		synctest.Wait()
		close(release) // A's late unsigned answer
		synctest.Wait()
		if got := pa.Stats().NoMA; got != 1 {
			t.Errorf("NoMA = %d, want 1 (the late answer counted)", got)
		}
		time.Sleep(time.Second)
		close(gB.ch) // B answers
		if _, err := cl.wait(context.Background(), time.Minute); err != nil {
			t.Errorf("a call in flight at B failed by A's late unsigned answer: %v", err)
		}
		mustClose(t, pa, pb, srvB)
		lnA.Close()
	})
}
