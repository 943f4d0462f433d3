package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/status"
)

// statusFlag adds --status to fs; where says where the URL goes.
func statusFlag(fs *flag.FlagSet, addr *string, where string) {
	fs.StringVar(addr, "status", "", "serve the live status page (/), the same data as JSON (/status.json) and Prometheus metrics (/metrics) over HTTP on `ADDR` (host:port, such as 127.0.0.1:8080; port 0 picks a free one; the URL is "+where+")")
}

// checkStatusAddr validates a --status value ("" is off).
func checkStatusAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--status %q: want host:port, such as 127.0.0.1:8080", addr)
	}
	// A port out of range would fail only when listening, as a runtime
	// failure (exit 1); a service name (http) is the listener's to look up.
	if n, err := strconv.ParseInt(port, 10, 64); err == nil && (n < 0 || n > 65535) {
		return usagef("--status %q: port %d: want 0 to 65535", addr, n)
	}
	return nil
}

// statusWeb is a running --status HTTP server.
type statusWeb struct {
	srv    *status.Server
	cancel context.CancelFunc
}

// openStatus serves src's page, /status.json and m at /metrics on addr
// until Close; a nil *statusWeb when addr is "". It logs the URL at Info.
func openStatus(addr string, src status.Source, m *status.Metrics, log *slog.Logger) (*statusWeb, error) {
	if addr == "" {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := status.ListenAndServe(ctx, addr, status.Handler(src, status.WithMetrics(m)))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("--status %s: %w", addr, err)
	}
	log.Info("status page", "url", srv.URL(), "json", srv.URL()+"status.json", "metrics", srv.URL()+"metrics")
	return &statusWeb{srv: srv, cancel: cancel}, nil
}

// URL returns the page's address ("" when off).
func (w *statusWeb) URL() string {
	if w == nil {
		return ""
	}
	return w.srv.URL()
}

// Close stops the server (requests in progress get status.ShutdownTimeout)
// and waits until it has.
func (w *statusWeb) Close() error {
	if w == nil {
		return nil
	}
	w.cancel()
	return w.srv.Wait()
}

// newMetrics returns the Metrics of a node with --status, nil without: a
// nil *status.Metrics does nothing.
func newMetrics(addr string) *status.Metrics {
	if addr == "" {
		return nil
	}
	return status.NewMetrics()
}

// logPeerEvents logs the events of a server's peers that they do not log
// themselves: failback at Info; connection events, errors and a failover
// with no alternate at Debug (the peers log their watchdog transitions at
// Info, and those follow every connection up and down). It returns the
// function that stops it.
func logPeerEvents(bus *peer.Bus, log *slog.Logger) (cancel func()) {
	return bus.Subscribe(func(_ context.Context, e peer.Event) { logPeerEvent(log, e) })
}

func logPeerEvent(log *slog.Logger, e peer.Event) {
	switch e.Kind {
	case peer.EventWatchdog: // logged by the peer
	case peer.EventFailback:
		log.Info("failback", "peer", e.Peer, "reason", e.Reason)
	case peer.EventFailover:
		// Package peer's own view; a client takes the requests and
		// records its own failover.
		log.Debug("failover", "peer", e.Peer, "pending", e.Pending, "reason", e.Reason)
	default:
		log.Debug(e.Kind.String(), "peer", e.Peer, "reason", e.Reason)
	}
}

// logClientEvents logs a client's events: its peers' as logPeerEvents
// does; failover records, balancer rebuilds, policy states and connection
// slots at Info, queue alarms at Warn when raised and Info when cleared.
func logClientEvents(bus *client.Bus, log *slog.Logger) (cancel func()) {
	ctx := context.Background()
	return bus.Subscribe(func(_ context.Context, e client.Event) {
		switch e.Kind {
		case client.EventPeer:
			if e.Peer != nil {
				logPeerEvent(log, *e.Peer)
			}
		case client.EventFailover:
			r := e.Failover
			to := r.To
			if to == "" {
				to = "none"
			}
			log.Info("failover", "from", r.From, "to", to, "outcome", r.Outcome.String(), "moved", r.Moved, "reason", r.Reason)
		case client.EventBalancerRebuilt:
			log.Info("balancer", "server", e.Server, "generation", e.Generation, "reason", e.Reason)
		case client.EventPolicy:
			log.Info("policy", "server", e.Server, "from", e.Policy.From.String(), "to", e.Policy.To.String(), "reason", e.Reason)
		case client.EventQueueAlarm:
			lvl := slog.LevelInfo
			if e.Raised {
				lvl = slog.LevelWarn
			}
			log.Log(ctx, lvl, "queue", "server", e.Server, "raised", e.Raised, "depth", e.Depth, "reason", e.Reason)
		default:
			log.Info(e.Kind.String(), "server", e.Server, "reason", e.Reason)
		}
	})
}
