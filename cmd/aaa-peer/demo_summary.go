package main

// This file: the demo's closing summary.

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// summary prints the counts of the run and returns the exit code: 1 if a
// request was lost (failed, or answered without being applied) or
// applied twice, or the run was interrupted.
func (d *demo) summary(w io.Writer, r clientReport, elapsed time.Duration, interrupted bool) int {
	d.mu.Lock()
	distinct, runs := len(d.applied), d.runs
	twice := 0
	for _, n := range d.applied {
		if n > 1 {
			twice++
		}
	}
	d.mu.Unlock()
	var dups uint64
	reports := make([]serverReport, len(d.servers))
	for i, ds := range d.servers {
		reports[i] = ds.s.report(0)
		dups += reports[i].Duplicates
	}
	pending := r.Sent - r.Answered - r.Failed

	fmt.Fprintf(w, "\nsummary: %.1f s of traffic at %g requests/s, Tw %v\n", elapsed.Seconds(), d.o.rate, d.o.tw)
	row := func(label string, n uint64, note string) {
		fmt.Fprintf(w, "  %-18s %7d   %s\n", label, n, note)
	}
	row("requests sent", r.Sent, "")
	row("answered", r.Answered, fmt.Sprintf("latency p50 %s, p99 %s, max %s",
		fmtUs(float64(r.LatencyUS.P50)), fmtUs(float64(r.LatencyUS.P99)), fmtUs(float64(r.LatencyUS.Max))))
	row("failed", r.Failed, failedNote(r.FailedBy))
	if pending > 0 {
		row("unfinished", pending, "")
	}
	row("moved by failover", r.Retransmitted, fmt.Sprintf("replayed by the client to another server with the T flag (%d failover records)", r.FailoversTotal))
	row("duplicates caught", dups, "at the servers: answered from the shared dedup store, not applied again")
	row("applied", uint64(distinct), fmt.Sprintf("distinct End-to-End ids the servers' handler ran for (%d runs)", runs))
	row("applied twice", uint64(twice), "")

	fmt.Fprintf(w, "\n  %-20s %-7s %7s %8s %6s %7s %8s %8s   | %8s %6s %7s %10s\n",
		"client's view", "state", "sent", "answered", "failed", "moved", "mean", "p99", "received", "T flag", "applied", "duplicates")
	for i, st := range r.Servers {
		sr := reports[i]
		fmt.Fprintf(w, "  %-20s %-7s %7d %8d %6d %7d %8s %8s   | %8d %6d %7d %10d\n",
			d.servers[i].name, st.State, st.Sent, st.Answered, st.Failed, st.FailedOver,
			fmtUs(st.MeanUs), fmtUs(st.P99Us), sr.Received, sr.Retransmitted, sr.Applied, sr.Duplicates)
	}
	fmt.Fprintln(w, "  (left, the client: requests first sent to the server, their outcome, how many it moved away,")
	fmt.Fprintln(w, "   the latency of the answers the server gave; right, the server: requests it read, of those with the T flag, applied, duplicates)")

	var problems []string
	if r.Failed > 0 || pending > 0 {
		problems = append(problems, fmt.Sprintf("%d requests lost", r.Failed+pending))
	}
	if uint64(distinct) != r.Answered && r.Failed == 0 {
		problems = append(problems, fmt.Sprintf("%d answered but %d applied", r.Answered, distinct))
	}
	if twice > 0 {
		problems = append(problems, fmt.Sprintf("%d requests applied twice", twice))
	}
	if interrupted {
		problems = append(problems, "interrupted")
	}
	fmt.Fprintln(w)
	if len(problems) > 0 {
		fmt.Fprintf(w, "FAIL: %s\n", strings.Join(problems, "; "))
		return 1
	}
	fmt.Fprintln(w, "OK: every request answered, and applied exactly once")
	return 0
}

func failedNote(by map[string]uint64) string {
	var parts []string
	for _, k := range sortedNames(by) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, by[k]))
	}
	return strings.Join(parts, ", ")
}

// fmtUs formats microseconds for a table.
func fmtUs(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.1f s", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.1f ms", us/1e3)
	}
	return fmt.Sprintf("%.0f us", us)
}

// sortedNames returns the keys of m, sorted.
func sortedNames(m map[string]uint64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
