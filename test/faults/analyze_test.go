package faults

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"
)

// row is one line of the scenario table.
type row struct {
	order        int
	name         string
	detect       string // fault -> first OKAY exit on the client
	failover     string // fault -> first failover event
	moved        int
	lost         uint64
	appliedTwice string
	transitions  int
	path         string // per server, the watchdog states after the fault
	result       string
}

var (
	tableMu sync.Mutex
	table   []row
)

func addRow(r row) {
	tableMu.Lock()
	defer tableMu.Unlock()
	table = append(table, r)
}

func printTable(w io.Writer) {
	tableMu.Lock()
	defer tableMu.Unlock()
	if len(table) == 0 {
		return
	}
	sort.Slice(table, func(i, j int) bool { return table[i].order < table[j].order })
	fmt.Fprintf(w, "\nfault suite: Tw=%v, detection bound 2(Tw+2s)=%v, delay from %s\n", tw, detectBound,
		map[bool]string{true: "tc netem", false: "the userspace proxy (no sch_netem)"}[suite.netem])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tdetection\tfailover\tmoved\tlost\tapplied twice\ttransitions\twatchdog path\tresult")
	for _, r := range table {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", r.name, r.detect, r.failover, r.moved, r.lost, r.appliedTwice, r.transitions, r.path, r.result)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// runScenario builds the topology, runs the client through the fault,
// stops everything and checks the outcome.
func runScenario(t *testing.T, sc *scenario) {
	order := 0
	for i, s := range scenarios {
		if s == sc {
			order = i
		}
	}
	r := row{order: order, name: sc.name, detect: "-", failover: "-", appliedTwice: "?", result: "FAIL"}
	defer func() {
		if !t.Failed() {
			r.result = "ok"
		}
		addRow(r)
	}()

	h := newHarness(t, sc)
	h.startClient()
	if sc.inject != nil {
		sc.inject(h)
	}

	// The client stops issuing at --duration; in-flight requests have
	// --timeout; the DPR exchange 5 s more.
	bound := time.Until(h.began.Add(sc.duration + sc.timeout + 25*time.Second))
	if !h.client.wait(bound) {
		h.client.kill()
		t.Errorf("client still running %v after its --duration: killed", sc.duration+sc.timeout+25*time.Second)
	}
	if code := h.client.exitCode(); code != 0 {
		t.Errorf("client exit %d: %s", code, h.client.tail(3000))
	}
	for _, s := range h.servers {
		if code := s.proc.stop(20 * time.Second); code != 0 {
			t.Errorf("server s%d exit %d: %s", s.k, code, s.proc.tail(2000))
		}
		if s.proxy != nil {
			s.proxy.kill()
		}
	}
	procs := []*proc{h.client}
	for _, s := range h.servers {
		procs = append(procs, s.proc)
	}
	for _, p := range procs {
		if rep := p.raceReport(); rep != "" {
			t.Errorf("%s:\n%s", p.name, rep)
		}
	}

	var cr clientReport
	if err := readJSON(h.path("client.json"), &cr); err != nil {
		t.Fatalf("client report: %v", err)
	}
	// The client writes its report after its disconnect: the report's time
	// is the end of the run, nothing the client did comes after it.
	cutoff := time.Now()
	if st, err := os.Stat(h.path("client.json")); err == nil {
		cutoff = st.ModTime()
	}
	evs := h.events()
	if cr.EventsDropped != 0 {
		t.Errorf("client dropped %d events", cr.EventsDropped)
	}
	t.Logf("client: sent %d answered %d failed %d %v retransmitted %d failovers %d", cr.Sent, cr.Answered, cr.Failed, cr.FailedBy, cr.Retransmitted, cr.FailoversTotal)

	// Lost: every request is answered (an alternate exists, or the
	// timeout outlasts the outage).
	r.lost = cr.Failed
	if cr.Failed != 0 || cr.Answered != cr.Sent || cr.Sent == 0 {
		t.Errorf("lost requests: sent %d answered %d failed %d %v", cr.Sent, cr.Answered, cr.Failed, cr.FailedBy)
	}

	// The delay really was there: requests took about the added RTT.
	if d := sc.delay.delay; d > 0 {
		want := 2 * (d - sc.delay.jitter)
		if got := time.Duration(cr.LatencyUS.P99) * time.Microsecond; got < want {
			t.Errorf("p99 latency %v under a %v +- %v delay each way: the delay was not applied", got, d, sc.delay.jitter)
		}
		t.Logf("latency p50 %v p99 %v max %v", time.Duration(cr.LatencyUS.P50)*time.Microsecond,
			time.Duration(cr.LatencyUS.P99)*time.Microsecond, time.Duration(cr.LatencyUS.Max)*time.Microsecond)
	}

	// Applied twice: the servers' applied counts against the answers the
	// shared store remembers (one per request applied at least once).
	var applied, received, dups, serrs uint64
	var last []serverReport // each server's last incarnation
	for _, s := range h.servers {
		var lr serverReport
		for i, path := range s.reports {
			var sr serverReport
			if err := readJSON(path, &sr); err != nil {
				if sc.killed && s.k == 1 && i == 0 {
					continue // SIGKILLed: no report
				}
				t.Errorf("server s%d incarnation %d report: %v", s.k, i+1, err)
				continue
			}
			t.Logf("s%d-%d: received %d (%d with T) applied %d duplicates %d store errors %d", s.k, i+1, sr.Received, sr.Retransmitted, sr.Applied, sr.Duplicates, sr.StoreErrors)
			applied += sr.Applied
			received += sr.Received
			dups += sr.Duplicates
			serrs += sr.StoreErrors
			lr = sr
		}
		last = append(last, lr)
	}
	st, err := h.storeCounts()
	if err != nil {
		t.Errorf("store: %v", err)
	} else {
		twice := int64(applied) - int64(st.Requests)
		t.Logf("store: %d requests (under %d keys), %d in-flight marks; servers applied %d, duplicates %d, store errors %d", st.Requests, st.Keys, st.Marks, applied, dups, serrs)
		switch {
		case sc.killed:
			// The killed incarnation's count died with it: only a bound.
			r.appliedTwice = "0 (of reported)"
			if twice > 0 {
				r.appliedTwice = fmt.Sprint(twice)
				t.Errorf("servers applied %d requests, the store remembers %d: %d applied twice", applied, st.Requests, twice)
			}
		default:
			r.appliedTwice = fmt.Sprint(twice)
			if twice != 0 {
				t.Errorf("servers applied %d requests, the store remembers %d: %d applied twice (or lost from the store)", applied, st.Requests, twice)
			}
			if st.Marks != 0 {
				t.Errorf("%d in-flight marks left in the store after every server stopped", st.Marks)
			}
		}
		if st.Conflicts != 0 {
			t.Errorf("%d requests stored with different answers under their keys: applied more than once", st.Conflicts)
		}
		if st.Other != 0 {
			t.Errorf("the store holds %d answers that are not to the client's requests (no Session-Id, or not %s's)", st.Other, clientHost)
		}
		if uint64(st.Requests) < cr.Answered {
			t.Errorf("store remembers %d requests, client got %d answers", st.Requests, cr.Answered)
		}
	}
	switch {
	case serrs == 0:
	default:
		t.Errorf("%d requests refused for store errors", serrs)
	}

	// Watchdog transitions after the warm-up (INITIAL -> OKAY excluded),
	// before the client's own disconnect at the end of the run. Only the
	// client's Close sends a DPR here (a connection_down with dpr set, in
	// the events before the DOWN it causes): from that event on, the
	// server's connection going DOWN is the run ending, not a fault, and
	// nothing but DOWN may follow.
	byServer := map[int][]event{}
	disconnected := map[int]bool{}
	for _, e := range evs {
		k := h.serverOf(e.Peer)
		if e.Kind == "connection_down" && e.DPR {
			disconnected[k] = true
			continue
		}
		if e.Kind != "watchdog" || e.From == "INITIAL" {
			continue
		}
		if disconnected[k] {
			if e.To != "DOWN" {
				t.Errorf("%s: watchdog %s -> %s after the client's own DPR (%s): the disconnect must end in DOWN", e.Peer, e.From, e.To, e.Reason)
			}
			continue
		}
		r.transitions++
		byServer[k] = append(byServer[k], e)
	}
	var paths []string
	for _, s := range h.servers {
		es := byServer[s.k]
		if len(es) == 0 {
			continue
		}
		p := fmt.Sprintf("s%d:%s", s.k, es[0].From)
		for _, e := range es {
			p += ">" + e.To
		}
		paths = append(paths, p)
	}
	r.path = strings.Join(paths, " ")
	if r.path == "" {
		r.path = "-"
	}
	if r.transitions > sc.transitions {
		t.Errorf("%d watchdog transitions, the scenario implies at most %d (flapping?): %s", r.transitions, sc.transitions, r.path)
	}
	if len(byServer[0]) > 0 {
		t.Errorf("transitions of an unknown peer: %+v", byServer[0])
	}

	// Detection: the first transition out of OKAY after the fault.
	if sc.detect != "" {
		var first *event
		for _, s := range h.servers {
			for _, e := range byServer[s.k] {
				if e.From == "OKAY" && !e.Time.Before(h.faultAt) && (first == nil || e.Time.Before(first.Time)) {
					first = &e
				}
			}
		}
		if first == nil {
			t.Errorf("no OKAY -> %s after the fault", sc.detect)
		} else {
			d := first.Time.Sub(h.faultAt)
			r.detect = secs(d) + " " + first.To
			if first.To != sc.detect {
				t.Errorf("first transition after the fault: %s -> %s (%s), want -> %s", first.From, first.To, first.Reason, sc.detect)
			}
			if d > detectBound {
				t.Errorf("OKAY -> %s %v after the fault; RFC 3539 bound 2(Twinit+2s) = %v", first.To, d, detectBound)
			}
		}
	} else if r.transitions != 0 {
		t.Errorf("no transition expected (premature failover is a bug, RFC 3539 2.10), got %s", r.path)
	}

	// Failover: started after the fault, moving the pending requests. The
	// client layer's events (from_peer set) carry what moved; the peer's
	// own failover event marks Failover() even when nothing was pending.
	var fos []event // client layer: requests moved
	var started *event
	for i, e := range evs {
		if e.Type != "failover" || e.Time.After(cutoff) || e.Kind == "failback" {
			continue
		}
		if e.FromPeer != "" {
			fos = append(fos, e)
			r.moved += e.Moved
		}
		if started == nil {
			started = &evs[i]
		}
	}
	if started != nil {
		if h.faultAt.IsZero() || started.Time.Before(h.faultAt) {
			t.Errorf("failover before any fault: %+v", *started)
		} else {
			r.failover = secs(started.Time.Sub(h.faultAt))
		}
	}
	switch {
	case sc.detect == "":
		if started != nil || cr.Retransmitted != 0 {
			t.Errorf("failover with no fault that warrants it (RFC 3539 2.10): first %+v, %d retransmitted", started, cr.Retransmitted)
		}
	default:
		if started == nil {
			t.Errorf("no failover event after the fault")
		}
		if sc.movedAny && r.moved == 0 {
			t.Errorf("failover moved no request; the callers were waiting on s1: %+v", fos)
		}
		if sc.alternate {
			for _, e := range fos {
				if e.Moved > 0 && e.FromPeer == h.servers[0].url && e.ToPeer != h.servers[1].url {
					t.Errorf("failover from s1 went to %q, want the alternate %s: %+v", e.ToPeer, h.servers[1].url, e)
				}
			}
			if uint64(r.moved) > cr.Retransmitted {
				t.Errorf("moved %d, retransmitted (T flag) %d", r.moved, cr.Retransmitted)
			}
		}
	}

	// Reopen: DOWN -> REOPEN -> OKAY, three DWR/DWA exchanges (two
	// watchdog intervals at least) before the connection is in service.
	for _, k := range sc.reopen {
		checkReopen(t, h, k, byServer[k], cutoff, cr, last)
	}
	if t.Failed() {
		t.Logf("scenario notes: %s", strings.Join(h.notes, "; "))
		t.Logf("client events:\n%s", dumpEvents(evs))
	}
}

func checkReopen(t *testing.T, h *harness, k int, es []event, cutoff time.Time, cr clientReport, last []serverReport) {
	t.Helper()
	var reopen, okay *event
	for i := range es {
		e := es[i]
		if e.To == "OKAY" && e.From != "REOPEN" && e.From != "SUSPECT" {
			t.Errorf("s%d: %s -> OKAY without REOPEN (%s)", k, e.From, e.Reason)
		}
		if e.To == "REOPEN" && reopen == nil {
			reopen = &es[i]
		}
		if reopen != nil && okay == nil && e.From == "REOPEN" && e.To == "OKAY" {
			okay = &es[i]
		}
	}
	if reopen == nil || okay == nil {
		t.Errorf("s%d never went DOWN -> REOPEN -> OKAY", k)
		return
	}
	// Three DWAs: the DWR at REOPEN, then one per Tw (at least Twinit - 2 s).
	minGap := 2*(tw-2*time.Second) - 500*time.Millisecond
	if gap := okay.Time.Sub(reopen.Time); gap < minGap {
		t.Errorf("s%d REOPEN -> OKAY in %v: three DWR/DWA exchanges take at least %v", k, gap, minGap)
	} else {
		t.Logf("s%d: REOPEN at +%v, OKAY %v later", k, reopen.Time.Sub(h.faultAt).Round(100*time.Millisecond), gap.Round(100*time.Millisecond))
	}
	if st := cr.Peers[k-1]; st.DWAReceived < 3 {
		t.Errorf("s%d: client peer stats dwa_received %d, want >= 3", k, st.DWAReceived)
	}
	// The server's side of the reopened connection (the last one to
	// change state): at least 3 DWRs, and application traffic once OKAY
	// (failover mode sends to s1 again as soon as it is in service).
	conns := last[k-1].Peers
	if len(conns) == 0 {
		t.Errorf("s%d: no connection in its report", k)
		return
	}
	c := conns[0]
	for _, x := range conns {
		if x.Since.After(c.Since) {
			c = x
		}
	}
	if c.DWRReceived < 3 {
		t.Errorf("s%d: reopened connection received %d DWRs, want >= 3: %+v", k, c.DWRReceived, c)
	}
	app := int64(c.Received) - int64(c.DWRReceived) - 1 // the client's DPR
	if k == 1 && cutoff.Sub(okay.Time) > 3*time.Second && app <= 0 {
		t.Errorf("s1 back in service %v before the end but its reopened connection carried no request: %+v", cutoff.Sub(okay.Time), c)
	}
}

func dumpEvents(evs []event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %s %s %s %s>%s %s %s>%s moved=%d\n", e.Time.Format("15:04:05.000"), e.Peer, e.Kind, e.From, e.To, e.Reason, e.FromPeer, e.ToPeer, e.Moved)
	}
	return b.String()
}
