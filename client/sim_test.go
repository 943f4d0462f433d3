package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/internal/testhook"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

var (
	simN     = flag.Int("sim.n", 0, "TestSim: run schedules for n seeds from -sim.from instead of the fixed set (a soak)")
	simSeed  = flag.Uint64("sim.seed", 0, "TestSim: replay the schedule of this seed only")
	simFrom  = flag.Uint64("sim.from", 1, "with -sim.n, -ssim.n or -usim.n: the first seed of the soak")
	simTrace = flag.Bool("sim.trace", false, "TestSim: log each step of the schedule and each event of the Client (with -sim.seed)")
	// -sim.throttle=false: the schedules as they were before the
	// throttle joined them (a soak seed found then replays as it did).
	simThrottle = flag.Bool("sim.throttle", true, "TestSim: put the ASR5K throttle in a third of the schedules")
)

// simFixedSeeds is the set every `go test` runs. With -race a schedule
// costs about 35 ms of wall time on two cores (two run side by side):
// 600 take about 22 s, the client package's tests about 30 s, within a
// minute on a CI machine that runs other packages alongside. Fewer miss
// the rare schedules: in the mutation run of the redesign issue, lost
// wake-ups and a batch dropped between pick and submit failed 1-4% of
// the seeds each, so 300 seeds could pass them by; 600 make that
// unlikely (1.5% of seeds: 1 in 10,000).
const simFixedSeeds = 600

// simSoakSeeds failed in a soak and pass since their fix; each ran every
// replay the same way (2740: two requests handed over by the server
// policy at different times, both refused after their loss, replayed in
// the wrong order when their waiters' retry timers fired together). simRaceSeeds failed in a soak in some
// replays only (the goroutines' interleaving decides): each failed about
// 1 in 10 replays before its fix, so every go test replays them
// simRaceReplays times. simInlineRaceSeeds are the same for schedules
// whose connections write without waiting (simInline), which they keep:
// 61082 ended with a Peer's timer still writing a DWR after Close had
// returned (1 replay in 3 before its fix). 571, 1849, 47247 (1 to 3
// replays in 40) and 51635 (17 in 40) placed requests the throttle
// released after one that was refused as it was placed, ahead of it.
// 65960 (6 in 10) gave the probe of a server to a younger request of a
// hand-over while an older one, which had to avoid the lowest-index
// probing server, waited. 1894 (small buffers) has a request still in
// its connection's write queue at a flap's SUSPECT: it is the seed of
// 1..2,000 that catches a failover leaving such a request queued, to be
// written to the server it left at the thaw (8 replays in 10).
var (
	simSoakSeeds       = []uint64{2740, 23485, 32089, 43487, 62932, 68316, 73893, 81288}
	simRaceSeeds       = []uint64{1743, 83890, 571, 1849, 47247, 51635, 65960, 1894}
	simInlineRaceSeeds = []uint64{61082}
	simRaceReplays     = 40
)

// simSlack is how late past its deadline a Send may return: the
// simulator's own pauses (see simPause) and a scheduling step.
const simSlack = time.Second

// simRecovery is how long the quiet end of a schedule waits for every
// peer to come back in service: the DPR hold-off (5 minutes), a redial
// (one Tw) and the REOPEN validation (3 DWAs, about 3 Tw), with margin.
const simRecovery = 9 * time.Minute

// TestSim is the fault-schedule simulator: each seed draws a Client with
// 2-4 peers (balance or primary/secondary; in a third of the seeds with
// a server policy: down-timeout, hold-down, probes; in a third, drawn
// apart, with the ASR5K throttle: rate and outstanding limits, queues) in
// front of servers
// sharing a duplicate store, and a random schedule of requests and faults, run in
// virtual time over net.Pipe. The requests: accounting and non-accounting
// (the (Origin-Host, End-to-End) key alone), some pinned by
// Destination-Host, with short, long, patient (an hour, past every fault)
// or no deadline. The faults: freeze and thaw (the connection surviving,
// or reset while frozen), SUSPECT -> OKAY flaps with late answers and
// late DWAs, resets mid-burst, DPR from a server with each
// Disconnect-Cause (its answers in flight drain first), 3004 and 3002 and
// final 5012 answers, requests lost in a server (no answer ever),
// duplicate answers, answers after the caller's deadline, every server
// out at once (frozen, reset or DPR) and back, a
// slow request left behind steady traffic before a failover, requests
// from a server to the client (which answers them within
// simHandlerDelay), the server sometimes disconnecting right after,
// Client.Close with answers in flight and during a failover, hurried (its
// context done) or as the view changes while requests wait, and random
// pauses inside the race windows (a failover's batch between pick and
// submit, before a request parks, right after a request is queued, in a
// reader, and between a peer's state change and the Client's reaction to
// it). A quarter of the servers have small receive buffers, so that
// the client's writes back up while they are frozen.
// Some Sends come with a context that has ended already (cancelled,
// or its deadline past): each returns at once, with the context's error.
// After every schedule it checks the invariants listed in check, and
// while it runs that no request is queued on a connection after the
// client read the server's DPR there, and that the Client's view stops
// showing that server in service while the connection drains; that an
// answer a server wrote is read at once on a connection where nothing
// holds the reading up (no virtual time passes on a healthy read path),
// and, in a phase of the quiet end where callers send one request at a
// time (the reading baton's case) while the servers ask requests of
// their own, that the client answers each of those (sim_latency_test.go);
// in another, a caller done with its call holds the baton while a caller
// registers waiting for it, whose wait ends as the baton is handed to
// it, or while the throttle's dispatcher writes a request inline there,
// and the answer that comes next must be read at once
// (sim_baton2_test.go).
// A failing schedule names its seed: replay it with
//
//	go test ./client -run TestSim -sim.seed=N -v
func TestSim(t *testing.T) {
	var seeds []uint64
	switch {
	case *simSeed != 0:
		seeds = []uint64{*simSeed}
	case *simN > 0:
		for i := range *simN {
			seeds = append(seeds, *simFrom+uint64(i))
		}
	default:
		for i := range simFixedSeeds {
			seeds = append(seeds, uint64(i+1))
		}
		seeds = append(seeds, simSoakSeeds...)
		for range simRaceReplays {
			seeds = append(seeds, simRaceSeeds...)
			seeds = append(seeds, simInlineRaceSeeds...)
		}
	}
	var total simTotals
	start := time.Now()
	workers := min(runtime.GOMAXPROCS(0), len(seeds))
	testhook.Queued = simQueued
	testhook.Withdrawn = simWithdrawn
	testhook.AfterQueue = simAfterQueue // simPause(20 * time.Millisecond), counted (sim_latency_test.go)
	testhook.CallerRead = simCallerRead
	testhook.Handing = simHanding // sim_baton2_test.go
	beforeSent = simBeforeSent
	beforeAwait = simBeforeAwait
	// Between a submit's boarding and its queueing, with the connection's
	// lock held: a moment for the others (a submit that let go of the
	// lock here would let a later one reach the wire first).
	testhook.Posting = simYield
	// Not longer: strand runs on a Send's goroutine (its deadline is at
	// stake) or on a peer's notifier, which delivers the peer's state
	// changes after it (longer pauses, one per premature failover, hold
	// the view back by seconds).
	beforeStrand = simBeforeStrand // simPause(50 * time.Millisecond), or the strand race (sim_strandrace_test.go)
	beforeRefresh = func() { simPause(20 * time.Millisecond) }
	beforeViewStore = simYield // avMu held: a pause in virtual time would stop the bubble
	onStrand = simStranded
	onWait = simWaited
	onThrottled = simThrottled
	onPicked = simPicked
	onReleased, onRequeued, onHeld, onAwaitHandOver = simReleased, simRequeued, simHeld, simAwaitHandOver
	onDispatcherPoll = simDispatcherPoll
	// Between a request's pick (and its policy's admission) and its
	// submit: the server may leave service, or read its peer's DPR,
	// meanwhile. Not in the hand-over phase, which times its requests
	// to the instant.
	pickToSubmit := func(_ *Client, cl *call.Call) {
		if w := simWorldOf(cl.Ref); w != nil && !w.raceDPR(cl) && !w.b2.quiet.Load() {
			simPause(5 * time.Millisecond)
		}
	}
	afterAdmit.Store(&pickToSubmit)
	defer func() {
		afterAdmit.Store(nil)
		testhook.Withdrawn = nil
		testhook.Queued, testhook.AfterQueue, beforeStrand, beforeRefresh, onStrand, onWait = nil, nil, nil, nil, nil, nil
		beforeViewStore = nil
		onThrottled, onPicked = nil, nil
		onReleased, onRequeued, onHeld, onAwaitHandOver, onDispatcherPoll = nil, nil, nil, nil, nil
		testhook.CallerRead, testhook.Posting, testhook.Handing, beforeSent, beforeAwait = nil, nil, nil, nil, nil
	}()
	var failed []uint64
	var fmu sync.Mutex
	t.Run("schedules", func(t *testing.T) {
		for w := range workers {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				for i := w; i < len(seeds); i += workers {
					seed := seeds[i]
					var st simCounts
					ok := t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
						runBubble(t, seed, func(t *testing.T) { st = runSim(t, seed, uint32(w)) })
					})
					if !ok {
						fmu.Lock()
						failed = append(failed, seed)
						fmu.Unlock()
						t.Errorf("seed %d failed: replay with -run TestSim -sim.seed=%d", seed, seed)
						continue
					}
					total.add(st)
				}
			})
		}
	})
	slices.Sort(failed)
	if len(failed) > 0 {
		t.Logf("failed seeds: %v", failed)
	}
	t.Logf("a waiter still in line once every request returned, in %d schedules", simLingeredTake())
	t.Logf("%d schedules in %v: %+v", len(seeds), time.Since(start).Round(time.Millisecond), total.snapshot())
	if len(seeds) >= simFixedSeeds {
		// The schedules must exercise what the invariants are about.
		s := total.snapshot()
		if s.Replays == 0 || s.Premature == 0 || s.Late == 0 || s.Parked == 0 || s.Drained == 0 ||
			s.Patient == 0 || s.Pinned == 0 || s.NonAcct == 0 || s.Auth == 0 || s.AllOut == 0 || s.SlowBehind == 0 ||
			s.OrderPairs == 0 || s.Drains == 0 || s.Pauses == 0 || s.BusyFailover == 0 ||
			s.Hurried == 0 || s.CloseAtChange == 0 || s.SubscriberClose == 0 || s.ServerAsks == 0 || s.PolicyOut == 0 || s.HandedOver == 0 || (*simThrottle && s.Throttle == 0) || s.Inline == 0 || s.InlinePart == 0 || s.CallerRead == 0 || s.ServerInline == 0 || s.Ended == 0 ||
			s.BatonPhase == 0 || s.ReadChecked == 0 || s.Baton2Holds == 0 || s.DPRRaced == 0 || s.StrandRaced == 0 || s.Withdrawn == 0 || s.SmallBuffers == 0 {
			t.Errorf("the schedules exercised too little: %+v", s)
		}
	}
	simReconfExercised(t, len(seeds))
}

type simCounts struct {
	Requests, Answered, Failed, Replays, Premature, Late, Parked, Drained, Closes int
	Patient, Pinned, NonAcct, AllOut, SlowBehind, OrderPairs, Drains, Pauses      int
	BusyFailover, HandOverPairs, Hurried, CloseAtChange, ServerAsks               int
	// Withdrawn: requests taken back out of a write queue at a failover,
	// never written there; SmallBuffers: servers with small receive
	// buffers.
	Withdrawn, SmallBuffers int
	// Policy: schedules with a server policy; PolicyOut: servers it took
	// out of service at the down-timeout (each a hand-over); HandedOver:
	// requests lost in such a server before, and still there then.
	Policy, PolicyOut, HandedOver int
	// Throttle: schedules with the ASR5K throttle; TightOutstanding: those
	// of them whose MaxOutstanding is a handful; AtOutstanding: the
	// snapshots that found a server with that many requests of a class
	// in flight.
	Throttle, TightOutstanding, AtOutstanding int
	// Auth: Credit-Control-Requests (the throttle's Auth class); NonAcct
	// counts Accounting-Requests without their record's AVPs.
	Auth int
	// SubscriberClose: schedules closed by a subscriber, with its context.
	SubscriberClose int
	// Inline: messages a TryWrite wrote whole on its caller's goroutine;
	// InlinePart: those it wrote in part, the rest left to the writer;
	// CallerRead: answers read by their own caller (the reading baton);
	// ServerInline: answers a server wrote whole on its handler's
	// goroutine.
	Inline, InlinePart, CallerRead, ServerInline int
	// Ended: Sends whose context had ended (cancelled, or its deadline
	// past) before they began; AfterDPR: requests the servers' DPRs
	// found queued on their connections (written after the DPR's read).
	Ended, AfterDPR int
	// BatonPhase: schedules that ran the reading baton's phase;
	// ReadChecked: answers whose latency was checked, ReadExcused those
	// of them read late with a fault pending (sim_latency_test.go).
	BatonPhase, ReadChecked, ReadExcused int
	// Baton2Holds: rounds of the hand-over phase in which a caller held
	// the baton done with its call (sim_baton2_test.go).
	Baton2Holds int
	// DPRRaced: DPR races in which the server's DPR was read between the
	// request's pick and its submit (sim_dprrace_test.go).
	DPRRaced int
	// StrandRaced: strand races in which a server came back between a
	// failover's placing and its strand (sim_strandrace_test.go).
	StrandRaced int
	// WriteBreaks: connections whose write side broke (the write-only
	// fault).
	WriteBreaks int
	// ThrottleOrderPairs: a replay through the throttle and a request
	// still in the throttle at its hand-over, sent to the same
	// connection (sim_throttleorder_test.go).
	ThrottleOrderPairs int
}

type simTotals struct {
	mu sync.Mutex
	c  simCounts
}

func (s *simTotals) add(b simCounts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := &s.c
	a.Requests += b.Requests
	a.Answered += b.Answered
	a.Failed += b.Failed
	a.Replays += b.Replays
	a.Premature += b.Premature
	a.Late += b.Late
	a.Parked += b.Parked
	a.Drained += b.Drained
	a.Closes += b.Closes
	a.Patient += b.Patient
	a.Pinned += b.Pinned
	a.NonAcct += b.NonAcct
	a.Auth += b.Auth
	a.AllOut += b.AllOut
	a.SlowBehind += b.SlowBehind
	a.OrderPairs += b.OrderPairs
	a.Drains += b.Drains
	a.Pauses += b.Pauses
	a.BusyFailover += b.BusyFailover
	a.HandOverPairs += b.HandOverPairs
	a.Withdrawn += b.Withdrawn
	a.SmallBuffers += b.SmallBuffers
	a.Hurried += b.Hurried
	a.CloseAtChange += b.CloseAtChange
	a.SubscriberClose += b.SubscriberClose
	a.ServerAsks += b.ServerAsks
	a.Policy += b.Policy
	a.PolicyOut += b.PolicyOut
	a.HandedOver += b.HandedOver
	a.Throttle += b.Throttle
	a.TightOutstanding += b.TightOutstanding
	a.AtOutstanding += b.AtOutstanding
	a.Inline += b.Inline
	a.InlinePart += b.InlinePart
	a.CallerRead += b.CallerRead
	a.ServerInline += b.ServerInline
	a.Ended += b.Ended
	a.AfterDPR += b.AfterDPR
	a.BatonPhase += b.BatonPhase
	a.ReadChecked += b.ReadChecked
	a.ReadExcused += b.ReadExcused
	a.Baton2Holds += b.Baton2Holds
	a.DPRRaced += b.DPRRaced
	a.StrandRaced += b.StrandRaced
	a.WriteBreaks += b.WriteBreaks
	a.ThrottleOrderPairs += b.ThrottleOrderPairs
}

