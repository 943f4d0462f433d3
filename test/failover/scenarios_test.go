package failover

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// thaw resumes a frozen server and gives it a moment to read what waits
// in its socket buffers (and to apply it, or not: the shared store decides).
func thaw(s *server) {
	s.signal(syscall.SIGCONT)
	time.Sleep(1500 * time.Millisecond)
}

// freezeBetweenRequests SIGSTOPs s half-way between two requests of a
// client paced at rate (> 1) per second, once it has sent minSent, and
// returns the moment. The pacer's slots fall on the whole seconds of the
// run, as the progress lines do. Half-way, no request is in a round trip
// to Redis (its claim as it arrives, its commit as its handler ends,
// which --answer-delay keeps on the slots): a store call frozen on the
// wire fails at the thaw, because its read deadline passed meanwhile
// although the reply waits in the socket. That is a store error, answered
// DIAMETER_TOO_BUSY: safe, but not what these scenarios test. A server
// with --answer-delay is still inside its handlers when frozen
// (TestFrozenMidRequest).
func freezeBetweenRequests(t *testing.T, c *client, s *server, minSent int, rate float64) time.Time {
	t.Helper()
	p, _ := c.waitSent(t, minSent, 20*time.Second)
	_, seen := c.waitTick(t, p.t, 5*time.Second)
	time.Sleep(time.Until(seen.Add(time.Duration(float64(time.Second) / rate / 2))))
	at := time.Now() // before the signal: the client may see its effect before we read the clock again
	s.signal(syscall.SIGSTOP)
	return at
}

// checkFailover: the client moved requests from the primary to the
// secondary with the T flag, and only those carried it.
func checkFailover(t *testing.T, sc *scenario, r clientReport, reps map[string]serverReport, allReported bool) {
	t.Helper()
	moved := 0
	for _, f := range r.Failovers {
		if sc.primary.is(f.From) && sc.secondary.is(f.To) {
			moved += f.Moved
			if len(f.EndToEnd) != f.Moved || f.Reason == "" {
				t.Errorf("failover record %+v: want one End-to-End id per moved request and a reason", f)
			}
		} else if f.To != "" {
			t.Errorf("unexpected failover record %+v", f)
		}
	}
	if moved == 0 || r.Retransmitted == 0 {
		t.Errorf("no failover primary -> secondary (records %+v), retransmitted %d", r.Failovers, r.Retransmitted)
	}
	if uint64(r.moved()) != r.Retransmitted {
		t.Errorf("failover records moved %d requests, client retransmitted %d: the T flag should mark exactly the replays", r.moved(), r.Retransmitted)
	}
	_, _, _, withT := sumApplied(reps)
	if allReported && withT != r.Retransmitted {
		t.Errorf("servers received %d requests with T, the client replayed %d", withT, r.Retransmitted)
	}
	if rp, ok := reps["primary"]; ok && rp.Retransmitted != 0 {
		t.Errorf("primary received %d requests with T; replays go to the secondary only", rp.Retransmitted)
	}
}

// checkApplied: nothing applied twice. With every server instance
// reporting, the handler runs add up to the distinct requests stored in
// Redis; with one killed, the survivors cannot exceed it and the secondary
// applied exactly what it stored.
func checkApplied(t *testing.T, sc *scenario, r clientReport, reps map[string]serverReport, allReported bool) (twice string) {
	t.Helper()
	st := redisApplied(t, sc.client)
	applied, dups, received, _ := sumApplied(reps)
	t.Logf("applied by the servers %d (duplicates %d, received %d); Redis holds %d answers %v", applied, dups, received, st.total, st.byHost)
	if uint64(st.total) != r.Answered {
		t.Errorf("Redis holds %d answers for this client, the client got %d", st.total, r.Answered)
	}
	if allReported {
		if applied != uint64(st.total) || applied != r.Answered {
			t.Errorf("servers applied %d, distinct requests stored %d, answered %d: applied twice or lost", applied, st.total, r.Answered)
		}
		if applied+dups > received {
			t.Errorf("applied %d + duplicates %d > received %d", applied, dups, received)
		}
		return fmt.Sprint(int64(applied) - int64(st.total))
	}
	if applied > uint64(st.total) {
		t.Errorf("surviving servers applied %d > %d distinct requests stored", applied, st.total)
	}
	if got := st.byHost[sc.secondary.host]; uint64(got) != reps["secondary"].Applied {
		t.Errorf("secondary applied %d, stored %d answers: applied some twice", reps["secondary"].Applied, got)
	}
	// What the survivors applied beyond what they stored: double runs we
	// can see. The killed instance stored byHost[primary] - primary2's; a
	// request it applied without storing is invisible.
	seen := int64(reps["secondary"].Applied) - int64(st.byHost[sc.secondary.host])
	if d := int64(reps["primary2"].Applied) - int64(st.byHost[sc.primary.host]); d > 0 {
		seen += d
	}
	return fmt.Sprintf("%d (killed: n/a)", seen)
}

