package client

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/internal/testhook"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

var (
	simN    = flag.Int("sim.n", 0, "TestSim: run schedules for seeds 1..n instead of the fixed set (a soak)")
	simSeed = flag.Uint64("sim.seed", 0, "TestSim: replay the schedule of this seed only")
)

// simFixedSeeds is the set every `go test` runs (well under a minute with
// -race).
const simFixedSeeds = 24

// TestSim is the fault-schedule simulator: each seed draws a Client with
// 2-4 peers (balance or primary/secondary) in front of servers sharing a
// duplicate store, and a random schedule of requests and faults, run in
// virtual time over net.Pipe. The faults: freeze and thaw (the connection
// surviving, or reset while frozen), SUSPECT -> OKAY flaps with late
// answers and late DWAs, resets mid-burst, DPR from a server with each
// Disconnect-Cause (its answers in flight drain first), 3004 and 3002 and
// final 5012 answers, duplicate answers, answers after the caller's
// deadline, Client.Close with answers in flight and during a failover.
// After every schedule it checks the invariants listed in simCheck. A
// failing schedule names its seed: replay it with
//
//	go test ./client -run TestSim -sim.seed=N -v
func TestSim(t *testing.T) {
	var seeds []uint64
	switch {
	case *simSeed != 0:
		seeds = []uint64{*simSeed}
	case *simN > 0:
		for i := range *simN {
			seeds = append(seeds, uint64(i+1))
		}
	default:
		for i := range simFixedSeeds {
			seeds = append(seeds, uint64(i+1))
		}
	}
	var total simTotals
	start := time.Now()
	workers := min(runtime.GOMAXPROCS(0), len(seeds))
	testhook.Queued = simQueued
	defer func() { testhook.Queued = nil }()
	t.Run("schedules", func(t *testing.T) {
		for w := range workers {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				for i := w; i < len(seeds); i += workers {
					seed := seeds[i]
					var st simCounts
					synctest.Test(t, func(t *testing.T) { st = runSim(t, seed, uint32(w)) })
					if t.Failed() {
						t.Fatalf("seed %d failed: replay with -run TestSim -sim.seed=%d", seed, seed)
					}
					total.add(st)
				}
			})
		}
	})
	t.Logf("%d schedules in %v: %+v", len(seeds), time.Since(start).Round(time.Millisecond), total.snapshot())
	if len(seeds) >= simFixedSeeds {
		// The schedules must exercise what the invariants are about.
		s := total.snapshot()
		if s.Replays == 0 || s.Premature == 0 || s.Late == 0 || s.Parked == 0 || s.Drained == 0 {
			t.Errorf("the schedules exercised too little: %+v", s)
		}
	}
}

type simCounts struct {
	Requests, Answered, Failed, Replays, Premature, Late, Parked, Drained, Closes int
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
}

func (s *simTotals) snapshot() simCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

// simSend is one queueing of a request on a connection, as the peer
// reported it (testhook.Queued, in send order per request).
type simSend struct {
	seq          int
	conn         any
	hbh          uint32
	e2e          uint32 // as written in the bytes
	tflag        bool
	afterRefusal bool
}

type simServer struct {
	host string
	f    *fakeServer

	mu    sync.Mutex
	kind  string // ok, busy, unable, reject
	delay time.Duration
}

type simWorld struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand

	servers []*simServer
	n       network
	c       *Client

	mu       sync.Mutex
	seq      int
	sends    map[uint32][]simSend
	refusals map[[2]uint32]int // (e2e, hbh) of a 3004/3002 the client read -> seq
	applied  map[uint32]int
	commits  map[uint32][]string // for a failure's report: who committed when
	counts   simCounts
}

func (w *simWorld) next() int { w.seq++; return w.seq }

// readLog is the client's end of a connection: it records the refusals
// (3004, 3002) the client reads, in one order with the sends.
type readLog struct {
	transport.Conn
	w *simWorld
}

func (r readLog) ReadMessage() ([]byte, error) {
	m, err := r.Conn.ReadMessage()
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
	return m, err
}

func (w *simWorld) handler(s *simServer) peer.Handler {
	return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		s.mu.Lock()
		kind, delay := s.kind, s.delay
		s.mu.Unlock()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil
			}
		}
		switch kind {
		case "busy", "unable", "reject":
			rc := map[string]uint32{"busy": message.TooBusy, "unable": message.UnableToDeliver, "reject": message.UnableToComply}[kind]
			return message.NewAnswer(req).ResultCode(rc).
				String(message.OriginHost, 0, true, s.host).
				String(message.OriginRealm, 0, true, "example.net").Bytes()
		}
		return s.f.handler(ctx, p, req)
	}
}