func (s *simTotals) snapshot() simCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

// simPauses draws the simulator's random pauses. The pauses run on
// goroutines of every schedule running at once (the hooks are global),
// so they share one source; which goroutine gets which pause is up to
// the scheduler anyway.
var simPauses = struct {
	sync.Mutex
	r *rand.Rand
	n int
}{r: rand.New(rand.NewPCG(1, 2))}

// simPause, on a goroutine that holds no lock, sometimes stops it: for a
// virtual instant (every other goroutine of the bubble runs until it
// blocks), or for up to max of virtual time (timers fire meanwhile).
func simPause(max time.Duration) (slept bool) {
	simPauses.Lock()
	k := simPauses.r.IntN(8)
	d := time.Duration(1 + simPauses.r.Int64N(int64(max)))
	if k < 3 {
		simPauses.n++
	}
	simPauses.Unlock()
	switch k {
	case 0:
		time.Sleep(time.Nanosecond)
	case 1, 2:
		time.Sleep(d)
	}
	return k < 3
}

// simYield, on a goroutine that may hold a lock, sometimes lets the
// others run for a moment (a sleep there could stop virtual time).
func simYield() {
	simPauses.Lock()
	n := simPauses.r.IntN(12)
	simPauses.Unlock()
	for range max(0, n-8) {
		runtime.Gosched()
	}
}

// inDispatch reports whether the caller runs inside placeAll (3: a
// waiter's round, on the waiter's goroutine; 2: a failover's batch, on
// the peer's notifier), between its picks and the submits of its runs,
// or dispatch (1: a single send between its pick and its submit), where
// no lock is held: the balancer's clock pauses there.
func inDispatch() int {
	var pcs [32]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	single, batch := 0, false
	for {
		f, more := frames.Next()
		if fn := f.Function; strings.HasSuffix(fn, ".(*Client).poll") || strings.HasSuffix(fn, ".(*Client).holdLocked") ||
			strings.HasSuffix(fn, ".(*Client).unhold") {
			// The throttle's scheduler picks under its lock, and so do
			// the Client's looks at the requests held out of it: a pause
			// there would hold the goroutines waiting for it, which
			// synctest does not count as blocked, and the bubble's clock
			// with them.
			return 0
		}
		if strings.HasSuffix(f.Function, ".(*Client).placeAll") {
			batch = true
		}
		if batch && strings.HasSuffix(f.Function, ".(*Client).waitFor") {
			return 3
		}
		if batch && !more {
			return 2
		}
		if strings.HasSuffix(f.Function, ".(*Client).dispatch") {
			single = 1
		}
		if strings.Contains(f.Function, "SetState") || !more {
			return single
		}
	}
}

// simSend is one queueing of a request on a connection, as the peer
// reported it (testhook.Queued, in send order per request).
type simSend struct {
	seq          int
	at           time.Time
	conn         any
	hbh          uint32
	e2e          uint32 // as written in the bytes
	tflag        bool
	afterRefusal bool
	// withdrawn: taken back out of the connection's write queue before it
	// was written (a failover): never on the wire, as if never queued
	// there for the wire's checks, but a step of the request's route.
	withdrawn bool
}

// simReq is what the schedule knows of one request it sent.
type simReq struct {
	id      uint32
	start   time.Time
	limit   time.Duration // the caller's deadline, or RequestTimeout
	patient bool          // its deadline outlives every fault
	pinned  string        // Destination-Host
	acct    bool          // an accounting record (its own duplicate key too)
	auth    bool          // a Credit-Control-Request: the throttle's Auth class
	drain   bool          // sent just before a graceful Client.Close
	// ended: its context had ended before Send began (cancelled, or a
	// deadline in the past): Send returns at once (limit is 0), with the
	// context's error, and sends nothing.
	ended    bool
	canceled bool // ended by a cancel, not by its deadline
	// slack is how late past its deadline Send may return, when not
	// simSlack: a phase without pauses that times its requests.
	slack time.Duration
}

// peers returns server s's peers, one a connection.
func (s *simServer) peers() []*peer.Peer {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return slices.Clone(s.f.peers)
}

// request is a request server s asks the client (as a Re-Auth-Request or
// an Abort-Session-Request would be), its Session-Id ending in tag.
func (s *simServer) request(tag string) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, s.host+tag).
		String(message.OriginHost, 0, true, s.host).
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").Bytes()
}

type simServer struct {
	host string
	f    *fakeServer

	mu       sync.Mutex
	kind     string // ok, busy, unable, reject
	delay    time.Duration
	slowNext time.Duration // the next request applied here takes that long
}

type simWorld struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand

	servers []*simServer
	n       network
	c       *Client

	mu        sync.Mutex
	seq       int
	sends     map[uint32][]simSend
	stranded  map[*call.Call]bool  // every request that waited for a peer (onStrand)
	waitWhy   map[uint32][]string  // why placeAll left each request waiting, with its view (onWait)
	waits     map[uint32][]simWait // placeAll's waits of each request, in order (onWait)
	picks     map[uint32][]simPick // the servers the throttle's pick chose for each request (onPicked)
	groups    []*simGroup          // the requests of each waiter started, while its deadlines run (onStrand)
	groupOf   map[*call.Call]*simGroup
	asked     map[[2]uint32]bool   // (e2e, hbh) of the servers' requests given to the client's handler
	hrng      *rand.Rand           // the client handler's delays, under mu (rng is the schedule's goroutine's)
	trng      *rand.Rand           // the room of inline writes (sendRoom), under mu
	brng      *rand.Rand           // the write-only fault (which connections break, when), under mu
	breaking  atomic.Bool          // the write-only fault is on (the schedule's steps, not its start, quiet end or Close)
	refusals  map[[2]uint32]int    // (e2e, hbh) of a 3004/3002 the client read -> seq
	wrote     map[[2]uint32]string // (e2e, hbh) of a request written -> the server's host
	answered  map[uint32]time.Time // when the client first read a final answer to the request
	applied   map[uint32]int
	commitAt  map[uint32]time.Time
	runs      map[uint32]int      // handler runs (inside the duplicate store's wrapper)
	commits   map[uint32][]string // for a failure's report: who committed when
	reqs      map[uint32]*simReq
	slow      map[uint32]bool // requests made slow behind steady traffic
	dropped   map[uint32]bool // requests a silent server lost
	lastDrop  map[uint32]simDrop
	throttled bool // the Client has a throttle
	// maxOut: the throttle's MaxOutstanding by class (Auth, Accounting);
	// calls: every request the throttle admitted.
	maxOut [2]int
	calls  []*call.Call
	// tight: MaxOutstanding is a handful, so a request a silent server
	// lost holds one of its server's few places until its deadline, and
	// the requests of the quiet end may wait behind it.
	tight    bool
	tord     simThrottleOrder       // the throttle's steps (sim_throttleorder_test.go)
	spin     simSpin                // the dispatcher's polls (sim_dispatchspin_test.go)
	waitedAt map[uint32][]time.Time // when each request began waiting for a peer
	// outAt: when the server policy took each server out of service at
	// its down-timeout (the hand-overs), from its events.
	outAt     map[string][]time.Time
	errs      []string // violations seen while the schedule ran
	counts    simCounts
	quietFrom time.Time // every fault over, every server answering
	records   []FailoverRecord
	closedAt  time.Time // when Client.Close returned

	lat         simLat        // the answer-latency invariant (sim_latency_test.go)
	b2          simBaton2     // the baton's hand-over phase (sim_baton2_test.go)
	dpr         simDPRRace    // the DPR race (sim_dprrace_test.go)
	sr          simStrandRace // the strand race (sim_strandrace_test.go)
	rc          *simReconf    // the reconfigure fault (simreconf_test.go); nil: off
	roundPauses atomic.Bool   // a waiter's round may pause (watchParked has stopped)
}

// handedOverReversed finds the failover record (moved or parked) of the
// hand-over that took a and b off the connection to server from where
// they were sent, b last at sent, and replayed them, the last at
// replayed (the first record from that server naming both in between):
// it names a after b, a having been sent before b: the hand-over itself
// was out of send order.
func (w *simWorld) handedOverReversed(a, b uint32, from string, sent, replayed time.Time) (string, bool) {
	if from == "" {
		return "", false
	}
	for _, r := range w.records { // oldest first
		if r.Time.After(replayed) {
			// A record made after both replays is of a later hand-over
			// (from the connection they were replayed on).
			continue
		}
		if r.Time.Before(sent) || r.From != from {
			continue
		}
		ia, ib := slices.Index(r.EndToEnd, a), slices.Index(r.EndToEnd, b)
		if ia < 0 || ib < 0 {
			continue
		}
		if ib < ia {
			return fmt.Sprintf("%v %s->%s %v %q %v", r.Time.Format("04:05.000"), r.From, r.To, r.Outcome, r.Reason, r.EndToEnd), true
		}
		return "", false
	}
	return "", false
}

// simHop is a request's move from one connection to the next (at: when
// it was queued there, or zero).
type simHop struct {
	from, to any
	at       time.Time
}

// simMove is one replay: the send on the connection it left and the send
// on the next.
type simMove struct {
	xseq, yseq int // seq of the send on from, on to
	id         uint32
	xat, yat   time.Time
	xhost      string // the server of from, when known
}

// handedOverOrder checks that requests handed over together (one
// failover of a connection: records of one time) and replayed on one same
// connection are queued there in their send order, also when some of
// them waited for a view change and others did not: those that waited
// could go nowhere, and whatever they could not go to, the others could
// not either, unless a refusal (forgotten later) or a Destination-Host
// set them apart, and those are left out. routes holds the replays of
// each (from, to) pair of connections. w.mu is held.
func (w *simWorld) handedOverOrder(routes map[simHop][]simMove) {
	for _, m := range routes {
		var ms []simMove
		for _, x := range m {
			if rq := w.reqs[x.id]; rq == nil || rq.pinned != "" || w.everRefused(x.id) {
				continue
			}
			ms = append(ms, x)
		}
		slices.SortFunc(ms, func(a, b simMove) int { return a.xseq - b.xseq })
		at := make([]time.Time, len(ms))
		for i, x := range ms {
			at[i], _ = w.handOverOf(x.id, x.xhost, x.xat)
		}
		for i := range ms {
			for j := i + 1; j < len(ms); j++ {
				if at[i].IsZero() || !at[i].Equal(at[j]) || w.apart(ms[i].id, ms[j].id) {
					continue
				}
				w.counts.HandOverPairs++
				if ms[j].yseq > ms[i].yseq || w.queuedElsewhere(ms[i].id, w.hostOfSend(ms[i].id, ms[i].yseq), ms[i].xseq, ms[j].yseq) {
					continue
				}
				a, b := ms[i].id, ms[j].id
				w.t.Errorf("seed %d: replays of one hand-over (at %v) out of send order: %d and %d sent at %d then %d, replayed on one connection at %d then %d (at %v then %v); sends %+v and %+v; records %q / %q; waited %q / %q",
					w.seed, at[i].Format("04:05.000"), a, b, ms[i].xseq, ms[j].xseq, ms[i].yseq, ms[j].yseq, ms[i].yat.Format("04:05.000"), ms[j].yat.Format("04:05.000"), w.sends[a], w.sends[b], w.recordsWith(a), w.recordsWith(b), w.waitWhy[a], w.waitWhy[b])
			}
		}
	}
}

// waitedApart reports whether request a, older than b, waited for a
// view change when the hand-over from server from moved b on at once
// (the hand-over's record of a, the first since a's send there, sent,
// says it parked) because a server had refused it: it had to avoid
// where b went, and followed when its wait ended, at the same instant at
// the soonest. Not moved together: b does not wait behind it. w.mu is
// held.
//
// Through the throttle a hand-over records no such wait: a request no
// peer can take is held out of the scheduler. There a was set apart when
// it had been sent on the very connection b went to, and refused there,
// before b went (seq): it avoids that connection until its refusal is
// forgotten (the retry tick), while b, never sent there, goes at once.
func (w *simWorld) waitedApart(a, b uint32, from string, sent time.Time, to any, seq int) bool {
	if from == "" || !w.everRefused(a) {
		return false // nothing set it apart: it could go wherever b went
	}
	if w.throttled {
		for _, s := range w.sends[a] {
			if at, ok := w.refusals[[2]uint32{a, s.hbh}]; ok && s.conn == to && s.seq < seq && at < seq {
				return true
			}
		}
	}
	// The hand-over's record of a: the first from that server since a's
	// send there that names it. Not bounded by the replays' instant: the
	// record is made after the hand-over placed what it could, and a
	// pause there (simPause) can stamp it after a's wait had already
	// ended.
	for _, r := range w.records {
		if r.Time.Before(sent) || r.From != from || (r.Outcome != Moved && r.Outcome != Parked) || !slices.Contains(r.EndToEnd, a) {
			continue
		}
		return r.Outcome == Parked && !slices.Contains(r.EndToEnd, b)
	}
	return false
}

// waitedOwnReason reports whether request a, sent before b on the
// connection both left, waited for its own reason in the batch that sent
// b on (b's replay, at seq), which placeAll's rule allows (holdsBack: a
// request that waits for its own reason does not hold back the others):
// a wait of a's (onWait) after its send at xseq and before seq, in a
// view where a avoided the server b went to (a connection of that server
// it was sent on and still pending there, or that server's refusal, not
// forgotten yet: a late refusal read while a waited keeps a from the
// server until the retry tick, which may fire at the very instant a
// hold-down ends and the others go), with no wait of b's between that
// wait and b's replay. Only then was b placed in the batch in which a
// waited: had b waited after a's wait, a later batch sent it on, and a,
// no longer kept away there, would have gone first; that is still
// checked. Without the throttle only (waitedApart and queuedElsewhere
// see to its queues). w.mu is held.
func (w *simWorld) waitedOwnReason(a, b uint32, xseq, seq int) bool {
	if w.throttled {
		return false
	}
	to := w.hostOfSend(b, seq)
	if to == "" {
		return false
	}
	lastB := 0 // b's last wait before its replay
	for _, e := range w.waits[b] {
		if e.seq < seq {
			lastB = e.seq
		}
	}
	for _, e := range w.waits[a] {
		if e.seq > xseq && e.seq > lastB && e.seq < seq && !e.holdsBack && slices.ContainsFunc(e.avoids, func(h string) bool { return message.EqualIdentity(h, to) }) {
			return true
		}
	}
	return false
}

// lostAt reports whether a silent server host lost a request (the last
// time one did). w.mu is held.
func (w *simWorld) lostAt(host string) bool {
	for _, d := range w.lastDrop {
		if d.host == host {
			return true
		}
	}
	return false
}

