package main

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/aaatp/aaatp/radpeer"
)

// radiusListener is one RADIUS --listen URL of the server: a radpeer
// server on its socket. A reload that changes the shared secret or the
// [[client]] tables changes the server's secrets in place
// (radpeer.Server.SetClients): no datagram is lost while it changes; a
// RADIUS/TCP or TLS connection accepted before whose client was removed
// is closed at once, and one whose secret changed keeps the old secret
// for radpeer.DefaultSecretGrace, then is closed once it owes no answer.
type radiusListener struct {
	url, bound string
	proto      string // the [[client]] protocol of url
	srv        radiusServer
	stats      func() radiusListenerReport
	log        *slog.Logger
	wg         sync.WaitGroup // Serve
}

// radiusServer is a RADIUS server of any transport: radpeer.Server or
// radpeer.UDPServer.
type radiusServer interface {
	Addr() net.Addr
	Serve() error
	SetClients(secret []byte, clients func(netip.Addr) (radpeer.Client, bool)) error
	Shutdown(context.Context) error
	Close(context.Context) error
}

// start serves rl's socket.
func (rl *radiusListener) start() {
	rl.wg.Add(1)
	go func() {
		defer rl.wg.Done()
		if err := rl.srv.Serve(); err != nil {
			rl.log.Error("serve", "addr", rl.bound, "err", err)
		}
	}()
}

// rotate verifies what comes next with sec.
func (rl *radiusListener) rotate(sec radiusSecrets) error {
	secret, clients := sec.of(rl.proto)
	return rl.srv.SetClients(secret, clients)
}

// drain is a removed listener's end: the socket takes nothing new, the
// connections get until budget (shutdownBudget) to finish (RADIUS has no DPR: a
// client sees its connection close and fails its pending requests over),
// the datagrams read are answered; then the server is closed, a handler
// that ignores its ended ctx left behind (the process's exit waits for
// drains), and rl's goroutines have ended.
func (rl *radiusListener) drain(budget time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	rl.end(ctx, rl.srv.Shutdown) // Close's, at its end
	rl.wg.Wait()
}

// close is the shutdown: the socket and the connections close, the
// handlers end, bounded by ctx; then rl's goroutines have ended.
func (rl *radiusListener) close(ctx context.Context) {
	rl.end(ctx, rl.srv.Close)
	rl.wg.Wait()
}

func (rl *radiusListener) end(ctx context.Context, f func(context.Context) error) {
	if err := f(ctx); err != nil {
		rl.log.Debug("close", "addr", rl.bound, "err", err)
	}
}

// report is rl's counters.
func (rl *radiusListener) report() radiusListenerReport {
	r := rl.stats()
	r.URL = rl.bound
	return r
}
