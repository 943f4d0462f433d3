package radpeer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	lradius "layeh.com/radius"
)

// noMAServer drops "drop", holds the answers of "late" until release is
// closed and then sends them without a Message-Authenticator, and
// answers the others (Status-Server included) signed.
type noMAServer struct {
	release chan struct{}
	closed  atomic.Int64
}

func (s *noMAServer) serveAll(ln *pipeListener) {
	for {
		tc, err := ln.Accept()
		if err != nil {
			return
		}
		go s.serve(tc)
	}
}

func (s *noMAServer) serve(tc transport.Conn) {
	defer s.closed.Add(1)
	defer tc.Close()
	var wmu sync.Mutex
	write := func(b []byte) error { wmu.Lock(); defer wmu.Unlock(); return tc.WriteMessages(b) }
	for {
		b, err := tc.ReadMessage()
		if err != nil {
			return
		}
		switch u, _ := radius.Attr(b, radius.AttrUserName); string(u) {
		case "drop":
			continue
		case "late":
			go func() {
				<-s.release
				write(unsignedAnswer(b, lradius.CodeAccessAccept, nil))
			}()
			continue
		}
		ans, _ := radius.EncodeResponse(b, lradius.CodeAccessAccept, nil, testSecret)
		if write(ans) != nil {
			return
		}
	}
}

// The last live request of a recycled connection ends with an answer
// dropped for want of a required Message-Authenticator (the request
// fails; FailOn retires nothing): the recycled connection closes all the
// same, nothing live left on it, and a request handed over from it may
// go on its server again. Left open, it would be avoided for as long as
// the link stays OKAY.
func TestRecycledConnectionClosesAfterAnswerWithoutMA(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		srv := &noMAServer{release: make(chan struct{})}
		go srv.serveAll(ln)
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		cfg.Failover = func(call.Carrier, []*call.Call, string) {}
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		x := newCall(accessReq("drop"))
		if err := p.submit(x); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		p.HandOver("down-timeout", nil, nil)
		synctest.Wait()
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); exchangeAll(p, 200, "drop", time.Second) }()
		synctest.Wait()
		var lateErrs []error
		go func() { defer wg.Done(); lateErrs = exchangeAll(p, IDsPerConn-201, "late", 10*time.Minute) }()
		synctest.Wait()
		time.Sleep(2 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = p.Exchange(ctx, accessReq("alice")) // recycles the connection
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if st := p.Stats(); st.RecycledConns != 1 {
			t.Fatalf("want a recycle: %+v", st)
		}
		close(srv.release) // the 54 live requests end: answers without MA
		wg.Wait()
		synctest.Wait()
		for _, e := range lateErrs {
			if !errors.Is(e, radius.ErrNoMessageAuthenticator) {
				t.Fatalf("late request: %v, want ErrNoMessageAuthenticator", e)
			}
		}
		time.Sleep(time.Minute) // plenty: nothing is live on the recycled connection
		synctest.Wait()
		if c := srv.closed.Load(); c != 1 {
			t.Errorf("%d connections closed, want the recycled one (nothing live on it)", c)
		}
		if p.avoids(&x.Call) {
			t.Errorf("x still avoided a minute after the last live request of its recycled connection ended")
		}
		x.Fail(errors.New("test over"))
		mustClose(t, p)
		ln.Close()
	})
}