// checkDetection checks that what came at, after since (the fault, or
// the state before), within limit, plus the time the machine held this
// process meanwhile (see the stall meter).
func checkDetection(t *testing.T, what string, since, at time.Time, limit time.Duration) {
	t.Helper()
	d := at.Sub(since)
	held := stalledBetween(since, at)
	if held > 0 {
		t.Logf("the machine held this process for %v of the %v before %s: allowed on top of %v", fmtDur(held), fmtDur(d), what, limit)
	}
	if d < 0 || d > limit+held {
		t.Errorf("%s took %v, want within %v", what, d, limit+held)
	}
}

// Scenario 1: the primary stops answering everything (SIGSTOP: the kernel
// still ACKs). The client's watchdog goes SUSPECT within 2 Tw and replays
// the pending requests to the secondary with T; nothing is lost or applied
// twice, even once the primary is thawed and reads what it was sent.
func TestFrozenPrimary(t *testing.T) {
	sc := newScenario(t, "1-frozen")
	const n = 100
	c := sc.startClient("--requests", fmt.Sprint(n), "--rate", "5", "--concurrency", "8", "--timeout", "60s")
	fault := freezeBetweenRequests(t, c, sc.primary, 15, 5)
	suspect := c.waitEvent(t, fault, maxDetect+5*time.Second, "primary OKAY -> SUSPECT", transition(sc.primary, "OKAY", "SUSPECT"))
	detect := suspect.Time.Sub(fault)
	r := c.finish(t, 2*time.Minute)
	thaw(sc.primary)
	reps := map[string]serverReport{"primary": sc.primary.stop(t), "secondary": sc.secondary.stop(t)}
	t.Logf("client %+v", r)
	t.Logf("servers %+v", reps)
	t.Logf("client events:\n%s", dumpEvents(readEvents(t, c.events)))

	checkOutcomes(t, r, n, true)
	checkServers(t, reps, map[string]uint64{"primary": uint64(r.moved())})
	checkFailover(t, sc, r, reps, true)
	twice := checkApplied(t, sc, r, reps, true)
	checkDetection(t, "OKAY -> SUSPECT", fault, suspect.Time, maxDetect)
	addRow(row{scenario: sc.name, detection: fmtDur(detect), moved: r.moved(), lost: r.Failed, twice: twice, note: "SIGSTOP mid-run, SIGCONT at the end"})
}

