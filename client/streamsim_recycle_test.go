package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/radius"
)

// The recycle phase of TestSimRADIUSStream: in some schedules (drawn from
// a source of their own: the others run as they did), once the faults
// have ended and every request has returned, a server's backend hangs
// while the others are down.
//
// Every server but one, T (one connection open), crashes and stays down
// (its port refuses the client's dials). T's backend then holds every
// request unanswered while T still answers Status-Server (radServer's
// silent: a front end up, its database or directory hung), and a few
// requests (h) come, patient ones. T hangs for a moment, long enough for
// its watchdog to go SUSPECT (h handed back, with no other server to go
// to: they wait in the Client), and comes back within the watchdog's
// detection: the connection is OKAY again, and h may not go on another
// connection of T while the one they were sent on is OKAY (RFC 6613
// 2.6.1), so they keep waiting. Then requests with short deadlines fill
// the connection's Identifiers and give them up; the backend answers
// again; a few more requests find no Identifier free and radpeer
// recycles the connection (its Identifiers held by requests that timed
// out). That lifts what h had to avoid: T, in service, could take them.
//
// Invariant, what the user sees: each of h is answered within
// ssimRecycleBound of the recycle, not left waiting until its deadline
// (or until some unrelated change of the servers' states) while a server
// in service could take it. It is checked when the situation formed: h
// written on T's connection before the hang and still waiting after it,
// T's connection OKAY again, and the recycle seen.

// ssimRecycleBound: how long after the recycle a request it let go may
// take to be answered. The replacement is dialed at once (virtual time),
// and T answers at once.
const ssimRecycleBound = 2 * time.Second

// ssimRecycle is one run of the phase.
type ssimRecycle struct {
	server    string // T's name ("s1")
	held      []*ssimOutcome
	outs      []*ssimOutcome // every request of the phase
	formed    bool           // the situation formed (the check applies)
	recycleAt time.Time      // when the requests that found no Identifier free went
	why       string         // why the situation did not form
}

// ssimRecycleRuns counts the phases run, and those in which the
// situation formed, over a test's schedules.
var ssimRecycleRuns struct {
	sync.Mutex
	ran, formed int
}

func ssimRecycleTake() (ran, formed int) {
	ssimRecycleRuns.Lock()
	defer ssimRecycleRuns.Unlock()
	ran, formed = ssimRecycleRuns.ran, ssimRecycleRuns.formed
	ssimRecycleRuns.ran, ssimRecycleRuns.formed = 0, 0
	return ran, formed
}

// ssimRecycleDraw reports whether seed's schedule runs the phase: a third
// of those without the throttle (its queues would hold the requests that
// fill the Identifiers).
func ssimRecycleDraw(seed uint64, throttled bool) *rand.Rand {
	rng := rand.New(rand.NewPCG(seed, 0x2ec1c1e))
	if throttled || rng.IntN(3) != 0 {
		return nil
	}
	return rng
}

