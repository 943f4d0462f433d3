package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// The cross-process pairs, in the order each round runs them.
var (
	pairRaw       = Pair{"raw pair (goroutine per request, batched writers)", "raw", "raw", 256}
	pairGD        = Pair{"go-diameter sm client + server", "godiameter", "godiameter", 256}
	pairAaa       = Pair{"aaa-peer client + aaa-peer server", "aaa-peer", "aaa-peer", 256}
	pairRawToAaa  = Pair{"raw client -> aaa-peer server (dedup on)", "raw", "aaa-peer", 256}
	pairAaaToRaw  = Pair{"aaa-peer client -> raw server", "aaa-peer", "raw", 256}
	pairAaaToFD   = Pair{"aaa-peer client -> freeDiameter", "aaa-peer", "freediameter", 256}
	pairPingPong  = Pair{"raw ping-pong -> inline raw server", "pingpong", "rawinline", 1}
	pairAaa1      = Pair{"aaa-peer client + aaa-peer server", "aaa-peer", "aaa-peer", 1}
	allPairs      = []Pair{pairRaw, pairGD, pairAaa, pairRawToAaa, pairAaaToRaw, pairAaaToFD, pairPingPong, pairAaa1}
	memoryPair    = pairAaa
	memoryCheckAt = []uint64{1_000_000, 10_000_000}
)

// XCell is the --json figure of one pair: medians over the runs, and the
// spread (min and max) of answers/s.
type XCell struct {
	Pair         string  `json:"pair"`
	Client       string  `json:"client"`
	Server       string  `json:"server"`
	Callers      int     `json:"callers"`
	Runs         int     `json:"runs"`
	AnswersPerS  float64 `json:"answers_per_s"`
	AnswersMin   float64 `json:"answers_per_s_min"`
	AnswersMax   float64 `json:"answers_per_s_max"`
	P50us        float64 `json:"p50_us"`
	P99us        float64 `json:"p99_us"`
	ClientCPUus  float64 `json:"client_cpu_us_per_req"`
	ServerCPUus  float64 `json:"server_cpu_us_per_req"`
	ClientRSSKiB float64 `json:"client_rss_kib"`
	ServerRSSKiB float64 `json:"server_rss_kib"`
}

// xprocResult is everything the cross-process section measured.
type xprocResult struct {
	runs    map[string][]PairResult // by pair name + callers, in round order
	order   []Pair
	skipped []string
	memory  *PairResult // nil: not measured
	memErr  string
	fdNote  string
	took    time.Duration
}

func pairKey(p Pair) string { return fmt.Sprintf("%s/%d", p.Name, p.Callers) }

// measureXproc runs every pair o.XRuns times, alternating (round after
// round), then the memory run when o.XMemory.
func measureXproc(o Options, progress io.Writer) (*xprocResult, error) {
	t0 := time.Now()
	x, err := newXprocEnv(o.aaaPeerBin)
	if err != nil {
		return nil, err
	}
	defer x.close()
	res := &xprocResult{runs: make(map[string][]PairResult)}
	pairs := o.XPairs
	if pairs == nil {
		pairs = allPairs
	}
	for _, p := range pairs {
		if p.Server == "freediameter" && x.fd == "" {
			res.skipped = append(res.skipped, p.Name+": freeDiameterd (with acl_wl.fdx) not installed")
			continue
		}
		res.order = append(res.order, p)
	}
	if x.fd != "" {
		if x.fdTestApp != "" {
			res.fdNote = "freeDiameter 1.2.1 with " + x.fdTestApp + " as the server; aaa-peer client --app test"
		} else {
			res.fdNote = "freeDiameter 1.2.1 has no test_app.fdx here (Debian's freediameter-extensions does not ship it): it answers each ACR itself with an error answer, counted as an answer (the Result-Codes are listed); aaa-peer client --app acct"
		}
	}
	n := 0
	for round := range o.XRuns {
		for _, p := range res.order {
			n++
			d := secs(o.XDuration)
			if p.Callers == 1 {
				d = secs(o.XDuration1)
			}
			r, err := x.runPair(p, d, n, nil)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s, %d callers: %w", round+1, p.Name, p.Callers, err)
			}
			if progress != nil {
				fmt.Fprintf(progress, "  round %d: %s, %d callers: %.0f answers/s\n", round+1, p.Name, p.Callers, r.AnswersPerS)
			}
			res.runs[pairKey(p)] = append(res.runs[pairKey(p)], r)
		}
	}
	if o.XMemory {
		rate := median(answersOf(res.runs[pairKey(memoryPair)]))
		if rate <= 0 {
			rate = 100_000
		}
		last := float64(memoryCheckAt[len(memoryCheckAt)-1])
		d := time.Duration(1.4*last/rate*float64(time.Second)) + 5*time.Second
		n++
		r, err := x.runPair(memoryPair, d.Round(time.Second), n, memoryCheckAt)
		switch {
		case err != nil:
			res.memErr = err.Error()
		case len(r.rssAtAnswered) < len(memoryCheckAt):
			res.memErr = fmt.Sprintf("reached only %d of %d requests in %v", r.Answers, memoryCheckAt[len(memoryCheckAt)-1], d)
			res.memory = &r
		default:
			res.memory = &r
		}
	}
	res.took = time.Since(t0)
	return res, nil
}