// Scenario 2: the primary answers DWRs but never the requests. A missing
// answer alone does not make a peer SUSPECT (RFC 3539 3.4.1): no failover,
// no T flag, and each request ends by the client's --timeout.
func TestStalledPrimary(t *testing.T) {
	sc := newScenario(t, "2-stalled", "--answer-delay", "120s")
	const n = 12 // three rounds of 4 callers, 8 s each: the watchdog runs at least 3 Tw
	c := sc.startClient("--requests", fmt.Sprint(n), "--rate", "4", "--concurrency", "4", "--timeout", "8s")
	r := c.finishExit(t, time.Minute, 3) // the primary's requests time out: exit 3
	reps := map[string]serverReport{"primary": sc.primary.stop(t), "secondary": sc.secondary.stop(t)}
	evs := readEvents(t, c.events)
	t.Logf("client %+v", r)
	t.Logf("servers %+v", reps)
	t.Logf("client events:\n%s", dumpEvents(evs))

	checkOutcomes(t, r, n, false)
	checkServers(t, reps, nil)
	if len(r.Servers) != 2 {
		t.Fatalf("client servers %+v", r.Servers)
	}
	// aaa-peer client starts as soon as one peer is OKAY: if the
	// secondary's CEA came first, the first requests went there (not a
	// failover: the primary was not in service yet).
	onPrimary, onSecondary := r.Servers[0], r.Servers[1]
	pUp, _ := firstAfter(evs, time.Time{}, transition(sc.primary, "", "OKAY"))
	sUp, _ := firstAfter(evs, time.Time{}, transition(sc.secondary, "", "OKAY"))
	if onSecondary.Sent > 0 {
		if !sUp.Time.Before(pUp.Time) {
			t.Errorf("%d requests went to the secondary though the primary was OKAY first (%v, %v)", onSecondary.Sent, pUp, sUp)
		} else {
			t.Logf("startup race: the secondary was OKAY %v before the primary and got the first %d requests", pUp.Time.Sub(sUp.Time), onSecondary.Sent)
		}
	}
	if onPrimary.Sent == 0 || onPrimary.Answered != 0 || onPrimary.Failed != onPrimary.Sent || r.FailedBy["timeout"] != onPrimary.Sent || r.Answered != onSecondary.Answered {
		t.Errorf("answered %d, failures %v, servers %+v; want every request sent to the primary to end by --timeout", r.Answered, r.FailedBy, r.Servers)
	}
	if r.Retransmitted != 0 || r.moved() != 0 {
		t.Errorf("retransmitted %d, failovers %+v; want none", r.Retransmitted, r.Failovers)
	}
	for _, f := range r.Failovers {
		if sc.primary.is(f.From) {
			t.Errorf("failover record from the primary: %+v", f)
		}
	}
	for _, e := range evs {
		if transition(sc.primary, "OKAY", "SUSPECT")(e) || (e.Type == "failover" && sc.primary.is(e.FromPeer)) {
			t.Errorf("unexpected event %v: unanswered requests alone must not fail a peer over", e)
		}
	}
	// Both ends run the watchdog with the same Tw, and each resets its
	// timer on the other's DWR: whichever fires first sends the next one.
	// Count the exchanges either way (the client's DWRs answered, and the
	// primary's DWRs the client answered).
	if len(r.Peers) == 0 || r.Peers[0].DWAReceived+r.Peers[0].DWRReceived < 2 {
		t.Errorf("client peers %+v: want at least 2 DWR/DWA exchanges with the primary during the run", r.Peers)
	}
	if rp := reps["primary"]; rp.Received != onPrimary.Sent || rp.Applied != 0 || rp.Retransmitted != 0 {
		t.Errorf("primary received %d (%d with T) applied %d; want %d, none applied, none with T", rp.Received, rp.Retransmitted, rp.Applied, onPrimary.Sent)
	}
	if rs := reps["secondary"]; rs.Received != onSecondary.Sent || rs.Retransmitted != 0 {
		t.Errorf("secondary received %d (%d with T); want %d without T", rs.Received, rs.Retransmitted, onSecondary.Sent)
	}
	twice := checkApplied(t, sc, r, reps, true)
	addRow(row{scenario: sc.name, detection: "none", moved: r.moved(), lost: r.Failed, twice: twice, note: fmt.Sprintf("--answer-delay 120s: %d timeouts (expected), no failover", r.FailedBy["timeout"])})
}

// killAndRestart kills the primary (SIGKILL: its kernel resets or closes
// the connection), restarts it on the same port and waits until the
// client has reopened the connection (DOWN -> REOPEN -> OKAY after three
// DWAs). It returns the fault time, the detection delay and the restarted
// server.
func killAndRestart(t *testing.T, sc *scenario, c *client, extra ...string) (fault time.Time, detect time.Duration, p2 *server) {
	t.Helper()
	// The fault's time is read before the signal: the client sees a killed
	// peer's connection close at once, and its event may carry a time
	// earlier than a reading taken after kill returns (a busy machine).
	fault = time.Now()
	sc.primary.signal(syscall.SIGKILL)
	<-sc.primary.done
	down := c.waitEvent(t, fault, 5*time.Second, "primary OKAY -> DOWN", transition(sc.primary, "OKAY", "DOWN"))
	detect = down.Time.Sub(fault)
	p2 = startServer(t, sc.dir, "primary2", sc.primary.host, sc.primary.url, extra...)
	if p2.url != sc.primary.url {
		t.Fatalf("restarted primary listens on %s, want %s", p2.url, sc.primary.url)
	}
	// Reopen: at most one Tw (DOWN's timer) to the attempt, then two more
	// Tw for the second and third DWA.
	reopen := c.waitEvent(t, fault, tw+jitter+schedSlop+5*time.Second, "primary DOWN -> REOPEN", transition(sc.primary, "DOWN", "REOPEN"))
	okay := c.waitEvent(t, reopen.Time, 2*(tw+jitter)+schedSlop+5*time.Second, "primary REOPEN -> OKAY", transition(sc.primary, "REOPEN", "OKAY"))
	t.Logf("killed at %s; DOWN after %v; REOPEN after %v; OKAY after %v", fault.Format("15:04:05.000"),
		fmtDur(detect), fmtDur(reopen.Time.Sub(fault)), fmtDur(okay.Time.Sub(fault)))
	if d := okay.Time.Sub(reopen.Time); d < 2*(tw-jitter)-schedSlop {
		t.Errorf("REOPEN -> OKAY took %v: three DWA exchanges need at least two Tw (%v)", d, 2*(tw-jitter))
	}
	return fault, detect, p2
}

