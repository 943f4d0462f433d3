package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/status"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

const demoSynopsis = `usage: aaa-peer demo [--protocol diameter] [--duration 55s] [--tw 6s] [--rate 200]
       [--concurrency 2000] [--freeze-at 4s] [--quiet] [--status ADDR]
       [--log-level error] [--log-format text|json]
       aaa-peer demo --protocol radius -h   (the RADIUS/UDP demo and its flags)

A live RFC 3539 failover demo, in this process, on 127.0.0.1: three
Diameter servers (server1..3.example.net, free ports) that share one
in-memory duplicate store, and an aaatp client balancing Accounting-
Requests over them (RFC 3074 Pearson hash of User-Name user<N>@example.net)
at --rate requests per second. The watchdog interval is --tw on every peer.
The script:
  - at --freeze-at, server2 freezes: it stops reading and writing, DWRs
    included, as a hung process would (the kernel keeps buffering). The
    client's watchdog takes it SUSPECT after about 2 Tw and replays its
    pending requests to the others with the T flag, then DOWN a Tw later;
  - 2 s after server2 went SUSPECT, server3 crashes: for half a second it
    applies the requests it reads but its answers are lost, then its
    connection is reset (RST). The client replays those requests to
    server1, whose duplicate store answers them without applying them
    again. server3 keeps listening;
  - 1 s after server2 went DOWN, it thaws. The client reconnects to both
    once per Tw and validates each connection with three DWR/DWA exchanges
    (REOPEN) before sending to it again;
  - 2 s after both are back in OKAY the traffic stops (at --duration at
    the latest), and a summary follows.
It prints a timeline as things happen, then the summary. Exit code 0 when
every request was answered and applied exactly once, 1 if any was lost or
applied twice (or the run was interrupted), 2 on a usage error.

With --status, an HTTP server shows the run live, as the client sees it:
a page with each server's watchdog state and time in state, balancer
state, pending, sent and answered, Tw and last DWA, the failover table,
and the duplicates the servers caught (/); the same as JSON
(/status.json); Prometheus metrics (/metrics). Its URL is printed with the
servers'; it stops when the demo ends.
`

const (
	demoRealm      = "example.net"
	demoClientHost = "client.example.net"
	demoServers    = 3
	demoFrozen     = 1 // server2
	demoReset      = 2 // server3
	// Script delays, counted from the client's view of server2.
	demoResetAfterSuspect = 2 * time.Second
	demoThawAfterDown     = time.Second
	demoTail              = 2 * time.Second
	demoCrashWindow       = 500 * time.Millisecond
	demoTrafficEvery      = 5 * time.Second
	demoPoll              = 20 * time.Millisecond
)

type demoOptions struct {
	duration    time.Duration
	tw          time.Duration
	freezeAt    time.Duration
	rate        float64
	concurrency int
	quiet       bool
	logLevel    string
	logFormat   string
	status      string
}

func demoFlags(o *demoOptions, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("demo", demoSynopsis, stderr)
	fs.DurationVar(&o.duration, "duration", 55*time.Second, "stop the traffic after `D` at the latest (the run ends sooner, once the script is done)")
	fs.DurationVar(&o.tw, "tw", watchdog.MinTwinit, "watchdog interval Twinit `D` of the client and the servers (RFC 3539: at least 6s; jittered by +-2s)")
	fs.DurationVar(&o.freezeAt, "freeze-at", 4*time.Second, "freeze server2 `D` after the traffic starts")
	fs.Float64Var(&o.rate, "rate", 200, "`N` requests per second, issued at that pace whatever the answers do (as many independent users would)")
	fs.IntVar(&o.concurrency, "concurrency", 2000, "at most `N` requests in flight (1 to 100000); past it, a request due is not sent, and a warning counts it (a frozen server holds its share until the failover)")
	fs.BoolVar(&o.quiet, "quiet", false, "print only the summary, not the timeline")
	logFlags(fs, &o.logLevel, &o.logFormat, "error")
	statusFlag(fs, &o.status, "printed after the servers', on stderr with --quiet")
	return fs
}

