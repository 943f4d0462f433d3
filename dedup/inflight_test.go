package dedup

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// waiting returns how many in-flight marks of shard 0 a duplicate waits on.
func waiting(s *Memory) int {
	sh := &s.shards[0]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.waits)
}

// TestMemoryFullShardKeepsInFlightMark: a request runs while a replay of
// it waits in Begin, and other requests fill its shard. Making room for
// them must not evict the running request's mark: that would wake the
// replay as First and run the handler a second time, at the same time.
// The replay gets the first answer once it is committed.
func TestMemoryFullShardKeepsInFlightMark(t *testing.T) {
	s := NewMemory(WithShards(1), WithMaxEntries(64), WithMarkTTL(time.Minute))
	defer s.Close()
	var runs atomic.Int32
	release, entered := make(chan struct{}), make(chan struct{})
	w := Wrap(s, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		if wire.EndToEnd(req) == 1 {
			if runs.Add(1) == 1 {
				close(entered)
			}
			<-release
		}
		return message.NewAnswer(req).ResultCode(message.Success).Bytes()
	}, nil)
	ctx := context.Background()
	first := make(chan []byte, 1)
	go func() { first <- w(ctx, nil, acrFor(1, 1)) }()
	<-entered
	replayed := make(chan []byte, 1)
	go func() {
		r := acrFor(1, 1)
		wire.SetRetransmit(r)
		replayed <- w(ctx, nil, r)
	}()
	for waiting(s) == 0 {
		time.Sleep(time.Millisecond)
	}
	for i := uint32(2); i < 2+64; i++ { // two keys each: the shard fills twice over
		w(ctx, nil, acrFor(i, i))
	}
	select {
	case <-replayed:
		t.Fatalf("the replay was answered while the first still runs (handler runs: %d)", runs.Load())
	case <-time.After(50 * time.Millisecond):
	}
	if n := s.Len(); n > 64 {
		t.Fatalf("Len %d, over max entries 64", n)
	}
	close(release)
	a1, a2 := <-first, <-replayed
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times for one request", runs.Load())
	}
	if !bytes.Equal(a1, a2) {
		t.Fatalf("replay answered %x, first %x", a2, a1)
	}
}