type simOutcome struct {
	e2e uint32
	ans []byte
	err error
}

// simWorlds maps the top byte of an End-to-End id to the schedule that
// sent it: schedules run in parallel, one per worker, and each worker's
// ids carry its number.
var simWorlds struct {
	sync.Mutex
	m map[uint32]*simWorld
}

func simQueued(e2e uint32, conn any, msg []byte, afterRefusal bool) {
	simWorlds.Lock()
	w := simWorlds.m[e2e>>24]
	simWorlds.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	w.sends[e2e] = append(w.sends[e2e], simSend{seq: w.next(), conn: conn, hbh: wire.HopByHop(msg),
		e2e: wire.EndToEnd(msg), tflag: wire.Flags(msg)&wire.FlagRetransmit != 0, afterRefusal: afterRefusal})
	w.mu.Unlock()
}

func runSim(t *testing.T, seed uint64, worker uint32) simCounts {
	w := &simWorld{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)),
		sends: map[uint32][]simSend{}, refusals: map[[2]uint32]int{}, applied: map[uint32]int{}, commits: map[uint32][]string{}}
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

	store := dedup.NewMemory()
	defer store.Close()
	nServers := 2 + w.rng.IntN(3)
	w.n = network{}
	var urls []string
	for i := range nServers {
		s := &simServer{host: fmt.Sprintf("%c.example.net", 'a'+i), kind: "ok"}
		s.f = newFakeServer(s.host)
		// A request is applied when its answer is committed to the shared
		// store (dedup.WrapCommit): a handler may run twice when a stalled
		// server is overtaken, but only one result commits.
		s.f.handle = dedup.WrapCommit(store, w.handler(s), func(req, ans []byte) {
			if rc, _ := message.ResultCodeOf(ans); rc == message.Success {
				w.mu.Lock()
				w.commits[wire.EndToEnd(req)] = append(w.commits[wire.EndToEnd(req)], fmt.Sprintf("%s@%v T=%v", s.host, time.Now().Format("04:05.000"), wire.Flags(req)&wire.FlagRetransmit != 0))
				w.applied[wire.EndToEnd(req)]++
				w.mu.Unlock()
			}
		}, nil)
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
	cfg.Peer.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
		tc, err := w.n.dialer(ctx, url)
		if err != nil {
			return nil, err
		}
		return readLog{tc, w}, nil
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	w.c = c
	synctest.Wait()

	results := make(chan simOutcome, 1<<14)
	var wg sync.WaitGroup
	nextID := (worker+1)<<24 | 1
	send := func() {
		id := nextID
		nextID++
		w.counts.Requests++
		nai := fmt.Sprintf("user%d@example.net", w.rng.IntN(40))
		req := acr(int(id), nai)
		if w.rng.IntN(10) == 0 { // pinned to one server
			req = acrTo(int(id), nai, w.servers[w.rng.IntN(len(w.servers))].host)
		}
		wire.SetEndToEnd(req, id)
		// Within the servers' duplicate window (dedup.DefaultMaxAge, the 4
		// minutes an End-to-End id is unique for): a replay later than
		// that is a new request to them.
		deadline := 3 * time.Minute
		if w.rng.IntN(8) == 0 { // its answer may come after the deadline
			deadline = time.Duration(1+w.rng.IntN(30)) * time.Second
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			ans, err := c.Send(ctx, req)
			results <- simOutcome{id, ans, err}
		}()
	}
	srv := func() *simServer { return w.servers[w.rng.IntN(len(w.servers))] }
	sleep := func(max time.Duration) { time.Sleep(time.Duration(1 + w.rng.Int64N(int64(max)))) }
	var bg sync.WaitGroup // faults that end by themselves
	defer bg.Wait()
	closedEarly := false
	steps := 15 + w.rng.IntN(25)
	for range steps {
		switch k := w.rng.IntN(16); {
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
			s := srv()
			cause := []uint32{message.DisconnectRebooting, message.DisconnectBusy, message.DisconnectDoNotWantToTalkToU}[w.rng.IntN(3)]
			s.f.mu.Lock()
			ps := append([]*peer.Peer(nil), s.f.peers...)
			s.f.mu.Unlock()
			for _, p := range ps {
				bg.Add(1)
				go func() { defer bg.Done(); p.Disconnect(context.Background(), cause) }()
			}
			w.counts.Drained++
		case k == 10: // a server refuses for a while
			s := srv()
			kind := []string{"busy", "unable", "reject"}[w.rng.IntN(3)]
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
		}
		if closedEarly {
			break
		}
		sleep(40 * time.Second)
	}
	if !closedEarly {
		// Quiet: every fault ends, every server answers at once.
		bg.Wait()
		for _, s := range w.servers {
			s.mu.Lock()
			s.kind, s.delay = "ok", 0
			s.mu.Unlock()
			s.f.unfreeze()
		}
		wg.Wait()
		synctest.Wait()
		for _, p := range c.Peers() {
			if p == nil {
				continue
			}
			if st := p.Stats(); st.Pending != 0 {
				t.Errorf("seed %d: peer %s has %d pending once quiet", seed, p.Name(), st.Pending)
			}
			w.counts.Late += int(p.Stats().Late)
		}
		c.mu.Lock()
		for _, cl := range c.parked { // complete ones are dropped at the next unpark
			if !cl.IsDone() {
				t.Errorf("seed %d: request %d still parked once quiet", seed, cl.Ref)
			}
		}
		c.mu.Unlock()
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
	c.Close(context.Background()) // with answers in flight when closedEarly
	for _, s := range w.servers {
		s.f.unfreeze()
	}
	wg.Wait()
	close(results)
	w.check(results)
	return w.counts
}

func recordsOf(c *Client) []FailoverRecord {
	r, _ := c.FailoverLog()
	return r
}

// acrTo is acr with a Destination-Host.
func acrTo(n int, nai, host string) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "client.example.net;1;"+itoa(n)).
		String(message.OriginHost, 0, true, "client.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").
		String(message.DestinationHost, 0, true, host).
		String(message.UserName, 0, true, nai).
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, uint32(n)).Bytes()
}

