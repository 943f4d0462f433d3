package main

// This file: the load generator's open-loop scheduler, shared by the
// Diameter and the RADIUS client, and the "no answer for N s from P"
// watch over the Client's per-server statistics.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/client"
)

// openLoop issues requests at their intended times, start + k/rate for
// the k-th, whatever the requests before them are doing (wrk2's model
// against coordinated omission): each request runs on a goroutine of its
// own, at most bound at once. A request whose time comes while bound are
// in flight is not sent: it is counted in dropped, and a warning says so
// (at most once a second). A scheduler that wakes up late sends the
// requests it owes at once, each with its own intended time, so that their
// latency, measured from that time, shows the delay.
type openLoop struct {
	rate     float64 // requests per second, > 0
	bound    int     // requests in flight at most
	requests int64   // stop once this many were sent (0: no limit)
	log      *slog.Logger

	sent     atomic.Int64  // requests sent
	dropped  atomic.Uint64 // requests not sent: the in-flight bound was reached
	inFlight atomic.Int64

	// warnEvery is the least time between two warnings (1s).
	warnEvery time.Duration
	// start is when request 0 is due (zero: when run starts); a test sets
	// it in the past to play a scheduler that woke up late.
	start time.Time
}

// maxConcurrency bounds --concurrency of both clients, and the in-flight
// bound openLoopBound picks: each caller or request in flight is a
// goroutine, and a run of a billion of them spends minutes starting them
// and seconds stopping them on a signal before it sends anything.
const maxConcurrency = 100000

// openLoopBound is the in-flight bound of an open loop at rate whose
// requests end within timeout when --concurrency is not given: room for
// every request to run its whole timeout, so that a server that stops
// answering costs no request of the others (at most maxConcurrency).
func openLoopBound(rate float64, timeout time.Duration) int {
	n := math.Ceil(rate*timeout.Seconds()) + 1
	if n > maxConcurrency {
		return maxConcurrency
	}
	return int(n)
}

func newOpenLoop(rate float64, bound int, requests int64, log *slog.Logger) *openLoop {
	return &openLoop{rate: rate, bound: bound, requests: requests, log: log, warnEvery: time.Second}
}

// run calls send(n, intended) on a goroutine of its own for each request,
// n counting the requests sent from 0, until runCtx ends or --requests
// were sent, then waits for the requests in flight. send measures the
// request's latency from intended. With a deadline (--duration), runCtx
// ends the run at its deadline by the requests' intended times: those
// due before it are sent, even late, and none due at or after it, however
// the loop's timer and the context's, both due then, happen to wake.
func (l *openLoop) run(runCtx context.Context, send func(n int64, intended time.Time)) {
	var wg sync.WaitGroup
	defer wg.Wait()
	interval := float64(time.Second) / l.rate
	start := l.start
	if start.IsZero() {
		start = time.Now()
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	end, bounded := runCtx.Deadline()
	// stopped says whether the run ends before its deadline (a signal):
	// at the deadline, the intended times decide.
	stopped := func() bool {
		err := runCtx.Err()
		return err != nil && !(bounded && errors.Is(err, context.DeadlineExceeded))
	}
	var lastWarn time.Time
	var droppedAtWarn uint64
	defer func() {
		if total := l.dropped.Load(); total > droppedAtWarn {
			// What the last rate-limited warning did not count.
			l.log.Warn("requests not sent on schedule in all: the in-flight bound was reached",
				"bound", l.bound, "dropped_total", total)
		}
	}()
	for k := int64(0); ; k++ {
		if l.requests > 0 && l.sent.Load() >= l.requests {
			return
		}
		due := start.Add(time.Duration(float64(k) * interval))
		if bounded && !due.Before(end) {
			// Nothing more to send, but the run lasts until its end (a
			// --rate 0.1 --duration 9s run watches its peers for 9s).
			<-runCtx.Done()
			return
		}
		if d := time.Until(due); d > 0 {
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			select {
			case <-timer.C:
			case <-runCtx.Done():
				// At the deadline, the request is due before it (above):
				// its time has come.
				if stopped() {
					return
				}
			}
		}
		if stopped() { // also when the timer won the select
			return
		}
		if l.inFlight.Add(1) > int64(l.bound) {
			l.inFlight.Add(-1)
			total := l.dropped.Add(1)
			if now := time.Now(); now.Sub(lastWarn) >= l.warnEvery {
				l.log.Warn("in-flight bound reached: requests not sent on schedule (dropped)",
					"bound", l.bound, "dropped", total-droppedAtWarn, "dropped_total", total)
				lastWarn, droppedAtWarn = now, total
			}
			continue
		}
		n := l.sent.Add(1) - 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.inFlight.Add(-1)
			send(n, due)
		}()
	}
}

// stallWatch logs "no answer for N s from P" (a warning, at most once a
// second per server, N in whole seconds) while requests first sent to
// server P are outstanding and none of them has been answered for N s. It
// reads the Client's per-server statistics (client.ServerStats), so that
// it names the same servers for Diameter and RADIUS: outstanding is
// sent - answered - failed, and an answer is a rise of answered.
type stallWatch struct {
	stats func() []client.ServerStats
	log   *slog.Logger
	every time.Duration // sampling period (200ms)

	mu    sync.Mutex
	state map[string]*stallState
	lines uint64 // lines logged
}

type stallState struct {
	answered uint64
	since    time.Time // since when nothing was answered with requests outstanding
	warned   int64     // the last N logged, in seconds (0: none since the last answer)
}

func newStallWatch(stats func() []client.ServerStats, log *slog.Logger) *stallWatch {
	return &stallWatch{stats: stats, log: log, every: 200 * time.Millisecond, state: map[string]*stallState{}}
}

// start samples until the function it returns is called.
func (w *stallWatch) start() (stop func()) { return every(w.every, w.check) }

// every calls tick with the time on a goroutine of its own each period
// until the function it returns is called, which waits for a call under
// way: the clients' progress lines and the stall watch.
func every(period time.Duration, tick func(now time.Time)) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				tick(now)
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-finished }
}

// check samples the statistics at now.
func (w *stallWatch) check(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.stats() {
		st := w.state[s.Server]
		if st == nil {
			st = &stallState{answered: s.Answered, since: now}
			w.state[s.Server] = st
		}
		var outstanding uint64
		if done := s.Answered + s.Failed; s.Sent > done {
			outstanding = s.Sent - done
		}
		if s.Answered != st.answered || outstanding == 0 {
			st.answered, st.since, st.warned = s.Answered, now, 0
			continue
		}
		n := int64(now.Sub(st.since) / time.Second)
		if n < 1 || n <= st.warned {
			continue
		}
		st.warned = n
		w.lines++
		args := []any{"server", s.Server, "outstanding", outstanding}
		if s.Peer != "" && s.Peer != s.Server {
			args = append(args, "peer", s.Peer)
		}
		w.log.Warn(fmt.Sprintf("no answer for %ds from %s", n, s.Server), args...)
	}
}