// lostDuring reports whether host lost as many requests of class as the
// throttle has places for that class there, each holding its place
// (until its deadline) for part of [from, to): a request of the class
// waiting there then could have found every place held. w.mu is held.
func (w *simWorld) lostDuring(host string, class throttle.Class, from, to time.Time) bool {
	most := w.maxOut[class]
	if most == 0 {
		most = throttle.DefaultMaxOutstanding
	}
	n := 0
	for id, d := range w.lastDrop {
		rq := w.reqs[id]
		if rq == nil || simClass(rq) != class || !message.EqualIdentity(d.host, host) || !d.at.Before(to) || !rq.start.Add(rq.limit).After(from) {
			continue
		}
		n++
	}
	return n >= most
}

// simThrottled records a request the throttle admitted in its world.
func simThrottled(cl *call.Call) {
	w := simWorldOf(cl.Ref)
	if w == nil {
		return
	}
	w.mu.Lock()
	w.calls = append(w.calls, cl)
	w.mu.Unlock()
}

// simStoreEntries bounds the entries of a schedule's dedup store. At the
// store's default (a million) its indexes are mapped on huge pages, and
// the kernel zeroing them for every schedule took a tenth of TestSim's
// time.
const simStoreEntries = 1 << 16

// checkStoreBound fails a schedule whose store came near its bound: it
// could have evicted an entry, and a duplicate then goes unnoticed.
func checkStoreBound(t testing.TB, seed uint64, entries int) {
	t.Helper()
	if entries > simStoreEntries/4 {
		t.Errorf("seed %d: the dedup store holds %d entries, more than a quarter of its %d: raise simStoreEntries", seed, entries, simStoreEntries)
	}
}

// simPick is a server the throttle's pick chose for a request, in the
// order of sends (seq); host "" when it chose none (the scheduler's
// round-robin queued the request for a server the pick does not know).
type simPick struct {
	seq  int
	host string
}

// simPicked records the server the throttle's pick chose for a request.
func simPicked(cl *call.Call, m *member) {
	w := simWorldOf(cl.Ref)
	if w == nil {
		return
	}
	w.mu.Lock()
	if p := w.picks[cl.Ref]; len(p) < 64 {
		host := ""
		if m != nil {
			host = m.spec.Name
		}
		w.picks[cl.Ref] = append(p, simPick{w.next(), host})
	}
	w.mu.Unlock()
}

// lastPicked returns the last server of picks, "" if none.
func lastPicked(picks []simPick) string {
	for i := len(picks) - 1; i >= 0; i-- {
		if picks[i].host != "" {
			return picks[i].host
		}
	}
	return ""
}

// queuedElsewhere reports whether the throttle picked another server
// than to for request a after its send at xseq and before seq: a waited
// in that server's queue for a free place, or went there, while a request
// behind it went to to at once; it follows when that server leaves
// service. The throttle keeps the order of each server's queue, not
// across servers: a busy server does not hold back the others. w.mu is
// held.
func (w *simWorld) queuedElsewhere(a uint32, to string, xseq, seq int) bool {
	if !w.throttled || to == "" {
		return false
	}
	for _, p := range w.picks[a] {
		if p.seq > xseq && p.seq < seq && p.host != "" && !message.EqualIdentity(p.host, to) {
			return true
		}
	}
	return false
}

// hostOfSend returns the server that request id's send seq was queued
// for, "" if unknown. w.mu is held.
func (w *simWorld) hostOfSend(id uint32, seq int) string {
	for _, s := range w.sends[id] {
		if s.seq == seq {
			return w.hostOf(id, s)
		}
	}
	return ""
}

// hostOf returns the server request id's send s was queued for: the one
// it was written to or, if it never was (its connection broke first),
// the one another request queued on the same connection was written to;
// "" if none was. w.mu is held.
func (w *simWorld) hostOf(id uint32, s simSend) string {
	if h := w.wrote[[2]uint32{id, s.hbh}]; h != "" {
		return h
	}
	for oid, os := range w.sends {
		for _, o := range os {
			if o.conn == s.conn {
				if h := w.wrote[[2]uint32{oid, o.hbh}]; h != "" {
					return h
				}
			}
		}
	}
	return ""
}

// checkOutstanding checks, once every goroutine of the schedule is
// blocked (so that the count is of one moment), that no server has more
// requests of a class in flight than the throttle's MaxOutstanding: a
// request in flight on a peer holds a place there from its dispatch until
// after it left the connection (an answer, a failover, its deadline).
func (w *simWorld) checkOutstanding() {
	if !w.throttled {
		return
	}
	synctest.Wait()
	w.mu.Lock()
	calls := slices.Clone(w.calls)
	w.mu.Unlock()
	type key struct {
		p    call.Carrier
		acct bool
	}
	n := map[key]int{}
	all := func(*call.Conn) bool { return true }
	for _, cl := range calls {
		if cl.State() != call.InFlight {
			continue
		}
		on := cl.AppendSentOn(nil, all)
		n[key{on[len(on)-1].Peer(), cl.Accounting}]++
	}
	at := false
	for k, v := range n {
		class := 0
		if k.acct {
			class = 1
		}
		most := w.maxOut[class]
		if most == 0 {
			most = throttle.DefaultMaxOutstanding
		}
		if v > most {
			w.violation("%d requests (accounting %v) in flight on %s, over the throttle's MaxOutstanding %d", v, k.acct, k.p.Name(), most)
		}
		at = at || v == most
	}
	if at {
		w.mu.Lock()
		w.counts.AtOutstanding++
		w.mu.Unlock()
	}
}

// apart reports whether requests a and b are in separate throttle
// queues: the throttle queues accounting and the other requests apart,
// each class with its own rate and outstanding limits, and keeps the
// order within each. Its class goes by the request's application and
// command (throttle.ClassOf), not by its record's AVPs. w.mu is held.
func (w *simWorld) apart(a, b uint32) bool {
	ra, rb := w.reqs[a], w.reqs[b]
	return w.throttled && ra != nil && rb != nil && simClass(ra) != simClass(rb)
}

// simClass is the throttle's class of a simulated request: Auth for a
// Credit-Control-Request, Accounting for an Accounting-Request (with or
// without its record's AVPs).
func simClass(r *simReq) throttle.Class {
	if r.auth {
		return throttle.ClassOf(simAppCC, simCmdCC)
	}
	return throttle.ClassOf(message.AppAccounting, message.CmdAccounting)
}

// handOverOf returns the time of the failover record (moved or parked)
// that took request id off the connection to server from where it was
// sent at sent: the first record from that server since naming it.
func (w *simWorld) handOverOf(id uint32, from string, sent time.Time) (time.Time, bool) {
	if from == "" {
		return time.Time{}, false
	}
	for _, r := range w.records {
		if r.Time.Before(sent) || r.From != from || (r.Outcome != Moved && r.Outcome != Parked) {
			continue
		}
		if slices.Contains(r.EndToEnd, id) {
			return r.Time, true
		}
	}
	return time.Time{}, false
}

// everRefused reports whether a server refused request id (3004 or 3002
// read, or a send after a refusal). w.mu is held.
func (w *simWorld) everRefused(id uint32) bool {
	for _, s := range w.sends[id] {
		if s.afterRefusal {
			return true
		}
		if _, ok := w.refusals[[2]uint32{id, s.hbh}]; ok {
			return true
		}
	}
	return false
}

// recordsWith returns the failover records that name request id, for a
// failure's report.
func (w *simWorld) recordsWith(id uint32) []string {
	var out []string
	for _, r := range w.records {
		if slices.Contains(r.EndToEnd, id) {
			out = append(out, fmt.Sprintf("%v %s->%s %v %q %v", r.Time.Format("04:05.000"), r.From, r.To, r.Outcome, r.Reason, r.EndToEnd))
		}
	}
	return out
}

func (w *simWorld) next() int { w.seq++; return w.seq }

// tracef logs what a server does, with -sim.trace.
func (w *simWorld) tracef(format string, args ...any) {
	if *simTrace {
		w.t.Logf("%v %s", time.Now().Format("04:05.000"), fmt.Sprintf(format, args...))
	}
}

