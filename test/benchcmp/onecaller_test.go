package benchcmp

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// clientEnv: peer.Listen with aaatpHandler and a client.Client with one
// member, each Send under a context with a deadline (as aaa-peer client
// sends), in process. One caller at a time is what it is measured with.
type clientEnv struct {
	srv     *peer.Server
	served  chan error
	c       *client.Client
	records atomic.Uint32
}

func startClient() (Env, error) {
	s, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: serverHost, OriginRealm: realm, Handler: aaatpHandler, Logger: quiet})
	if err != nil {
		return nil, err
	}
	e := &clientEnv{srv: s, served: make(chan error, 1)}
	go func() { e.served <- s.Serve() }()
	c, err := client.New(client.Config{RequestTimeout: time.Minute,
		Peers: []client.PeerSpec{{URL: "tcp://" + s.Addr().String(), Name: "srv"}},
		Peer:  peer.Config{OriginHost: clientHost, OriginRealm: realm, AcctApps: []uint32{message.AppAccounting}, Logger: quiet}})
	if err != nil {
		s.Close(context.Background())
		return nil, err
	}
	e.c = c
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Peers()[0].WaitState(ctx, watchdog.Okay); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *clientEnv) Caller() func() (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	_ = cancel // lives as long as the env
	return func() (Result, error) {
		req := make([]byte, len(acrBytes))
		copy(req, acrBytes)
		setRecordNumber(req, e.records.Add(1))
		ans, err := e.c.Send(ctx, req)
		if err != nil {
			return Result{}, err
		}
		code, _ := message.ResultCodeOf(ans)
		return Result{RC: code,
			SentHBH: wire.HopByHop(ans), GotHBH: wire.HopByHop(ans), // Send sets the ids on its own copy
			SentE2E: wire.EndToEnd(ans), GotE2E: wire.EndToEnd(ans)}, nil
	}
}

func (e *clientEnv) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.c.Close(ctx)
	if serr := e.srv.Close(ctx); err == nil {
		err = serr
	}
	if serr := <-e.served; err == nil {
		err = serr
	}
	return err
}

// BenchmarkOneCaller: one caller's round trip in process, the raw
// ping-pong bound, peer.Dial + peer.Listen, and client.Client over
// peer.Listen, side by side.
func BenchmarkOneCaller(b *testing.B) {
	for _, im := range []struct {
		name  string
		start func() (Env, error)
	}{{"rawpingpong", StartPingPong}, {"peer", StartAaatp}, {"client", startClient}} {
		b.Run(im.name, func(b *testing.B) {
			e, err := im.start()
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			benchRoundTrip(b, e, 1)
		})
	}
}