// Scenario 3: the primary is killed mid-burst with requests pending
// (--answer-delay 1s keeps some in flight): the client sees the
// connection drop, goes DOWN at once and replays them to the secondary;
// the primary restarted on the same port is reopened.
func TestKilledMidBurst(t *testing.T) {
	sc := newScenario(t, "3-reset-mid-burst", "--answer-delay", "1s")
	const n = 175 // 35 s at 5/s: the run outlasts the reopen (up to 3 Tw after the kill)
	c := sc.startClient("--requests", fmt.Sprint(n), "--rate", "5", "--concurrency", "8", "--timeout", "60s")
	c.waitSent(t, 20, 20*time.Second)
	fault, detect, p2 := killAndRestart(t, sc, c, "--answer-delay", "1s")
	r := c.finish(t, 2*time.Minute)
	reps := map[string]serverReport{"primary2": p2.stop(t), "secondary": sc.secondary.stop(t)}
	evs := readEvents(t, c.events)
	t.Logf("client %+v", r)
	t.Logf("servers %+v", reps)
	t.Logf("client events:\n%s", dumpEvents(evs))

	checkOutcomes(t, r, n, true)
	checkServers(t, reps, nil)
	checkFailover(t, sc, r, reps, true)
	for _, f := range r.Failovers {
		if sc.primary.is(f.From) && f.Time.Sub(fault) > 2*time.Second {
			t.Errorf("failover %v after the kill; the pending requests should move at once", f.Time.Sub(fault))
		}
	}
	if reps["primary2"].Applied == 0 {
		t.Errorf("the restarted primary applied nothing: no failback after REOPEN -> OKAY?")
	}
	twice := checkApplied(t, sc, r, reps, false)
	checkDetection(t, "OKAY -> DOWN", fault, fault.Add(detect), 2*time.Second)
	addRow(row{scenario: sc.name, detection: fmtDur(detect), moved: r.moved(), lost: r.Failed, twice: twice, note: "SIGKILL with requests pending, restart, REOPEN -> OKAY"})
}

// Scenario 4: the primary is killed between requests (nothing pending)
// and restarted: the client goes DOWN, sends to the secondary meanwhile,
// reopens the primary; nothing fails and nothing is replayed.
func TestKilledBetweenBursts(t *testing.T) {
	sc := newScenario(t, "4-kill-between-bursts")
	const n = 35 // one a second: the run outlasts the reopen
	c := sc.startClient("--requests", fmt.Sprint(n), "--rate", "1", "--concurrency", "4", "--timeout", "60s")
	// Requests leave on the whole seconds of the run, as the progress
	// lines do: kill half-way between two.
	p, _ := c.waitSent(t, 5, 20*time.Second)
	_, seen := c.waitTick(t, p.t, 5*time.Second)
	time.Sleep(time.Until(seen.Add(500 * time.Millisecond)))
	fault, detect, p2 := killAndRestart(t, sc, c)
	r := c.finish(t, 2*time.Minute)
	reps := map[string]serverReport{"primary2": p2.stop(t), "secondary": sc.secondary.stop(t)}
	evs := readEvents(t, c.events)
	t.Logf("client %+v", r)
	t.Logf("servers %+v", reps)
	t.Logf("client events:\n%s", dumpEvents(evs))

	checkOutcomes(t, r, n, true)
	checkServers(t, reps, nil)
	if r.Retransmitted != 0 || r.moved() != 0 {
		t.Errorf("retransmitted %d, failovers %+v; nothing was pending at the kill", r.Retransmitted, r.Failovers)
	}
	if _, _, _, withT := sumApplied(reps); withT != 0 {
		t.Errorf("servers received %d requests with T; want none", withT)
	}
	if reps["secondary"].Applied == 0 || reps["primary2"].Applied == 0 {
		t.Errorf("secondary applied %d, restarted primary %d: want traffic on the secondary while the primary was down, and back on the primary after",
			reps["secondary"].Applied, reps["primary2"].Applied)
	}
	twice := checkApplied(t, sc, r, reps, false)
	checkDetection(t, "OKAY -> DOWN", fault, fault.Add(detect), 2*time.Second)
	addRow(row{scenario: sc.name, detection: fmtDur(detect), moved: r.moved(), lost: r.Failed, twice: twice, note: "SIGKILL with nothing pending, restart, REOPEN -> OKAY"})
}