func (w *simWorld) violation(format string, args ...any) {
	w.mu.Lock()
	w.errs = append(w.errs, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// readLog is the client's end of a connection: it records the refusals
// (3004, 3002) the client reads, in one order with the sends, and
// sometimes holds a message back a little (network latency).
type readLog struct {
	transport.Conn
	w    *simWorld
	host string
	owed *simOwed
}

// simOwed is what the client owes the server on one connection: the
// requests the server sent it (by End-to-End and Hop-by-Hop id) not
// answered yet, and those of them received before the server's DPR.
type simOwed struct {
	mu        sync.Mutex
	open      map[[2]uint32]bool
	beforeDPR map[[2]uint32]bool
	dprAt     time.Time
	tail      bool // the next write starts with the rest of a TryWrite's message
	// whole: the header of a message a TryWrite took none of (logged
	// then): the next write starts with it, unless a failover took it
	// back (withdrawn, or forgone as it was being written).
	whole []byte
	ended bool // closed, or a read failed: the connection is down
	// The write-only fault: the write side breaks at the breakAfter'th
	// write (0: never), as to a server that stopped reading whose socket
	// then fails writes (EPIPE) while what it sent is still read.
	breakAfter, writes int
	brokeAt            time.Time
	// lastHbh is the Hop-by-Hop id of the last request written (any:
	// one was), for the order of the wire.
	lastHbh uint32
	any     bool
	// dpaAt: when the client read the DPA to its own DPR; flushArmed: the
	// check that it then closes the connection is set.
	dpaAt      time.Time
	flushArmed bool
}

// simFlushDown bounds how long the client keeps a connection up once it
// has read the DPA to its DPR there and owes the server nothing (every
// request the server sent answered on the wire): it closes it once what
// is queued is written. The servers of some schedules leave that close
// to it (linger).
const simFlushDown = time.Second

// armFlushDownLocked sets the check of simFlushDown once the DPA is read
// and nothing is owed. r.owed.mu is held.
func (r readLog) armFlushDownLocked() {
	o := r.owed
	if o.dpaAt.IsZero() || o.flushArmed || len(o.open) > 0 || o.ended {
		return
	}
	o.flushArmed = true
	from, dpaAt := time.Now(), o.dpaAt
	o.closedWithin(simFlushDown, func() {
		r.w.violation("client read the DPA to its DPR from %s at %v and owed it nothing from %v, and still had that connection up %v later (it closes once what is queued is written)",
			r.host, dpaAt.Format("04:05.000"), from.Format("04:05.000"), time.Since(from))
	})
}

// closedWithin runs late, d from now, unless the client closed the
// connection by then.
func (o *simOwed) closedWithin(d time.Duration, late func()) {
	go func() {
		time.Sleep(d)
		o.mu.Lock()
		ended := o.ended
		o.mu.Unlock()
		if !ended {
			late()
		}
	}()
}

// simWriteDown bounds how long a connection whose write failed may stay
// up: the write's goroutine (a writer, or a caller writing inline) ends
// it at once.
const simWriteDown = time.Second

var errSimWriteBroken = errors.New("sim: write failed: the server stopped reading")

// broken counts a write and reports whether the write side has broken:
// the first time, it checks simWriteDown later that the client closed
// the connection.
func (r readLog) broken() bool {
	o := r.owed
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writes++
	if o.breakAfter == 0 || o.writes < o.breakAfter || o.brokeAt.IsZero() && !r.w.breaking.Load() {
		return false
	}
	if o.brokeAt.IsZero() {
		o.brokeAt = time.Now()
		r.w.mu.Lock()
		r.w.counts.WriteBreaks++
		r.w.mu.Unlock()
		at := o.brokeAt
		o.closedWithin(simWriteDown, func() {
			r.w.violation("a write to %s failed at %v (the server stopped reading; reads go on) and the client still had that connection up %v later (a failed write ends its connection at once)",
				r.host, at.Format("04:05.000"), time.Since(at))
		})
	}
	return true
}

// Close records that the client closed the connection.
func (r readLog) Close() error {
	r.owed.mu.Lock()
	r.owed.ended = true
	r.owed.mu.Unlock()
	return r.Conn.Close()
}

// simDPRView bounds how long after the client read a server's DPR its
// view may still show that server in service while the connection that
// carried the DPR is still up: the peer says EventDisconnecting at once
// (InService is false from then on), and the Client's reaction to a
// peer's events comes after the simulator's pauses (a slow subscriber,
// up to 500 ms an event; the refresh's own, 20 ms).
const simDPRView = 3 * time.Second

// dprInService checks, simDPRView after the client read the DPR of
// server host on connection o, that the Client's view no longer shows
// that server in service if that connection is still up (the peer has
// then no other): a request picked for it would be refused there as
// disconnecting. Not with the reconfigure fault (a member replaced has a
// new peer, whose connection to the same server may be up meanwhile).
func (w *simWorld) dprInService(host string, o *simOwed) {
	time.Sleep(simDPRView)
	o.mu.Lock()
	ended, dprAt := o.ended, o.dprAt
	o.mu.Unlock()
	if ended || w.rc != nil || w.c.ctx.Err() != nil {
		return
	}
	v := w.c.view()
	for _, m := range v.ros.all {
		if message.EqualIdentity(m.spec.Name, host) && v.open[m.index] {
			w.violation("%s in service in the Client's view (gen %d) %v after the client read its DPR (at %v), on a connection still up",
				host, v.gen, time.Since(dprAt), dprAt.Format("04:05.000"))
		}
	}
}

// checkWrittenWhereItLeft checks that request id's send with hbh, written
// now to host, had not moved on before: a request handed over is taken
// out of its connection's write queue (withdrawn), so that the server it
// left never reads it after its copy went elsewhere. A write begun in the
// instant of the hand-over is excused: the writer had taken it, it was
// on its way to the wire. w.mu is held.
func (w *simWorld) checkWrittenWhereItLeft(id, hbh uint32, host string) {
	ss := w.sends[id]
	for i, s := range ss {
		if s.hbh != hbh {
			continue
		}
		if s.withdrawn {
			w.errs = append(w.errs, fmt.Sprintf("request %d written to %s (hbh %d), withdrawn from that connection's queue; sends %+v", id, host, hbh, ss))
		}
		for _, next := range ss[i+1:] {
			if next.at.Before(time.Now()) {
				w.errs = append(w.errs, fmt.Sprintf("request %d written to %s (hbh %d) at %v, after it was queued on another connection at %v: not withdrawn when it was handed over; sends %+v",
					id, host, hbh, time.Now().Format("04:05.000000"), next.at.Format("04:05.000000"), ss))
				return
			}
		}
		return
	}
}

// WriteMessages records which server each request is written to, and
// checks that the client answers a DPR only once it has answered the
// requests the server sent before it (the peer that asks to disconnect
// gets the answers it is owed first; the client's handler takes less
// than the DPA's bound).
func (r readLog) WriteMessages(msgs ...[]byte) error {
	if r.broken() {
		return errSimWriteBroken
	}
	whole := msgs
	r.owed.mu.Lock()
	switch {
	case len(msgs) == 0:
	case r.owed.tail:
		whole, r.owed.tail = msgs[1:], false
	case r.owed.whole != nil:
		if len(msgs[0]) >= wire.HeaderLen && bytes.Equal(msgs[0][:wire.HeaderLen], r.owed.whole) {
			whole = msgs[1:] // logged by its TryWrite
		}
		r.owed.whole = nil
	}
	r.owed.mu.Unlock()
	r.logWrites(whole)
	return r.Conn.WriteMessages(msgs...)
}

// readLogTry is readLog over a connection that writes without waiting:
// a message written inline is logged whole when TryWrite is called, and
// what the socket did not take comes first in the next WriteMessages.
type readLogTry struct{ readLog }

func (r readLogTry) TryWrite(msg []byte) (int, error) {
	if r.broken() {
		return 0, errSimWriteBroken
	}
	r.logWrites([][]byte{msg})
	n, err := r.Conn.(transport.TryWriter).TryWrite(msg)
	if err == nil && n < len(msg) {
		r.owed.mu.Lock()
		if n > 0 {
			r.owed.tail = true
		} else {
			r.owed.whole = slices.Clone(msg[:min(len(msg), wire.HeaderLen)])
		}
		r.owed.mu.Unlock()
	}
	r.w.mu.Lock()
	switch {
	case err != nil:
	case n == len(msg):
		r.w.counts.Inline++
	case n > 0:
		r.w.counts.InlinePart++
	}
	r.w.mu.Unlock()
	return n, err
}

// readLogBaton is readLogTry over a connection that callers may read
// (resumePipe): the reading baton passes between the reader and them.
type readLogBaton struct{ readLogTry }

func (r readLogBaton) MessageBuffered() bool {
	return r.Conn.(transport.BufferedReader).MessageBuffered()
}

func (r readLogBaton) SetReadDeadline(t time.Time) error {
	return r.Conn.(transport.ReadInterrupter).SetReadDeadline(t)
}

func (r readLogBaton) ReadResumes() bool { return true }

// logWrites records which server each request in msgs is written to and
// checks the DPA (see WriteMessages). A piece shorter than a header is
// not a message (an outbox that misplaced the rest of a cut one); the
// server's reader reports the bad frame.
func (r readLog) logWrites(msgs [][]byte) {
	msgs = slices.DeleteFunc(slices.Clone(msgs), func(m []byte) bool { return len(m) < wire.HeaderLen })
	r.owed.mu.Lock()
	dprAt := r.owed.dprAt
	r.owed.mu.Unlock()
	r.owed.mu.Lock()
	for _, m := range msgs {
		// The Hop-by-Hop ids of a connection are issued in increasing
		// order (from a random start, wrapping) as its requests board,
		// under its lock, which is held until the request is queued or
		// taken for an inline write: the wire has them in that order.
		if !wire.IsRequest(m) || wire.AppID(m) == 0 {
			continue
		}
		hbh := wire.HopByHop(m)
		if r.owed.any && int32(hbh-r.owed.lastHbh) <= 0 {
			r.w.violation("client wrote request %d (hbh %d) to %s after request hbh %d boarded later on that connection: the wire's order is not the boarding order",
				wire.EndToEnd(m), hbh, r.host, r.owed.lastHbh)
		}
		r.owed.lastHbh, r.owed.any = hbh, true
	}
	r.owed.mu.Unlock()
	r.w.mu.Lock()
	for _, m := range msgs {
		if wire.IsRequest(m) && wire.AppID(m) != 0 {
			id, hbh := wire.EndToEnd(m), wire.HopByHop(m)
			r.w.wrote[[2]uint32{id, hbh}] = r.host
			r.w.checkWrittenWhereItLeft(id, hbh, r.host)
			if dprAt.IsZero() {
				continue
			}
			// The server's DPR read on this connection, the peer takes
			// no new request on it (EventDisconnecting): every request
			// written after it was queued by then. The DPR is handled on
			// the reader's goroutine at the instant it is read (virtual
			// time), and a request boarded meanwhile is queued at that
			// same instant.
			r.w.counts.AfterDPR++
			for _, s := range r.w.sends[id] {
				if s.hbh == hbh && s.at.After(dprAt) {
					r.w.errs = append(r.w.errs, fmt.Sprintf("request %d queued on a connection to %s at %v, %v after the client read the server's DPR there (the connection takes no new request); sends %+v",
						id, r.host, s.at.Format("04:05.000000"), s.at.Sub(dprAt), r.w.sends[id]))
				}
			}
		}
	}
	r.w.mu.Unlock()
	o := r.owed
	o.mu.Lock()
	for _, m := range msgs {
		switch {
		case wire.IsRequest(m):
		case wire.AppID(m) != 0:
			r.answerWritten(m)
			delete(o.open, [2]uint32{wire.EndToEnd(m), wire.HopByHop(m)})
			delete(o.beforeDPR, [2]uint32{wire.EndToEnd(m), wire.HopByHop(m)})
			r.armFlushDownLocked()
		case wire.CommandCode(m) == wire.CmdDisconnectPeer && time.Since(o.dprAt) < simDPABound:
			owed := 0
			r.w.mu.Lock()
			for k := range o.beforeDPR {
				if r.w.asked[k] {
					owed++
				}
			}
			r.w.mu.Unlock()
			if owed > 0 {
				r.w.violation("client wrote its DPA to %s %v after the DPR with %d requests received before it, given to its handler, unanswered (its handler answers within %v)",
					r.host, time.Since(o.dprAt), owed, simHandlerDelay)
			}
		}
	}
	o.mu.Unlock()
}

// simHandlerDelay bounds how long the client's handler takes to answer a
// server's request; simDPABound is how long a DPR receiver may hold its
// DPA for the answers it owes (peer.DefaultDPATimeout), well above it.
const (
	simHandlerDelay = 2 * time.Second
	simDPABound     = peer.DefaultDPATimeout
)

func (r readLog) ReadMessage() ([]byte, error) {
	m, err := r.Conn.ReadMessage()
	if err == nil && wire.IsRequest(m) {
		o := r.owed
		o.mu.Lock()
		switch {
		case wire.AppID(m) != 0:
			o.open[[2]uint32{wire.EndToEnd(m), wire.HopByHop(m)}] = true
			r.requestRead(m)
		case wire.CommandCode(m) == wire.CmdDisconnectPeer && o.dprAt.IsZero():
			o.dprAt = time.Now()
			o.beforeDPR = maps.Clone(o.open)
			go r.w.dprInService(r.host, o)
		}
		o.mu.Unlock()
	}
	if err == nil && !wire.IsRequest(m) && wire.AppID(m) == 0 && wire.CommandCode(m) == wire.CmdDisconnectPeer {
		o := r.owed
		o.mu.Lock()
		if o.dpaAt.IsZero() {
			o.dpaAt = time.Now()
			r.armFlushDownLocked()
		}
		o.mu.Unlock()
	}
	if to, ok := err.(interface{ Timeout() bool }); err != nil && !(ok && to.Timeout()) {
		// Not a caller's read cut short (a read deadline): the end.
		r.owed.mu.Lock()
		r.owed.ended = true
		r.owed.mu.Unlock()
	}
	if err == nil && !wire.IsRequest(m) && wire.AppID(m) != 0 && wire.Flags(m)&wire.FlagError != 0 {
		if rc, _ := message.ResultCodeOf(m); rc == message.TooBusy || rc == message.UnableToDeliver {
			r.w.mu.Lock()
			k := [2]uint32{wire.EndToEnd(m), wire.HopByHop(m)}
			if _, seen := r.w.refusals[k]; !seen { // a duplicate answer: the first counts
				r.w.refusals[k] = r.w.next()
			}
			r.w.mu.Unlock()
		}
	}
	if err == nil && !wire.IsRequest(m) && wire.AppID(m) != 0 {
		if rc, _ := message.ResultCodeOf(m); rc != message.TooBusy && rc != message.UnableToDeliver {
			r.w.mu.Lock()
			if _, seen := r.w.answered[wire.EndToEnd(m)]; !seen {
				r.w.answered[wire.EndToEnd(m)] = time.Now()
			}
			r.w.mu.Unlock()
		}
		r.answerRead(m) // checks its latency, then simPause(5 * time.Millisecond)
	}
	return m, err
}

// handler is server s's: too busy (3004) and unable to deliver (3002)
// are answered before the request reaches the application, as an
// overloaded or misrouted server does; the application (apply, behind
// the shared duplicate store) answers 2001 or the final 5012.
func (w *simWorld) handler(s *simServer, app peer.Handler) peer.Handler {
	return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		s.mu.Lock()
		kind := s.kind
		s.mu.Unlock()
		if w.b2.drops(wire.EndToEnd(req)) {
			kind = "silent"
		}
		w.tracef("%s receives %d (hbh %d, T %v) as %s", s.host, wire.EndToEnd(req), wire.HopByHop(req), wire.Flags(req)&wire.FlagRetransmit != 0, kind)
		switch kind {
		case "silent": // the request is lost in the server: no answer ever
			w.mu.Lock()
			w.dropped[wire.EndToEnd(req)] = true
			d := simDrop{host: s.host, at: time.Now(), sent: time.Now()}
			for _, x := range w.sends[wire.EndToEnd(req)] {
				if x.hbh == wire.HopByHop(req) {
					d.sent = x.at
				}
			}
			w.lastDrop[wire.EndToEnd(req)] = d
			w.mu.Unlock()
			return nil
		case "busy", "unable":
			rc := map[string]uint32{"busy": message.TooBusy, "unable": message.UnableToDeliver}[kind]
			return message.NewAnswer(req).ResultCode(rc).
				String(message.OriginHost, 0, true, s.host).
				String(message.OriginRealm, 0, true, "example.net").Bytes()
		}
		return app(ctx, p, req)
	}
}

// apply is server s's application: it counts its runs, and fails the
// schedule if it runs for a request whose answer is committed already.
func (w *simWorld) apply(s *simServer) peer.Handler {
	return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		id := wire.EndToEnd(req)
		w.mu.Lock()
		w.runs[id]++
		if at, ok := w.commitAt[id]; ok {
			w.errs = append(w.errs, fmt.Sprintf("request %d: the handler of %s ran again at %v, after its commit at %v", id, s.host, time.Now().Format("04:05.000"), at.Format("04:05.000")))
		}
		w.mu.Unlock()
		s.mu.Lock()
		kind, delay := s.kind, s.delay
		if s.slowNext > 0 {
			delay, s.slowNext = s.slowNext, 0
			w.mu.Lock()
			w.slow[id] = true
			w.mu.Unlock()
		}
		s.mu.Unlock()
		if at, ok := w.b2.readyAt(id); ok {
			delay = max(0, time.Until(at))
		}
		if delay > 0 {
			w.tracef("%s holds %d for %v", s.host, id, delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				w.tracef("%s gives up %d: %v", s.host, id, context.Cause(ctx))
				return nil
			}
		}
		if kind == "reject" {
			return message.NewAnswer(req).ResultCode(message.UnableToComply).
				String(message.OriginHost, 0, true, s.host).
				String(message.OriginRealm, 0, true, "example.net").Bytes()
		}
		return s.f.handler(ctx, p, req)
	}
}

// simDrop is where and when a silent server lost a request last, and
// when the client sent the copy it lost: a server whose connection was
// frozen reads it later, and the client may have handed it over since.
type simDrop struct {
	host     string
	at, sent time.Time
}

// handOver looks at a request a silent server lost (the last time one
// did), which returned at returned: needed when the server policy took
// that server out of service at its down-timeout after the request was
// sent there, the request still unanswered then; missed when it had not
// moved on by then (sent to another server, or waiting for one, in the
// waiting line or the throttle's queue) nor returned. The hand-over
// moves it at once; without it, only the end of its deadline or another
// fault of that server's connection would. w.mu is held.
func (w *simWorld) handOver(id uint32, returned time.Time) (out time.Time, needed, missed bool) {
	d, ok := w.lastDrop[id]
	if !ok {
		return out, false, false
	}
	for _, at := range w.outAt[d.host] { // in the order of the events
		if at.After(d.sent) {
			out = at
			break
		}
	}
	by := out.Add(simSlack)
	if out.IsZero() || !returned.After(by) {
		return out, false, false
	}
	for _, s := range w.sends[id] {
		if s.at.After(d.sent) && !s.at.After(by) {
			return out, true, false
		}
	}
	for _, at := range w.waitedAt[id] {
		if !at.Before(d.sent) && !at.After(by) {
			return out, true, false
		}
	}
	return out, true, true
}

type simOutcome struct {
	e2e uint32
	ans []byte
	err error
	at  time.Time
}

// simWorlds maps the top byte of an End-to-End id to the schedule that
// sent it: schedules run in parallel, one per worker, and each worker's
// ids carry its number.
var simWorlds struct {
	sync.Mutex
	m map[uint32]*simWorld
}

// simWorldOf returns the world of a request's End-to-End id, nil once it
// has ended.
func simWorldOf(e2e uint32) *simWorld {
	simWorlds.Lock()
	defer simWorlds.Unlock()
	return simWorlds.m[e2e>>24]
}

// simCallerRead counts an answer read by its own caller.
func simCallerRead(e2e uint32) {
	w := simWorldOf(e2e)
	if w == nil {
		return
	}
	w.mu.Lock()
	w.counts.CallerRead++
	w.mu.Unlock()
	w.batonHold(e2e) // the hand-over phase (sim_baton2_test.go)
}

func simQueued(e2e uint32, conn any, msg []byte, afterRefusal bool) {
	w := simWorldOf(e2e)
	if w == nil {
		return
	}
	w.mu.Lock()
	w.sends[e2e] = append(w.sends[e2e], simSend{seq: w.next(), at: time.Now(), conn: conn, hbh: wire.HopByHop(msg),
		e2e: wire.EndToEnd(msg), tflag: wire.Flags(msg)&wire.FlagRetransmit != 0, afterRefusal: afterRefusal})
	w.mu.Unlock()
	simYield() // under the connection's lock: a moment for the others
}

// simWithdrawn marks the send of e2e on conn with hbh withdrawn: a
// failover took it out of the connection's write queue before it was
// written.
func simWithdrawn(e2e uint32, conn any, hbh uint32) {
	w := simWorldOf(e2e)
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ss := w.sends[e2e]
	for i := len(ss) - 1; i >= 0; i-- {
		if ss[i].conn == conn && ss[i].hbh == hbh && !ss[i].withdrawn {
			ss[i].withdrawn = true
			w.counts.Withdrawn++
			return
		}
	}
	w.errs = append(w.errs, fmt.Sprintf("request %d withdrawn from a connection it was not queued on (Hop-by-Hop %d)", e2e, hbh))
}

// simGroup is the requests one waiter started with (a call of strand):
// it may hold them until the last of their deadlines, and no longer.
type simGroup struct {
	calls []*call.Call
	sends []int     // each one's Sends() when it started waiting
	last  time.Time // the last of their deadlines
}

// simWaitsMax bounds the waits recorded for each request (its latest).
const simWaitsMax = 256

// simWait is one wait placeAll left a request in (onWait), in the order
// of sends (seq): whether it held back the requests after it in its
// batch (holdsBack), and the servers open in its view that it avoids (a
// connection of theirs it was sent on, or their refusal).
type simWait struct {
	seq       int
	holdsBack bool
	avoids    []string
}

