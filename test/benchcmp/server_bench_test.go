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
	dd     *dedup.Counters
}

func startAaatpServer() (*serverEnv, error) {
	e, err := listenAaatpServer()
	if err != nil {
		return nil, err
	}
	rc, err := dialRaw(e.srv.Addr().String(), true, true)
	if err != nil {
		e.stop()
		return nil, err
	}
	e.rawClient = rc
	return e, nil
}

// listenAaatpServer is startAaatpServer without its client.
func listenAaatpServer() (*serverEnv, error) {
	st := dedup.NewMemory()
	dd := new(dedup.Counters)
	cfg := peer.Config{OriginHost: serverHost, OriginRealm: realm, Logger: quiet,
		Handler: dedup.Wrap(st, aaatpHandler, dd)}
	s, err := peer.Listen("tcp://127.0.0.1:0", cfg)
	if err != nil {
		return nil, err
	}
	e := &serverEnv{srv: s, served: make(chan error, 1), store: st, dd: dd}
	go func() { e.served <- s.Serve() }()
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

// TestEveryRequestARecord: the raw clients (batched, one write per
// request, ping-pong) send each request as a record of its own, so that a
// server with a duplicate store applies every one of them rather than
// answering all but the first from the store.
func TestEveryRequestARecord(t *testing.T) {
	// One server each: a second connection of one Origin-Host is refused.
	dialers := map[string]func(addr string) (Env, error){
		"batched":   func(addr string) (Env, error) { return dialRaw(addr, true, true) },
		"unbatched": func(addr string) (Env, error) { return dialRaw(addr, false, true) },
		"ping-pong": func(addr string) (Env, error) { return dialPingPong(addr, true) },
	}
	const n = 50
	for name, dial := range dialers {
		t.Run(name, func(t *testing.T) {
			e, err := listenAaatpServer()
			if err != nil {
				t.Fatal(err)
			}
			defer e.stop()
			c, err := dial(e.srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			call := c.Caller()
			for range n {
				if r, err := call(); err != nil || r.Check() != nil {
					t.Fatalf("request: %v %v", err, r.Check())
				}
			}
			if got := e.dd.Applied.Load(); got != n || e.dd.Duplicates.Load() != 0 {
				t.Fatalf("applied %d, duplicates %d of %d requests; want every one applied", got, e.dd.Duplicates.Load(), n)
			}
		})
	}
}
