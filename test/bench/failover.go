package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/test/benchcmp"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// countingConn counts the messages written on a connection; reached is
// closed once target of them are written.
type countingConn struct {
	transport.Conn
	written atomic.Int64
	target  atomic.Int64
	reached chan struct{}
	once    sync.Once
}

func (c *countingConn) WriteMessages(msgs ...[]byte) error {
	err := c.Conn.WriteMessages(msgs...)
	if err == nil {
		n := c.written.Add(int64(len(msgs)))
		if t := c.target.Load(); t > 0 && n >= t {
			c.once.Do(func() { close(c.reached) })
		}
	}
	return err
}

type failoverResult struct {
	runs           []time.Duration
	meanMs, minMs  float64
	maxMs, pending float64
}

// measureFailover is client/bench_test.go's BenchmarkFailover10k: a
// client.Client in PrimarySecondary mode over two aaatp servers on
// loopback; the primary never answers, so o.FailoverPending requests are
// pending on it; its connection is then closed, and the time is taken from
// that close to the last of those requests written on the alternate's
// socket (the Client replays them there, T flag set).
func measureFailover(o Options) (*failoverResult, error) {
	pending := o.FailoverPending
	silent := func(context.Context, *peer.Peer, []byte) []byte { return nil }
	answer := func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, message.Success).Bytes()
	}
	var servers []*peer.Server
	var served sync.WaitGroup
	defer func() {
		for _, s := range servers {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.Close(ctx)
			cancel()
		}
		served.Wait()
	}()
	for _, h := range []peer.Handler{silent, answer} {
		s, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: "srv.example.net", OriginRealm: "example.net", Handler: h, Logger: quiet})
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
		served.Add(1)
		go func() { defer served.Done(); s.Serve() }()
	}
	primary, alternate := servers[0], servers[1]

	res := &failoverResult{pending: float64(pending)}
	for range o.FailoverRuns {
		// The servers refuse a second connection from the client's
		// identity while they hold the first (RFC 6733 5.6), and the last
		// run cut its connection to the primary rather than closing it
		// with a DPR: wait until both have seen the last client go.
		if err := awaitNoPeers(primary, alternate); err != nil {
			return nil, err
		}
		d, err := failoverOnce(pending, primary.Addr().String(), alternate.Addr().String())
		if err != nil {
			return nil, err
		}
		res.runs = append(res.runs, d)
	}
	var sum time.Duration
	for _, d := range res.runs {
		sum += d
	}
	res.meanMs = round(float64(sum)/float64(len(res.runs))/1e6, 2)
	res.minMs = round(float64(slices.Min(res.runs))/1e6, 2)
	res.maxMs = round(float64(slices.Max(res.runs))/1e6, 2)
	return res, nil
}

// awaitNoPeers waits, up to 10 s, until no server holds a connected peer.
func awaitNoPeers(servers ...*peer.Server) error {
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range servers {
		for {
			live := 0
			for _, p := range s.Peers() {
				select {
				case <-p.Done():
				default:
					live++
				}
			}
			if live == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("failover: server %s still holds %d peers of the last run", s.Addr(), live)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

func failoverOnce(pending int, primary, alternate string) (time.Duration, error) {
	var mu sync.Mutex
	conns := map[string]*countingConn{}
	priURL, altURL := "tcp://"+primary, "tcp://"+alternate
	cfg := client.Config{Mode: client.PrimarySecondary, RequestTimeout: time.Minute,
		Peers: []client.PeerSpec{{URL: priURL, Name: "primary"}, {URL: altURL, Name: "alternate"}},
		Peer: peer.Config{OriginHost: "client.example.net", OriginRealm: "example.net", Logger: quiet,
			Watchdog: watchdog.Config{Twinit: 30 * time.Second},
			Dialer: func(ctx context.Context, url string) (transport.Conn, error) {
				tc, err := transport.Dial(ctx, url, transport.Options{})
				if err != nil {
					return nil, err
				}
				cc := &countingConn{Conn: tc, reached: make(chan struct{})}
				mu.Lock()
				conns[url] = cc
				mu.Unlock()
				return cc, nil
			}},
	}
	c, err := client.New(cfg)
	if err != nil {
		return 0, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Close(ctx)
	}()
	for _, p := range c.Peers() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := p.WaitState(ctx, watchdog.Okay)
		cancel()
		if err != nil {
			return 0, err
		}
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Send(context.Background(), benchcmp.ACR()); err != nil {
				failed.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for c.Peers()[0].Stats().Sent < uint64(pending) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("only %d of %d requests sent to the primary", c.Peers()[0].Stats().Sent, pending)
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	alt, pri := conns[altURL], conns[priURL]
	mu.Unlock()
	alt.target.Store(alt.written.Load() + int64(pending))

	// The setup's garbage (10,000 goroutines started, their requests
	// built) is collected before the clock starts, as testing.B collects
	// before each run: the window then holds the failover's own work,
	// collections its allocations cause included, not a mark phase the
	// setup left due.
	runtime.GC()
	t0 := time.Now()
	pri.Conn.Close() // the transport reports the loss: OKAY -> DOWN, Failover()
	select {
	case <-alt.reached:
	case <-time.After(time.Minute):
		return 0, fmt.Errorf("the alternate did not get the %d requests", pending)
	}
	d := time.Since(t0)
	wg.Wait() // every caller got its answer from the alternate
	if n := failed.Load(); n > 0 {
		return 0, fmt.Errorf("%d of %d requests failed", n, pending)
	}
	return d, nil
}
