package peer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// A client that sends requests the server refuses before its Handler (E
// bit set), reading every refusal, while a subscriber of the server's
// events is blocked: each refusal's EventError waits on the peer's notice
// queue only while fewer than maxMessageEvents notices do; past that it is
// dropped and counted, so the memory held behind the subscriber stays
// bounded whatever the client sends.
func TestRefusalEventsBoundedBehindSlowSubscriber(t *testing.T) {
	unblock := make(chan struct{})
	bus := NewBus()
	cancel := bus.Subscribe(func(ctx context.Context, e Event) {
		if e.Kind == EventError {
			<-unblock
		}
	})
	defer cancel()
	s := startServer(t, "tcp://127.0.0.1:0", func(c *Config) { c.Events = bus })
	defer close(unblock)
	tc, err := transport.Dial(bounded(t), "tcp://"+s.Addr().String(), transport.Options{})
	require.NoError(t, err)
	defer tc.Close()
	cfg := clientConfig("client.example.net")
	cfg.AcctApps = []uint32{message.AppAccounting}
	require.NoError(t, tc.WriteMessages(cfg.newCER(tc.LocalAddr())))
	_, err = tc.ReadMessage()
	require.NoError(t, err)
	before := liveHeap()
	const n = 50_000
	done := make(chan int)
	go func() {
		got := 0
		for got < n {
			if _, err := tc.ReadMessage(); err != nil {
				break
			}
			got++
		}
		done <- got
	}()
	batch := make([][]byte, 0, 500)
	for i := 0; i < n; i += cap(batch) {
		batch = batch[:0]
		for j := range cap(batch) {
			m := acr()
			wire.SetFlags(m, wire.Flags(m)|wire.FlagError)
			wire.SetHopByHop(m, uint32(i+j+1))
			batch = append(batch, m)
		}
		require.NoError(t, tc.WriteMessages(batch...))
	}
	var got int
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the refusals did not come back within 30 s")
	}
	require.Equal(t, n, got, "every request refused and answered")
	grew := liveHeap() - before
	t.Logf("heap grew %.1f MB over %d refusals behind a blocked subscriber", float64(grew)/(1<<20), n)
	assert.Less(t, grew, int64(4<<20), "the events waiting for a slow subscriber are bounded")
	st := s.Peers()[0].Stats()
	assert.Greater(t, st.EventsDropped, uint64(n-2*maxMessageEvents), "the refusals' events past the bound are dropped and counted")
}
