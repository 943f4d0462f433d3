package radpeer

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
)

// A connection the server stops reading: the client's writer blocks on
// the first request, the next ones queue behind it, and the watchdog goes
// SUSPECT (its Status-Server queued too) before the write times out. The requests handed over then
// that were still queued are taken out of the queue: when the server
// reads again it gets the first request only, not the four that have
// gone on elsewhere (RFC 6613 2.6.1), and their Identifiers are free.
func TestHandedOverRequestsNotWrittenLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		read := make(chan struct{})
		var mu sync.Mutex
		var got []string
		go func() {
			tc, err := ln.Accept()
			if err != nil {
				return
			}
			defer tc.Close()
			<-read // stalled: the client's writes block
			for {
				b, err := tc.ReadMessage()
				if err != nil {
					return
				}
				if u, _ := radius.Attr(b, radius.AttrUserName); len(u) > 0 {
					mu.Lock()
					got = append(got, string(u))
					mu.Unlock()
				}
			}
		}()
		cfg := testConfig(6 * time.Second)
		cfg.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			a, b := net.Pipe()
			ln.ch <- framed(b)
			// Writes time out after the watchdog's two Tw.
			return transport.NewStreamConn(a, "tcp", transport.Options{ReadFrame: radius.ReadFrame, WriteTimeout: time.Minute}), nil
		}
		var handed []*call.Call
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			mu.Lock()
			handed = append(handed, calls...)
			mu.Unlock()
		}
		p, err := Dial("radius+tcp://server:1812", cfg)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		var calls []*rcall
		for i, u := range []string{"r1", "r2", "r3", "r4", "r5"} {
			cl := newCall(accessReq(u))
			calls = append(calls, cl)
			if err := p.submit(cl); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				synctest.Wait() // the writer holds r1, blocked
			}
		}
		time.Sleep(13 * time.Second) // two Tw, before the write's timeout: SUSPECT
		synctest.Wait()
		if st := p.State(); st != watchdog.Suspect {
			t.Fatalf("state %s, want SUSPECT", st)
		}
		mu.Lock()
		if len(handed) != 5 {
			t.Fatalf("%d requests handed over at SUSPECT, want 5", len(handed))
		}
		mu.Unlock()
		if st := p.Stats(); len(st.Conns) != 1 || st.Conns[0].Pending != 1 || st.Sent != 1 {
			t.Fatalf("want the Identifier of r1 only still reserved, r1 alone counted sent: %+v", st)
		}
		close(read)
		synctest.Wait()
		mu.Lock()
		if len(got) != 1 || got[0] != "r1" {
			t.Errorf("the server read %q, want r1 alone: the others were handed over before they were written", got)
		}
		mu.Unlock()
		for _, cl := range calls {
			cl.Fail(errors.New("test over"))
		}
		mustClose(t, p)
		ln.Close()
	})
}
