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
	return fmt.Sprintf("%d (+killed?)", int64(applied)+int64(st.byHost[sc.primary.host])-int64(reps["primary2"].Applied)-int64(st.total))
}

func checkDetection(t *testing.T, what string, d time.Duration, limit time.Duration) {
	t.Helper()
	if d < 0 || d > limit {
		t.Errorf("%s detected %v after the fault, want within %v", what, d, limit)
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
	c.waitSent(t, 15, 20*time.Second)
	sc.primary.signal(syscall.SIGSTOP)
	fault := time.Now()
	suspect := c.waitEvent(t, fault, maxDetect+5*time.Second, "primary OKAY -> SUSPECT", transition(sc.primary, "OKAY", "SUSPECT"))
	detect := suspect.Time.Sub(fault)
	r := c.finish(t, 2*time.Minute)
	thaw(sc.primary)
	reps := map[string]serverReport{"primary": sc.primary.stop(t), "secondary": sc.secondary.stop(t)}
	t.Logf("client %+v", r)
	t.Logf("servers %+v", reps)
	t.Logf("client events:\n%s", dumpEvents(readEvents(t, c.events)))

	checkOutcomes(t, r, n, true)
	checkServers(t, reps)
	checkFailover(t, sc, r, reps, true)
	twice := checkApplied(t, sc, r, reps, true)
	checkDetection(t, "OKAY -> SUSPECT", detect, maxDetect)
	addRow(row{scenario: sc.name, detection: fmtDur(detect), moved: r.moved(), lost: r.Failed, twice: twice, note: "SIGSTOP mid-run, SIGCONT at the end"})
}
