// Command bench is aaatp's benchmark harness: in one run, on
// loopback, it measures request/answer round trips of a raw TCP bound,
// go-diameter v4.0.4 and aaatp over the same ACR bytes with 1, 16 and 256
// callers, then the failover of 10k pending requests, 10k idle peers, the
// balancer's Pick and the dedup store. See README.md.
//
//	go run ./test/bench [--quick] [--json FILE]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
)

func main() {
	if role := os.Getenv(roleEnv); role != "" {
		if err := runRole(role, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench role:", err)
			os.Exit(1)
		}
		return
	}
	if os.Getenv(idleServerEnv) != "" {
		if err := idleServer(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "idle server:", err)
			os.Exit(1)
		}
		return
	}
	quick := flag.Bool("quick", false, "short run for CI (about 30 s; 1k idle peers, 100k dedup entries); asserts no speed")
	jsonOut := flag.String("json", "", "also write the numbers as JSON to this `file`")
	only := flag.String("only", "", "profiling aid: run one `section` only (roundtrip, idle, idlebig, failover, micro, radius, xproc); no JSON")
	aaaPeer := flag.String("aaa-peer", "", "cross-process pairs: run this aaa-peer `binary` instead of building ./cmd/aaa-peer (to compare builds)")
	pairs := flag.String("pairs", "", "cross-process pairs: run only these (and not the memory run), comma-separated `CLIENT+SERVER` (clients aaa-peer, raw, godiameter, pingpong; servers aaa-peer, raw, rawinline, godiameter, freediameter)")
	xruns := flag.Int("xruns", 0, "cross-process pairs: runs of each pair (default 3, 1 with --quick)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run to `file`")
	memProfile := flag.String("memprofile", "", "write a heap profile at the end of the run to `file` (with --only idle: taken while the peers are connected)")
	flag.Parse()
	log.SetOutput(io.Discard) // go-diameter logs benign accept errors on close
	opts := fullOptions()
	if *quick {
		opts = quickOptions()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	opts.memProfile = *memProfile
	opts.aaaPeerBin = *aaaPeer
	if *pairs != "" {
		opts.XMemory = false // the 10M-request run goes with the full set only
		for _, want := range strings.Split(*pairs, ",") {
			n := len(opts.XPairs)
			for _, p := range allPairs {
				if p.Client+"+"+p.Server == strings.TrimSpace(want) {
					opts.XPairs = append(opts.XPairs, p)
				}
			}
			if len(opts.XPairs) == n {
				fmt.Fprintf(os.Stderr, "bench: --pairs: no pair %q\n", want)
				os.Exit(2)
			}
		}
	}
	if *xruns > 0 {
		opts.XRuns = *xruns
	}
	if *only != "" {
		if err := runOnly(opts, *only, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if _, err := run(opts, os.Stdout, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// Options sizes a run.
type Options struct {
	Name            string
	RoundTrip       float64 // seconds measured per (impl, callers) cell
	Warmup          float64 // seconds of warm-up per cell
	Callers         []int
	FailoverPending int
	FailoverRuns    int
	IdlePeers       int
	IdlePeersBig    int     // a second idle run with this many peers (0: none)
	IdleTw          float64 // seconds
	IdleWindow      float64 // seconds of idle CPU measurement
	DedupEntries    int
	// Cross-process pairs: runs of each (alternating), seconds per run at
	// 256 callers and at 1, the 10M-request memory run, the pairs (nil:
	// all).
	XRuns      int
	XDuration  float64
	XDuration1 float64
	XMemory    bool
	XPairs     []Pair

	memProfile string // --memprofile
	aaaPeerBin string // --aaa-peer
}

func fullOptions() Options {
	return Options{Name: "full", RoundTrip: 3, Warmup: 0.5, Callers: []int{1, 16, 256},
		FailoverPending: 10_000, FailoverRuns: 5,
		IdlePeers: 10_000, IdlePeersBig: 100_000, IdleTw: 30, IdleWindow: 30,
		DedupEntries: 1 << 20,
		XRuns:        3, XDuration: 8, XDuration1: 4, XMemory: true}
}

func quickOptions() Options {
	return Options{Name: "quick", RoundTrip: 1, Warmup: 0.2, Callers: []int{1, 16, 256},
		FailoverPending: 10_000, FailoverRuns: 1,
		IdlePeers: 1_000, IdleTw: 30, IdleWindow: 2,
		DedupEntries: 100_000,
		XRuns:        1, XDuration: 2.5, XDuration1: 2.5}
}

// Report is the --json output; its shape is fixed: scripts read it.
type Report struct {
	Results            []Cell  `json:"results"`
	FailoverMs         float64 `json:"failover_10k_ms"`
	IdlePeerKiB        float64 `json:"idle_peer_kib"`
	IdleCPUPct         float64 `json:"idle_cpu_pct"`
	PickNs             float64 `json:"pick_ns"`
	DedupNs            float64 `json:"dedup_ns"`
	DedupBytesPerEntry float64 `json:"dedup_bytes_per_entry"`
	CrossProcess       []XCell `json:"cross_process"`
	// IdleBig is the large idle run (100k peers), absent in quick mode.
	IdleBig *IdleFigures `json:"idle_big,omitempty"`
	// Radius is the RADIUS/TCP section.
	Radius *RadiusFigures `json:"radius,omitempty"`
}

// IdleFigures are one idle run's per-peer RSS and CPU (both processes).
type IdleFigures struct {
	Peers            int     `json:"peers"`
	ClientKiBPerPeer float64 `json:"client_kib_per_peer"`
	ServerKiBPerPeer float64 `json:"server_kib_per_peer"`
	CPUPct           float64 `json:"cpu_pct"`
}

// Cell is one (impl, callers) measurement.
type Cell struct {
	Impl         string  `json:"impl"`
	Callers      int     `json:"callers"`
	AnswersPerS  float64 `json:"answers_per_s"`
	P50us        float64 `json:"p50_us"`
	P99us        float64 `json:"p99_us"`
	CPUusPerReq  float64 `json:"cpu_us_per_req"`
	AllocsPerReq float64 `json:"allocs_per_req"`
}

// run measures everything, prints the markdown report to w and writes the
// JSON to jsonPath when it is not empty.
func run(o Options, w io.Writer, jsonPath string) (*Report, error) {
	fdLimit := raiseNoFile(max(o.IdlePeers, o.IdlePeersBig) + fdHeadroom)
	printHeader(w, o)
	var rep Report
	// Idle peers first: the RSS baseline is cleanest in a young process.
	idle, err := measureIdle(o, o.IdlePeers)
	if err != nil {
		return nil, fmt.Errorf("idle peers: %w", err)
	}
	var idleBig *idleResult
	if o.IdlePeersBig > 0 {
		big := min(o.IdlePeersBig, fdLimit-fdHeadroom)
		fmt.Fprintf(os.Stderr, "bench: %d idle peers (RLIMIT_NOFILE %d)\n", big, fdLimit)
		if idleBig, err = measureIdle(o, big); err != nil {
			return nil, fmt.Errorf("%d idle peers: %w", big, err)
		}
		idleBig.wanted, idleBig.fdLimit = o.IdlePeersBig, fdLimit
		rep.IdleBig = &IdleFigures{Peers: idleBig.peers, ClientKiBPerPeer: idleBig.clientKiBPerPeer,
			ServerKiBPerPeer: idleBig.serverKiBPerPeer, CPUPct: idleBig.cpuPct}
	}
	rt, pp, err := measureRoundTrips(o, w)
	if err != nil {
		return nil, fmt.Errorf("round trips: %w", err)
	}
	rep.Results = rt
	a256, _ := find(rt, "aaatp", 256)
	if rep.Radius, err = measureRadius(o, a256.AnswersPerS); err != nil {
		return nil, fmt.Errorf("radius: %w", err)
	}
	fmt.Fprintln(os.Stderr, "bench: cross-process pairs")
	xp, err := measureXproc(o, os.Stderr)
	if err != nil {
		return nil, fmt.Errorf("cross-process pairs: %w", err)
	}
	rep.CrossProcess = xp.cells()
	fo, err := measureFailover(o)
	if err != nil {
		return nil, fmt.Errorf("failover: %w", err)
	}
	pick, err := measurePick()
	if err != nil {
		return nil, fmt.Errorf("pick: %w", err)
	}
	dd, err := measureDedup(o)
	if err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	rep.FailoverMs = fo.meanMs
	rep.IdlePeerKiB = idle.clientKiBPerPeer
	rep.IdleCPUPct = idle.cpuPct
	rep.PickNs = pick.knownNs
	rep.DedupNs = dd.beginIntoNs
	rep.DedupBytesPerEntry = dd.bytesPerEntry
	printReport(w, o, &rep, pp, fo, idle, idleBig, pick, dd, xp)
	printRadius(w, rep.Radius)
	if jsonPath != "" {
		b, err := json.MarshalIndent(&rep, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
			return nil, err
		}
	}
	return &rep, nil
}

// runOnly runs one section and prints its raw numbers (a profiling aid).
func runOnly(o Options, section string, w io.Writer) error {
	fdLimit := raiseNoFile(max(o.IdlePeers, o.IdlePeersBig) + fdHeadroom)
	var v any
	var err error
	switch section {
	case "roundtrip":
		var cells []Cell
		var pp Cell
		cells, pp, err = measureRoundTrips(o, w)
		v = append([]Cell{pp}, cells...)
	case "idle":
		v, err = measureIdle(o, o.IdlePeers)
	case "idlebig":
		v, err = measureIdle(o, min(max(o.IdlePeersBig, o.IdlePeers), fdLimit-fdHeadroom))
	case "failover":
		v, err = measureFailover(o)
	case "xproc":
		var x *xprocResult
		if x, err = measureXproc(o, os.Stderr); err == nil {
			printXproc(w, o, x)
			fmt.Fprintln(w, "| measure | value | target | |")
			fmt.Fprintln(w, "|---------|------:|-------:|-|")
			xTargets(w, x)
			printMemory(w, x)
			return nil
		}
	case "radius":
		var f *RadiusFigures
		if f, err = measureRadius(o, 0); err == nil {
			printRadius(w, f)
			return nil
		}
	case "micro":
		var p *pickResult
		var d *dedupResult
		if p, err = measurePick(); err == nil {
			d, err = measureDedup(o)
		}
		if err == nil {
			v = []any{*p, *d} // the values, not their addresses
		}
	default:
		return fmt.Errorf("--only %q: want roundtrip, idle, idlebig, failover, micro, radius or xproc", section)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%+v\n", v)
	if o.memProfile != "" && section != "idle" {
		return writeHeapProfile(o.memProfile)
	}
	return nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.WriteHeapProfile(f)
}
