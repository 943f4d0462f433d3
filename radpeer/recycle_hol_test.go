package radpeer

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
)

// As TestWaitingRequestAvoidsItsConnectionOkayAgain with MaxConns 2: no
// further connection opens when x's connection is OKAY again, and the
// request waiting ahead of x (y) keeps the head of the queue, finding no
// Identifier. x, which may not go on this server now, goes back to the
// failover layer (where another server may take it) when its connection
// is OKAY again, not when an Identifier frees for the requests ahead of
// it.
func TestAvoidedRequestBehindBlockedHeadHandedBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		srv := &gateServer{}
		go srv.serveAll(ln)
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = ln.dialer()
		cfg.MaxConns = 2
		x := newCall(accessReq("drop"))
		handed := make(chan *call.Call, 2)
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			for _, cl := range calls {
				if cl == &x.Call {
					handed <- cl
				}
			}
		}
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := p.submit(x); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		run := func(n int) {
			wg.Add(1)
			go func() { defer wg.Done(); exchangeAll(p, n, "drop", time.Minute) }()
			synctest.Wait()
		}
		run(IDsPerConn - 1)
		run(IDsPerConn)
		srv.mu.Lock()
		srv.hold = true
		srv.mu.Unlock()
		time.Sleep(13 * time.Second)
		synctest.Wait()
		<-handed
		y := newCall(accessReq("alice"))
		if err := p.submit(y); err != nil {
			t.Fatal(err)
		}
		if err := p.submit(x); err != nil {
			t.Fatal(err)
		}
		srv.release() // x's connection OKAY again; no connection may be added
		synctest.Wait()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case <-handed:
		default:
			t.Errorf("x, which may not go on this server, still waits in its queue behind y 10 s after its connection was OKAY again: %+v", p.Stats().Waiting)
		}
		x.Fail(errors.New("test over"))
		y.Fail(errors.New("test over"))
		mustClose(t, p)
		wg.Wait()
		ln.Close()
	})
}