// simStranded records requests that wait for a view change in their
// world, for watchParked and checkRecovered, and the group a waiter
// starts with, for watchParked.
// simWaited keeps why placeAll left a request waiting, with the view it
// was placed against: the members open, taking requests and avoided by
// it, and whether it held back the requests after it.
func simWaited(cl *call.Call, v *avail, why string) {
	w := simWorldOf(cl.Ref)
	if w == nil {
		return
	}
	var ms []string
	var avoids []string // the servers open in v that cl avoids (its own reason)
	for _, m := range v.ros.all {
		k := m.carrier()
		avoided := k != nil && k.Avoids(cl)
		ms = append(ms, fmt.Sprintf("%s open %v takes %v avoids %v", m.spec.Name, v.open[m.index], v.takes[m.index], avoided))
		if avoided && v.open[m.index] {
			avoids = append(avoids, m.spec.Name)
		}
	}
	holds := w.c.holdsBack(cl, v)
	note := fmt.Sprintf("%v %s in gen %d, holds back %v: %s", time.Now().Format("04:05.000"), why, v.gen, holds, strings.Join(ms, "; "))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waitedAt[cl.Ref] = append(w.waitedAt[cl.Ref], time.Now())
	ws := w.waits[cl.Ref]
	if len(ws) == simWaitsMax {
		ws = append(ws[:0], ws[1:]...) // the latest count: a request waits once a retry tick for its deadline
	}
	w.waits[cl.Ref] = append(ws, simWait{seq: w.next(), holdsBack: holds, avoids: avoids})
	if len(w.waitWhy[cl.Ref]) < 8 {
		w.waitWhy[cl.Ref] = append(w.waitWhy[cl.Ref], note)
	}
}

func simStranded(calls []*call.Call) {
	if len(calls) == 0 {
		return
	}
	w := simWorldOf(calls[0].Ref)
	if w == nil {
		return
	}
	if *simTrace {
		v := w.c.view()
		for _, cl := range calls {
			var ms []string
			for _, m := range v.ros.all {
				k := m.carrier()
				ms = append(ms, fmt.Sprintf("%s open %v takes %v avoids %v", m.spec.Name, v.open[m.index], v.takes[m.index], k != nil && k.Avoids(cl)))
			}
			w.tracef("%d waits (gen %d): %s", cl.Ref, v.gen, strings.Join(ms, "; "))
		}
	}
	g := &simGroup{calls: slices.Clone(calls)}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cl := range calls {
		w.stranded[cl] = true
		w.groupOf[cl] = g
		g.sends = append(g.sends, cl.Sends())
		g.last = maxTime(g.last, cl.Deadline)
	}
	w.groups = append(w.groups, g)
}

// mayHoldWaiters counts the groups whose waiter may still be in line at
// now: the last of its requests' deadlines not passed by more than
// slack, and one of its requests still waiting there (parked, or done
// without having been sent again: answered on its old connection, or
// given up, which the waiter sees at its next round or its deadline).
// It forgets the groups past their deadlines. w.mu is held.
func (w *simWorld) mayHoldWaiters(now time.Time, slack time.Duration) int {
	live := 0
	w.groups = slices.DeleteFunc(w.groups, func(g *simGroup) bool { return now.After(g.last.Add(slack)) })
	for _, g := range w.groups {
		for i, cl := range g.calls {
			if w.groupOf[cl] == g && (cl.State() == call.Parked || (cl.IsDone() && cl.Sends() == g.sends[i])) {
				live++
				break
			}
		}
	}
	return live
}

// simInline tells whether a schedule's connections write without waiting
// (tryPipe, tryRecordConn), so that a request alone goes out on its
// caller's goroutine and an answer alone on its handler's, as over TCP:
// a third of them; the odd ones among those can also be read
// by callers (resumePipe), so that a caller may read its own answer. The
// soak seeds replay the interleavings they failed with, over plain pipes.
func simInline(seed uint64) bool {
	return seed%3 == 2 && !slices.Contains(simSoakSeeds, seed) && !slices.Contains(simRaceSeeds, seed)
}

// simSmallBuffers says how small the receive buffers of server i are in
// a schedule (0: as large as the default): small for a quarter of the
// servers, so that the client's writes back up while a server is frozen
// and a failover finds requests still in its write queue. The seeds kept
// for the interleavings they failed with keep the buffers they had then,
// 1894 aside, which failed with small ones.
func simSmallBuffers(seed uint64, i int) (readAhead, reads int) {
	if seed != 1894 && (slices.Contains(simSoakSeeds, seed) || slices.Contains(simRaceSeeds, seed) || slices.Contains(simInlineRaceSeeds, seed)) {
		return 0, 0
	}
	if r := rand.New(rand.NewPCG(seed, 0x72656164+uint64(i))); r.IntN(4) == 0 {
		return 1 + r.IntN(4), 64 + r.IntN(256)
	}
	return 0, 0
}

// sendRoom is how much of a message of n bytes the client's socket takes
// at once on an inline write: one in eight finds room for part only.
func (w *simWorld) sendRoom(n int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n > 1 && w.trng.IntN(8) == 0 {
		return 1 + w.trng.IntN(n-1)
	}
	return n
}

// tryPause is how long a client's goroutine is away after an inline
// write: a quarter of the time up to 20 us, so that sends and answers
// queue while an inline write, whole or cut, is still to be accounted.
func (w *simWorld) tryPause() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.trng.IntN(4) != 0 {
		return 0
	}
	return time.Duration(w.trng.IntN(20_000))
}

