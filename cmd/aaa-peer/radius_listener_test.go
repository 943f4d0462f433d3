package main

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/aaatp/aaatp/radpeer"
)

// stuckServer is a RADIUS server whose handlers ignore their ctx: its
// Close waits for them until its own ctx ends.
type stuckServer struct{ closed chan struct{} }

func (s *stuckServer) Addr() net.Addr { return &net.UDPAddr{} }
func (s *stuckServer) Serve() error   { <-s.closed; return nil }
func (s *stuckServer) SetClients([]byte, func(netip.Addr) (radpeer.Client, bool)) error {
	return nil
}
func (s *stuckServer) Shutdown(ctx context.Context) error { return s.Close(ctx) }
func (s *stuckServer) Close(ctx context.Context) error {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	<-ctx.Done() // the handlers never end
	return ctx.Err()
}

// The end of a removed RADIUS listener's drain is bounded: a handler
// that ignores its ctx does not hold it (and the process's exit, which
// waits for drains) forever.
func TestRADIUSListenerDrainCloseBounded(t *testing.T) {
	rl := &radiusListener{srv: &stuckServer{closed: make(chan struct{})}, log: slog.New(slog.DiscardHandler)}
	rl.start()
	done := make(chan struct{})
	go func() {
		rl.drain(50 * time.Millisecond)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the drain's close did not return")
	}
}
