package client

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/message"
)

// The DPR race of TestSim, once quiet: a request to a server (its
// Destination-Host) is picked while that server's peer is in service,
// and the server's DPR is read between its pick and its submit (the
// pick-to-submit hook holds it there until the client's peer has left
// service), while the connection drains: the client owes the server an
// answer (see dprRacePhase). The connection that read the DPR takes no new
// request: the wire check of logWrites reports one queued there after
// the DPR's read.
// The request goes once the server is back (the DPR says REBOOTING: no
// redial hold-off); it is patient, so it must be answered.

// simDPRRace is a schedule's record of the race.
type simDPRRace struct {
	mu    sync.Mutex
	host  string // armed: the next request to this host triggers it
	peers sync.WaitGroup
}

// dprRacePhase runs the race once, on a server drawn from a source of
// its own.
func (w *simWorld) dprRacePhase(send func(opts ...string) *simReq) {
	if len(w.servers) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(w.seed, 0x64707272))
	s := w.servers[rng.IntN(len(w.servers))]
	// The server first asks the client a request, and gives up on it
	// after 5 ms, before the client's handler answers (it takes up to
	// simHandlerDelay): its DPR then finds the client owing that answer,
	// and the connection drains (it stays up, taking no new request)
	// until the client has answered.
	for _, p := range s.peers() {
		req := s.request(";dpr-race")
		w.dpr.peers.Add(1)
		go func() {
			defer w.dpr.peers.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			defer cancel()
			p.Request(ctx, req)
		}()
	}
	time.Sleep(time.Millisecond)
	w.dpr.mu.Lock()
	w.dpr.host = s.host
	w.dpr.mu.Unlock()
	w.b2.mu.Lock()
	w.b2.next = &simB2Req{pin: s.host}
	w.b2.mu.Unlock()
	r := send("patient", "unpinned", "b2")
	w.tracef("dpr race: request %d to %s", r.id, s.host)
	w.waitReturnBy(r.id, time.Now().Add(2*time.Minute))
	w.dpr.mu.Lock()
	w.dpr.host = ""
	w.dpr.mu.Unlock()
	w.dpr.peers.Wait()
}

// raceDPR runs between the pick and the submit of request cl: if it is
// the race's, the server sends its DPR, and raceDPR returns once the
// client's peer of that server has left service (at most a second).
func (w *simWorld) raceDPR(cl *call.Call) bool {
	w.dpr.mu.Lock()
	host := w.dpr.host
	if host == "" || !message.EqualIdentity(cl.Key.Dest, host) {
		w.dpr.mu.Unlock()
		return false
	}
	w.dpr.host = ""
	w.dpr.mu.Unlock()
	var s *simServer
	for _, x := range w.servers {
		if x.host == host {
			s = x
		}
	}
	for _, p := range s.peers() {
		w.dpr.peers.Add(1)
		go func() {
			defer w.dpr.peers.Done()
			p.Disconnect(context.Background(), message.DisconnectRebooting)
		}()
	}
	out := simWithin(time.Second, 100*time.Microsecond, func() bool {
		for _, p := range w.c.Peers() {
			if p != nil && message.EqualIdentity(p.Name(), host) && p.InService() {
				return false
			}
		}
		return true
	})
	if out {
		w.mu.Lock()
		w.counts.DPRRaced++
		w.mu.Unlock()
	}
	return true
}

// simWithin looks at cond every step until it holds, for d at most, and
// reports whether it held.
func simWithin(d, step time.Duration, cond func() bool) bool {
	by := time.Now().Add(d)
	for !cond() {
		if !time.Now().Before(by) {
			return false
		}
		time.Sleep(step)
	}
	return true
}