func answersOf(rs []PairResult) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r.AnswersPerS
	}
	return v
}

func field(rs []PairResult, f func(PairResult) float64) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return v
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread formats the median of v with its range.
func spread(v []float64, format string) string {
	return withRange(fmt.Sprintf(format, median(v)), v, format)
}

// judgedSpread is spread for a figure judged by ok: its median as shown
// shows it.
func judgedSpread(v []float64, format string, ok func(float64) bool) string {
	return withRange(shown(format, median(v), ok), v, format)
}

// withRange appends the range of v to its median m, when v has several.
func withRange(m string, v []float64, format string) string {
	if len(v) < 2 {
		return m
	}
	return fmt.Sprintf("%s ("+format+"-"+format+")", m, slices.Min(v), slices.Max(v))
}

func (x *xprocResult) cells() []XCell {
	var out []XCell
	for _, p := range x.order {
		rs := x.runs[pairKey(p)]
		a := answersOf(rs)
		out = append(out, XCell{Pair: p.Name, Client: p.Client, Server: p.Server, Callers: p.Callers, Runs: len(rs),
			AnswersPerS: median(a), AnswersMin: slices.Min(a), AnswersMax: slices.Max(a),
			P50us:        median(field(rs, func(r PairResult) float64 { return r.P50us })),
			P99us:        median(field(rs, func(r PairResult) float64 { return r.P99us })),
			ClientCPUus:  median(field(rs, func(r PairResult) float64 { return r.ClientCPUus })),
			ServerCPUus:  median(field(rs, func(r PairResult) float64 { return r.ServerCPUus })),
			ClientRSSKiB: median(field(rs, func(r PairResult) float64 { return r.ClientRSSKiB })),
			ServerRSSKiB: median(field(rs, func(r PairResult) float64 { return r.ServerRSSKiB })),
		})
	}
	return out
}

// ratios returns a/b per round (side by side), for the rounds both have.
func (x *xprocResult) ratios(a, b Pair, f func(PairResult) float64) []float64 {
	ra, rb := x.runs[pairKey(a)], x.runs[pairKey(b)]
	var v []float64
	for i := range min(len(ra), len(rb)) {
		if f(rb[i]) > 0 {
			v = append(v, f(ra[i])/f(rb[i]))
		}
	}
	return v
}

func (x *xprocResult) values(p Pair, f func(PairResult) float64) []float64 {
	return field(x.runs[pairKey(p)], f)
}

func printXproc(w io.Writer, o Options, x *xprocResult) {
	fmt.Fprintf(w, "## Cross-process pairs (each process alone, loopback TCP, one connection; %d run(s) each, alternating; %.1f s per run at 256 callers, %.1f s at 1)\n\n",
		o.XRuns, o.XDuration, o.XDuration1)
	fmt.Fprintln(w, "| pair | callers | answers/s: median (min-max) | p50 us | p99 us | client cpu us/req | server cpu us/req | client RSS MiB | server RSS MiB |")
	fmt.Fprintln(w, "|------|--------:|------:|------:|------:|------:|------:|------:|------:|")
	for _, p := range x.order {
		rs := x.runs[pairKey(p)]
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", p.Name, p.Callers,
			spread(answersOf(rs), "%.0f"),
			spread(field(rs, func(r PairResult) float64 { return r.P50us }), "%.0f"),
			spread(field(rs, func(r PairResult) float64 { return r.P99us }), "%.0f"),
			spread(field(rs, func(r PairResult) float64 { return r.ClientCPUus }), "%.2f"),
			spread(field(rs, func(r PairResult) float64 { return r.ServerCPUus }), "%.2f"),
			spread(field(rs, func(r PairResult) float64 { return r.ClientRSSKiB / 1024 }), "%.0f"),
			spread(field(rs, func(r PairResult) float64 { return r.ServerRSSKiB / 1024 }), "%.0f"))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU: utime+stime of each process from /proc/PID/stat (10 ms ticks) between the client's first progress line (t=1s, after connecting and warming up) and its last, divided by the answers in that window; RSS: VmRSS at the last line; p50/p99: client-side over the whole run. "+
		"raw: benchcmp's raw client (CER/CEA first, 256 callers queueing to one batched writer) and raw server (a goroutine per request, one batched writer); raw ping-pong: one goroutine write/read against the inline raw server; go-diameter: v4.0.4 sm.Client + diam.Server/sm (benchcmp's); aaa-peer: the binary built from this tree, client with --concurrency N --duration, server with its defaults (memory dedup on, Nagle on).")
	if x.fdNote != "" {
		fmt.Fprintln(w, x.fdNote+".")
		if rs := x.runs[pairKey(pairAaaToFD)]; len(rs) > 0 && rs[0].ResultCodes != "" {
			fmt.Fprintf(w, "freeDiameter answered (first run): %s.\n", rs[0].ResultCodes)
		}
	}
	for _, s := range x.skipped {
		fmt.Fprintf(w, "Skipped: %s.\n", s)
	}
	fmt.Fprintln(w)
}

