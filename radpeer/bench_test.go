package radpeer

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
)

// BenchmarkExchangeTCP measures RADIUS/TCP exchanges over loopback with
// 256 callers, on one connection (at most 255 in flight, the 256th
// waiting) and with up to four.
func BenchmarkExchangeTCP(b *testing.B) {
	for _, conns := range []int{1, 4} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{NoDelay: true})
			if err != nil {
				b.Fatal(err)
			}
			srv, _ := NewServer(ln, SchemeTCP, ServerConfig{Secret: testSecret})
			go srv.Serve()
			p, err := Dial("radius+tcp://"+ln.Addr().String(), Config{
				Secret: testSecret, MaxConns: conns, MaxWaiting: 1 << 16,
				Transport: transport.Options{NoDelay: true}, Watchdog: watchdog.Config{Twinit: time.Minute},
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := p.WaitState(ctx, watchdog.Okay); err != nil {
				b.Fatal(err)
			}
			cancel()
			// Warm up with more calls than one connection carries.
			warm := make([]*rcall, conns*IDsPerConn)
			for i := range warm {
				warm[i] = newCall(acctReq("warm"))
				_ = p.submit(warm[i])
			}
			for _, cl := range warm {
				if _, err := cl.wait(context.Background(), 10*time.Second); err != nil {
					b.Fatal(err)
				}
			}
			b.SetParallelism((256 + runtimeProcs() - 1) / runtimeProcs()) // 256 callers
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req := acctReq("bench")
				for pb.Next() {
					if _, err := p.Exchange(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "answers/s")
			// Connections are opened on demand: fewer than MaxConns when
			// the answers free Identifiers fast enough.
			b.ReportMetric(float64(len(p.Stats().Conns)), "conns")
			c2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel2()
			p.Close(c2)
			srv.Close(c2)
		})
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
