package client

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
)

// countingConn counts the messages written on a connection and can be cut.
type countingConn struct {
	transport.Conn
	written atomic.Int64
	target  int64
	reached chan struct{}
	once    sync.Once
}

func (c *countingConn) WriteMessages(msgs ...[]byte) error {
	err := c.Conn.WriteMessages(msgs...)
	if err == nil && c.written.Add(int64(len(msgs))) >= c.target && c.target > 0 {
		c.once.Do(func() { close(c.reached) })
	}
	return err
}

// BenchmarkFailover10k measures the cost of failing over 10,000 pending
// requests: from the moment the primary's connection drops (the watchdog's
// Failover()) to the last request written on the alternate's socket.
// Real TCP on loopback; the primary never answers, the alternate does.
func BenchmarkFailover10k(b *testing.B) {
	const pending = 10_000
	silent := func(context.Context, *peer.Peer, []byte) []byte { return nil }
	answer := func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, message.Success).Bytes()
	}
	serve := func(h peer.Handler) *peer.Server {
		s, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: "srv.example.net", OriginRealm: "example.net", Handler: h, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		go s.Serve()
		return s
	}
	primary, alternate := serve(silent), serve(answer)
	defer primary.Close(context.Background())
	defer alternate.Close(context.Background())

	var ms []time.Duration
	for b.Loop() {
		var mu sync.Mutex
		conns := map[string]*countingConn{}
		cfg := Config{Mode: PrimarySecondary, RequestTimeout: time.Minute,
			Peers: []PeerSpec{{URL: "tcp://" + primary.Addr().String(), Name: "primary"}, {URL: "tcp://" + alternate.Addr().String(), Name: "alternate"}},
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
		c, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range c.Peers() {
			if err := p.WaitState(context.Background(), watchdog.Okay); err != nil {
				b.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for i := range pending {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.Send(context.Background(), acr(i, "user@example.net"))
			}()
		}
		for c.Peers()[0].Stats().Sent < pending {
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		alt := conns[cfg.Peers[1].URL]
		pri := conns[cfg.Peers[0].URL]
		mu.Unlock()
		alt.target = alt.written.Load() + pending

		t0 := time.Now()
		pri.Conn.Close() // the transport reports the loss: OKAY -> DOWN, Failover()
		<-alt.reached
		ms = append(ms, time.Since(t0))
		wg.Wait() // every caller got its answer from the alternate
		c.Close(context.Background())
	}
	var sum time.Duration
	for _, d := range ms {
		sum += d
	}
	b.ReportMetric(float64(sum.Microseconds())/float64(len(ms))/1000, "ms/failover")
}

// BenchmarkSend measures Send as a load generator drives it: 256 callers
// on one connection to an in-process server over loopback TCP, sharing a
// context with a deadline (as aaa-peer client does). The time and the
// allocations per request include the server's.
func BenchmarkSend(b *testing.B) {
	answer := func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, message.Success).Bytes()
	}
	s, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: "srv.example.net", OriginRealm: "example.net", Handler: answer, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve()
	defer s.Close(context.Background())
	c, err := New(Config{RequestTimeout: time.Minute,
		Peers: []PeerSpec{{URL: "tcp://" + s.Addr().String(), Name: "srv"}},
		Peer:  peer.Config{OriginHost: "client.example.net", OriginRealm: "example.net", Logger: quiet}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.Peers()[0].WaitState(context.Background(), watchdog.Okay); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var n atomic.Int64
	b.SetParallelism(128) // x GOMAXPROCS callers
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Send(ctx, acr(int(n.Add(1)), "user@example.net")); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	// CPU time per request: on a loaded machine less noisy than the time.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU returns the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