func runSim(t *testing.T, seed uint64, worker uint32) simCounts {
	w := &simWorld{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), stranded: map[*call.Call]bool{},
		waitWhy: map[uint32][]string{}, picks: map[uint32][]simPick{}, sends: map[uint32][]simSend{}, refusals: map[[2]uint32]int{}, wrote: map[[2]uint32]string{}, answered: map[uint32]time.Time{}, applied: map[uint32]int{}, commits: map[uint32][]string{},
		commitAt: map[uint32]time.Time{}, runs: map[uint32]int{}, reqs: map[uint32]*simReq{}, slow: map[uint32]bool{}, dropped: map[uint32]bool{},
		lastDrop: map[uint32]simDrop{}, outAt: map[string][]time.Time{}, waitedAt: map[uint32][]time.Time{}, waits: map[uint32][]simWait{},
		groupOf: map[*call.Call]*simGroup{}, asked: map[[2]uint32]bool{}, hrng: rand.New(rand.NewPCG(seed, 0x4a4d)), trng: rand.New(rand.NewPCG(seed, 0x7472)), brng: rand.New(rand.NewPCG(seed, 0x62726b))}
	simWorlds.Lock()
	if simWorlds.m == nil {
		simWorlds.m = map[uint32]*simWorld{}
	}
	simWorlds.m[worker+1] = w
	simWorlds.Unlock()
	defer func() {
		simWorlds.Lock()
		delete(simWorlds.m, worker+1)
		simWorlds.Unlock()
	}()

	// The store remembers for longer than any request lives here
	// (patient ones wait an hour), and holds more entries than a schedule
	// makes (checkStoreBound): whatever is applied twice is the Client's
	// doing, not an entry aged out or evicted.
	store := dedup.NewMemory(dedup.WithMaxAge(3*time.Hour), dedup.WithMaxEntries(simStoreEntries))
	defer store.Close()
	defer func() { checkStoreBound(t, seed, store.Len()) }()
	nServers := 2 + w.rng.IntN(3)
	w.n = network{}
	var urls []string
	for i := range nServers {
		s := &simServer{host: fmt.Sprintf("%c.example.net", 'a'+i), kind: "ok"}
		s.f = newFakeServer(s.host)
		s.f.authApps = []uint32{simAppCC} // the Credit-Control-Requests
		s.f.tryWrite = simInline(seed)
		s.f.baton = s.f.tryWrite && seed%2 == 1
		s.f.tryLimit = w.sendRoom
		s.f.tryPause = w.tryPause
		if ahead, reads := simSmallBuffers(seed, i); ahead > 0 {
			s.f.faults.ReadAhead, s.f.smallReads = ahead, reads
			w.counts.SmallBuffers++
		}
		// In a third of the schedules the servers leave the close of a
		// connection to the client, for 1.5 to 3.5 s (a source of its
		// own): past simFlushDown, within the schedule's end.
		if lrng := rand.New(rand.NewPCG(seed, 0x6c6e67+uint64(i))); lrng.IntN(3) == 0 {
			var lmu sync.Mutex
			s.f.linger = func() time.Duration {
				lmu.Lock()
				defer lmu.Unlock()
				return 1500*time.Millisecond + time.Duration(lrng.Int64N(int64(2*time.Second)))
			}
		}
		// The requests a server sends the client (k == 19) are not sent
		// again elsewhere: they fail where they leave a connection. (A
		// peer without a failover hook whose graceful disconnect still
		// has one unanswered after its drain calls the nil hook.)
		s.f.failover = func(_ call.Carrier, calls []*call.Call, reason string) {
			failAll(calls, errors.New(reason))
		}
		// A request is applied when its answer is committed to the shared
		// store (dedup.WrapCommit): a handler may run twice when a stalled
		// server is overtaken, but only one result commits.
		s.f.handle = w.readyAt(s, w.handler(s, dedup.WrapCommit(store, w.apply(s), func(req, ans []byte) {
			if rc, _ := message.ResultCodeOf(ans); rc == message.Success {
				w.mu.Lock()
				id := wire.EndToEnd(req)
				w.commits[id] = append(w.commits[id], fmt.Sprintf("%s@%v T=%v", s.host, time.Now().Format("04:05.000"), wire.Flags(req)&wire.FlagRetransmit != 0))
				w.applied[id]++
				if _, ok := w.commitAt[id]; !ok {
					w.commitAt[id] = time.Now()
				}
				w.mu.Unlock()
			}
		}, nil)))
		w.servers = append(w.servers, s)
		u := fmt.Sprintf("tcp://%c:3868", 'a'+i)
		w.n[u] = s.f
		urls = append(urls, u)
	}
	defer w.n.close()
	mode := Balance
	if w.rng.IntN(2) == 0 {
		mode = PrimarySecondary
	}
	cfg := clientConfig(w.n, mode, urls...)
	cfg.Peer.AuthApps, cfg.Peer.AcctApps = []uint32{simAppCC}, acctWith([]uint32{simAppCC})
	cfg.RequestTimeout = 150 * time.Second // for Sends whose context has no deadline
	cfg.FailoverLog = 1 << 14
	// A server policy in a third of the schedules (drawn from a source of
	// its own: the other schedules stay as they were): a server that
	// answers DWRs but lost the requests sent to it ("silent") is taken
	// out of service at the down-timeout, and its requests handed over.
	if prng := rand.New(rand.NewPCG(seed, 0x706f6c)); prng.IntN(3) == 0 {
		// The down-timeout (RequestTimeout x Retries) is longer than
		// the 1-3 s the servers take in the quiet end's drains: there a
		// server is slow, not lost, and must not be taken out.
		cfg.Policy = &policy.Config{RequestTimeout: time.Duration(4+prng.IntN(6)) * time.Second, Retries: 1 + prng.IntN(3),
			HoldDown: time.Duration(5+prng.IntN(60)) * time.Second}
		w.counts.Policy++
	}
	// The ASR5K throttle in a third of the schedules (unless
	// -sim.throttle=false),
	// from a source of its own too: its queues, replays at their head and
	// rate slots on the request's path. Its bounds leave room for the
	// quiet end's bursts and drains, and for the requests lost in silent
	// servers, which hold their outstanding places until their deadlines.
	if trng := rand.New(rand.NewPCG(seed, 0x746872)); *simThrottle && trng.IntN(3) == 0 {
		lim := func() throttle.Limits {
			return throttle.Limits{MaxRate: 100 + trng.IntN(900), MaxOutstanding: 64 + trng.IntN(192)}
		}
		cfg.Throttle = &Throttle{Auth: lim(), Accounting: lim()}
		// In half of them (a source of its own again, so that the other
		// schedules stay as they were), a server takes only a handful of
		// each class at once: the requests after them wait for places
		// freed by answers, failovers and deadlines, and a place freed
		// twice or never shows (checkOutstanding, and the deadlines of
		// the patient requests).
		if orng := rand.New(rand.NewPCG(seed, 0x6f7574)); orng.IntN(2) == 0 {
			cfg.Throttle.Auth.MaxOutstanding = 1 + orng.IntN(8)
			cfg.Throttle.Accounting.MaxOutstanding = 1 + orng.IntN(8)
			w.counts.TightOutstanding++
			w.tight = true
		}
		w.maxOut = [2]int{cfg.Throttle.Auth.MaxOutstanding, cfg.Throttle.Accounting.MaxOutstanding}
		w.throttled = true
		w.counts.Throttle++
	}
	cfg.Peer.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
		tc, err := w.n.dialer(ctx, url)
		if err != nil {
			return nil, err
		}
		rl := readLog{tc, w, w.n[url].host, &simOwed{open: map[[2]uint32]bool{}}}
		// One connection in 8 has its write side break after a few
		// writes, its reads going on (a source of its own: the rest of
		// the schedule stays as it was).
		w.mu.Lock()
		if w.brng.IntN(8) == 0 {
			rl.owed.breakAfter = 2 + w.brng.IntN(40)
		}
		w.mu.Unlock()
		if _, ok := tc.(transport.ReadInterrupter); ok {
			return readLogBaton{readLogTry{rl}}, nil
		}
		if _, ok := tc.(transport.TryWriter); ok {
			return readLogTry{rl}, nil
		}
		return rl, nil
	}
	// The servers send the client requests too (a Re-Auth-Request, an
	// Abort-Session-Request): it answers them within simHandlerDelay.
	cfg.Peer.Handler = w.clientHandler(func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		w.mu.Lock()
		d := time.Duration(w.hrng.Int64N(int64(simHandlerDelay)))
		if w.lat.quick.Load() {
			d /= 200 // the baton's phase: the reader may park again soon (sim_latency_test.go)
		}
		w.asked[[2]uint32{wire.EndToEnd(req), wire.HopByHop(req)}] = true
		w.mu.Unlock()
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil
		}
		return message.NewAnswer(req).ResultCode(message.Success).
			String(message.OriginHost, 0, true, "client.example.net").
			String(message.OriginRealm, 0, true, "example.net").Bytes()
	})
	// The balancer's clock is read while a failover's batch is being
	// picked: a pause there lets the alternates picked so far change
	// state before the batch is submitted.
	cfg.Balancer.Now = func() time.Time {
		switch inDispatch() {
		case 3:
			// A round: no pause while watchParked looks. Its requests stay
			// parked while it places them, and watchParked, which looks
			// every 5 s, would find a request lost and refused (asked
			// again every second) in the middle of a round too often.
			// Once it has stopped (the schedule's end, Close), a round
			// pauses like a failover's batch: Close must wait for it.
			if w.roundPauses.Load() {
				w.otherPause(50 * time.Millisecond)
			}
		case 2: // on the peer's notifier, which delivers its state changes after it
			w.otherPause(50 * time.Millisecond)
		case 1: // a single send between its pick and its submit
			w.otherPause(5 * time.Millisecond)
		}
		return time.Now()
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	w.c = c
	simClients.Store(c, w)
	defer simClients.Delete(c)
	// A subscriber slow to take a peer's state change: the Client reacts
	// to it (balancer, parked requests, failover) a little later.
	cancelSub := c.Events().Subscribe(func(_ context.Context, e Event) {
		if *simTrace {
			b, _ := json.Marshal(e.Line())
			t.Logf("%v event %s", e.Time.Format("04:05.000"), b)
		}
		if e.Kind == EventPolicy && e.Policy.To == policy.OutOfService &&
			(e.Policy.Reason == policy.ReasonDownTimeout || e.Policy.Reason == policy.ReasonNoFirstReply) {
			w.mu.Lock()
			w.outAt[e.Server] = append(w.outAt[e.Server], e.Policy.Time)
			w.counts.PolicyOut++
			w.mu.Unlock()
		}
		if e.Kind == EventPeer && e.Peer != nil && e.Peer.Kind == peer.EventWatchdog {
			w.watchdogEvent()
			w.otherPause(500 * time.Millisecond)
		}
	})
	defer cancelSub()
	synctest.Wait()
	for _, p := range c.Peers() {
		if p.State() != watchdog.Okay {
			t.Fatalf("seed %d: peer %s is %s after start", seed, p.Name(), p.State())
		}
	}

	w.rc = newSimReconf(w, cfg.Peers)
	w.breaking.Store(true)
	stopWatch := w.watchParked()

	results := make(chan simOutcome, 1<<14)
	var wg sync.WaitGroup
	nextID := (worker+1)<<24 | 1
	// Some Sends of the schedule's steps (1 in 16) come with a context
	// that has ended already: cancelled, or its deadline past. Drawn from
	// a source of their own, so that the rest of each schedule stays as
	// it was.
	erng := rand.New(rand.NewPCG(seed, 0x656e64))
	// Half the requests without an accounting record are
	// Credit-Control-Requests, of the throttle's Auth class: a source of
	// their own too.
	arng := rand.New(rand.NewPCG(seed, 0x617574))
	// They share two contexts, as the Sends of one caller whose context
	// ended do: one cancelled, one whose deadline has passed. (A shared
	// context's watch may have fired before a Send joins it.) Each has a
	// Done channel of its own, asked for before it ends: a context ended
	// before its Done was first called returns the one closed channel
	// every such context shares, and call's watch, which a context's
	// Done channel identifies, would then be shared with other
	// schedules' contexts (other bubbles).
	endedCancel, cancelEnded := context.WithCancel(context.Background())
	endedCancel.Done()
	cancelEnded()
	endedPast, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(time.Nanosecond))
	defer cancelPast()
	endedPast.Done()
	time.Sleep(time.Millisecond)
	send := func(opts ...string) *simReq {
		rng := w.rng
		if slices.Contains(opts, "ended") {
			rng = erng // not to shift the rest of the schedule
		}
		id := nextID
		nextID++
		w.counts.Requests++
		nai := fmt.Sprintf("user%d@example.net", rng.IntN(40))
		r := &simReq{id: id, acct: rng.IntN(4) != 0}
		if rng.IntN(10) == 0 && !slices.Contains(opts, "unpinned") { // pinned to one server
			r.pinned = w.servers[rng.IntN(len(w.servers))].host
			w.counts.Pinned++
		}
		b2 := w.b2.take(id, opts) // the hand-over phase's (sim_baton2_test.go)
		if b2 != nil && b2.pin != "" {
			r.pinned = b2.pin
		}
		r.auth = !r.acct && arng.IntN(2) == 0
		if b2 != nil && b2.class != "" {
			r.acct, r.auth = b2.class == "acct", b2.class == "auth"
		}
		req := simRequest(int(id), nai, r.pinned, r.acct, r.auth)
		switch {
		case r.auth:
			w.counts.Auth++
		case !r.acct:
			w.counts.NonAcct++
		}
		wire.SetEndToEnd(req, id)
		// Within the servers' duplicate window: see the store above.
		r.limit = 3 * time.Minute
		switch k := rng.IntN(8); {
		case k == 0: // its answer may come after the deadline
			r.limit = time.Duration(1+rng.IntN(30)) * time.Second
		case k == 1: // no deadline: RequestTimeout
			r.limit = 0
		case k < 5: // past every fault: it must be answered
			r.limit, r.patient = time.Hour, true
			w.counts.Patient++
		}
		if slices.Contains(opts, "patient") {
			r.limit, r.patient = time.Hour, true
		}
		if b2 != nil && b2.limit > 0 {
			r.limit, r.patient, r.slack = b2.limit, false, b2.slack
		}
		r.drain = slices.Contains(opts, "drain")
		if slices.Contains(opts, "ended") || len(opts) == 0 && erng.IntN(16) == 0 {
			if r.patient {
				w.counts.Patient--
			}
			r.ended, r.patient, r.canceled = true, false, erng.IntN(2) == 0
			w.counts.Ended++
		}
		r.start = time.Now()
		w.mu.Lock()
		w.reqs[id] = r
		w.mu.Unlock()
		limit := r.limit
		if r.limit == 0 {
			r.limit = cfg.RequestTimeout
		}
		ended, canceled := r.ended, r.canceled
		if ended {
			r.limit = 0 // it returns at once (within simSlack)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			switch {
			case b2 != nil && b2.ctx != nil:
				ctx = b2.ctx // its deadline ends when the phase says
			case ended && canceled:
				ctx = endedCancel
			case ended:
				ctx = endedPast
			case limit > 0:
				ctx, cancel = context.WithTimeout(ctx, limit)
			}
			defer cancel()
			ans, err := c.Send(ctx, req)
			w.sendReturned(id)
			results <- simOutcome{id, ans, err, time.Now()}
		}()
		return r
	}
	srv := func() *simServer { return w.servers[w.rng.IntN(len(w.servers))] }
	sleep := func(max time.Duration) { time.Sleep(time.Duration(1 + w.rng.Int64N(int64(max)))) }
	var bg sync.WaitGroup // faults that end by themselves
	defer bg.Wait()
	closedEarly := false
	steps := 15 + w.rng.IntN(25)
	for range steps {
		w.reconfigure(&bg)
		k := w.rng.IntN(20)
		w.tracef("step %d", k)
		switch {
		case k < 5: // a burst of requests
			for range 1 + w.rng.IntN(12) {
				send()
			}
		case k == 5: // freeze and thaw, the connection surviving
			s := srv()
			s.f.freeze()
			d := time.Duration(5+w.rng.IntN(100)) * time.Second
			bg.Add(1)
			go func() { defer bg.Done(); time.Sleep(d); s.f.unfreeze() }()
		case k == 6: // freeze, then the connection is reset, then thaw
			s := srv()
			s.f.freeze()
			d := time.Duration(1+w.rng.IntN(90)) * time.Second
			bg.Add(1)
			go func() { defer bg.Done(); time.Sleep(d); s.f.dropConnections(); time.Sleep(time.Second); s.f.unfreeze() }()
		case k == 7: // a flap: SUSPECT, then late answers and a late DWA bring it back
			s := srv()
			s.mu.Lock()
			s.delay = time.Duration(w.rng.IntN(20)) * time.Second
			s.mu.Unlock()
			s.f.freeze()
			d := time.Duration(61+w.rng.IntN(25)) * time.Second // past 2 Tw, before the close at 3 Tw
			bg.Add(1)
			go func() { defer bg.Done(); time.Sleep(d); s.f.unfreeze() }()
		case k == 8: // a reset in the middle of a burst
			for range 1 + w.rng.IntN(10) {
				send()
			}
			time.Sleep(time.Duration(w.rng.IntN(5)) * time.Millisecond)
			srv().f.dropConnections()
		case k == 9: // DPR from a server, with one of the causes
			w.disconnect(srv(), &bg)
		case k == 10: // a server refuses for a while
			s := srv()
			kind := []string{"busy", "unable", "reject", "silent"}[w.rng.IntN(4)]
			s.mu.Lock()
			s.kind = kind
			s.mu.Unlock()
			d := time.Duration(1+w.rng.IntN(60)) * time.Second
			bg.Add(1)
			go func() {
				defer bg.Done()
				time.Sleep(d)
				s.mu.Lock()
				s.kind = "ok"
				s.mu.Unlock()
			}()
		case k == 11: // duplicate answers for a while
			s := srv()
			s.f.dupAnswers.Store(true)
			d := time.Duration(1+w.rng.IntN(60)) * time.Second
			bg.Add(1)
			go func() { defer bg.Done(); time.Sleep(d); s.f.dupAnswers.Store(false) }()
		case k == 12: // slow answers (past short deadlines)
			s := srv()
			s.mu.Lock()
			s.delay = time.Duration(w.rng.IntN(40)) * time.Second
			s.mu.Unlock()
		case k == 13 && w.rng.IntN(6) == 0: // Close in the middle of it all
			closedEarly = true
			w.counts.Closes++
		case k == 14 || k == 15: // every server out at once, then back
			w.counts.AllOut++
			for range 1 + w.rng.IntN(6) {
				send()
			}
			time.Sleep(time.Duration(w.rng.IntN(3)) * time.Millisecond)
			switch w.rng.IntN(5) {
			case 0: // frozen together (each watchdog fails over into the others)
				d := time.Duration(5+w.rng.IntN(150)) * time.Second
				for _, s := range w.servers {
					s.f.freeze()
				}
				bg.Add(1)
				go func() {
					defer bg.Done()
					time.Sleep(d)
					for _, s := range w.servers {
						s.f.unfreeze()
					}
				}()
			case 1: // reset together
				for _, s := range w.servers {
					s.f.dropConnections()
				}
			case 2: // frozen in turn, a Tw apart or less, then reset
				d := time.Duration(1+w.rng.IntN(30)) * time.Second
				out := time.Duration(w.rng.IntN(60)) * time.Second
				bg.Add(1)
				go func() {
					defer bg.Done()
					for _, s := range w.servers {
						s.f.freeze()
						time.Sleep(d)
					}
					time.Sleep(out)
					for _, s := range w.servers {
						s.f.dropConnections()
						s.f.unfreeze()
					}
				}()
			case 3: // every server disconnects (DPR)
				for _, s := range w.servers {
					w.disconnect(s, &bg)
				}
			case 4: // every server flaps: SUSPECT everywhere (requests park), then OKAY again
				for _, s := range w.servers {
					s.f.freeze()
				}
				d := time.Duration(61+w.rng.IntN(25)) * time.Second // past 2 Tw, before the close at 3 Tw
				bg.Add(1)
				go func() {
					defer bg.Done()
					time.Sleep(d)
					for _, s := range w.servers {
						s.f.unfreeze()
					}
				}()
				began := time.Now()
				for range 1 + w.rng.IntN(3) {
					time.Sleep(time.Duration(w.rng.Int64N(int64(d / 4))))
					for range 1 + w.rng.IntN(4) {
						send()
					}
				}
				if w.rng.IntN(2) == 0 {
					// A burst as they come back: requests that find no peer
					// start waiting while the peers' return changes the
					// view (a change in between must not be lost).
					time.Sleep(d - time.Since(began))
					for range 1 + w.rng.IntN(6) {
						send()
					}
				}
			}
			// Sends whose context has ended already, as every server is
			// out: none of them can have its answer soon, and each must
			// return at once all the same.
			for range erng.IntN(3) {
				send("ended")
			}
		case k == 16 || k == 17: // a slow request left behind steady traffic, then a failover
			w.counts.SlowBehind++
			s := srv()
			s.mu.Lock()
			s.slowNext = time.Duration(5+w.rng.IntN(60)) * time.Second
			s.mu.Unlock()
			for range 5 + w.rng.IntN(25) {
				send()
				time.Sleep(time.Duration(100+w.rng.IntN(3000)) * time.Millisecond)
			}
			switch w.rng.IntN(3) {
			case 0:
				s.f.dropConnections()
			case 1:
				s.f.freeze()
				d := time.Duration(61+w.rng.IntN(60)) * time.Second
				bg.Add(1)
				go func() { defer bg.Done(); time.Sleep(d); s.f.unfreeze() }()
			case 2:
				w.disconnect(s, &bg)
			}
		case k == 18: // the alternates refuse (3004) while a server fails over, then the server is back on its connection
			// The requests moved off it are lost there and refused by every
			// other peer; none of the peers leaves or comes back once the
			// refusals end: nothing but the refusals being forgotten sends
			// them again.
			w.counts.BusyFailover++
			x := srv()
			for _, s := range w.servers {
				if s != x {
					s.mu.Lock()
					s.kind = "busy"
					s.mu.Unlock()
				}
			}
			for range 2 + w.rng.IntN(8) {
				send()
			}
			x.f.freeze()
			busy := time.Duration(65+w.rng.IntN(30)) * time.Second // past x's failover at 2 Tw
			thaw := time.Duration(61+w.rng.IntN(25)) * time.Second // a flap: before the close at 3 Tw
			bg.Add(2)
			go func() {
				defer bg.Done()
				time.Sleep(busy)
				for _, s := range w.servers {
					if s != x {
						s.mu.Lock()
						s.kind = "ok"
						s.mu.Unlock()
					}
				}
			}()
			go func() { defer bg.Done(); time.Sleep(thaw); x.f.unfreeze() }()
		case k == 19: // a server sends the client requests, and sometimes disconnects right after
			w.counts.ServerAsks++
			s := srv()
			for _, p := range s.peers() {
				for range 1 + w.rng.IntN(5) {
					req := s.request(";asks")
					// The server may give up on it before the client answers,
					// and then disconnect with nothing of its own pending:
					// the client still owes that answer before its DPA.
					d := time.Duration(1 + w.rng.Int64N(int64(2*simHandlerDelay)))
					bg.Add(1)
					go func() {
						defer bg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), d)
						defer cancel()
						p.Request(ctx, req) // refused when that connection is down; answered or lost otherwise
					}()
				}
			}
			if w.rng.IntN(2) == 0 {
				time.Sleep(time.Duration(w.rng.Int64N(int64(simHandlerDelay))))
				w.disconnect(s, &bg)
			}
		}
		if closedEarly {
			break
		}
		sleep(40 * time.Second)
		w.checkOutstanding()
	}
	w.breaking.Store(false)
	if !closedEarly {
		// Quiet: every fault ends, every server answers at once.
		bg.Wait()
		for _, s := range w.servers {
			s.mu.Lock()
			s.kind, s.delay, s.slowNext = "ok", 0, 0
			s.mu.Unlock()
			s.f.unfreeze()
			s.f.dupAnswers.Store(false)
		}
		w.quietFrom = time.Now()
		// Long enough for every peer to be back: the requests still
		// waiting are the patient ones, and none may be left parked.
		time.Sleep(simRecovery)
		synctest.Wait()
		w.checkRecovered()
		w.reconfQuiet(send)
		// A fresh burst is answered at once, everywhere.
		var fresh []*simReq
		for range 3 + w.rng.IntN(8) {
			fresh = append(fresh, send("patient", "unpinned"))
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		w.mu.Lock()
		for _, r := range fresh {
			if w.applied[r.id] != 1 && !w.tight {
				w.errs = append(w.errs, fmt.Sprintf("request %d sent once quiet: applied %d times after 5s (sends %+v; policy %v; waits %q)", r.id, w.applied[r.id], w.sends[r.id], c.PolicyStates(), w.waitWhy[r.id]))
			}
		}
		w.mu.Unlock()
		w.batonPhase(send)
		w.batonPhase2(send)
		w.dprRacePhase(send)
		w.strandRacePhase(send)
		// Every deadline is an hour at most: a Send still waiting after
		// two is stuck (Close below ends it, and check reports it).
		returned := make(chan struct{})
		go func() { wg.Wait(); close(returned) }()
		select {
		case <-returned:
			var last time.Time
			w.mu.Lock()
			for _, r := range w.reqs {
				last = maxTime(last, r.start.Add(r.limit))
			}
			w.mu.Unlock()
			waitersEnd(t, c, last)
		case <-time.After(2 * time.Hour):
			w.violation("Sends still waiting 2h after the schedule went quiet")
		}
		for _, p := range c.Peers() {
			if p == nil {
				continue
			}
			if st := p.Stats(); st.Pending != 0 {
				t.Errorf("seed %d: peer %s has %d pending once quiet", seed, p.Name(), st.Pending)
			}
			w.counts.Late += int(p.Stats().Late)
		}
		// Every Send returned: the throttle holds no place and queues
		// nothing (a place never freed would stop the server's queue
		// for good once MaxOutstanding were reached).
		for _, st := range c.ServerStats() {
			if ts := st.Throttle; ts != nil && (ts.Outstanding != [2]int{} || ts.Depth != 0) {
				w.violation("throttle of %s holds %v places and queues %d once every Send returned", st.Server, ts.Outstanding, ts.Depth)
			}
		}
		w.checkAnsweredAll(c)
		// A graceful Close drains: the answers in flight come in (the
		// servers take 1-3 s, well within the drain), nothing is lost,
		// nothing replayed.
		if w.rng.IntN(2) == 0 {
			w.counts.Drains++
			for _, s := range w.servers {
				s.mu.Lock()
				s.delay = time.Duration(1+w.rng.IntN(3)) * time.Second
				s.mu.Unlock()
			}
			var drain []*simReq
			for range 1 + w.rng.IntN(10) {
				drain = append(drain, send("patient", "drain", "unpinned"))
			}
			// In flight means on the wire: the simulator's pauses on a
			// request's way there can add up past 100 ms, and the
			// throttle's rate slots may hold some for a few slots. Close
			// fails what has not left, as it documents.
			time.Sleep(100 * time.Millisecond)
			for wait := 0; wait < 40 && !w.allSent(drain); wait++ {
				time.Sleep(throttle.MinSlot)
			}
		}
	} else {
		for _, p := range c.Peers() {
			if p != nil {
				w.counts.Late += int(p.Stats().Late)
			}
		}
	}
	for _, st := range c.ServerStats() {
		w.counts.Premature += int(st.Premature)
	}
	for _, r := range recordsOf(c) {
		if r.Outcome == Parked {
			w.counts.Parked++
		}
	}
	stopWatch()
	w.roundPauses.Store(true)
	if line, _ := waitersLeft(c); closedEarly && line > 0 && w.rng.IntN(2) == 0 {
		// Close as the view changes while requests wait for a peer: the
		// waiters run their rounds while Close runs.
		select {
		case <-c.view().changed:
			w.counts.CloseAtChange++
		case <-time.After(simRecovery):
		}
	}
	closeCtx := context.Background()
	if closedEarly && w.rng.IntN(2) == 0 {
		// A hurried Close (a process told to stop now): its context is
		// done, so no peer waits for its DPA or drains; the requests
		// waiting for a peer still fail before it returns.
		ctx, cancel := context.WithCancel(closeCtx)
		cancel()
		closeCtx = ctx
		w.counts.Hurried++
	}
	if closedEarly && closeCtx.Err() == nil && w.rng.IntN(2) == 0 {
		// Closed by a subscriber at the next event, with the context it
		// got: that Close starts the shutdown and returns at once; the
		// Close below waits for the same end.
		fired, stuck := closeFromSubscriber(c, simRecovery)
		if stuck {
			w.violation("Client.Close called by a subscriber with its context has not returned after %v", simCloseBound)
		}
		if fired {
			w.counts.SubscriberClose++
		}
	}
	if !closeBounded(t, closeCtx, c) { // with answers in flight when closedEarly
		w.violation("Client.Close has not returned after %v (waiters, line and count: %v)", simCloseBound, fmt.Sprint(waitersLeft(c)))
		w.mu.Lock()
		for _, e := range w.errs {
			t.Errorf("seed %d: %s", seed, e)
		}
		w.mu.Unlock()
		t.FailNow() // the goroutines left blocked: runBubble reports them too
	}
	w.closedAt = time.Now()
	for _, s := range w.servers {
		s.f.unfreeze()
	}
	wg.Wait()
	// A Close whose ctx ended (hurried) returned without waiting for the
	// peers' last goroutines (a write, a Handler): they end on their own,
	// within a Handler's delay, before the schedule does.
	time.Sleep(2 * simHandlerDelay)
	synctest.Wait()
	for _, s := range w.servers {
		w.counts.ServerInline += int(s.f.inlined.Load())
		if n := s.f.overlaps.Load(); n > 0 {
			w.violation("%d writes to %s's connections began while another was under way on the same end", n, s.host)
		}
		if n := s.f.badFrames.Load(); n > 0 {
			w.violation("%d reads on %s's connections found bytes that are not a Diameter message: a writer cut or interleaved one", n, s.host)
		}
	}
	close(results)
	w.lat.mu.Lock()
	w.counts.ReadChecked, w.counts.ReadExcused = w.lat.checked, w.lat.excused
	w.lat.mu.Unlock()
	w.records = recordsOf(c)
	w.check(results, closedEarly)
	return w.counts
}