// Scenario 5: the primary freezes mid-burst; the client goes SUSPECT,
// replays to the secondary, then closes the connection (DOWN); only then
// is the primary thawed. It reads the requests still in its socket: the
// shared Redis store (or the closed connection) must keep them from being
// applied a second time.
func TestFrozenThawedAfterClose(t *testing.T) {
	sc := newScenario(t, "5-thaw-after-close")
	const n = 100
	c := sc.startClient("--requests", fmt.Sprint(n), "--rate", "5", "--concurrency", "8", "--timeout", "60s")
	fault := freezeBetweenRequests(t, c, sc.primary, 15, 5)
	suspect := c.waitEvent(t, fault, maxDetect+5*time.Second, "primary OKAY -> SUSPECT", transition(sc.primary, "OKAY", "SUSPECT"))
	down := c.waitEvent(t, suspect.Time, tw+jitter+schedSlop+5*time.Second, "primary SUSPECT -> DOWN", transition(sc.primary, "SUSPECT", "DOWN"))
	sc.primary.signal(syscall.SIGCONT)
	r := c.finish(t, 2*time.Minute)
	reps := map[string]serverReport{"primary": sc.primary.stop(t), "secondary": sc.secondary.stop(t)}
	evs := readEvents(t, c.events)
	t.Logf("client %+v", r)
	t.Logf("servers %+v", reps)
	t.Logf("client events:\n%s", dumpEvents(evs))

	detect := suspect.Time.Sub(fault)
	checkOutcomes(t, r, n, true)
	checkServers(t, reps, map[string]uint64{"primary": uint64(r.moved())})
	checkFailover(t, sc, r, reps, true)
	rp := reps["primary"]
	if late := rp.Received - rp.Applied; late < uint64(r.moved()) {
		t.Errorf("primary received %d, applied %d: want the %d moved requests read after the thaw and not applied", rp.Received, rp.Applied, r.moved())
	}
	twice := checkApplied(t, sc, r, reps, true)
	checkDetection(t, "OKAY -> SUSPECT", fault, suspect.Time, maxDetect)
	checkDetection(t, "SUSPECT -> DOWN", suspect.Time, down.Time, tw+jitter+schedSlop) // within one Tw
	addRow(row{scenario: sc.name, detection: fmtDur(detect), moved: r.moved(), lost: r.Failed, twice: twice,
		note: fmt.Sprintf("SIGSTOP, SIGCONT after DOWN; primary read %d late: %d duplicates, %d store errors", rp.Received-rp.Applied, rp.Duplicates, rp.StoreErrors)})
}

// Scenario 5b: as 5, but the primary is thawed while the client still
// holds the connection (SUSPECT, its requests already replayed to the
// secondary). The primary reads them on a live connection: the shared
// Redis store answers them as duplicates (applied by the secondary), the
// client takes those late answers on the old connection without a second
// outcome (F4), and the primary's answers bring it back: SUSPECT -> OKAY.
func TestFrozenThawedWhileSuspect(t *testing.T) {
	thawWhileSuspect(t, "5b-thaw-while-suspect")
}