// runSSimRecycle runs the phase on c; urls are the servers' (by index,
// as named sN), exchange starts one request. It returns when every
// request of the phase has returned.
func runSSimRecycle(rng *rand.Rand, c *Client, snet *ssimNet, n radNetwork, urls []string,
	exchange func(*ssimOutcome, context.Context, context.CancelFunc, *radius.Request), wait func(), tracef func(string, ...any)) *ssimRecycle {
	r := &ssimRecycle{}
	defer func() {
		ssimRecycleRuns.Lock()
		ssimRecycleRuns.ran++
		if r.formed {
			ssimRecycleRuns.formed++
		}
		ssimRecycleRuns.Unlock()
	}()
	// T: a server in service with one connection open.
	v := c.view()
	var cands []*member
	for i, m := range v.ros.all {
		if v.open[i] && !m.removed.Load() && m.rp.Load() != nil && len(snet.open(m.spec.URL)) == 1 {
			cands = append(cands, m)
		}
	}
	if len(cands) == 0 {
		r.why = "no server in service with one connection"
		return r
	}
	tm := cands[rng.IntN(len(cands))]
	turl := tm.spec.URL
	ts := n[turl]
	r.server = fmt.Sprintf("s%d", slices.Index(urls, turl))
	var down []string
	for _, u := range urls {
		if u != turl {
			down = append(down, u)
		}
	}
	tracef("fault: recycle phase at %s: the other servers crash and refuse connections", r.server)
	snet.mu.Lock()
	for _, u := range down {
		snet.refused[u] = true
	}
	snet.mu.Unlock()
	defer func() {
		snet.mu.Lock()
		clear(snet.refused)
		snet.mu.Unlock()
	}()
	for _, u := range down {
		n[u].faults.Reset()
	}
	only := func() bool { // T alone in service
		v := c.view()
		for i, m := range v.ros.all {
			if v.open[i] != (m == tm) {
				return false
			}
		}
		return true
	}
	for start := time.Now(); !only(); time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			r.why = "the other servers did not leave service, or T did"
			return r
		}
	}
	send := func(user string, d time.Duration) *ssimOutcome {
		o := &ssimOutcome{user: user}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		exchange(o, ctx, cancel, accessRequest(user))
		r.outs = append(r.outs, o)
		return o
	}
	defer wait()
	defer ts.silent.Store(false)

	// The backend hangs; the held requests come.
	ts.silent.Store(true)
	nh := 1 + rng.IntN(3)
	for i := range nh {
		r.held = append(r.held, send(fmt.Sprintf("h%d", i), time.Duration(60+rng.IntN(40))*time.Second))
	}
	time.Sleep(500 * time.Millisecond)
	cs := snet.open(turl)
	if len(cs) != 1 {
		r.why = "T's connections changed"
		return r
	}
	sc := cs[0]
	snet.mu.Lock()
	for _, o := range r.held {
		if !sc.written[o.user] {
			r.why = o.user + " not written on T's connection"
		}
	}
	snet.mu.Unlock()
	if r.why != "" {
		return r
	}

	// T hangs until its watchdog goes SUSPECT, and comes back before DOWN.
	tracef("fault: %s frozen (its backend holding every request)", r.server)
	ts.faults.Freeze()
	for start := time.Now(); c.view().open[tm.index]; time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > 4*snet.tw {
			ts.faults.Thaw()
			r.why = "T did not leave service while frozen"
			return r
		}
	}
	time.Sleep(time.Duration(200+rng.IntN(2000)) * time.Millisecond)
	tracef("fault: %s thawed", r.server)
	ts.faults.Thaw()
	for start := time.Now(); !c.view().open[tm.index]; time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > 2*snet.tw {
			r.why = "T did not come back in service"
			return r
		}
	}
	if cs := snet.open(turl); len(cs) != 1 || cs[0] != sc {
		r.why = "T's connection was replaced during the hang"
		return r
	}

	// Requests with short deadlines fill the connection's Identifiers.
	snet.mu.Lock()
	// At least 250 pending once written: the wire check of RFC 6613 2.6.1
	// (checkWriteLocked) takes the connection for one radpeer may have
	// recycled (full) from then on.
	fill := 255 - len(sc.pending) - 1 - rng.IntN(4)
	snet.mu.Unlock()
	tracef("fault: %d requests with short deadlines fill %s's Identifiers", fill, sc.name)
	for i := range fill {
		send(fmt.Sprintf("x%d", i), time.Duration(1000+rng.IntN(2000))*time.Millisecond)
	}
	time.Sleep(4 * time.Second)
	// The backend answers again; requests find no Identifier free.
	ts.silent.Store(false)
	snet.mu.Lock()
	more := 255 - len(sc.pending) + 1 + rng.IntN(4)
	snet.mu.Unlock()
	recycled := tm.rp.Load().Stats().RecycledConns
	tracef("fault: %s answers again; %d requests find its Identifiers held", r.server, more)
	r.recycleAt = time.Now()
	for i := range more {
		send(fmt.Sprintf("y%d", i), 30*time.Second)
	}
	time.Sleep(time.Second)
	if tm.rp.Load().Stats().RecycledConns == recycled {
		r.why = "no recycle"
		return r
	}
	r.formed = true
	return r
}

// check returns what broke, in plain words.
func (r *ssimRecycle) check() []string {
	if !r.formed {
		return nil
	}
	var errs []string
	for _, o := range r.held {
		lat := o.done.Sub(r.recycleAt)
		if o.err != nil || lat > ssimRecycleBound {
			what := "answered"
			if o.err != nil {
				what = fmt.Sprintf("failed (%v)", o.err)
				if errors.Is(o.err, call.ErrTimeout) {
					what = "failed at its deadline"
				}
			}
			errs = append(errs, fmt.Sprintf("request %s, handed back by %s's SUSPECT connection and held back from %s while that connection was OKAY again, "+
				"%s %v after the connection was recycled (its deadline %v after it): %s, in service, could take it at once (bound %v)",
				o.user, r.server, r.server, what, lat.Round(time.Millisecond), o.deadline.Sub(r.recycleAt).Round(time.Millisecond), r.server, ssimRecycleBound))
		}
	}
	return errs
}