// check verifies the invariants of one schedule:
//   - each Send returned exactly once, with the answer to its own request
//     (2001, or the refusal a peer gave when no other was left, or a final
//     error answer) or an error;
//   - with the shared duplicate store, no request was applied twice
//     across the servers, and an answered one exactly once;
//   - no request was queued twice on one connection, nor while in flight
//     elsewhere (the sends of one request follow each other);
//   - its first send has no T flag; every later send keeps the End-to-End
//     id, has a new Hop-by-Hop id, and has the T flag unless the previous
//     connection refused it (3004, 3002) and the client had read that
//     refusal: a premature-failover resend, without T;
//   - nothing pending once quiet, and no goroutine left (checked in
//     runSim and by synctest, which fails a bubble with goroutines left).
func (w *simWorld) check(results <-chan simOutcome) {
	t, seed := w.t, w.seed
	got := map[uint32]int{}
	for r := range results {
		got[r.e2e]++
		if r.err != nil {
			w.counts.Failed++
			continue
		}
		w.counts.Answered++
		if wire.EndToEnd(r.ans) != r.e2e {
			t.Errorf("seed %d: request %d got the answer to %d", seed, r.e2e, wire.EndToEnd(r.ans))
		}
		rc, _ := message.ResultCodeOf(r.ans)
		switch rc {
		case message.Success:
			w.mu.Lock()
			n := w.applied[r.e2e]
			w.mu.Unlock()
			if n != 1 {
				t.Errorf("seed %d: request %d answered 2001 but applied %d times; sends %+v; commits %v", seed, r.e2e, n, w.sends[r.e2e], w.commits[r.e2e])
			}
		case message.TooBusy, message.UnableToDeliver, message.UnableToComply:
		default:
			t.Errorf("seed %d: request %d: result %d", seed, r.e2e, rc)
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
	for id, ss := range w.sends {
		conns := map[any]bool{}
		hbhs := map[uint32]bool{}
		for k, s := range ss {
			if s.e2e != id {
				t.Errorf("seed %d: request %d sent with End-to-End %d", seed, id, s.e2e)
			}
			if conns[s.conn] {
				t.Errorf("seed %d: request %d sent twice on one connection (send %d)", seed, id, k+1)
			}
			conns[s.conn] = true
			if k == 0 {
				if s.tflag {
					t.Errorf("seed %d: request %d: first send with the T flag", seed, id)
				}
				hbhs[s.hbh] = true
				continue
			}
			w.counts.Replays++
			if hbhs[s.hbh] {
				t.Errorf("seed %d: request %d: send %d reuses Hop-by-Hop %d", seed, id, k+1, s.hbh)
			}
			hbhs[s.hbh] = true
			prev := ss[k-1]
			at, refused := w.refusals[[2]uint32{id, prev.hbh}]
			refused = refused && at < s.seq
			switch {
			case s.afterRefusal && !refused:
				t.Errorf("seed %d: request %d: send %d taken for a premature failover, but no refusal was read", seed, id, k+1)
			case s.afterRefusal && s.tflag:
				t.Errorf("seed %d: request %d: premature-failover resend %d with the T flag", seed, id, k+1)
			case !s.afterRefusal && !s.tflag:
				t.Errorf("seed %d: request %d: replay %d without the T flag", seed, id, k+1)
			}
		}
	}
}
