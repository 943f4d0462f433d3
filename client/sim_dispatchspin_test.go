package client

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// The throttle's dispatcher does not poll in vain again and again. A
// poll that releases nothing is followed by a sleep until something can
// change: the scheduler's next slot or deadline, a view that gains a
// server, a poke (a place freed, a hand-over's end, a refused request
// due again), a policy's tick. A dispatcher that set its timer for a
// request due but unable to leave (during the wait for a hand-over, the
// scheduler releases nothing) polled every millisecond for the wait's
// length. Every throttled schedule counts the dispatcher's polls that
// released nothing in a sliding window; so does every schedule of the
// RADIUS simulators (watchSpin).

// More than simSpinMax polls that released nothing within simSpinWindow
// of the schedule's time are a violation.
const (
	simSpinWindow = 100 * time.Millisecond
	simSpinMax    = 40
)

// simSpin is a schedule's record of the dispatcher's empty polls, under
// simWorld.mu.
type simSpin struct {
	recent []time.Time // the empty polls of the last simSpinWindow, at most simSpinMax+1
	worst  int         // the most in one window
	at     time.Time   // when that window ended
	polls  int         // every poll, for the report
	empty  int         // the polls that released nothing
}

// add records a poll at now.
func (s *simSpin) add(now time.Time, released bool) {
	s.polls++
	if released {
		return
	}
	s.empty++
	i := 0
	for i < len(s.recent) && now.Sub(s.recent[i]) >= simSpinWindow {
		i++
	}
	s.recent = append(s.recent[:0], s.recent[i:]...)
	if len(s.recent) > simSpinMax {
		s.recent = s.recent[1:] // over the bound already: keep the record bounded
	}
	s.recent = append(s.recent, now)
	if len(s.recent) > s.worst {
		s.worst, s.at = len(s.recent), now
	}
}

// violation describes a window with more empty polls than simSpinMax,
// or is "".
func (s *simSpin) violation() string {
	if s.worst <= simSpinMax {
		return ""
	}
	return fmt.Sprintf("the throttle's dispatcher polled %d times in vain within %v (ending %s; %d of its %d polls released nothing): it spins",
		s.worst, simSpinWindow, s.at.Format("04:05.000"), s.empty, s.polls)
}

// simDispatcherPoll is onDispatcherPoll.
func simDispatcherPoll(c *Client, released bool) {
	x, ok := simClients.Load(c)
	if !ok {
		return
	}
	w := x.(*simWorld)
	w.mu.Lock()
	w.spin.add(time.Now(), released)
	w.mu.Unlock()
}

// spinWatch is a RADIUS simulator schedule's record of its dispatcher's
// polls.
type spinWatch struct {
	mu sync.Mutex
	s  simSpin
}

// spinWatches holds the spinWatch of each RADIUS simulator schedule's
// Client.
var spinWatches sync.Map // *Client -> *spinWatch

// spinPoll is onDispatcherPoll in the RADIUS simulators.
func spinPoll(c *Client, released bool) {
	if x, ok := spinWatches.Load(c); ok {
		w := x.(*spinWatch)
		w.mu.Lock()
		w.s.add(time.Now(), released)
		w.mu.Unlock()
	}
}

// watchSpin records c's dispatcher polls (with onDispatcherPoll set to
// spinPoll) until the function it returns is called, which fails the
// schedule if the dispatcher spun.
func watchSpin(t testing.TB, seed uint64, c *Client) (check func()) {
	w := &spinWatch{}
	spinWatches.Store(c, w)
	return func() {
		spinWatches.Delete(c)
		w.mu.Lock()
		defer w.mu.Unlock()
		if v := w.s.violation(); v != "" {
			t.Errorf("seed %d: %s", seed, v)
		}
	}
}
