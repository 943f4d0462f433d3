package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
)

// One caller over real TCP (its requests go out inline and it reads its
// own answers: peer's reading baton), PrimarySecondary: the primary
// leaves one request unanswered and its server closes while the caller
// waits reading; the request fails over to the alternate and is answered
// there, and the next ones too.
func TestOneCallerReadingFailsOverOnLoss(t *testing.T) {
	var silent atomic.Bool
	held := make(chan struct{}, 1)
	answer := func(host string) peer.Handler {
		return func(_ context.Context, _ *peer.Peer, req []byte) []byte {
			if host == "primary.example.net" && silent.Load() {
				held <- struct{}{}
				return nil
			}
			return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, message.Success).
				String(message.OriginHost, 0, true, host).Bytes()
		}
	}
	serve := func(host string) (*peer.Server, chan error) {
		s, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: host, OriginRealm: "example.net", Handler: answer(host), Logger: quiet})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- s.Serve() }()
		return s, done
	}
	primary, pdone := serve("primary.example.net")
	alternate, adone := serve("alternate.example.net")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		alternate.Close(ctx)
		<-adone
	})
	c, err := New(Config{Mode: PrimarySecondary, RequestTimeout: 10 * time.Second,
		Peers: []PeerSpec{{URL: "tcp://" + primary.Addr().String(), Name: "primary"}, {URL: "tcp://" + alternate.Addr().String(), Name: "alternate"}},
		Peer: peer.Config{OriginHost: "client.example.net", OriginRealm: "example.net", Logger: quiet,
			AcctApps: []uint32{message.AppAccounting}, Watchdog: watchdog.Config{Twinit: 30 * time.Second}}})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range c.Peers() {
		require.NoError(t, p.WaitState(ctx, watchdog.Okay))
	}
	from := func(ans []byte) string {
		h, _ := message.StringOf(ans, message.OriginHost, 0)
		return h
	}
	for range 20 {
		ans, err := c.Send(ctx, acr(1, "user@example.net"))
		require.NoError(t, err)
		require.Equal(t, "primary.example.net", from(ans))
	}
	silent.Store(true)
	got := make(chan []byte, 1)
	go func() {
		ans, err := c.Send(ctx, acr(1, "user@example.net"))
		assert.NoError(t, err)
		got <- ans
	}()
	<-held // the request is in, unanswered: its caller waits, reading
	closeCtx, closeCancel := context.WithTimeout(context.Background(), time.Second)
	defer closeCancel()
	primary.Close(closeCtx)
	<-pdone
	select {
	case ans := <-got:
		assert.Equal(t, "alternate.example.net", from(ans), "failed over")
	case <-time.After(10 * time.Second):
		t.Fatal("the request never completed")
	}
	for range 5 {
		ans, err := c.Send(ctx, acr(1, "user@example.net"))
		require.NoError(t, err)
		assert.Equal(t, "alternate.example.net", from(ans))
	}
}
