package radudp

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/radpeer"
	lradius "layeh.com/radius"
)

// testServer is a radpeer.UDPServer on the in-memory net whose handler
// counts its runs (applications) and can be held on a gate.
type testServer struct {
	*radpeer.UDPServer
	applied atomic.Int64
	gate    chan struct{} // when not nil, handlers wait for it
}

// startServer serves addr; with store, accounting records go through
// radpeer.Dedup, as aaa-peer server does.
func startServer(t *testing.T, n *memNet, addr string, secret []byte, store dedup.Store) *testServer {
	t.Helper()
	ts := &testServer{}
	if secret == nil {
		secret = testSecret
	}
	var h radpeer.Handler = func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		ts.applied.Add(1)
		if ts.gate != nil {
			<-ts.gate
		}
		return radpeer.AcceptAll(ctx, req, raw)
	}
	if store != nil {
		h = radpeer.Dedup(store, h, nil)
	}
	s, err := radpeer.NewUDPServer(n.ListenPacket(addr), radpeer.ServerConfig{Secret: secret, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	ts.UDPServer = s
	done := make(chan struct{})
	go func() { s.Serve(); close(done) }()
	t.Cleanup(func() { s.Close(context.Background()); <-done })
	return ts
}