// checkAnsweredAll, once quiet, waits up to two minutes for every
// connection at both ends to owe no answer to what it read (its backlog
// empty): a write, inline or batched, that forgot its accounting leaves
// it above zero, and the reader of that connection would pause early.
func (w *simWorld) checkAnsweredAll(c *Client) {
	var ps []*peer.Peer
	for _, p := range c.Peers() {
		if p != nil {
			ps = append(ps, p)
		}
	}
	for _, s := range w.servers {
		s.f.mu.Lock()
		ps = append(ps, s.f.peers...)
		s.f.mu.Unlock()
	}
	// One reading of zero clears a peer: the watchdogs still talk once
	// quiet, and a reading taken while a DWA is being written counts it
	// (a second reading after the loop failed seed 211 so, once). A count
	// that leaked reads the same every second for the whole wait.
	until := time.Now().Add(2 * time.Minute)
	for _, p := range ps {
		n := p.Stats().Unanswered
		for n != 0 && time.Now().Before(until) {
			time.Sleep(time.Second)
			n = p.Stats().Unanswered
		}
		if n != 0 {
			w.violation("peer %s (%s) still owes answers to %d requests it read, 2 min after the schedule went quiet and every Send returned", p.Name(), p.State(), n)
			// Whether a Handler still runs (and where it waits) or a
			// writer is stuck, or neither (the count leaked), shows in
			// the goroutines: the failure is rare, keep what it shows.
			st, _ := json.Marshal(p.Stats())
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			w.t.Logf("seed %d: stats of %s: %s\ngoroutines:\n%s", w.seed, p.Name(), st, buf)
		}
	}
}

// watchParked looks at the parked requests every 5 s of the schedule: a
// request still parked 10 s after a peer could take it was forgotten (a
// peer came into service and did not release it). The returned function
// stops it.
func (w *simWorld) watchParked() (stop func()) {
	c := w.c
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		since := map[*call.Call]int{}
		outlived := 0
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			if closed {
				return
			}
			// A waiter ends by the last deadline of its requests (plus a
			// moment: its callers return at their deadlines, and it
			// looks again): a waiter in line with none of its requests
			// able to wait any more, twice 5 s apart, outlived them (it
			// keeps them counted against maxWaiting, and its goroutine).
			line, _ := waitersLeft(c)
			w.mu.Lock()
			live := w.mayHoldWaiters(time.Now(), 2*time.Second)
			w.mu.Unlock()
			if line > live {
				outlived++
				if outlived == 2 {
					w.violation("%d waiters in line, of which at most %d hold a request whose deadline has not passed (twice 5 s apart): a waiter outlived its requests' deadlines", line, live)
				}
			} else {
				outlived = 0
			}
			parked := w.waitingCalls()
			next := map[*call.Call]int{}
			for _, cl := range parked {
				if cl.State() != call.Parked {
					continue
				}
				if m := c.pick(cl, c.view()); m != nil {
					next[cl] = since[cl] + 1
					if next[cl] == 3 {
						w.violation("request %d parked for 10 s while %s, in service, could take it (policy %v)", cl.Ref, m.spec.Name, c.PolicyStates())
					}
				}
			}
			since = next
		}
	}()
	return func() { close(done); <-ended }
}

// disconnect has server s send DPR on its connections, with one of the
// causes (BUSY and DO_NOT_WANT_TO_TALK_TO_YOU hold the Client's redial
// off for 5 minutes).
func (w *simWorld) disconnect(s *simServer, bg *sync.WaitGroup) {
	cause := []uint32{message.DisconnectRebooting, message.DisconnectBusy, message.DisconnectDoNotWantToTalkToU}[w.rng.IntN(3)]
	for _, p := range s.peers() {
		bg.Add(1)
		go func() { defer bg.Done(); p.Disconnect(context.Background(), cause) }()
	}
	w.counts.Drained++
}

// balancerWants is the balancer's state for server name, whose peer is
// in service: InService, or Down while the server policy holds it out
// of service (or probing), which the balancer must hear of.
func (w *simWorld) balancerWants(name string) loadbalance.State {
	c := w.c
	for _, m := range c.ros.Load().order {
		if m.spec.Name == name && c.group != nil && !c.group.State(m.index).Takes() {
			return loadbalance.Down
		}
	}
	return loadbalance.InService
}

// checkRecovered runs once the schedule has been quiet for simRecovery:
// every peer is back in service, the balancer sees them so, and no
// request is left parked while they are (the Sends of the patient ones
// still wait: this is the moment a request parked and never released
// shows).
func (w *simWorld) checkRecovered() {
	c := w.c
	if k := handOverAwaited(c); k != "" {
		w.violation("%s", k)
	}
	for _, p := range c.Peers() {
		if p != nil && p.State() != watchdog.Okay {
			w.violation("peer %s is %s after %v of quiet", p.Name(), p.State(), simRecovery)
		}
	}
	if snap, ok := c.Balancer(); ok {
		for _, s := range snap.Servers {
			if want := w.balancerWants(s.Name); s.State != want {
				w.violation("balancer: %s is %v after %v of quiet, its peer in service, want %v (policy %v)", s.Name, s.State, simRecovery, want, c.PolicyStates())
			}
		}
	}
	for _, cl := range w.waitingCalls() {
		if w.reconfExcused(cl.Ref) {
			continue
		}
		w.mu.Lock()
		dropped := w.dropped[cl.Ref]
		w.mu.Unlock()
		if dropped && c.pick(cl, c.view()) == nil {
			// Lost in a silent server that stayed up: for all the client
			// knows it is still pending there, so it may go to none of the
			// connections it left (its only server's, when no other is
			// configured) and waits for its deadline. One that could go
			// somewhere is still a failure.
			continue
		}
		w.errs = append(w.errs, fmt.Sprintf("request %d still waiting for a peer after %v of quiet, every peer in service (policy %v; state %v)", cl.Ref, simRecovery, c.PolicyStates(), cl.State()))
	}
}

// handOverAwaited says which peers the throttle still waits for the
// hand-over of (Client.handing), or how many of its waits ended without
// their hand-over (handOverMissed, lapseWaitsLocked), or "": every
// change that makes it wait must be followed by its peer's hand-over,
// else the throttle holds every request until the peer's next change or
// the wait's bound.
func handOverAwaited(c *Client) string {
	if c.sched == nil {
		return ""
	}
	c.tmu.Lock()
	defer c.tmu.Unlock()
	if n := c.missedHandOvers; n > 0 {
		return fmt.Sprintf("%d waits for a hand-over ended without it (a watchdog's change out of service not followed by its hand-over until the peer's next change, or a wait past handOverWaitMax)", n)
	}
	if len(c.handing) == 0 {
		return ""
	}
	names := make([]string, len(c.handing))
	for i, w := range c.handing {
		names[i] = w.k.Name()
	}
	return fmt.Sprintf("the throttle still waits for the hand-over of %v once quiet: it releases nothing", names)
}

// waitingCalls returns the requests that wait for a peer now.
func (w *simWorld) waitingCalls() []*call.Call {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*call.Call
	for cl := range w.stranded {
		if cl.State() == call.Parked {
			out = append(out, cl)
		} else if cl.IsDone() {
			delete(w.stranded, cl)
		}
	}
	return out
}

func recordsOf(c *Client) []FailoverRecord {
	r, _ := c.FailoverLog()
	return r
}

// acrTo is acr with a Destination-Host.
func acrTo(n int, nai, host string) []byte { return simRequest(n, nai, host, true, false) }

// The Credit-Control application (RFC 4006): the simulated requests of
// the throttle's Auth class.
const (
	simAppCC         = 4
	simCmdCC         = 272
	simCCRequestType = 416
	simCCRequestNum  = 415
	simCCInitial     = 1
)

// simRequest is an Accounting-Request (acct: with its record type and
// number, so that the servers' duplicate store keys it by its record as
// well) or the same request without them (keyed by Origin-Host and
// End-to-End id alone), or, with auth, a Credit-Control-Request (the
// throttle's Auth class, keyed by Origin-Host and End-to-End id alone),
// with a Destination-Host when host is set.
func simRequest(n int, nai, host string, acct, auth bool) []byte {
	app, cmd := uint32(message.AppAccounting), uint32(message.CmdAccounting)
	if auth {
		app, cmd, acct = simAppCC, simCmdCC, false
	}
	b := message.NewRequest(cmd, app, wire.FlagProxiable).
		String(message.SessionID, 0, true, "client.example.net;1;"+itoa(n)).
		String(message.OriginHost, 0, true, "client.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net")
	if host != "" {
		b.String(message.DestinationHost, 0, true, host)
	}
	b.String(message.UserName, 0, true, nai)
	if auth {
		b.Uint32(message.AuthApplicationID, 0, true, simAppCC).
			Uint32(simCCRequestType, 0, true, simCCInitial).
			Uint32(simCCRequestNum, 0, true, uint32(n))
	}
	if acct {
		b.Uint32(message.AccountingRecordType, 0, true, 2).
			Uint32(message.AccountingRecordNumber, 0, true, uint32(n))
	}
	return b.Bytes()
}

