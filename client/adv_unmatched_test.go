package client

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// A server that answers a request with a burst of answers matching
// nothing, in one write: past MaxUnmatched in a row the connection is
// closed, once. The answers of the burst that the connection's read
// buffer already held were each taken as one more reason to close it: an
// error event and an unlimited warning per answer (hundreds from one
// write of 16 KiB), on every connection the server is given.
func TestUnmatchedBurstClosesOnce(t *testing.T) {
	s := &advServer{}
	const burst = 400
	s.on = func(c *advConn, m []byte) bool {
		if !wire.IsRequest(m) || wire.CommandCode(m) != message.CmdAccounting {
			return false
		}
		var b []byte
		for i := range burst {
			a := s.answer(m, message.Success)
			wire.SetHopByHop(a, ^wire.HopByHop(m)-uint32(i))
			b = append(b, a...)
		}
		c.writeRaw(b)
		return true
	}
	startAdv(t, s)
	var logs testhelp.SyncBuffer
	cfg := advPeerConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	bus := NewBus()
	var mu sync.Mutex
	var closing []string
	cancelSub := bus.Subscribe(func(_ context.Context, e Event) {
		if e.Kind == EventPeer && e.Peer.Kind == peer.EventError && strings.Contains(e.Peer.Reason, "closing the connection") {
			mu.Lock()
			closing = append(closing, e.Peer.Reason)
			mu.Unlock()
		}
	})
	defer cancelSub()
	c, err := New(Config{Peers: []PeerSpec{{URL: s.url()}}, Peer: cfg, RequestTimeout: 5 * time.Second, Events: bus})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 1); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	_, err = c.Send(sctx, advACR(1))
	scancel()
	if err == nil {
		t.Error("answered by an answer matching nothing")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	c.Close(cctx)
	<-c.Done() // every event delivered
	lines := strings.Count(logs.String(), `msg="closing connection: `)
	mu.Lock()
	defer mu.Unlock()
	st := c.Peers()[0].Stats()
	t.Logf("unmatched %d; %d closing events, %d closing log lines", st.Unmatched, len(closing), lines)
	if len(closing) != 1 || lines != 1 {
		t.Errorf("one connection closed for unmatched answers: %d error events and %d warnings, want 1 each; first events %q", len(closing), lines, closing[:min(3, len(closing))])
	}
}