func (o *demoOptions) validate() error {
	switch {
	case o.tw < watchdog.MinTwinit:
		return usagef("--tw %v is below the RFC 3539 minimum of %v", o.tw, watchdog.MinTwinit)
	case o.duration <= 0:
		return usagef("--duration must be positive")
	case o.freezeAt < 0 || o.freezeAt >= o.duration:
		return usagef("--freeze-at must be at least 0 and below --duration")
	case !(o.rate > 0) || math.IsInf(o.rate, 0):
		return usagef("--rate must be a finite number > 0")
	case o.concurrency < 1 || o.concurrency > maxConcurrency:
		return usagef("--concurrency %d: want 1 to %d", o.concurrency, maxConcurrency)
	}
	return checkStatusAddr(o.status)
}

// demo is one run of "aaa-peer demo".
type demo struct {
	o       demoOptions
	start   time.Time
	store   *dedup.Memory
	servers []*demoServer
	gen     *loadgen
	tl      *timeline

	// applied counts the handler runs per End-to-End id, across the
	// servers, behind the duplicate store: a count of 2 is a request
	// applied twice.
	mu      sync.Mutex
	applied map[uint32]int
	runs    uint64
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	proto, args, err := protocolArg(args)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer demo: %v\n", err)
		return 2
	}
	if proto == "radius" {
		return runRadiusDemo(ctx, args, stdout, stderr)
	}
	var o demoOptions
	fs := demoFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "aaa-peer demo: %v\n", err)
		return 2
	}
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer demo: %v\n", err)
		return 2
	}
	d := &demo{o: o, start: time.Now(), store: dedup.NewMemory(), applied: make(map[uint32]int)}
	defer d.store.Close()
	tlOut := stdout
	if o.quiet {
		tlOut = io.Discard
	}
	d.tl = newTimeline(tlOut, d.start)
	defer d.tl.Close()

	// Servers.
	for i := range demoServers {
		ds, err := d.startServer(i, log)
		if err != nil {
			fmt.Fprintf(stderr, "aaa-peer demo: %v\n", err)
			d.stopServers()
			return 1
		}
		d.servers = append(d.servers, ds)
	}
	defer d.stopServers()

	// Client: an aaa-peer client run (package client, balance mode,
	// Pearson), whose Send, counters and report we reuse.
	timeout := max(30*time.Second, 5*o.tw) // longer than a freeze takes to detect (2 Tw + jitter)
	co := clientOptions{
		loadOptions: loadOptions{tw: o.tw, rate: o.rate, concurrency: o.concurrency, duration: o.duration,
			nai: "user%d@example.net", app: "acct", alg: loadbalance.Pearson,
			connectTimeout: 10 * time.Second, waitPeers: 0, clientMode: client.Balance},
		originHost: demoClientHost, originRealm: demoRealm, destRealm: demoRealm,
		timeout: timeout, dprHoldOff: peer.DefaultDPRHoldOff,
	}
	bus := client.NewBus()
	ccfg := co.clientConfig(log, transport.Options{}, bus)
	for _, ds := range d.servers {
		ccfg.Peers = append(ccfg.Peers, client.PeerSpec{URL: ds.url, Name: ds.name})
		// loadgen.ready matches its --peer values with the balancer's
		// server names: ours are the names.
		co.peers = append(co.peers, ds.name)
	}
	metrics := newMetrics(o.status)
	metrics.CountDedupHitsFrom(d.duplicates)
	defer metrics.WatchClient(bus)() // the client's peers: states, transitions, failovers
	defer logClientEvents(bus, log)()
	g, _ := newDiameterLoad(co, log, metrics)
	d.tl.watchClient(bus, d.servers)
	g.cl, err = client.New(ccfg)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer demo: %v\n", err)
		return 1
	}
	g.peers = g.cl.Peers()
	d.gen = g
	d.tl.setClient(g)
	var closeOnce sync.Once
	closeClient := func() { closeOnce.Do(g.closeClient) }
	defer closeClient()
	web, err := openStatus(o.status, status.SourceFunc(d.snapshot), metrics, log)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer demo: %v\n", err)
		return 1
	}
	defer web.Close() // early returns; idempotent

	if !o.quiet {
		fmt.Fprintf(stdout, "aaatp demo: 3 servers and 1 client on 127.0.0.1, Tw %v, %g requests/s, balanced by the RFC 3074 Pearson hash of the User-Name\n", o.tw, o.rate)
		for _, ds := range d.servers {
			fmt.Fprintf(stdout, "  %-20s %s\n", ds.name, ds.url)
		}
		if web != nil {
			fmt.Fprintf(stdout, "  %-20s %s\n", "status page", web.URL())
		}
		fmt.Fprintln(stdout)
	} else if web != nil {
		fmt.Fprintf(stderr, "aaa-peer demo: status page %s\n", web.URL())
	}
	if err := g.waitUp(ctx, co.waitPeers, co.connectTimeout); err != nil {
		fmt.Fprintf(stderr, "aaa-peer demo: %v\n", err)
		return 1
	}

	// Traffic and script.
	runCtx, stopRun := context.WithTimeout(ctx, o.duration)
	defer stopRun()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.script(runCtx, stopRun)
	}()
	began := time.Now()
	d.traffic(ctx, runCtx)
	stopRun()
	wg.Wait()
	elapsed := time.Since(began)
	interrupted := ctx.Err() != nil
	d.tl.Close() // the timeline ends here; disconnecting is not part of it
	r := g.report(0, elapsed)

	// Stop the page, thaw whatever is frozen, disconnect (DPR), then count.
	if err := web.Close(); err != nil {
		log.Error("status page", "err", err)
	}
	for _, ds := range d.servers {
		ds.thaw()
	}
	closeClient()
	d.stopServers()
	return d.summary(stdout, r, elapsed, interrupted)
}