// TestFrozenMidRequest: the primary (--answer-delay 1s, so requests are
// always inside its handler) freezes while it holds dedup claims for the
// requests it is handling: in-flight marks with dedup.DefaultMarkTTL =
// 10 s. The client's watchdog moves them only after two Tw without a DWA
// (here Tw 12 s: 20 s to 28 s; at the RFC minimum of 6 s it is 8 s to
// 16 s, so the same happens whenever detection takes more than 10 s), by
// then the marks have expired and the secondary applies the replays. Once
// thawed with its connection still open (SUSPECT), the primary finishes
// its handlers: dedup.Wrap used to apply them a second time, ignoring
// ErrMarkLost from Complete; now the stalled result is superseded by the
// committed one and each request is applied once.
func TestFrozenMidRequest(t *testing.T) {
	sc := newScenario(t, "5c-freeze-mid-request", "--answer-delay", "1s")
	const n = 60
	c := sc.startClient("--requests", fmt.Sprint(n), "--rate", "5", "--concurrency", "8", "--timeout", "60s", "--tw", "12s")
	// Frozen half a request period after a send, not at it: each request
	// is then either inside its 1 s handler or not yet sent, and none is
	// in a round trip to Redis. A store call frozen on the wire fails at
	// the thaw (its read deadline passed meanwhile, though the reply is in
	// the socket): a store error, answered DIAMETER_TOO_BUSY, which is
	// safe but not what this scenario is about.
	fault := freezeBetweenRequests(t, c, sc.primary, 15, 5)
	suspect := c.waitEvent(t, fault, 2*(12*time.Second+jitter)+5*time.Second, "primary OKAY -> SUSPECT", transition(sc.primary, "OKAY", "SUSPECT"))
	time.Sleep(time.Until(suspect.Time.Add(time.Second)))
	sc.primary.signal(syscall.SIGCONT)
	r := c.finish(t, 2*time.Minute)
	reps := map[string]serverReport{"primary": sc.primary.stop(t), "secondary": sc.secondary.stop(t)}
	t.Logf("client %+v", r)
	t.Logf("servers %+v", reps)
	t.Logf("client events:\n%s", dumpEvents(readEvents(t, c.events)))
	checkOutcomes(t, r, n, true)
	checkServers(t, reps, nil)
	checkFailover(t, sc, r, reps, true)
	twice := checkApplied(t, sc, r, reps, true)
	addRow(row{scenario: sc.name, detection: fmtDur(suspect.Time.Sub(fault)), moved: r.moved(), lost: r.Failed, twice: twice,
		note: "--answer-delay 1s (marks expire while frozen), client Tw 12s, SIGSTOP, SIGCONT in SUSPECT"})
}

func thawWhileSuspect(t *testing.T, name string) {
	sc := newScenario(t, name)
	const n = 60
	c := sc.startClient("--requests", fmt.Sprint(n), "--rate", "5", "--concurrency", "8", "--timeout", "60s")
	fault := freezeBetweenRequests(t, c, sc.primary, 15, 5)
	suspect := c.waitEvent(t, fault, maxDetect+5*time.Second, "primary OKAY -> SUSPECT", transition(sc.primary, "OKAY", "SUSPECT"))
	// The replays take milliseconds; SUSPECT -> DOWN takes another Tw (>= 4 s).
	time.Sleep(time.Until(suspect.Time.Add(time.Second)))
	sc.primary.signal(syscall.SIGCONT)
	back := c.waitEvent(t, suspect.Time, tw+jitter+schedSlop, "primary SUSPECT -> OKAY", transition(sc.primary, "SUSPECT", ""))
	r := c.finish(t, 2*time.Minute)
	reps := map[string]serverReport{"primary": sc.primary.stop(t), "secondary": sc.secondary.stop(t)}
	evs := readEvents(t, c.events)
	t.Logf("client %+v", r)
	t.Logf("servers %+v", reps)
	t.Logf("client events:\n%s", dumpEvents(evs))

	detect := suspect.Time.Sub(fault)
	checkOutcomes(t, r, n, true)
	checkServers(t, reps, nil)
	checkFailover(t, sc, r, reps, true)
	if back.To != "OKAY" {
		t.Errorf("after the thaw the primary went %s -> %s (%s); want OKAY (Failback on its answers)", back.From, back.To, back.Reason)
	}
	rp := reps["primary"]
	if rp.Duplicates != uint64(r.moved()) {
		t.Errorf("primary answered %d duplicates from the store; want the %d requests replayed to the secondary", rp.Duplicates, r.moved())
	}
	if len(r.Peers) > 0 {
		if p := r.Peers[0]; p.Late+p.Unmatched != uint64(r.moved()) {
			t.Errorf("client got %d late and %d unmatched answers from the primary; want the %d replayed requests' answers, each dropped (F4)", p.Late, p.Unmatched, r.moved())
		}
	}
	twice := checkApplied(t, sc, r, reps, true)
	checkDetection(t, "OKAY -> SUSPECT", fault, suspect.Time, maxDetect)
	addRow(row{scenario: sc.name, detection: fmtDur(detect), moved: r.moved(), lost: r.Failed, twice: twice,
		note: fmt.Sprintf("SIGSTOP, SIGCONT in SUSPECT; primary answered %d from Redis, client late %d", rp.Duplicates, r.Peers[0].Late)})
}
