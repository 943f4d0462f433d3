package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/throttle"
)

// probeResult is one Send's outcome.
type probeResult struct {
	id       int
	start    time.Time
	deadline time.Time
	at       time.Time
	err      error
	canceled bool
}

type probeOpts struct {
	throttle, policy, subscriberClose, cancelledClose, twiceClose bool
	mode                                                          Mode
	maxConns                                                      int
	chaosDuringClose                                              bool
}

func probeStress(t *testing.T, seed uint64, o probeOpts) {
	rng := rand.New(rand.NewPCG(seed, 99))
	urls := []string{"tcp://a:1", "tcp://b:1", "tcp://c:1", "tcp://d:1"}
	n := network{}
	for i, u := range urls {
		n[u] = newFakeServer(string(rune('a'+i)) + ".example.net")
	}
	defer n.close()
	cfg := clientConfig(n, o.mode, urls[:3]...)
	cfg.Peer.Watchdog.Twinit = 6 * time.Second
	cfg.RequestTimeout = 30 * time.Second
	cfg.Peer.DPATimeout = time.Second
	if o.throttle {
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxRate: 200, MaxOutstanding: 20}, AlarmHigh: 10, AlarmLow: 2}
	}
	cfg.MaxConnections = o.maxConns
	if o.policy {
		cfg.Policy = &policy.Config{RequestTimeout: time.Second, Retries: 2, HoldDown: 5 * time.Second}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Wait()

	stop := make(chan struct{})
	waitCallers := stressCallers(seed, stop, func(ctx context.Context, id int, r *rand.Rand) error {
		_, err := c.Send(ctx, acr(id, "u"+strconv.Itoa(r.IntN(50))+"@example.net"))
		return err
	})

	// No event is delivered once Done is closed.
	var lateEvents atomic.Int64
	var lateWhat atomic.Value
	c.Events().Subscribe(func(_ context.Context, e Event) {
		select {
		case <-c.Done():
			lateEvents.Add(1)
			lateWhat.Store(e.Reason)
		default:
		}
	})
	defer func() {
		time.Sleep(time.Minute)
		synctest.Wait()
		if k := lateEvents.Load(); k > 0 {
			t.Errorf("seed %d: %d events delivered after Done (%v)", seed, k, lateWhat.Load())
		}
	}()
	// Subscribers come and go; one sometimes blocks for a while.
	var subs sync.WaitGroup
	subs.Add(1)
	go func() {
		defer subs.Done()
		r := rand.New(rand.NewPCG(seed, 77))
		for {
			select {
			case <-stop:
				return
			default:
			}
			block := r.IntN(4) == 0
			cancel := c.Events().Subscribe(func(ctx context.Context, e Event) {
				if block {
					time.Sleep(50 * time.Millisecond)
				}
			})
			time.Sleep(time.Duration(r.IntN(500)) * time.Millisecond)
			cancel()
		}
	}()

	// Chaos.
	chaosStop := make(chan struct{})
	chaosDone := make(chan struct{})
	closeAt := time.Now().Add(time.Duration(20+rng.IntN(40)) * time.Second)
	var closing atomic.Bool
	all := []PeerSpec{spec(n, urls[0]), spec(n, urls[1]), spec(n, urls[2]), spec(n, urls[3])}
	frozen := map[string]bool{}
	var fmu sync.Mutex
	// WaitReady racing everything.
	var readyWG sync.WaitGroup
	readyWG.Add(1)
	go func() {
		defer readyWG.Done()
		for {
			select {
			case <-chaosStop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := c.WaitReady(ctx, 1)
			cancel()
			if errors.Is(err, ErrClosed) {
				if !closing.Load() {
					t.Errorf("seed %d: WaitReady: ErrClosed before Close", seed)
				}
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()
	go func() {
		defer close(chaosDone)
		r := rand.New(rand.NewPCG(seed, 1234))
		for {
			select {
			case <-chaosStop:
				return
			default:
			}
			time.Sleep(time.Duration(r.IntN(3000)) * time.Millisecond)
			fmu.Lock()
			switch r.IntN(5) {
			case 0, 1: // SetPeers: a random non-empty subset, random order, weights
				k := 1 + r.IntN(len(all))
				perm := r.Perm(len(all))[:k]
				var specs []PeerSpec
				for _, i := range perm {
					s := all[i]
					s.Weight = 1 + r.IntN(3)
					if r.IntN(6) == 0 {
						s.Tw = time.Duration(6+r.IntN(3)) * time.Second // replaced
					}
					specs = append(specs, s)
				}
				if _, err := c.SetPeers(context.Background(), specs); err != nil && !(closing.Load() && errors.Is(err, ErrClosed)) {
					t.Errorf("seed %d: SetPeers: %v", seed, err)
				}
			case 2:
				u := urls[r.IntN(len(urls))]
				if frozen[u] {
					n[u].unfreeze()
				} else {
					n[u].freeze()
				}
				frozen[u] = !frozen[u]
			case 3:
				n[urls[r.IntN(len(urls))]].dropConnections()
			case 4:
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(2000))*time.Millisecond)
				c.WaitReady(ctx, 1)
				cancel()
			}
			fmu.Unlock()
		}
	}()
	time.Sleep(time.Until(closeAt))
	if !o.chaosDuringClose {
		close(chaosStop)
		<-chaosDone
	}
	closing.Store(true)

	// Close, in one of its variants, with requests in flight.
	closeCtx := context.Background()
	if o.cancelledClose {
		cctx, cancel := context.WithCancel(context.Background())
		cancel()
		closeCtx = cctx
	}
	var closeWG sync.WaitGroup
	closeStart := time.Now()
	if o.subscriberClose {
		var once sync.Once
		fired := make(chan struct{})
		cancel := c.Events().Subscribe(func(ctx context.Context, e Event) {
			once.Do(func() {
				if err := c.Close(ctx); err != nil {
					t.Errorf("seed %d: Close from a subscriber: %v", seed, err)
				}
				close(fired)
			})
		})
		// Make an event.
		specs := slices.Clone(all)
		specs[0].Weight = 7 // an event: reweighted
		if _, err := c.SetPeers(context.Background(), specs); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("seed %d: SetPeers: %v", seed, err)
		}
		select {
		case <-fired:
		case <-time.After(time.Minute):
			t.Errorf("seed %d: no event fired", seed)
		}
		cancel()
	}
	if o.twiceClose {
		closeWG.Add(1)
		go func() {
			defer closeWG.Done()
			c.Close(closeCtx)
		}()
	}
	c.Close(closeCtx)
	closedAt := time.Now()
	closeWG.Wait()
	close(stop)
	if o.chaosDuringClose {
		close(chaosStop)
		<-chaosDone
	}
	readyWG.Wait()
	results := waitCallers()
	subs.Wait()
	for u := range frozen {
		n[u].unfreeze()
	}
	select {
	case <-c.Done():
	case <-time.After(time.Minute):
		t.Errorf("seed %d: Done not closed a minute after Close", seed)
	}
	_, err = c.Send(context.Background(), acr(0, "x"))
	if !errors.Is(err, ErrClosed) {
		t.Errorf("seed %d: Send after Close: %v", seed, err)
	}
	for _, m := range c.ros.Load().all {
		if p := m.p(); p != nil {
			select {
			case <-p.Done():
			default:
				t.Errorf("seed %d: member %s (removed %v): peer not done after Done", seed, m.spec.Name, m.removed.Load())
			}
		}
	}
	if d := c.EventsDropped(); d > 0 {
		t.Logf("seed %d: %d events dropped", seed, d)
	}

	kinds := map[string]int{}
	const slack = 10 * time.Millisecond
	for _, r := range results {
		kind := "ok"
		switch {
		case r.err == nil:
		case errors.Is(r.err, ErrClosed):
			kind = "closed"
		case errors.Is(r.err, context.Canceled):
			kind = "canceled"
		case errors.Is(r.err, ErrNoPeer):
			kind = "nopeer"
		case errors.Is(r.err, ErrTimeout):
			kind = "timeout"
		case errors.Is(r.err, throttle.ErrExpired):
			kind = "expired"
		case errors.Is(r.err, ErrUnableToDeliver):
			kind = "utd"
		case errors.Is(r.err, ErrQueueFull):
			kind = "queuefull"
		default:
			kind = "other"
			t.Errorf("seed %d: request %d: unexpected error %v", seed, r.id, r.err)
		}
		kinds[kind]++
		if r.at.After(r.deadline.Add(slack)) {
			t.Errorf("seed %d: request %d returned %v after its deadline (err %v)", seed, r.id, r.at.Sub(r.deadline), r.err)
		}
		if r.start.Before(closeStart) && r.at.After(closedAt.Add(slack)) {
			t.Errorf("seed %d: request %d returned %v after Close returned (err %v)", seed, r.id, r.at.Sub(closedAt), r.err)
		}
		if kind == "canceled" && !r.canceled {
			t.Errorf("seed %d: request %d canceled but not by its caller", seed, r.id)
		}
	}
	t.Logf("seed %d: %d requests %v; Close took %v", seed, len(results), kinds, closedAt.Sub(closeStart))
}

// stressSeeds are the seeds the lifecycle stress tests run: one by
// default, STRESS_SEEDS=n for n.
func stressSeeds() []uint64 {
	k := 1
	if s := os.Getenv("STRESS_SEEDS"); s != "" {
		k, _ = strconv.Atoi(s)
	}
	var out []uint64
	for i := range k {
		out = append(out, uint64(i+1))
	}
	return out
}

// TestLifecycleStress runs callers with random deadlines and cancels
// against SetPeers churn (remove, add back, reorder, reweight, replace),
// freezes and resets, subscriber churn and a slow subscriber, and
// WaitReady, then Close in its variants (a cancelled ctx, twice, from a
// subscriber, with the chaos still running), with a throttle, a policy
// and MaxConnections. Every call returns once, within its deadline and
// never after Close returned; after Close, ErrClosed; Done closes, no
// event comes after it, removed peers end. STRESS_SEEDS=n runs n seeds,
// STRESS_VARIANT=name one variant.
func TestLifecycleStress(t *testing.T) {
	variants := map[string]probeOpts{
		"plain":      {},
		"ps":         {mode: PrimarySecondary},
		"throttle":   {throttle: true},
		"policy":     {policy: true},
		"both":       {throttle: true, policy: true},
		"subscriber": {subscriberClose: true},
		"cancelled":  {cancelledClose: true},
		"twice":      {twiceClose: true, cancelledClose: true},
		"maxconn":    {mode: PrimarySecondary, maxConns: 2},
		"maxconn1":   {mode: PrimarySecondary, maxConns: 1, chaosDuringClose: true, throttle: true, policy: true},
		"chaos":      {chaosDuringClose: true, throttle: true},
		"chaossub":   {chaosDuringClose: true, subscriberClose: true, policy: true},
		"chaostwice": {chaosDuringClose: true, twiceClose: true},
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range variants {
			if !yield(k) {
				return
			}
		}
	})
	only := os.Getenv("STRESS_VARIANT")
	for _, name := range names {
		if only != "" && only != name {
			continue
		}
		o := variants[name]
		for _, seed := range stressSeeds() {
			t.Run(fmt.Sprintf("%s/%d", name, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { probeStress(t, seed, o) })
			})
		}
	}
}

