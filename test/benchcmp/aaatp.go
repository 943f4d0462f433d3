package benchcmp

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// aaatp: peer.Listen + Server.Serve with a Handler answering ACA 2001, and
// a client peer.Dial waited to OKAY; every call hands Request a fresh copy
// of acrBytes (Request takes the slice over), counted in allocs/op. The
// Config is the default one apart from identities and a silent logger: in
// particular Nagle stays ON (RFC 3539 3.2), and ctx has no deadline so
// Request arms its RequestTimeout timer, as a plain caller would.

type aaatpEnv struct {
	srv    *peer.Server
	served chan error
	p      *peer.Peer
	// records numbers the requests' Accounting-Record-Number.
	records atomic.Uint32
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func aaatpHandler(ctx context.Context, p *peer.Peer, req []byte) []byte {
	return message.NewAnswer(req).
		Uint32(message.ResultCode, 0, true, successCode).
		String(message.OriginHost, 0, true, serverHost).
		String(message.OriginRealm, 0, true, realm).
		Bytes()
}

func StartAaatp() (Env, error) {
	return StartAaatpWith(nil)
}

func StartAaatpWith(mutate func(*peer.Config)) (Env, error) {
	scfg := peer.Config{OriginHost: serverHost, OriginRealm: realm, Handler: aaatpHandler, Logger: quiet}
	if mutate != nil {
		mutate(&scfg)
	}
	s, err := peer.Listen("tcp://127.0.0.1:0", scfg)
	if err != nil {
		return nil, err
	}
	e := &aaatpEnv{srv: s, served: make(chan error, 1)}
	go func() { e.served <- s.Serve() }()
	ccfg := peer.Config{OriginHost: clientHost, OriginRealm: realm, Logger: quiet}
	if mutate != nil {
		mutate(&ccfg)
	}
	p, err := peer.Dial("tcp://"+s.Addr().String(), ccfg)
	if err != nil {
		e.stopServer()
		return nil, err
	}
	e.p = p
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *aaatpEnv) Caller() func() (Result, error) {
	ctx := context.Background()
	return func() (Result, error) {
		req := make([]byte, len(acrBytes))
		copy(req, acrBytes)
		setRecordNumber(req, e.records.Add(1)) // Request sets the ids
		ans, err := e.p.Request(ctx, req)
		if err != nil {
			return Result{}, err
		}
		code, _ := message.ResultCodeOf(ans)
		// Request set the ids on this goroutine before queueing req.
		return Result{RC: code,
			SentHBH: wire.HopByHop(req), GotHBH: wire.HopByHop(ans),
			SentE2E: wire.EndToEnd(req), GotE2E: wire.EndToEnd(ans)}, nil
	}
}

func (e *aaatpEnv) stopServer() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.srv.Close(ctx)
	if serr := <-e.served; err == nil {
		err = serr
	}
	return err
}

func (e *aaatpEnv) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.p.Close(ctx)
	if serr := e.stopServer(); err == nil {
		err = serr
	}
	return err
}