// check verifies the invariants of one schedule:
//   - each Send returned exactly once, with the answer to its own request
//     (2001, or the refusal a peer gave when no other was left, or a final
//     error answer) or an error, and no later than its deadline (its
//     context's, or RequestTimeout) plus simSlack;
//   - none returns later than Client.Close (which fails what it has not
//     answered), nor later than its answer (2001 or 5012) came in, on
//     whichever connection it was sent on;
//   - an error is one of Send's documented kinds (timeout, closed, no
//     peer; unable to deliver only with a Destination-Host), and only
//     where the schedule made it unavoidable: a patient
//     request (an hour: past every fault and the recovery after) is
//     answered unless the Client was closed early, a server lost it, or
//     it named in Destination-Host a server whose connection failed;
//   - a request applied before its Send returned gets neither 3004 nor
//     3002 (another server refused it while it was being applied
//     elsewhere), nor, when patient, an error;
//   - with the shared duplicate store, no request was applied twice
//     across the servers, an answered one exactly once, and no handler
//     ran for a request after its answer was committed;
//   - a request naming a Destination-Host reached no other server, and
//     was not replayed once its host's connection failed (it fails with
//     DIAMETER_UNABLE_TO_DELIVER);
//   - no request stays parked 10 s while a peer in service could take it
//     (watchParked);
//   - no request was queued twice on one connection, nor while in flight
//     elsewhere (the sends of one request follow each other); one taken
//     back out of a write queue at a failover (withdrawn) was never sent
//     there: it may go there again, and it is never written there after
//     it was queued elsewhere (checkWrittenWhereItLeft);
//   - its first send has no T flag; every later send keeps the End-to-End
//     id, has a new Hop-by-Hop id, and has the T flag unless the previous
//     connection refused it (3004, 3002) and the client had read that
//     refusal: a premature-failover resend, without T;
//   - replays leave in send order: a failover hands the requests of a
//     connection over in the order they were sent there (its records),
//     and requests moved together from one connection to another are
//     queued there in that order, also when they waited for a peer and
//     when a peer came into service in the middle of the batch, and also
//     when some of one hand-over waited and others did not
//     (handedOverOrder); through the throttle, a replay reaches its new
//     connection ahead of the requests of its class still in the
//     throttle when its hand-over began (replaysAheadOfQueued);
//   - Client.Close returns (within simCloseBound), with no waiter left in
//     line and no request counted waiting (closeBounded), also hurried
//     and while waiters run their rounds;
//   - no waiter outlives the deadlines of its requests: in line with
//     none of them able to wait any more, twice 5 s apart (watchParked),
//     or once every request returned and the last deadline passed
//     (waitersEnd);
//   - the client answers a server's DPR only once it has answered the
//     requests the server sent before it (readLog.WriteMessages);
//   - a graceful Close drains: the requests in flight to servers that
//     answer within the drain are answered, and not replayed;
//   - once quiet (checkRecovered): every peer back in service, nothing
//     parked; a fresh burst answered at once; nothing pending at the
//     end, and no goroutine left (synctest fails a bubble with
//     goroutines left).
func (w *simWorld) check(results <-chan simOutcome, closedEarly bool) {
	t, seed := w.t, w.seed
	w.mu.Lock()
	for _, e := range w.errs {
		t.Errorf("seed %d: %s", seed, e)
	}
	w.mu.Unlock()
	got := map[uint32]int{}
	for r := range results {
		got[r.e2e]++
		w.mu.Lock()
		rq := w.reqs[r.e2e]
		n, commitAt, committed := w.applied[r.e2e], w.commitAt[r.e2e], !w.commitAt[r.e2e].IsZero()
		sends := w.sends[r.e2e]
		slow, dropped := w.slow[r.e2e], w.dropped[r.e2e]
		out, needed, missed := w.handOver(r.e2e, r.at)
		lost := w.lastDrop[r.e2e]
		var expired *throttle.ExpiredError
		behindLost := errors.As(r.err, &expired) && expired.Server != "" && w.lostAt(expired.Server)
		if p := lastPicked(w.picks[r.e2e]); !behindLost && p != "" && errors.Is(r.err, context.DeadlineExceeded) {
			// The caller's deadline ended its wait in the throttle at
			// the instant the throttle's expiry would have: the server
			// whose queue it waited in is the last the pick chose.
			behindLost = w.lostAt(p)
		}
		if !behindLost && rq.pinned != "" && len(sends) == 0 && errors.Is(r.err, context.DeadlineExceeded) {
			// A pinned request waits in its host's queue, picked by no
			// pick: excused only if requests that host lost held all of
			// its places while it waited.
			behindLost = w.lostDuring(rq.pinned, simClass(rq), rq.start, r.at)
		}
		w.mu.Unlock()
		slack := simSlack
		if rq.slack > 0 {
			slack = rq.slack
		}
		if took := r.at.Sub(rq.start); took > rq.limit+slack {
			t.Errorf("seed %d: request %d returned after %v, past its deadline of %v by more than %v (context ended before Send: %v; err %v)", seed, r.e2e, took, rq.limit, slack, rq.ended, r.err)
		}
		if at, ok := w.answered[r.e2e]; ok && r.at.After(at.Add(simSlack)) {
			// Its answer came in, on the connection it was sent on or an
			// older one (a late answer still completes a request that
			// was moved or parked), but the request went on waiting.
			t.Errorf("seed %d: request %d returned %v after the client read its answer (err %v); sends %+v", seed, r.e2e, r.at.Sub(at), r.err, sends)
		}
		if r.at.After(w.closedAt.Add(simSlack)) {
			t.Errorf("seed %d: request %d returned %v after Client.Close had returned (err %v)", seed, r.e2e, r.at.Sub(w.closedAt), r.err)
		}
		appliedBefore := committed && !commitAt.After(r.at)
		if needed && !closedEarly && rq.pinned == "" {
			w.counts.HandedOver++
			if missed {
				t.Errorf("seed %d: request %d, sent at %v, lost in %s at %v, still there when the policy took it out of service at %v (down-timeout): not handed over; returned at %v (err %v); sends %+v", seed, r.e2e, lost.sent.Format("04:05.000"), lost.host, lost.at.Format("04:05.000"), out.Format("04:05.000"), r.at.Format("04:05.000"), r.err, sends)
			}
		}
		if rq.ended {
			// Its context had ended before Send began: it is not sent (a
			// server would answer, or apply, what nobody waits for), and
			// fails with the context's error; a deadline's is ErrTimeout.
			want := context.Canceled
			if !rq.canceled {
				want = peer.ErrTimeout
			}
			switch {
			case len(sends) > 0 || r.err == nil:
				t.Errorf("seed %d: request %d, sent with a context already ended (canceled %v), was sent all the same: sends %+v, err %v", seed, r.e2e, rq.canceled, sends, r.err)
			case !errors.Is(r.err, want):
				t.Errorf("seed %d: request %d, sent with a context already ended (canceled %v), failed with %v, not the context's error", seed, r.e2e, rq.canceled, r.err)
			}
			w.counts.Failed++
			continue
		}
		if r.err != nil {
			w.counts.Failed++
			// The documented errors of Send, each for its cause.
			switch {
			case errors.Is(r.err, ErrUnableToDeliver) && rq.pinned == "":
				t.Errorf("seed %d: request %d, with no Destination-Host, failed as unable to deliver: %v", seed, r.e2e, r.err)
			case !errors.Is(r.err, peer.ErrTimeout) && !errors.Is(r.err, peer.ErrClosed) && !errors.Is(r.err, ErrNoPeer) &&
				!errors.Is(r.err, ErrUnableToDeliver):
				t.Errorf("seed %d: request %d failed with an error of no documented kind: %v", seed, r.e2e, r.err)
			}
			switch {
			case closedEarly:
			case rq.pinned != "" && errors.Is(r.err, ErrUnableToDeliver):
			case dropped: // a server lost it: it waits for its deadline
			case w.reconfExcused(r.e2e):
			case w.tight && rq.drain && len(sends) == 0 && errors.Is(r.err, peer.ErrClosed):
				// Still in the throttle's queue at Close, behind places
				// that lost requests hold: Close fails what has not left.
			case w.tight && len(sends) == 0 && behindLost:
				// Never sent: it waited in the throttle's queue of a
				// server whose few places requests it lost hold until
				// their deadlines (sent there, it would have been lost
				// too). Pinned requests are not handed over when a
				// policy takes the server out, and without a policy a
				// server that answers DWRs stays in service; its
				// policy's probe, a real request, waits behind them as
				// well (a known limit: the probe does not pass the
				// throttle's MaxOutstanding).
			case rq.patient:
				t.Errorf("seed %d: patient request %d (pinned %q, slow %v) failed after %v: %v; applied %d; sends %+v", seed, r.e2e, rq.pinned, slow, r.at.Sub(rq.start), r.err, n, sends)
			}
			continue
		}
		w.counts.Answered++
		if wire.EndToEnd(r.ans) != r.e2e {
			t.Errorf("seed %d: request %d got the answer to %d", seed, r.e2e, wire.EndToEnd(r.ans))
		}
		rc, _ := message.ResultCodeOf(r.ans)
		switch rc {
		case message.Success:
			if n != 1 {
				t.Errorf("seed %d: request %d answered 2001 but applied %d times; sends %+v; commits %v", seed, r.e2e, n, sends, w.commits[r.e2e])
			}
		case message.TooBusy, message.UnableToDeliver:
			if appliedBefore {
				t.Errorf("seed %d: request %d applied (at %v) but answered %d at %v; sends %+v; commits %v; records %q", seed, r.e2e, commitAt.Format("04:05.000"), rc, r.at.Format("04:05.000"), sends, w.commits[r.e2e], w.recordsWith(r.e2e))
			}
		case message.UnableToComply:
		default:
			t.Errorf("seed %d: request %d: result %d", seed, r.e2e, rc)
		}
		if rq.drain && (rc != message.Success || len(sends) != 1) {
			t.Errorf("seed %d: request %d in flight at a graceful Close: result %d, sends %+v", seed, r.e2e, rc, sends)
		}
	}
	if len(got) != w.counts.Requests {
		t.Errorf("seed %d: %d requests returned of %d", seed, len(got), w.counts.Requests)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("seed %d: request %d returned %d times", seed, id, n)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, n := range w.applied {
		if n > 1 {
			t.Errorf("seed %d: request %d applied %d times", seed, id, n)
		}
	}
	for _, r := range w.records {
		if !strings.HasPrefix(r.Reason, "out of service: ") {
			continue
		}
		// The server policy's hand-over keeps the connection: a request
		// whose Destination-Host names that server stays there.
		for _, id := range r.EndToEnd {
			if rq := w.reqs[id]; rq != nil && message.EqualIdentity(rq.pinned, r.From) && !w.reconfUnpinned(rq) {
				t.Errorf("seed %d: request %d for Destination-Host %s handed over by the server policy (%q) though its connection stays up", seed, id, rq.pinned, r.Reason)
			}
		}
	}
	for _, s := range w.servers {
		for _, r := range s.f.received() {
			if rq := w.reqs[r.e2e]; rq != nil && rq.pinned != "" && !message.EqualIdentity(rq.pinned, s.host) && !w.reconfUnpinned(rq) {
				t.Errorf("seed %d: request %d for Destination-Host %s reached %s (at %v, T %v); sends %+v", seed, r.e2e, rq.pinned, s.host, r.at.Format("04:05.000"), r.tflag, w.sends[r.e2e])
			}
		}
	}
	type hop = simHop
	type move = simMove
	moves := map[hop][]move{}  // replays moved together
	routes := map[hop][]move{} // replays by their connections alone (at zero), for handedOverOrder
	for id, ss := range w.sends {
		conns := map[any]int{} // the last send on each connection
		hbhs := map[uint32]bool{}
		lostBefore := false // a send before this one was lost (left without a refusal)
		// k counts the sends before this one that reached the wire
		// (withdrawn ones are not sends: their boarding was undone);
		// last is the latest of them.
		k, last := 0, -1
		for i, s := range ss {
			if s.e2e != id {
				t.Errorf("seed %d: request %d sent with End-to-End %d", seed, id, s.e2e)
			}
			// Again on a connection only after that connection refused its
			// last send there (a refusal read before this send, on time or
			// late, after the request had moved on): never while it may
			// still be pending there.
			if j, ok := conns[s.conn]; ok {
				if at, refused := w.refusals[[2]uint32{id, ss[j].hbh}]; !refused || at > s.seq {
					t.Errorf("seed %d: request %d sent twice on one connection (send %d)", seed, id, i+1)
				}
			}
			if hbhs[s.hbh] {
				t.Errorf("seed %d: request %d: send %d reuses Hop-by-Hop %d", seed, id, i+1, s.hbh)
			}
			hbhs[s.hbh] = true
			if i > 0 && !s.afterRefusal {
				// A replay's route, from the connection it left, withdrawn
				// or not: it moved on from there with the others.
				prev := ss[i-1]
				h := hop{prev.conn, s.conn, s.at}
				mv := move{prev.seq, s.seq, id, prev.at, s.at, w.hostOf(id, prev)}
				moves[h] = append(moves[h], mv)
				r := hop{from: prev.conn, to: s.conn}
				routes[r] = append(routes[r], mv)
			}
			wire := !s.withdrawn
			if wire {
				conns[s.conn] = i
			}
			if k == 0 {
				if s.tflag {
					t.Errorf("seed %d: request %d: first send with the T flag", seed, id)
				}
				if wire {
					k, last = 1, i
				}
				continue
			}
			prev := ss[last]
			if wire {
				w.counts.Replays++
				k, last = k+1, i
			}
			at, refused := w.refusals[[2]uint32{id, prev.hbh}]
			refused = refused && at < s.seq
			// A send lost before (one that did not follow a refusal
			// left a send without an answer) may have been applied:
			// every later send is a possible duplicate and carries the T
			// flag, a premature failover's too (RFC 6733 3).
			switch {
			case s.afterRefusal && !refused:
				t.Errorf("seed %d: request %d: send %d taken for a premature failover, but no refusal was read", seed, id, i+1)
			case s.afterRefusal && s.tflag && !lostBefore:
				t.Errorf("seed %d: request %d: premature-failover resend %d with the T flag, no earlier send lost", seed, id, i+1)
			case s.afterRefusal && !s.tflag && lostBefore:
				t.Errorf("seed %d: request %d: resend %d after a refusal without the T flag, though an earlier send was lost (a server may have applied it)", seed, id, i+1)
			case !s.afterRefusal && !s.tflag:
				t.Errorf("seed %d: request %d: replay %d without the T flag", seed, id, i+1)
			}
			if !s.afterRefusal {
				lostBefore = true
			}
			if rq := w.reqs[id]; rq != nil && rq.pinned != "" && !s.afterRefusal && !w.reconfUnpinned(rq) {
				// RFC 6733 5.5.4: not moved to another host, nor
				// replayed to its own once its connection failed: it
				// fails with DIAMETER_UNABLE_TO_DELIVER.
				t.Errorf("seed %d: request %d for Destination-Host %s replayed (send %d) after its connection failed", seed, id, rq.pinned, i+1)
			}
		}
	}
	w.handedOverOrder(routes)
	w.replaysAheadOfQueued()
	if v := w.spin.violation(); v != "" {
		t.Errorf("seed %d: %s", seed, v)
	}
	for h, m := range moves {
		slices.SortFunc(m, func(a, b move) int { return a.xseq - b.xseq })
		for i := 1; i < len(m); i++ {
			a, b := m[i-1].id, m[i].id
			if w.apart(a, b) || w.waitedApart(a, b, m[i].xhost, m[i-1].xat, h.to, m[i].yseq) {
				continue
			}
			w.counts.OrderPairs++
			if r, ok := w.handedOverReversed(a, b, m[i].xhost, m[i].xat, maxTime(m[i-1].yat, m[i].yat)); ok {
				t.Errorf("seed %d: failover handed %d and %d over out of send order (sent at %d then %d): %s; sends %+v and %+v", seed, a, b, m[i-1].xseq, m[i].xseq, r, w.sends[a], w.sends[b])
				continue
			}
			if m[i].yseq > m[i-1].yseq || w.queuedElsewhere(a, w.hostOfSend(a, m[i-1].yseq), m[i-1].xseq, m[i].yseq) ||
				w.waitedOwnReason(a, b, m[i-1].xseq, m[i].yseq) {
				continue
			}
			t.Errorf("seed %d: replays out of send order: %d and %d moved together, sent at %d then %d, replayed at %d then %d; sends %+v and %+v; pinned %q %q; waited %q / %q", seed, a, b, m[i-1].xseq, m[i].xseq, m[i-1].yseq, m[i].yseq, w.sends[a], w.sends[b], w.reqs[a].pinned, w.reqs[b].pinned, w.waitWhy[a], w.waitWhy[b])
			t.Logf("records: %q / %q", w.recordsWith(a), w.recordsWith(b))
		}
	}
	simPauses.Lock()
	if simPauses.n > 0 {
		w.counts.Pauses = 1
	}
	simPauses.Unlock()
}
