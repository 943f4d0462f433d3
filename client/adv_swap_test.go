package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// A server (or a broken agent in front of it) that crosses its answers:
// the answer to request A goes out with B's Hop-by-Hop id and the other
// way round. Each answer still carries the End-to-End id (and the
// Session-Id) of the request it answers, so the client can tell that it
// is not the answer to the request its Hop-by-Hop id names (RFC 6733 3:
// an answer carries its request's End-to-End id). The callers must not
// be handed each other's answers: both answers are counted unmatched and
// each caller, left waiting for its own, times out.
func TestAnswerWithAnotherRequestsEndToEndNotDelivered(t *testing.T) {
	s := &advServer{}
	var mu sync.Mutex
	var held []byte
	crossed := 0
	s.on = func(c *advConn, m []byte) bool {
		if !wire.IsRequest(m) || wire.CommandCode(m) != message.CmdAccounting {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if held == nil {
			held = m
			return true
		}
		a, b := sessionAnswer(s, held), sessionAnswer(s, m)
		wire.SetHopByHop(a, wire.HopByHop(m))
		wire.SetHopByHop(b, wire.HopByHop(held))
		held = nil
		crossed++
		c.write(a, b)
		return true
	}
	startAdv(t, s)
	c := advClient(t, s.url())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 1); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			req := advACR(i)
			e2e := uint32(0x5eed0000 + i)
			wire.SetEndToEnd(req, e2e)
			want, _ := message.StringOf(req, message.SessionID, 0)
			ans, err := c.Send(ctx, req) // req is the Client's from here
			errs <- err
			if err != nil {
				return
			}
			got, _ := message.StringOf(ans, message.SessionID, 0)
			if wire.EndToEnd(ans) != e2e || got != want {
				t.Errorf("request %d (End-to-End %#x, Session-Id %q) was handed the answer to another request (End-to-End %#x, Session-Id %q)",
					i, e2e, want, wire.EndToEnd(ans), got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	mu.Lock()
	defer mu.Unlock()
	if crossed != 1 {
		t.Fatalf("the server crossed %d pairs of answers, want 1", crossed)
	}
	for err := range errs {
		if !errors.Is(err, ErrTimeout) {
			t.Errorf("a caller got %v, want a timeout", err)
		}
	}
	if u := c.Peers()[0].Stats().Unmatched; u != 2 {
		t.Errorf("%d answers counted unmatched, want 2", u)
	}
}

// sessionAnswer is s's success answer to req, echoing its Session-Id.
func sessionAnswer(s *advServer, req []byte) []byte {
	sid, _ := message.StringOf(req, message.SessionID, 0)
	return message.NewAnswer(req).String(message.SessionID, 0, true, sid).ResultCode(message.Success).
		String(message.OriginHost, 0, true, s.host).
		String(message.OriginRealm, 0, true, "example.net").Bytes()
}

// An answer with the request's Hop-by-Hop and End-to-End ids but another
// Command Code (a CCA to an ACR) is not the request's answer either.
func TestAnswerWithAnotherCommandCodeNotDelivered(t *testing.T) {
	s := &advServer{}
	s.on = func(c *advConn, m []byte) bool {
		if !wire.IsRequest(m) || wire.CommandCode(m) != message.CmdAccounting {
			return false
		}
		a := sessionAnswer(s, m)
		a[5], a[6], a[7] = 0, 1, 16 // Command Code 272
		c.write(a)
		return true
	}
	startAdv(t, s)
	c := advClient(t, s.url())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 1); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	defer scancel()
	if ans, err := c.Send(sctx, advACR(1)); err == nil {
		t.Errorf("an Accounting-Request was answered with Command Code %d", wire.CommandCode(ans))
	}
}
