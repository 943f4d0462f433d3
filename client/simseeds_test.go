package client

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// simSeeds returns the seeds a simulator runs: only seed when it is set,
// n seeds from -sim.from (1 by default) for a soak when n is set, else
// 1..fixed.
func simSeeds(seed uint64, n, fixed int) []uint64 {
	if seed != 0 {
		return []uint64{seed}
	}
	from := *simFrom
	if n <= 0 {
		n, from = fixed, 1
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = from + uint64(i)
	}
	return seeds
}

// runSeeds runs one schedule a seed, each in a synctest bubble, on as many
// parallel workers as processors, and hands each result that passed to
// add (under a lock). A failing seed is named with the flag that replays
// it.
func runSeeds[R any](t *testing.T, seeds []uint64, replay string, run func(t *testing.T, seed uint64) R, add func(R)) {
	workers := min(runtime.GOMAXPROCS(0), len(seeds))
	var mu sync.Mutex
	t.Run("schedules", func(t *testing.T) {
		for w := range workers {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				for i := w; i < len(seeds); i += workers {
					seed := seeds[i]
					var r R
					if !t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
						runBubble(t, seed, func(t *testing.T) { r = run(t, seed) })
					}) {
						t.Errorf("seed %d failed: replay with %s=%d", seed, replay, seed)
						continue
					}
					mu.Lock()
					add(r)
					mu.Unlock()
				}
			})
		}
	})
}

// runBubble runs f in a synctest bubble. A schedule whose goroutines end
// up blocked for ever (a waiter stuck in line, a Close that cannot
// finish) makes synctest panic once nothing else can run: that panic is
// the seed's failure, reported with the seed, and the other seeds go on.
func runBubble(t *testing.T, seed uint64, f func(t *testing.T)) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok && strings.HasPrefix(e.Error(), "deadlock") {
				t.Errorf("seed %d: the schedule's goroutines are blocked for ever (%v)", seed, e)
				return
			}
			panic(r)
		}
	}()
	synctest.Test(t, f)
}

// simCloseBound is how long a simulator waits for Client.Close: its
// graceful disconnects take seconds; one that has not returned after
// this is stuck.
const simCloseBound = 10 * time.Minute

// closeBounded closes c and waits for Done, up to simCloseBound; false if
// it did not return by then (the caller reports it: goroutines are left
// blocked, which runBubble reports too). A Close that returns with a
// waiter left in line, or requests counted waiting, is reported to t:
// Close fails the waiting requests and waits for their waiters.
func closeBounded(t *testing.T, ctx context.Context, c *Client) bool {
	done := make(chan struct{})
	go func() {
		c.Close(ctx)
		if line, n := waitersLeft(c); line > 0 || n != 0 {
			t.Errorf("Client.Close returned with %d waiters in line and %d requests counted waiting", line, n)
		}
		<-c.Done()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(simCloseBound):
		return false
	}
}

// closeFromSubscriber has a subscriber close c, with the context it got,
// at the next event published within wait: fired, it did; stuck, its
// Close did not return within simCloseBound (it must return at once,
// without waiting for the shutdown it starts).
func closeFromSubscriber(c *Client, wait time.Duration) (fired, stuck bool) {
	started, returned := make(chan struct{}), make(chan struct{})
	var taken atomic.Bool // the one event it closes at, or the time-out's
	cancel := c.Events().Subscribe(func(ctx context.Context, e Event) {
		if taken.CompareAndSwap(false, true) {
			close(started)
			c.Close(ctx)
			close(returned)
		}
	})
	defer cancel()
	select {
	case <-started:
	case <-time.After(wait):
		if taken.CompareAndSwap(false, true) {
			return false, false
		}
		<-started
	}
	select {
	case <-returned:
		return true, false
	case <-time.After(simCloseBound):
		return true, true
	}
}

// waitersLeft reports the waiters still in line and the requests counted
// as waiting: once every request has returned and its deadline passed,
// none may be left (a waiter ends when its requests are placed, fail at
// Close, or pass their deadlines).
func waitersLeft(c *Client) (line int, waiting int64) {
	c.mu.Lock()
	for x := c.lastWaiter; x != nil; x = x.prev {
		line++
	}
	c.mu.Unlock()
	return line, c.waiting.Load()
}

// simLingered counts the schedules in which a waiter was still in line
// once every request had returned, and so had to be looked at again
// after the last deadline (waitersEnd): the cost of that check.
var simLingered struct {
	sync.Mutex
	n int
}

// waitersEnd checks, once every request has returned, that no waiter
// outlives the deadlines of its requests: a waiter keeps a request that
// was answered elsewhere (its caller has returned) until that request's
// deadline, and looks at its requests again when the last deadline
// passes; by then none may be left in line nor counted waiting (they
// count against the bound on waiting requests, maxWaiting). last is the
// latest deadline of the schedule's requests. Virtual time is spent only
// when a waiter is still in line.
func waitersEnd(t *testing.T, c *Client, last time.Time) {
	if line, n := waitersLeft(c); line == 0 && n == 0 {
		return
	}
	simLingered.Lock()
	simLingered.n++
	simLingered.Unlock()
	time.Sleep(time.Until(last) + time.Second)
	synctest.Wait()
	if line, n := waitersLeft(c); line > 0 || n != 0 {
		t.Errorf("%d waiters in line and %d requests counted waiting %v after the last request's deadline, every request returned", line, n, time.Second)
	}
}

// simLingeredTake returns simLingered's count and resets it.
func simLingeredTake() int {
	simLingered.Lock()
	defer simLingered.Unlock()
	n := simLingered.n
	simLingered.n = 0
	return n
}
