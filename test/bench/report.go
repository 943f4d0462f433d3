package main

import (
	"fmt"
	"io"
	"regexp"
	"strconv"

	"github.com/aaatp/aaatp/test/benchcmp"
)

func ratio(a, b float64) string {
	if b < 0.1 { // allocs/req of raw: 0
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// shown formats v, a figure judged by ok, with format (one %.Nf verb and
// a suffix: "%.2f", "%.2fx"). Should the rounded figure and v itself fall
// on different sides of the target (2.9954 against ">= 3" shows as
// 3.00), decimals are added until they agree, up to the shortest text
// that reads back as v exactly: a missed target never shows a figure that
// meets it, nor the reverse.
func shown(format string, v float64, ok func(float64) bool) string {
	m := precision.FindStringSubmatchIndex(format)
	if m == nil {
		return fmt.Sprintf(format, v)
	}
	prefix, suffix := format[:m[0]], format[m[1]:]
	digits, _ := strconv.Atoi(format[m[2]:m[3]])
	for end := digits + 4; digits <= end; digits++ {
		num := strconv.FormatFloat(v, 'f', digits, 64)
		if r, err := strconv.ParseFloat(num, 64); err == nil && ok(r) == ok(v) {
			return prefix + num + suffix
		}
	}
	return prefix + strconv.FormatFloat(v, 'f', -1, 64) + suffix
}

// precision finds the %.Nf verb of a format.
var precision = regexp.MustCompile(`%\.(\d+)f`)

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// targetRatio prints the target line of the ratio a/b, judged by ok.
func targetRatio(w io.Writer, what string, a, b float64, target string, ok func(float64) bool) {
	if b <= 0 {
		fmt.Fprintf(w, "| %s | - | %s | not measured |\n", what, target)
		return
	}
	judged(w, what, "%.2fx", a/b, target, ok)
}

// judged prints the target line of v, judged by ok.
func judged(w io.Writer, what, format string, v float64, target string, ok func(float64) bool) {
	fmt.Fprintf(w, "| %s | %s | %s | %s |\n", what, shown(format, v, ok), target, verdict(ok(v)))
}

func find(cells []Cell, impl string, callers int) (Cell, bool) {
	for _, c := range cells {
		if c.Impl == impl && c.Callers == callers {
			return c, true
		}
	}
	return Cell{}, false
}

func printReport(w io.Writer, o Options, rep *Report, pp Cell, fo *failoverResult, idle, idleBig *idleResult, pick *pickResult, dd *dedupResult, xp *xprocResult) {
	fmt.Fprintf(w, "## Round trips (ACR %d B / ACA %d B, one connection, %.1f s per row)\n\n", len(benchcmp.ACR()), len(benchcmp.ACA()), o.RoundTrip)
	fmt.Fprintln(w, "| impl | callers | answers/s | p50 us | p99 us | cpu us/req | allocs/req |")
	fmt.Fprintln(w, "|------|--------:|----------:|-------:|-------:|-----------:|-----------:|")
	row := func(c Cell) {
		fmt.Fprintf(w, "| %s | %d | %.0f | %.1f | %.1f | %.2f | %.2f |\n", c.Impl, c.Callers, c.AnswersPerS, c.P50us, c.P99us, c.CPUusPerReq, c.AllocsPerReq)
	}
	row(pp)
	for _, c := range rep.Results {
		row(c)
	}
	for _, n := range o.Callers {
		a, _ := find(rep.Results, "aaatp", n)
		for _, other := range []string{"go-diameter", "raw"} {
			b, ok := find(rep.Results, other, n)
			if !ok {
				continue
			}
			fmt.Fprintf(w, "| aaatp/%s | %d | %s | %s | %s | %s | %s |\n", other, n,
				ratio(a.AnswersPerS, b.AnswersPerS), ratio(a.P50us, b.P50us), ratio(a.P99us, b.P99us),
				ratio(a.CPUusPerReq, b.CPUusPerReq), ratio(a.AllocsPerReq, b.AllocsPerReq))
		}
	}
	if a, ok := find(rep.Results, "aaatp", 1); ok {
		fmt.Fprintf(w, "| aaatp/raw ping-pong | 1 | %s | %s | %s | %s | %s |\n",
			ratio(a.AnswersPerS, pp.AnswersPerS), ratio(a.P50us, pp.P50us), ratio(a.P99us, pp.P99us),
			ratio(a.CPUusPerReq, pp.CPUusPerReq), ratio(a.AllocsPerReq, pp.AllocsPerReq))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "raw: one write per request under a mutex, one reader goroutine matching Hop-by-Hop ids; raw ping-pong: one goroutine write/read (not in the JSON, whose impls are raw, go-diameter, aaatp); go-diameter: v4.0.4 sm.Client + diam.Server/sm; aaatp: peer.Dial + peer.Listen (one client Peer, default Config: Nagle on), not client.Client. Client and server share the process: cpu and allocs count both sides.")
	fmt.Fprintln(w)

	printXproc(w, o, xp)
	fmt.Fprintln(w, "## Scale")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| measure | value | target | |")
	fmt.Fprintln(w, "|---------|------:|-------:|-|")
	if a, ok := find(rep.Results, "aaatp", 256); ok {
		g, _ := find(rep.Results, "go-diameter", 256)
		r, _ := find(rep.Results, "raw", 256)
		targetRatio(w, "256 callers: aaatp / go-diameter answers/s", a.AnswersPerS, g.AnswersPerS, ">= 3x", func(v float64) bool { return v >= 3 })
		targetRatio(w, "256 callers: aaatp / raw answers/s", a.AnswersPerS, r.AnswersPerS, ">= 0.75x", func(v float64) bool { return v >= 0.75 })
	}
	if a, ok := find(rep.Results, "aaatp", 1); ok {
		targetRatio(w, "1 caller: aaatp p50 / raw ping-pong p50", a.P50us, pp.P50us, "<= 1.3x", func(v float64) bool { return v <= 1.3 })
	}
	xTargets(w, xp)
	judged(w, fmt.Sprintf("failover of %.0f pending (ms, mean of %d; min %.2f, max %.2f)", fo.pending, len(fo.runs), fo.minMs, fo.maxMs), "%.2f", fo.meanMs, "<= 20", func(v float64) bool { return v <= 20 })
	judged(w, fmt.Sprintf("%d idle client peers: RSS per peer (KiB)", idle.peers), "%.2f", idle.clientKiBPerPeer, "<= 16", func(v float64) bool { return v <= 16 })
	judged(w, fmt.Sprintf("%d idle peers: CPU, client + server (%% of a core)", idle.peers), "%.3f", idle.cpuPct, "< 2", func(v float64) bool { return v < 2 })
	if idleBig != nil {
		fmt.Fprintf(w, "| %d idle client peers: RSS per peer (KiB) | %.2f | (%d peers: %.2f) | |\n", idleBig.peers, idleBig.clientKiBPerPeer, idle.peers, idle.clientKiBPerPeer)
		fmt.Fprintf(w, "| %d idle peers: server RSS per accepted peer (KiB) | %.2f | (%d peers: %.2f) | |\n", idleBig.peers, idleBig.serverKiBPerPeer, idle.peers, idle.serverKiBPerPeer)
		fmt.Fprintf(w, "| %d idle peers: CPU, client + server (%% of a core) | %.3f | (%d peers: %.3f) | |\n", idleBig.peers, idleBig.cpuPct, idle.peers, idle.cpuPct)
	}
	judged(w, "Pick, 30-byte NAI + remembered Session-Id, 8 servers (ns)", "%.1f", pick.knownNs, "<= 100", func(v float64) bool { return v <= 100 })
	judged(w, fmt.Sprintf("dedup lookup + insert (BeginInto, as Wrap), %d entries (ns)", dd.entries), "%.1f", dd.beginIntoNs, "<= 250", func(v float64) bool { return v <= 250 })
	judged(w, fmt.Sprintf("dedup bytes per entry, %d entries, %d-byte ACA stored", dd.entries, dd.answerLen), "%.1f", dd.bytesPerEntry, "<= 200", func(v float64) bool { return v <= 200 })
	fmt.Fprintln(w)
	if idle.peers != 10_000 {
		fmt.Fprintf(w, "Idle peers: %d, not 10k (%s mode).\n", idle.peers, o.Name)
	}
	fmt.Fprintf(w, "Idle peers: client peers (peer.Dial, Tw %.0f s) in this process, one aaatp server in a child process; connected in %v; "+
		"client RSS %.2f KiB/peer (Go heap in use + stacks %.2f KiB/peer, of which stacks %.2f; %.2f goroutines/peer), server RSS %.2f KiB/peer; "+
		"CPU over %v idle: client %.3f%%, server %.3f%% of a core, %d DWRs sent in the window (about peers x window / Tw expected).\n",
		o.IdleTw, idle.connectTime.Round(1e6), idle.clientKiBPerPeer, idle.clientHeapStackPerPeer, idle.clientStackPerPeer, idle.goroutinesPerPeer, idle.serverKiBPerPeer,
		idle.window, idle.clientCPUPct, idle.serverCPUPct, idle.dwrExchanges)
	if idleBig != nil {
		fmt.Fprintf(w, "Idle peers, large run: %d client peers dialing from %d loopback source addresses (127.0.0.1 up, %d each), the same server child; connected in %v; client RSS %.2f KiB/peer (heap + stacks %.2f KiB/peer), server RSS %.2f KiB/peer; CPU over %v idle: client %.3f%%, server %.3f%% of a core, %d DWRs in the window.\n",
			idleBig.peers, (idleBig.peers+perSourceAddr-1)/perSourceAddr, perSourceAddr, idleBig.connectTime.Round(1e6), idleBig.clientKiBPerPeer, idleBig.clientHeapStackPerPeer,
			idleBig.serverKiBPerPeer, idleBig.window, idleBig.clientCPUPct, idleBig.serverCPUPct, idleBig.dwrExchanges)
		if idleBig.peers < idleBig.wanted {
			fmt.Fprintf(w, "The large idle run has %d peers, not %d: RLIMIT_NOFILE is %d in this process and its hard limit cannot be raised here (no CAP_SYS_RESOURCE); each process holds one socket per peer.\n",
				idleBig.peers, idleBig.wanted, idleBig.fdLimit)
		}
	}
	printMemory(w, xp)
	fmt.Fprintf(w, "Failover: client.Client PrimarySecondary, from the primary's connection close to the last pending request written on the alternate (as client.BenchmarkFailover10k), after a collection of the setup's garbage.\n")
	fmt.Fprintf(w, "Pick: NAI only %.1f ns; NAI + remembered Session-Id (one server of 8 down, the NAI in a bucket its return takes) %.1f ns (%.0f allocs/op; the JSON figure); every server in service, NAI + a first-seen Session-Id each time (not remembered) %.1f ns.\n", pick.naiOnlyNs, pick.knownNs, pick.allocs, pick.firstSeenNs)
	fmt.Fprintf(w, "Dedup: dedup.Memory; a new key in the full store (miss + insert + eviction) through BeginInto with a recycled Outcome, the path of dedup.Wrap, %.1f ns (the JSON figure); through Begin, which allocates the Outcome, %.1f ns, %.0f allocs/op (Outcomes come 16 to an allocation); Begin + Complete %.1f ns; memory per completed entry %.1f B with a %d-byte answer.\n",
		dd.beginIntoNs, dd.beginNs, dd.beginAllocsPerOp, dd.beginCompleteNs, dd.bytesPerEntry, dd.answerLen)
}
