package failover

import (
	"sync"
	"testing"
	"time"
)

// The scenarios judge detection delays by the wall clock, across
// processes. A loaded machine (a CI runner with other test binaries
// beside these) can hold every process for seconds: the client's timers
// fire that much later, and the delay is the machine's, not the
// watchdog's. The stall meter records when this process's own timer ran
// late by more than stallMin, and checkDetection allows the client the
// stalls that overlap what it judges. A client that stalls alone (a bug
// of its own) is not excused: this process did not stall with it.
const (
	stallTick = 50 * time.Millisecond
	stallMin  = 500 * time.Millisecond
	maxStalls = 256 // the oldest go first
)

type stall struct{ from, to time.Time }

var stalls struct {
	mu   sync.Mutex
	at   []stall
	stop chan struct{}
	done chan struct{}
}

// startStallMeter starts the meter; stopStallMeter ends it.
func startStallMeter() {
	stalls.stop, stalls.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stalls.done)
		t := time.NewTicker(stallTick)
		defer t.Stop()
		prev := time.Now().Round(0) // the wall clock: a paused machine's gap counts too
		for {
			select {
			case <-stalls.stop:
				return
			case <-t.C:
			}
			now := time.Now().Round(0)
			if now.Sub(prev)-stallTick > stallMin {
				stalls.mu.Lock()
				if len(stalls.at) == maxStalls {
					stalls.at = stalls.at[1:]
				}
				stalls.at = append(stalls.at, stall{prev, now})
				stalls.mu.Unlock()
			}
			prev = now
		}
	}()
}

func stopStallMeter() {
	close(stalls.stop)
	<-stalls.done
}

// stalledBetween returns how long this process was held between a and b
// (the part of each recorded stall inside [a, b], beyond one tick).
func stalledBetween(a, b time.Time) time.Duration {
	stalls.mu.Lock()
	defer stalls.mu.Unlock()
	var sum time.Duration
	for _, s := range stalls.at {
		from, to := s.from, s.to
		if from.Before(a) {
			from = a
		}
		if to.After(b) {
			to = b
		}
		if d := to.Sub(from) - stallTick; d > 0 {
			sum += d
		}
	}
	return sum
}

// The meter allows the part of each stall inside the window, no more.
func TestStalledBetween(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	stalls.mu.Lock()
	saved := stalls.at
	stalls.at = []stall{{at(1), at(3)}, {at(10), at(18.5)}}
	stalls.mu.Unlock()
	defer func() {
		stalls.mu.Lock()
		stalls.at = saved
		stalls.mu.Unlock()
	}()
	for _, c := range []struct {
		a, b float64
		want time.Duration
	}{
		{0, 5, 2*time.Second - stallTick},
		{2, 5, time.Second - stallTick},
		{4, 9, 0},
		{0, 30, 10500*time.Millisecond - 2*stallTick},
		{12, 14, 2*time.Second - stallTick},
	} {
		if got := stalledBetween(at(c.a), at(c.b)); got != c.want {
			t.Errorf("stalledBetween(%v s, %v s) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