// stressCallers starts six callers that call send until stop is closed,
// each request with a random deadline (100 ms to 20 s), one in five
// cancelled by its caller before that; wait waits for them and returns
// what each call gave.
func stressCallers(seed uint64, stop <-chan struct{}, send func(ctx context.Context, id int, r *rand.Rand) error) (wait func() []probeResult) {
	var mu sync.Mutex
	var results []probeResult
	var callers sync.WaitGroup
	var nextID atomic.Int64
	for g := range 6 {
		callers.Add(1)
		r := rand.New(rand.NewPCG(seed, uint64(g)))
		go func() {
			defer callers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := int(nextID.Add(1))
				timeout := time.Duration(100+r.IntN(20000)) * time.Millisecond
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				dl, _ := ctx.Deadline()
				canceled := false
				if r.IntN(5) == 0 {
					canceled = true
					time.AfterFunc(time.Duration(r.IntN(3000))*time.Millisecond, cancel)
				}
				start := time.Now()
				err := send(ctx, id, r)
				cancel()
				mu.Lock()
				results = append(results, probeResult{id: id, start: start, deadline: dl, at: time.Now(), err: err, canceled: canceled})
				mu.Unlock()
				time.Sleep(time.Duration(r.IntN(200)) * time.Millisecond)
			}
		}()
	}
	return func() []probeResult {
		callers.Wait()
		mu.Lock()
		defer mu.Unlock()
		return results
	}
}