// xTargets appends the cross-process target lines to the scale
// table (one row each; ratios are per round, median and range).
func xTargets(w io.Writer, x *xprocResult) {
	ans := func(r PairResult) float64 { return r.AnswersPerS }
	p50 := func(r PairResult) float64 { return r.P50us }
	srvCPU := func(r PairResult) float64 { return r.ServerCPUus }
	cliCPU := func(r PairResult) float64 { return r.ClientCPUus }
	row := func(what string, v []float64, format, target string, ok func(float64) bool) {
		if len(v) == 0 {
			fmt.Fprintf(w, "| %s | - | %s | not measured |\n", what, target)
			return
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", what, judgedSpread(v, format, ok), target, verdict(ok(median(v))))
	}
	row("xproc 256 callers: aaa-peer pair / go-diameter pair answers/s", x.ratios(pairAaa, pairGD, ans), "%.2fx", ">= 3x", func(v float64) bool { return v >= 3 })
	row("xproc 256 callers: aaa-peer pair / raw pair answers/s", x.ratios(pairAaa, pairRaw, ans), "%.2fx", ">= 0.8x", func(v float64) bool { return v >= 0.8 })
	row("xproc aaa-peer server CPU us/req, raw client, dedup on", x.values(pairRawToAaa, srvCPU), "%.2f", "<= 2.5", func(v float64) bool { return v <= 2.5 })
	row("xproc aaa-peer client CPU us/req, raw server", x.values(pairAaaToRaw, cliCPU), "%.2f", "<= 3", func(v float64) bool { return v <= 3 })
	row("xproc aaa-peer client CPU us/req, aaa-peer server", x.values(pairAaa, cliCPU), "%.2f", "<= 3", func(v float64) bool { return v <= 3 })
	// The two CPU targets above are microseconds, which depend on the
	// machine; these lines put each process beside the raw Go process in
	// its place, measured in the same rounds, so that a reader can tell
	// the code from the machine. They judge nothing.
	beside := func(what string, v, raw []float64, rawWhat string) {
		if len(v) == 0 {
			return
		}
		fmt.Fprintf(w, "| %s | %s | (%s: %s us) | |\n", what, spread(v, "%.2fx"), rawWhat, spread(raw, "%.2f"))
	}
	beside("xproc aaa-peer server CPU / raw server CPU, both under the raw client (context)",
		x.ratios(pairRawToAaa, pairRaw, srvCPU), x.values(pairRaw, srvCPU), "raw server")
	beside("xproc aaa-peer client CPU / raw client CPU, both against the raw server (context)",
		x.ratios(pairAaaToRaw, pairRaw, cliCPU), x.values(pairRaw, cliCPU), "raw client")
	row("xproc 1 caller: aaa-peer pair p50 / raw ping-pong p50", x.ratios(pairAaa1, pairPingPong, p50), "%.2fx", "<= 1.2x", func(v float64) bool { return v <= 1.2 })
	if _, ok := x.runs[pairKey(pairAaaToFD)]; ok || len(x.skipped) > 0 {
		row("xproc aaa-peer server / freeDiameter answers/s, aaa-peer client", x.ratios(pairAaa, pairAaaToFD, ans), "%.2fx", ">= 5x", func(v float64) bool { return v >= 5 })
	}
	row("xproc client RSS MiB, 1 connection, 256 callers", x.values(pairAaa, func(r PairResult) float64 { return r.ClientRSSKiB / 1024 }), "%.0f", "< 64", func(v float64) bool { return v < 64 })
	if m := x.memory; m != nil && len(m.rssAtAnswered) == len(memoryCheckAt) {
		a, b := m.rssAtAnswered[0], m.rssAtAnswered[1]
		row("xproc client RSS after 10M / after 1M distinct sessions", []float64{b.client / a.client}, "%.2fx", "<= 1.1x", func(v float64) bool { return v <= 1.1 })
		row("xproc server RSS after 10M / after 1M distinct sessions", []float64{b.server / a.server}, "%.2fx", "<= 1.1x", func(v float64) bool { return v <= 1.1 })
	} else if x.memErr != "" {
		fmt.Fprintf(w, "| xproc RSS after 10M / after 1M | - | <= 1.1x | NOT MEASURED: %s |\n", strings.ReplaceAll(x.memErr, "|", "/"))
	}
}

func printMemory(w io.Writer, x *xprocResult) {
	m := x.memory
	if m == nil {
		return
	}
	var parts []string
	for _, s := range m.rssAtAnswered {
		parts = append(parts, fmt.Sprintf("after %d answers: client %.1f MiB, server %.1f MiB", s.answered, s.client/1024, s.server/1024))
	}
	fmt.Fprintf(w, "Memory run (%s, 256 callers, every request a new Session-Id and NAI, %.0f answers/s): %s.\n",
		m.Name, m.AnswersPerS, strings.Join(parts, "; "))
}
