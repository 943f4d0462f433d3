package radpeer

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/internal/testhook"
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
		got := stalledServer(ln, read)
		var mu sync.Mutex
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
		// Their sends are undone: never written there, the connection
		// may carry them again, and none counts as sent; r1 was written.
		p.mu.Lock()
		c := p.links[0].cur
		p.mu.Unlock()
		for i, cl := range calls {
			wantSends, wantAvoid := 0, false
			if i == 0 {
				wantSends, wantAvoid = 1, true
			}
			if n, avoid := cl.Sends(), cl.Avoids(&c.h, p); n != wantSends || avoid != wantAvoid {
				t.Errorf("r%d: %d sends, avoids its connection %v; want %d, %v", i+1, n, avoid, wantSends, wantAvoid)
			}
		}
		close(read)
		synctest.Wait()
		if got := got(); len(got) != 1 || got[0] != "r1" {
			t.Errorf("the server read %q, want r1 alone: the others were handed over before they were written", got)
		}
		for _, cl := range calls {
			cl.Fail(errors.New("test over"))
		}
		mustClose(t, p)
		ln.Close()
	})
}

// A hand-over that comes while a request is being queued (its Identifier
// assigned, its bytes encoded) either finds the request's bytes in the
// write queue and takes them out, or comes before they are queued and the
// request is not written: never after the check that the request is still
// on the connection and before its bytes are queued, which would write it
// on the connection it left after its copy went elsewhere (RFC 6613
// 2.6.1). The hand-over is started at the moment of the queueing (the
// write queue's Posting hook) and given time to run; the server, stalled
// until then behind the first request, must read that one alone.
func TestHandOverWhileARequestIsQueued(t *testing.T) {
	ln := newPipeListener()
	defer ln.Close()
	read := make(chan struct{})
	got := stalledServer(ln, read)
	cfg := testConfig(time.Minute)
	cfg.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
		a, b := net.Pipe()
		ln.ch <- framed(b)
		return transport.NewStreamConn(a, "tcp", transport.Options{ReadFrame: radius.ReadFrame, WriteTimeout: time.Minute}), nil
	}
	cfg.Failover = func(call.Carrier, []*call.Call, string) {}
	var p *Peer
	var armed, ran atomic.Bool
	handedOver := make(chan struct{})
	testhook.Posting = func() {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		ran.Store(true)
		go func() {
			p.HandOver("test", nil, nil)
			close(handedOver)
		}()
		select { // time for the hand-over to run, unless it waits for the queueing
		case <-handedOver:
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer func() { testhook.Posting = nil }() // after Close: no peer goroutine reads it then
	var err error
	p, err = Dial("radius+tcp://server:1812", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, p)
	for end := time.Now().Add(5 * time.Second); p.State() != watchdog.Okay; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("state %s after 5 s, want OKAY", p.State())
		}
	}
	r1, r2 := newCall(accessReq("r1")), newCall(accessReq("r2"))
	defer r1.Fail(errors.New("test over"))
	defer r2.Fail(errors.New("test over"))
	if err := p.submit(r1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the writer takes r1 and blocks
	armed.Store(true)
	if err := p.submit(r2); err != nil {
		t.Fatal(err)
	}
	if !ran.Load() {
		t.Fatal("r2 was not queued through the write queue's Post")
	}
	<-handedOver
	close(read)
	time.Sleep(200 * time.Millisecond) // the server reads what was queued
	if got := got(); len(got) != 1 || got[0] != "r1" {
		t.Errorf("the server read %q, want r1 alone: r2 was handed over before it was written", got)
	}
}

// stalledServer accepts one connection from ln and reads nothing until
// read is closed (the client's writer blocks on its first write), then
// reads until the connection ends; got returns the User-Names of the
// requests it read, in order.
func stalledServer(ln *pipeListener, read <-chan struct{}) (got func() []string) {
	var mu sync.Mutex
	var names []string
	go func() {
		tc, err := ln.Accept()
		if err != nil {
			return
		}
		defer tc.Close()
		<-read
		for {
			b, err := tc.ReadMessage()
			if err != nil {
				return
			}
			if u, _ := radius.Attr(b, radius.AttrUserName); len(u) > 0 {
				mu.Lock()
				names = append(names, string(u))
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(names)
	}
}
