package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	fs.IntVar(&o.concurrency, "concurrency", 2000, "at most `N` requests in flight; past it, new requests wait (a frozen server holds its share until the failover)")
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
	case o.concurrency < 1:
		return usagef("--concurrency must be at least 1")
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
		originHost: demoClientHost, originRealm: demoRealm, destRealm: demoRealm,
		tw: o.tw, rate: o.rate, concurrency: o.concurrency, duration: o.duration,
		nai: "user%d@example.net", app: "acct", timeout: timeout,
		connectTimeout: 10 * time.Second, waitPeers: 0,
		clientMode: client.Balance, alg: loadbalance.Pearson,
		dprHoldOff: peer.DefaultDPRHoldOff,
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
	g := newLoadgen(co, log, metrics)
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
	if err := g.waitUp(ctx); err != nil {
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
	s.Totals.Received = 0
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

// traffic issues requests at --rate until runCtx ends, at most
// --concurrency in flight, and waits for those in flight. Only ctx (a
// signal) interrupts a request in flight.
func (d *demo) traffic(ctx, runCtx context.Context) {
	g := d.gen
	pace := newPacer(d.o.rate)
	sem := make(chan struct{}, d.o.concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for pace.wait(runCtx) {
		select {
		case sem <- struct{}{}:
		case <-runCtx.Done():
			return
		}
		n := g.issued.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			g.one(ctx, n)
		}()
	}
}

// script freezes server2, resets server3 and thaws server2 as the
// client's watchdog sees them, then ends the run (stop) once both are
// back in service.
func (d *demo) script(ctx context.Context, stop func()) {
	defer stop()
	frozen, reset := d.servers[demoFrozen], d.servers[demoReset]
	pf, pr := d.gen.peers[demoFrozen], d.gen.peers[demoReset]
	if !sleepCtx(ctx, d.o.freezeAt) {
		return
	}
	frozen.freeze()
	d.tl.note(frozen.name, "frozen (stops reading and writing: no answers, no DWAs; the kernel keeps buffering)")
	if !waitFor(ctx, func() bool { return pf.State() != watchdog.Okay }) {
		return
	}
	if !sleepCtx(ctx, demoResetAfterSuspect) {
		return
	}
	d.tl.note(reset.name, fmt.Sprintf("crashing: still applies what it reads, but its answers are lost; reset in %v", demoCrashWindow))
	reset.mute()
	sleepCtx(ctx, demoCrashWindow) // reset even when interrupted
	reset.mu.Lock()
	n := len(reset.conns)
	reset.mu.Unlock()
	d.tl.note(reset.name, fmt.Sprintf("reset: %d connection(s) closed abruptly (RST), as a crash would; still listening", n))
	reset.reset()
	if !waitFor(ctx, func() bool { return pf.State() == watchdog.Down }) {
		return
	}
	if !sleepCtx(ctx, demoThawAfterDown) {
		return
	}
	buffered, dropped := frozen.thaw()
	switch {
	case dropped > 0:
		d.tl.note(frozen.name, fmt.Sprintf("thawed; it had given its connection up meanwhile: %d buffered requests dropped", buffered))
	case buffered > 0:
		d.tl.note(frozen.name, fmt.Sprintf("thawed; reads the %d requests buffered meanwhile (failed over already; the client has closed this connection)", buffered))
	default:
		d.tl.note(frozen.name, "thawed")
	}
	if !waitFor(ctx, func() bool { return pf.State() == watchdog.Okay && pr.State() == watchdog.Okay }) {
		return
	}
	sleepCtx(ctx, 5*demoPoll) // let the timeline print the transition first
	d.tl.note("", "every server is back in service; stopping the traffic in "+demoTail.String())
	sleepCtx(ctx, demoTail)
}

func sleepCtx(ctx context.Context, dur time.Duration) bool {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitFor polls cond until it holds (true) or ctx ends (false).
func waitFor(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(demoPoll)
	defer t.Stop()
	for !cond() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	return true
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
		url:   "tcp://" + ln.Addr().String(),
		conns: make(map[*demoConn]struct{}),
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

// demoServer is one in-process server and the fault switches of the
// script.
type demoServer struct {
	name  string // Origin-Host
	short string // server1
	url   string
	s     *server
	ln    net.Listener

	stopOnce sync.Once
	pumps    sync.WaitGroup

	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed at thaw; nil while not frozen
	muted  bool          // crashing: answers are not sent
	conns  map[*demoConn]struct{}
}

func (ds *demoServer) stop() {
	ds.thaw()
	ds.stopOnce.Do(func() {
		ds.s.closePeers() // closes the listener too
		ds.pumps.Wait()
	})
}

// gate returns a channel to wait on while the server is frozen, nil
// otherwise.
func (ds *demoServer) gate() <-chan struct{} {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if !ds.frozen {
		return nil
	}
	return ds.thawed
}

// freeze stops every connection of the server, present and future, from
// reading and writing: a hung process.
func (ds *demoServer) freeze() {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if !ds.frozen {
		ds.frozen = true
		ds.thawed = make(chan struct{})
	}
}

// thaw undoes freeze. It returns how many requests were buffered for the
// server meanwhile, and how many of those are dropped because the server
// had given their connection up during the freeze (its own watchdog
// still runs in this emulation; the close is carried out now).
func (ds *demoServer) thaw() (buffered, dropped int) {
	ds.mu.Lock()
	if !ds.frozen {
		ds.mu.Unlock()
		return 0, 0
	}
	ds.frozen = false
	close(ds.thawed)
	var closing []*demoConn
	for c := range ds.conns {
		n := c.buffered()
		buffered += n
		if c.closeWanted {
			closing = append(closing, c)
			dropped += n
		}
	}
	ds.mu.Unlock()
	for _, c := range closing {
		c.realClose()
	}
	return buffered, dropped
}

// mute starts a crash: from now on the answers the server computes are
// never sent (it still reads and applies requests: those are applied,
// their answers lost). reset ends it.
func (ds *demoServer) mute() {
	ds.mu.Lock()
	ds.muted = true
	ds.mu.Unlock()
}

// reset closes every connection with an RST (SO_LINGER 0), as the kernel
// does for a crashed process, and ends a mute. The listener stays open:
// the client reconnects. It returns how many connections were reset.
func (ds *demoServer) reset() int {
	ds.mu.Lock()
	cs := make([]*demoConn, 0, len(ds.conns))
	for c := range ds.conns {
		cs = append(cs, c)
	}
	ds.muted = false
	ds.mu.Unlock()
	for _, c := range cs {
		_ = c.tcp.SetLinger(0)
		c.realClose()
	}
	return len(cs)
}

// demoListener is a transport.Listener over a TCP listener of ours, so
// that we hold each connection's socket (for the RST) and wrap it.
type demoListener struct {
	ln net.Listener
	ds *demoServer
}

func (l *demoListener) Accept() (transport.Conn, error) {
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, errNoTCP
	}
	return l.ds.wrap(transport.NewStreamConn(tc, transport.SchemeTCP, transport.Options{}), tc), nil
}

func (l *demoListener) Close() error   { return l.ln.Close() }
func (l *demoListener) Addr() net.Addr { return l.ln.Addr() }

// errNoTCP: the listener returned something other than a TCP connection.
var errNoTCP = errors.New("demo: not a TCP connection")

// demoConn is an accepted connection that can be frozen, as
// client/harness_test.go's freezeConn: a pump reads the socket into a
// queue (the kernel's buffer, which keeps filling while the process
// hangs) and ReadMessage hands messages on only while the server is not
// frozen. While frozen, writes block too, and a Close is held until the
// thaw: a hung process closes nothing.
type demoConn struct {
	transport.Conn
	tcp         *net.TCPConn
	ds          *demoServer
	q           chan readResult
	closed      chan struct{}
	closeOnce   sync.Once
	closeErr    error
	closeWanted bool // guarded by ds.mu
	queued      atomic.Int64
}

type readResult struct {
	msg []byte
	err error
}

const demoQueue = 1 << 14

func (ds *demoServer) wrap(sc transport.Conn, tc *net.TCPConn) *demoConn {
	c := &demoConn{Conn: sc, tcp: tc, ds: ds, q: make(chan readResult, demoQueue), closed: make(chan struct{})}
	ds.mu.Lock()
	ds.conns[c] = struct{}{}
	ds.mu.Unlock()
	ds.pumps.Add(1)
	go c.pump()
	return c
}

func (c *demoConn) pump() {
	defer c.ds.pumps.Done()
	for {
		m, err := c.Conn.ReadMessage()
		if err == nil && isAppRequest(m) {
			c.queued.Add(1)
		}
		select {
		case c.q <- readResult{m, err}:
		case <-c.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

// buffered is how many application requests wait in the queue.
func (c *demoConn) buffered() int { return int(c.queued.Load()) }

// hold waits while the server is frozen; false if the connection closed.
func (c *demoConn) hold() bool {
	for g := c.ds.gate(); g != nil; g = c.ds.gate() {
		select {
		case <-g:
		case <-c.closed:
			return false
		}
	}
	return true
}

func (c *demoConn) ReadMessage() ([]byte, error) {
	if !c.hold() || c.wanted() {
		return nil, net.ErrClosed
	}
	select {
	case r := <-c.q:
		if r.err == nil && isAppRequest(r.msg) {
			c.queued.Add(-1)
		}
		if !c.hold() { // froze meanwhile: hold it
			return nil, net.ErrClosed
		}
		return r.msg, r.err
	case <-c.closed:
		return nil, net.ErrClosed
	}
}

func (c *demoConn) WriteMessages(msgs ...[]byte) error {
	if !c.hold() {
		return net.ErrClosed
	}
	c.ds.mu.Lock()
	muted := c.ds.muted
	c.ds.mu.Unlock()
	if muted { // crashing: nothing leaves the process any more
		<-c.closed
		return net.ErrClosed
	}
	return c.Conn.WriteMessages(msgs...)
}

func (c *demoConn) Close() error {
	c.ds.mu.Lock()
	if c.ds.frozen {
		c.closeWanted = true
		c.ds.mu.Unlock()
		return nil
	}
	c.ds.mu.Unlock()
	return c.realClose()
}

// wanted reports whether the server closed the connection while frozen.
func (c *demoConn) wanted() bool {
	c.ds.mu.Lock()
	defer c.ds.mu.Unlock()
	return c.closeWanted
}

func (c *demoConn) realClose() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.closeErr = c.Conn.Close()
		c.ds.mu.Lock()
		delete(c.ds.conns, c)
		c.ds.mu.Unlock()
	})
	return c.closeErr
}

// timeline prints what happens, one aligned line per happening:
//
//	18.3s  server2.example.net   OKAY -> SUSPECT (no DWA within Tw)
//
// Bus subscribers hand events to its goroutine and never block (an event
// that does not fit is dropped and counted); the goroutine also polls
// the client's peers for the DWAs of REOPEN and the traffic counters.
type timeline struct {
	w     io.Writer
	start time.Time
	ch    chan tlItem
	done  chan struct{}

	mu      sync.RWMutex // guards closed and cancels against the subscribers
	closed  bool
	cancels []func()
	dropped atomic.Uint64
	gen     atomic.Pointer[loadgen]

	// Set before the client exists; read only afterwards.
	servers []*demoServer
	index   map[string]int // a client-side peer label -> server index

	// The printer goroutine's.
	reopen      map[int]*reopenState
	connects    map[int]int
	fo          *failoverLine
	last        *repeatLine
	nextTraffic time.Time
}

type tlItem struct {
	at      time.Time
	who     string
	text    string
	ev      client.Event
	idx     int // server index of a client-side event, -1 if unknown
	dwaBase uint64
	isEvent bool
}

// reopenState follows one client peer through REOPEN.
type reopenState struct {
	base  uint64 // DWAReceived when it entered REOPEN
	shown int
}

// failoverLine gathers the failover records of one failover (one per
// destination, published together) into one line.
type failoverLine struct {
	at     time.Time
	from   string
	reason string
	total  int
	parts  []string
	seen   time.Time
}

// repeatLine folds a line repeated within a second (the server-side
// errors of a backlog, for one) into a count.
type repeatLine struct {
	who, text string
	first     time.Time
	n         int
}

const tlBuffer = 1 << 14

func newTimeline(w io.Writer, start time.Time) *timeline {
	tl := &timeline{
		w: w, start: start, ch: make(chan tlItem, tlBuffer), done: make(chan struct{}),
		index: make(map[string]int), reopen: make(map[int]*reopenState), connects: make(map[int]int),
		nextTraffic: start.Add(demoTrafficEvery),
	}
	go tl.run()
	return tl
}

func (tl *timeline) push(it tlItem) {
	tl.mu.RLock()
	defer tl.mu.RUnlock()
	if tl.closed {
		return
	}
	select {
	case tl.ch <- it:
	default:
		tl.dropped.Add(1)
	}
}

func (tl *timeline) subscribe(cancel func()) {
	tl.mu.Lock()
	tl.cancels = append(tl.cancels, cancel)
	tl.mu.Unlock()
}

// note prints a line of the script.
func (tl *timeline) note(who, text string) {
	tl.push(tlItem{at: time.Now(), who: who, text: text})
}

// watchServer prints the server-side connection events and errors of ds
// (the story is the client's view: the servers' own watchdog lines are
// left out). A frozen server prints nothing: a hung process does not.
func (tl *timeline) watchServer(bus *peer.Bus, ds *demoServer) {
	tl.servers = append(tl.servers, ds)
	tl.index[ds.name] = len(tl.servers) - 1
	tl.index[ds.url] = len(tl.servers) - 1
	tl.index[strings.TrimPrefix(ds.url, "tcp://")] = len(tl.servers) - 1
	tl.subscribe(bus.Subscribe(func(e peer.Event) {
		if e.Kind == peer.EventWatchdog || e.Kind == peer.EventFailover || e.Kind == peer.EventFailback || ds.gate() != nil {
			return
		}
		tl.push(tlItem{at: e.Time, who: ds.name, text: "server side: " + e.Reason})
	}))
}

// watchClient prints the client's events: its peers' and its own
// (failover records, balancer rebuilds).
func (tl *timeline) watchClient(bus *client.Bus, servers []*demoServer) {
	tl.subscribe(bus.Subscribe(func(e client.Event) {
		idx, ok := tl.index[e.Server]
		if !ok {
			idx = -1
		}
		it := tlItem{at: e.Time, ev: e, idx: idx, isEvent: true}
		if e.Kind == client.EventPeer && e.Peer.Kind == peer.EventWatchdog && e.Peer.To == watchdog.Reopen && idx >= 0 {
			// Runs on the peer's loop before the DWR goes out: the
			// count of DWAs from here on is exact.
			if g := tl.gen.Load(); g != nil {
				it.dwaBase = g.peers[idx].Stats().DWAReceived
			}
		}
		tl.push(it)
	}))
}

func (tl *timeline) setClient(g *loadgen) { tl.gen.Store(g) }

// Close stops listening, prints what is queued and waits. Idempotent.
func (tl *timeline) Close() {
	tl.mu.Lock()
	if tl.closed {
		tl.mu.Unlock()
		return
	}
	tl.closed = true
	cancels := tl.cancels
	close(tl.ch)
	tl.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	<-tl.done
}

func (tl *timeline) run() {
	defer close(tl.done)
	t := time.NewTicker(demoPoll)
	defer t.Stop()
	for {
		select {
		case it, ok := <-tl.ch:
			if !ok {
				tl.flushFailover()
				tl.flushRepeat()
				tl.pollReopen(-1)
				if n := tl.dropped.Load(); n > 0 {
					tl.line(time.Now(), "", fmt.Sprintf("(%d events were not shown: the timeline fell behind)", n))
				}
				return
			}
			tl.handle(it)
		case now := <-t.C:
			if tl.fo != nil && now.Sub(tl.fo.seen) > 2*demoPoll {
				tl.flushFailover()
			}
			if tl.last != nil && now.Sub(tl.last.first) > time.Second {
				tl.flushRepeat()
			}
			tl.pollReopen(-1)
			if !now.Before(tl.nextTraffic) {
				tl.nextTraffic = tl.nextTraffic.Add(demoTrafficEvery)
				tl.traffic(now)
			}
		}
	}
}

func (tl *timeline) name(idx int, label string) string {
	if idx >= 0 && idx < len(tl.servers) {
		return tl.servers[idx].name
	}
	return label
}

func (tl *timeline) short(label string) string {
	if idx, ok := tl.index[label]; ok {
		return tl.servers[idx].short
	}
	return label
}

func (tl *timeline) handle(it tlItem) {
	if !it.isEvent {
		tl.flushFailover()
		tl.say(it.at, it.who, it.text)
		return
	}
	who := tl.name(it.idx, it.ev.Server)
	if it.ev.Kind == client.EventFailover {
		tl.addFailover(it.ev.Failover)
		return
	}
	tl.flushFailover()
	e := it.ev.Peer
	if it.ev.Kind != client.EventPeer {
		tl.say(it.ev.Time, who, it.ev.Reason)
		return
	}
	switch e.Kind {
	case peer.EventWatchdog:
		switch {
		case e.To == watchdog.Reopen:
			tl.reopen[it.idx] = &reopenState{base: it.dwaBase}
			tl.say(e.Time, who, fmt.Sprintf("%s -> %s (%s; needs %d DWAs)", e.From, e.To, e.Reason, watchdog.DefaultOkayDWAs))
			return
		case e.From == watchdog.Reopen:
			tl.pollReopen(it.idx) // the last DWA came before this
			delete(tl.reopen, it.idx)
		}
		tl.say(e.Time, who, fmt.Sprintf("%s -> %s (%s)", e.From, e.To, e.Reason))
	case peer.EventConnUp:
		text := e.Reason
		if it.idx >= 0 {
			tl.connects[it.idx]++
			if tl.connects[it.idx] > 1 {
				text = "re" + text
			}
		}
		tl.say(e.Time, who, text)
	case peer.EventFailover:
		// A peer's failover with no alternate: a client always takes
		// the requests (and records it), so this is not its story.
	default:
		tl.say(e.Time, who, e.Reason)
	}
}

// pollReopen prints the DWAs received by the client's peers in REOPEN
// (Stats().DWAReceived since they entered it); idx >= 0 limits it to one.
func (tl *timeline) pollReopen(idx int) {
	g := tl.gen.Load()
	if g == nil {
		return
	}
	for i, rs := range tl.reopen {
		if idx >= 0 && i != idx {
			continue
		}
		if i < 0 || i >= len(g.peers) {
			continue
		}
		st := g.peers[i].Stats()
		got := int(st.DWAReceived - rs.base)
		for rs.shown < got && rs.shown < watchdog.DefaultOkayDWAs {
			rs.shown++
			at := time.Now()
			if rs.shown == got && !st.LastDWA.IsZero() {
				at = st.LastDWA
			}
			tl.say(at, tl.servers[i].name, fmt.Sprintf("REOPEN %d/%d DWAs", rs.shown, watchdog.DefaultOkayDWAs))
		}
	}
}

func (tl *timeline) addFailover(r *client.FailoverRecord) {
	if f := tl.fo; f != nil && (!f.at.Equal(r.Time) || f.from != r.From || f.reason != r.Reason) {
		tl.flushFailover()
	}
	if tl.fo == nil {
		tl.fo = &failoverLine{at: r.Time, from: r.From, reason: r.Reason}
	}
	f := tl.fo
	f.seen = time.Now()
	f.total += r.Moved
	switch r.Outcome {
	case client.Moved:
		f.parts = append(f.parts, fmt.Sprintf("%s (%d)", tl.short(r.To), r.Moved))
	case client.Parked:
		f.parts = append(f.parts, fmt.Sprintf("waiting for a server in service (%d)", r.Moved))
	case client.Refused:
		f.parts = append(f.parts, fmt.Sprintf("%d refused", len(r.EndToEnd)))
	default:
		f.parts = append(f.parts, "nothing pending")
	}
}

func (tl *timeline) flushFailover() {
	f := tl.fo
	if f == nil {
		return
	}
	tl.fo = nil
	slices.Sort(f.parts)
	tl.say(f.at, tl.name(tl.lookup(f.from), f.from),
		fmt.Sprintf("failover: %d requests %s -> %s, resent with the T flag (%s)", f.total, tl.short(f.from), strings.Join(f.parts, ", "), f.reason))
}

func (tl *timeline) lookup(label string) int {
	if i, ok := tl.index[label]; ok {
		return i
	}
	return -1
}

func (tl *timeline) traffic(now time.Time) {
	g := tl.gen.Load()
	if g == nil {
		return
	}
	sent, answered, failed := g.sent.Load(), g.answered.Load(), g.failed.Load()
	var in []string
	for i, p := range g.peers {
		if p.State() == watchdog.Okay {
			in = append(in, tl.servers[i].short)
		}
	}
	if len(in) == 0 {
		in = []string{"none"}
	}
	tl.say(now, "client", fmt.Sprintf("traffic: %d sent, %d answered, %d failed, %d pending; in service: %s",
		sent, answered, failed, sent-answered-failed, strings.Join(in, ", ")))
}

// say prints a line, folding repeats.
func (tl *timeline) say(at time.Time, who, text string) {
	if r := tl.last; r != nil && r.who == who && r.text == text {
		r.n++
		return
	}
	tl.flushRepeat()
	tl.line(at, who, text)
	tl.last = &repeatLine{who: who, text: text, first: time.Now()}
}

func (tl *timeline) flushRepeat() {
	r := tl.last
	tl.last = nil
	if r != nil && r.n > 0 {
		tl.line(time.Now(), r.who, fmt.Sprintf("(the line above %d more times)", r.n))
	}
}

func (tl *timeline) line(at time.Time, who, text string) {
	if who == "" {
		who = "demo"
	}
	fmt.Fprintf(tl.w, "%6.1fs  %-20s  %s\n", at.Sub(tl.start).Seconds(), who, text)
}

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
	fmt.Fprintln(w, "  (left, the client: requests first sent to the server, their outcome, how many it moved away")
	fmt.Fprintln(w, "   and their latency; right, the server: requests it read, of those with the T flag, applied, duplicates)")

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
