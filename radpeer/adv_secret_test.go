package radpeer

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/watchdog"
)

// A server with another shared secret that answers a burst of pipelined
// requests in one write: every answer fails verification, the first one
// closes the connection. That is one connection that looked like a
// secret mismatch (Stats.SecretMismatch counts connections), one error
// event for it; the answers already in the connection's read buffer add
// to BadAuth only (they were each taken as a new sign: SecretMismatch
// counted every answer).
func TestBurstOfBadAnswersCountsOneMismatchedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	var conns atomic.Int64
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				go func() { <-done; nc.Close() }()
				first := conns.Add(1) == 1
				br := bufio.NewReader(nc)
				var burst []byte
				for k := 0; ; {
					req, err := radius.ReadFrame(br)
					if err != nil {
						return
					}
					if radius.Code(req) == lradius.CodeStatusServer || !first {
						continue // no watchdog answers, nothing on later connections
					}
					ans, err := radius.EncodeResponse(req, lradius.CodeAccessAccept, nil, []byte("another secret"))
					if err != nil {
						t.Error(err)
						return
					}
					burst = append(burst, ans...)
					if k++; k == n {
						nc.Write(burst) // every answer in one write
					}
				}
			}()
		}
	}()
	defer func() { close(done); ln.Close(); wg.Wait() }()

	cfg := testConfig(30 * time.Second)
	cfg.Events = peer.NewBus()
	cfg.Logger = slog.New(slog.DiscardHandler)
	var mu sync.Mutex
	var errorEvents []string
	cancelSub := cfg.Events.Subscribe(func(_ context.Context, e peer.Event) {
		if e.Kind == peer.EventError {
			mu.Lock()
			errorEvents = append(errorEvents, e.Reason)
			mu.Unlock()
		}
	})
	defer cancelSub()
	p, err := Dial(SchemeTCP+"://"+ln.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			mustClose(t, p)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	var cw sync.WaitGroup
	for i := range n {
		cw.Add(1)
		go func() {
			defer cw.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := p.Exchange(ctx, accessReq("u"+strings.Repeat("x", i)))
			if err == nil {
				t.Errorf("request %d answered with a reply signed with another secret", i)
			}
		}()
	}
	cw.Wait()
	st := p.Stats()
	mustClose(t, p)
	closed = true
	<-p.Done() // every event delivered
	mu.Lock()
	defer mu.Unlock()
	t.Logf("BadAuth %d, SecretMismatch %d, %d error events, connections %d", st.BadAuth, st.SecretMismatch, len(errorEvents), conns.Load())
	if st.SecretMismatch != 1 {
		t.Errorf("SecretMismatch %d for the one connection whose answers failed verification; want 1", st.SecretMismatch)
	}
	if len(errorEvents) != 1 {
		t.Errorf("%d error events for one connection closed on a failed verification, want 1: %q", len(errorEvents), errorEvents)
	}
}