// duplicates is how many duplicates the servers caught.
func (d *demo) duplicates() uint64 {
	var n uint64
	for _, ds := range d.servers {
		n += ds.s.dd.Duplicates.Load()
	}
	return n
}

// snapshot is the demo's status: the client's view, with the duplicates
// the servers caught.
func (d *demo) snapshot() status.Snapshot {
	s := d.gen.clientSnapshot()
	s.Role = status.RoleDemo
	s.Totals.Duplicates = d.duplicates()
	for _, ds := range d.servers {
		s.Totals.Received += ds.s.dd.Received.Load()
	}
	s.Identity.Started = d.start
	s.Identity.Info = map[string]string{
		"servers": fmt.Sprintf("%d on 127.0.0.1, one shared dedup store", len(d.servers)),
		"tw":      d.o.tw.String(), "rate": fmt.Sprintf("%g/s", d.o.rate),
		"balance": "RFC 3074 Pearson hash of the User-Name",
	}
	return s
}

// traffic issues requests at --rate until runCtx ends, open loop (each
// at its time whatever the others are doing, at most --concurrency in
// flight), and waits for those in flight. Only ctx (a signal) interrupts
// a request in flight.
func (d *demo) traffic(ctx, runCtx context.Context) {
	g := d.gen
	dl := newDeadlines(ctx, g.timeout)
	defer dl.close() // after the requests in flight
	g.openLoop(ctx, runCtx, dl, newOpenLoop(d.o.rate, d.o.concurrency, 0, g.log))
}

// countApplied counts the runs of h per End-to-End id: behind dedup.Wrap,
// each is one application of the request.
func (d *demo) countApplied(h peer.Handler) peer.Handler {
	return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		ans := h(ctx, p, req)
		if ans != nil {
			d.mu.Lock()
			d.applied[wire.EndToEnd(req)]++
			d.runs++
			d.mu.Unlock()
		}
		return ans
	}
}

// startServer starts server i+1: an aaa-peer server (its handler, dedup
// wrapper, T-flag count, peer.Server and report) on a listener of our own,
// whose connections can be frozen and reset.
func (d *demo) startServer(i int, log *slog.Logger) (*demoServer, error) {
	name := fmt.Sprintf("server%d.%s", i+1, demoRealm)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s := &server{
		o:   serverOptions{originHost: name, originRealm: demoRealm, tw: d.o.tw, dedup: "memory"},
		log: log, ended: history{max: defaultHistory},
	}
	bus := peer.NewBus()
	// As serve does, with the shared store and the count of applications.
	s.cfg = s.peerConfig(d.store, d.countApplied(s.handle), bus)
	ds := &demoServer{
		name: name, short: fmt.Sprintf("server%d", i+1), s: s, ln: ln,
		url: "tcp://" + ln.Addr().String(),
	}
	d.tl.watchServer(bus, ds)
	srv, err := peer.NewServer(&demoListener{ln: ln, ds: ds}, s.cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.start(srv, nil)
	return ds, nil
}

// stopServers stops every server as serve does on SIGTERM (DPR to every
// peer, bounded by shutdownBudget). Idempotent.
func (d *demo) stopServers() {
	for _, ds := range d.servers {
		ds.stop()
	}
}
