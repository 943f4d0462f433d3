package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/quick"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// Property: under any schedule of servers freezing and thawing while
// requests flow, (1) every request ends with exactly one answer or one
// error, (2) no request is applied twice across the servers sharing a
// duplicate store, (3) every answer is the answer to that request, and
// (4) each End-to-End id reaches the servers at most once without the T
// flag (the T flag marks replays only).
func TestPropertyRandomFaultSchedules(t *testing.T) {
	prop := func(seed uint64) bool {
		ok := true
		synctest.Test(t, func(t *testing.T) {
			ok = runSchedule(t, seed)
		})
		return ok
	}
	cfg := &quick.Config{MaxCount: 12}
	if testing.Short() {
		cfg.MaxCount = 3
	}
	if err := quick.Check(prop, cfg); err != nil {
		t.Fatal(err)
	}
	// The schedules must actually exercise failover, or the property
	// proves nothing.
	t.Logf("%d requests, %d failover records, %d replays", totals.requests, totals.failovers, totals.replays)
	if totals.failovers == 0 || totals.replays == 0 {
		t.Fatal("no schedule caused a failover")
	}
}

var totals struct {
	sync.Mutex
	requests  int
	failovers uint64
	replays   int
}

func runSchedule(t *testing.T, seed uint64) bool {
	rng := rand.New(rand.NewPCG(seed, 42))
	store := dedup.NewMemory()
	defer store.Close()
	var mu sync.Mutex
	applied := map[uint32]int{}
	plain := map[uint32]int{} // receptions without T, by End-to-End id
	n := network{}
	urls := []string{"tcp://a:1", "tcp://b:1", "tcp://c:1"}
	for i, u := range urls {
		f := newFakeServer(fmt.Sprintf("%c.example.net", 'a'+i))
		base := f.handler
		f.handle = dedup.Wrap(store, func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			mu.Lock()
			applied[wire.EndToEnd(req)]++
			mu.Unlock()
			return base(ctx, p, req)
		}, nil)
		n[u] = f
	}
	defer n.close()
	mode := Balance
	if rng.IntN(2) == 0 {
		mode = PrimarySecondary
	}
	c, err := New(clientConfig(n, mode, urls...))
	require.NoError(t, err)
	defer c.Close(context.Background())
	synctest.Wait()

	type outcome struct {
		e2e uint32
		ans []byte
		err error
	}
	results := make(chan outcome, 10000)
	sent := 0
	var wg sync.WaitGroup
	for step := range 30 {
		switch rng.IntN(4) {
		case 0:
			n[urls[rng.IntN(3)]].freeze()
		case 1:
			n[urls[rng.IntN(3)]].unfreeze()
		default:
			for range 1 + rng.IntN(20) {
				sent++
				id := uint32(step*1000 + sent)
				req := acr(sent, fmt.Sprintf("user%d@example.net", rng.IntN(50)))
				wire.SetEndToEnd(req, id)
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
					defer cancel()
					ans, err := c.Send(ctx, req)
					results <- outcome{id, ans, err}
				}()
			}
		}
		time.Sleep(time.Duration(1+rng.IntN(90)) * time.Second)
	}
	for _, u := range urls {
		n[u].unfreeze()
	}
	wg.Wait()
	close(results)

	replays := 0
	for _, u := range urls {
		for _, s := range n[u].received() {
			if !s.tflag {
				plain[s.e2e]++
			} else {
				replays++
			}
		}
	}
	_, failovers := c.FailoverLog()
	totals.Lock()
	totals.replays += replays
	totals.failovers += failovers
	totals.requests += sent
	totals.Unlock()
	got := 0
	for r := range results {
		got++
		if r.err != nil {
			if !errors.Is(r.err, peer.ErrTimeout) && !errors.Is(r.err, ErrNoPeer) {
				t.Errorf("seed %d: request %d: unexpected error %v", seed, r.e2e, r.err)
			}
			continue
		}
		if wire.EndToEnd(r.ans) != r.e2e {
			t.Errorf("seed %d: request %d got the answer to %d", seed, r.e2e, wire.EndToEnd(r.ans))
		}
		if rc, _ := message.ResultCodeOf(r.ans); rc != message.Success {
			t.Errorf("seed %d: request %d: result %d", seed, r.e2e, rc)
		}
	}
	if got != sent {
		t.Errorf("seed %d: %d outcomes for %d requests", seed, got, sent)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, runs := range applied {
		if runs > 1 {
			t.Errorf("seed %d: request %d applied %d times", seed, id, runs)
		}
	}
	for id, k := range plain {
		if k > 1 {
			t.Errorf("seed %d: request %d arrived %d times without the T flag", seed, id, k)
		}
	}
	return !t.Failed()
}
