package benchcmp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/peer"
)

// serverEnv is the aaatp server (peer.Server, default Config, a dedup
// store in front of the handler, as aaa-peer server runs it) driven by
// the raw batched client, so that the client costs as little as it can:
// the difference between two runs is the server's.
type serverEnv struct {
	*rawClient
	srv    *peer.Server
	served chan error
	store  *dedup.Memory
}

func startAaatpServer() (*serverEnv, error) {
	st := dedup.NewMemory()
	cfg := peer.Config{OriginHost: serverHost, OriginRealm: realm, Logger: quiet,
		Handler: dedup.Wrap(st, aaatpHandler, nil)}
	s, err := peer.Listen("tcp://127.0.0.1:0", cfg)
	if err != nil {
		return nil, err
	}
	e := &serverEnv{srv: s, served: make(chan error, 1), store: st}
	go func() { e.served <- s.Serve() }()
	rc, err := dialRaw(s.Addr().String(), true, true)
	if err != nil {
		e.stop()
		return nil, err
	}
	e.rawClient = rc
	return e, nil
}

func (e *serverEnv) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.srv.Close(ctx)
	if serr := <-e.served; err == nil {
		err = serr
	}
	return err
}

func (e *serverEnv) Close() error {
	err := e.rawClient.Close()
	if serr := e.stop(); err == nil {
		err = serr
	}
	return err
}

// BenchmarkServerDedup measures the aaatp server's round trip with the
// dedup store on, from the raw batched client, for 1 and 256 callers on
// one connection.
func BenchmarkServerDedup(b *testing.B) {
	for _, callers := range []int{1, 256} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			e, err := startAaatpServer()
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := e.Close(); err != nil {
					b.Error(err)
				}
			}()
			benchRoundTrip(b, e, callers)
		})
	}
}
