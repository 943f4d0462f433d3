package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/status"
	"github.com/aaatp/aaatp/throttle"
	lradius "layeh.com/radius"
)

const radiusDemoSynopsis = `usage: aaa-peer demo --protocol radius [--timeout 1s] [--retries 3]
       [--hold-down 10s] [--rate 20] [--burst 2000] [--burst-rate 500] [--quiet]
       [--status ADDR]

The Nokia 7750 SR server states and the Cisco ASR5K throttle, over RADIUS
on UDP, in this process, on 127.0.0.1 (nothing else to install): three
RADIUS servers (server1..3, free ports, one duplicate store), and an aaatp
RADIUS client with the direct access algorithm (the in-service server of
lowest index) and a test user, sending Access-Requests at --rate per
second. The script:
  - at 2 s server1 hangs: it reads and answers nothing. Requests sent to
    it are retransmitted, byte for byte, every --timeout, --retries times
    in all, then go to server2; the down-timeout (timeout x retries), which
    no reply resets, puts server1 out of service;
  - after --hold-down server1 is probed with one test-user Access-Request,
    no retry; it is still hung: out of service again, a new hold-down;
  - server1 recovers; the next probe is answered: in service at once, and
    direct access sends to it again;
  - then --burst Accounting-Stop records are released at once, as when many
    sessions end together; the throttle sends them at --burst-rate per
    second, spread over 50 ms slots, none dropped.
The 7750 SR defaults are timeout 3 s, retry 3 and hold-down 30 s; the demo
shortens them to finish in well under a minute. It prints a timeline, then
a summary. Exit code 0 when every request was answered or failed with a
reason, none was applied twice and every step of the story was seen; 1
otherwise; 2 on a usage error.
`

type radiusDemoOptions struct {
	timeout   time.Duration
	retries   int
	holdDown  time.Duration
	rate      float64
	burst     int
	burstRate int
	quiet     bool
	status    string
}

const (
	radiusDemoSecret   = "demo-secret"
	radiusDemoHangAt   = 2 * time.Second
	radiusDemoTestUser = "probe-user"
)

// radiusDemoFlags is the flag set of "aaa-peer demo --protocol radius".
func radiusDemoFlags(o *radiusDemoOptions, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("demo", radiusDemoSynopsis, stderr)
	fs.DurationVar(&o.timeout, "timeout", time.Second, "how long one attempt waits for a reply (`D`; 7750 SR default 3s)")
	fs.IntVar(&o.retries, "retries", 3, "attempts per request and server (`N`; down-timeout = timeout x retries)")
	fs.DurationVar(&o.holdDown, "hold-down", 10*time.Second, "how long an out-of-service server gets nothing (`D`; 7750 SR default 30s)")
	fs.Float64Var(&o.rate, "rate", 20, "Access-Requests per second (`N`)")
	fs.IntVar(&o.burst, "burst", 2000, "Accounting-Stop records released at once at the end (`N`)")
	fs.IntVar(&o.burstRate, "burst-rate", 500, "the throttle's max rate for accounting, records per second (`N`)")
	fs.BoolVar(&o.quiet, "quiet", false, "print only the summary")
	statusFlag(fs, &o.status, "printed after the servers'")
	return fs
}

// protocolArg removes --protocol P (or --protocol=P) from args.
func protocolArg(args []string) (proto string, rest []string, err error) {
	proto = "diameter"
	for i := 0; i < len(args); i++ {
		a := strings.TrimPrefix(args[i], "-")
		a = strings.TrimPrefix(a, "-")
		switch {
		case a == "protocol":
			if i+1 >= len(args) {
				return "", nil, usagef("--protocol needs a value: diameter or radius")
			}
			proto = args[i+1]
			i++
		case strings.HasPrefix(a, "protocol="):
			proto = strings.TrimPrefix(a, "protocol=")
		default:
			rest = append(rest, args[i])
		}
	}
	if proto != "diameter" && proto != "radius" {
		return "", nil, usagef("--protocol %q: want diameter or radius", proto)
	}
	return proto, rest, nil
}

// hangConn is a server socket that can hang: while hung it reads and
// drops every datagram, as a stopped process would leave them unread.
type hangConn struct {
	net.PacketConn
	hung    atomic.Bool
	ignored atomic.Uint64
}

func (c *hangConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, a, err := c.PacketConn.ReadFrom(b)
		if err != nil || !c.hung.Load() {
			return n, a, err
		}
		c.ignored.Add(1)
	}
}

type radiusDemoServer struct {
	name string
	conn *hangConn
	srv  *radpeer.UDPServer
	done chan struct{}
}

type radiusDemo struct {
	o       radiusDemoOptions
	start   time.Time
	out     io.Writer
	errOut  io.Writer // warnings (the open loop's)
	outMu   sync.Mutex
	servers []*radiusDemoServer
	store   *dedup.Memory

	mu        sync.Mutex
	applied   map[dedup.Key]int // accounting records, by content key
	auths     uint64
	twice     int
	slotCount map[int64]int // burst records arriving at the servers, by 50 ms slot

	seen  map[string]bool      // story steps
	since map[string]time.Time // when each server entered its policy state
}

func runRadiusDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o radiusDemoOptions
	fs := radiusDemoFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if err := checkStatusAddr(o.status); err != nil {
		return usage(stderr, err.Error())
	}
	switch {
	case o.timeout < 100*time.Millisecond || o.timeout > 5*time.Second:
		return usage(stderr, "--timeout must be within 100ms..5s")
	case o.retries < 1 || o.retries > 5:
		return usage(stderr, "--retries must be within 1..5")
	case o.holdDown < time.Second || o.holdDown > 15*time.Second:
		return usage(stderr, "--hold-down must be within 1s..15s (the demo must end within a minute)")
	case !(o.rate > 0 && o.rate <= 1000):
		return usage(stderr, "--rate must be within 0..1000")
	case o.burst < 0 || o.burst > 20000:
		return usage(stderr, "--burst must be within 0..20000")
	case o.burstRate < 20 || o.burstRate > 100000:
		return usage(stderr, "--burst-rate must be within 20..100000")
	}
	d := &radiusDemo{o: o, start: time.Now(), out: stdout, errOut: stderr, store: dedup.NewMemory(),
		applied: make(map[dedup.Key]int), slotCount: make(map[int64]int), seen: make(map[string]bool), since: make(map[string]time.Time)}
	defer d.store.Close()
	if o.quiet {
		d.out = io.Discard
	}
	code, err := d.run(ctx, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer demo: %v\n", err)
		return 1
	}
	return code
}

func usage(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "aaa-peer demo: %s\n", msg)
	return 2
}

func (d *radiusDemo) say(who, text string) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.out, "%6.1fs  %-8s %s\n", time.Since(d.start).Seconds(), who, text)
}

// handler counts applications: Access-Requests, and accounting records
// by content key (a second application of one record is a failure).
func (d *radiusDemo) handler(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
	d.mu.Lock()
	if k, ok := radpeer.AccountingKey(req); ok {
		d.applied[k]++
		if d.applied[k] == 2 {
			d.twice++
		}
		d.slotCount[time.Now().UnixMilli()/50]++ // the throttle's slots are aligned on the epoch
	} else if req.Code == lradius.CodeAccessRequest {
		d.auths++
	}
	d.mu.Unlock()
	return radpeer.AcceptAll(ctx, req, raw)
}

func (d *radiusDemo) startServers() error {
	h := radpeer.Dedup(d.store, d.handler, nil)
	for i := range 3 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		hc := &hangConn{PacketConn: pc}
		srv, err := radpeer.NewUDPServer(hc, radpeer.ServerConfig{Secret: []byte(radiusDemoSecret), Handler: h})
		if err != nil {
			pc.Close()
			return err
		}
		ds := &radiusDemoServer{name: fmt.Sprintf("server%d", i+1), conn: hc, srv: srv, done: make(chan struct{})}
		go func() { defer close(ds.done); srv.Serve() }()
		d.servers = append(d.servers, ds)
	}
	return nil
}

func (d *radiusDemo) stopServers() {
	for _, s := range d.servers {
		s.srv.Close(context.Background())
		<-s.done
	}
}

// waitPolicy waits until server i is in state st, or ctx ends.
func waitPolicy(ctx context.Context, c *client.Client, i int, st policy.State) bool {
	return waitFor(ctx, func() bool { return c.PolicyStates()[i] == st.String() })
}

// waitSeen waits until the policy event of server from -> to has ever been
// printed.
func (d *radiusDemo) waitSeen(ctx context.Context, server string, from, to policy.State) bool {
	key := server + " " + from.String() + ">" + to.String()
	return waitFor(ctx, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.seen[key]
	})
}

func (d *radiusDemo) run(ctx context.Context, stdout io.Writer) (int, error) {
	if err := d.startServers(); err != nil {
		return 1, err
	}
	defer d.stopServers()
	specs := make([]client.PeerSpec, len(d.servers))
	for i, s := range d.servers {
		specs[i] = client.PeerSpec{Name: s.name, URL: "radius://" + s.srv.Addr().String()}
		d.say(s.name, "listening on "+specs[i].URL)
	}
	bus := client.NewBus()
	var failoverLines atomic.Int64
	cancelSub := bus.Subscribe(func(_ context.Context, e client.Event) {
		switch e.Kind {
		case client.EventPolicy:
			from, to := e.Policy.From.String(), e.Policy.To.String()
			d.say(e.Server, fmt.Sprintf("%s -> %s (%s)", from, to, e.Reason))
			d.mu.Lock()
			d.seen[e.Server+" "+from+">"+to] = true
			d.since[e.Server] = e.Time
			d.mu.Unlock()
		case client.EventFailover:
			if failoverLines.Add(1) <= 3 {
				d.say(e.Server, "failover: "+e.Reason)
			}
		case client.EventQueueAlarm:
			d.say(e.Server, e.Reason)
		}
	})
	defer cancelSub()
	testUser := &radius.Request{Code: lradius.CodeAccessRequest}
	testUser.Attributes.Add(radius.AttrUserName, lradius.Attribute(radiusDemoTestUser))
	testUser.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("probe-pw"))
	c, err := client.New(client.Config{
		Peers: specs, Algorithm: loadbalance.Direct, Events: bus,
		RADIUS: radpeer.Config{Secret: []byte(radiusDemoSecret)},
		UDP:    radpeer.UDPConfig{Timeout: d.o.timeout, Retries: d.o.retries},
		Policy: &policy.Config{RequestTimeout: d.o.timeout, Retries: d.o.retries, HoldDown: d.o.holdDown, TestUser: true},
		RADIUSTestRequest: func(string) *radius.Request {
			return &radius.Request{Code: testUser.Code, Attributes: testUser.Attributes}
		},
		Throttle: &client.Throttle{Accounting: throttle.Limits{MaxRate: d.o.burstRate}, AlarmHigh: 1000, AlarmLow: 100},
	})
	if err != nil {
		return 1, err
	}
	defer c.Close(context.Background())
	metrics := newMetrics(d.o.status)
	defer metrics.WatchClient(bus)()
	var sent, answered, failed atomic.Uint64
	web, err := openStatus(d.o.status, status.SourceFunc(func() status.Snapshot {
		return d.snapshot(c, sent.Load(), answered.Load(), failed.Load())
	}), metrics, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return 1, err
	}
	defer web.Close()
	if web != nil {
		fmt.Fprintf(stdout, "  %-20s %s\n", "status page", web.URL())
	}
	d.say("client", fmt.Sprintf("direct access, timeout %v x retries %d = down-timeout %v, hold-down %v, test user %q",
		d.o.timeout, d.o.retries, d.o.timeout*time.Duration(d.o.retries), d.o.holdDown, radiusDemoTestUser))

	// Auth traffic until the story is told.
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	reasons := map[string]uint64{}
	var rmu sync.Mutex
	var twg sync.WaitGroup
	twg.Add(1)
	go func() {
		defer twg.Done()
		// Open loop, as aaa-peer client's: each request at its time, with
		// room in flight for every one to run the Client's deadline (each
		// server's retries).
		deadline := time.Duration(len(d.servers)) * d.o.timeout * time.Duration(d.o.retries)
		newOpenLoop(d.o.rate, openLoopBound(d.o.rate, deadline), 0, slog.New(slog.NewTextHandler(d.errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))).run(trafficCtx, func(n int64, _ time.Time) {
			r := &radius.Request{Code: lradius.CodeAccessRequest}
			r.Attributes.Add(radius.AttrUserName, lradius.Attribute(fmt.Sprintf("user%d@example.net", n%1000)))
			r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("pw"))
			sent.Add(1)
			if _, err := c.Exchange(context.Background(), r); err != nil {
				failed.Add(1)
				rmu.Lock()
				reasons[err.Error()]++
				rmu.Unlock()
				return
			}
			answered.Add(1)
		})
	}()

	interrupted := false
	story := func() bool {
		if !sleepCtx(ctx, radiusDemoHangAt) {
			return false
		}
		d.servers[0].conn.hung.Store(true)
		d.say("server1", "hangs: reads and answers nothing")
		if !waitPolicy(ctx, c, 0, policy.OutOfService) || !waitPolicy(ctx, c, 0, policy.Probing) {
			return false
		}
		// The failed probe's line, not just its state: the line is printed
		// by the event's subscriber, which may run after the state is
		// visible, and the recovery must come after it.
		if !d.waitSeen(ctx, d.servers[0].name, policy.Probing, policy.OutOfService) {
			return false
		}
		d.servers[0].conn.hung.Store(false)
		d.say("server1", "recovers")
		if !waitPolicy(ctx, c, 0, policy.InService) {
			return false
		}
		return sleepCtx(ctx, time.Second)
	}
	if !story() {
		interrupted = true
	}
	stopTraffic()
	twg.Wait()

	// The accounting burst.
	var burstOK, burstFailed atomic.Uint64
	burstStart := time.Now()
	if !interrupted && d.o.burst > 0 {
		d.say("client", fmt.Sprintf("%d Accounting-Stop records released at once; the throttle sends %d/s in 50 ms slots", d.o.burst, d.o.burstRate))
		d.mu.Lock()
		clear(d.slotCount)
		d.mu.Unlock()
		var bwg sync.WaitGroup
		ts := uint32(time.Now().Unix())
		for i := range d.o.burst {
			bwg.Add(1)
			go func() {
				defer bwg.Done()
				r := &radius.Request{Code: lradius.CodeAccountingRequest}
				r.Attributes.Add(radius.AttrUserName, lradius.Attribute(fmt.Sprintf("user%d@example.net", i)))
				r.Attributes.Add(radius.AttrNASIdentifier, lradius.Attribute("nas1.example.net"))
				r.Attributes.Add(radius.AttrAcctSessionID, lradius.Attribute(fmt.Sprintf("session-%d", i)))
				r.Attributes.Add(radius.AttrAcctStatusType, lradius.Attribute([]byte{0, 0, 0, 2}))
				r.Attributes.Add(radius.AttrEventTimestamp, lradius.Attribute([]byte{byte(ts >> 24), byte(ts >> 16), byte(ts >> 8), byte(ts)}))
				if _, err := c.Exchange(ctx, r); err != nil {
					burstFailed.Add(1)
					rmu.Lock()
					reasons["accounting: "+err.Error()]++
					rmu.Unlock()
					return
				}
				burstOK.Add(1)
			}()
		}
		bwg.Wait()
		d.say("client", fmt.Sprintf("burst done in %v", time.Since(burstStart).Round(10*time.Millisecond)))
	}
	if ctx.Err() != nil {
		interrupted = true
	}
	return d.summary(stdout, c, sent.Load(), answered.Load(), failed.Load(), burstOK.Load(), burstFailed.Load(), reasons, interrupted), nil
}

func (d *radiusDemo) summary(w io.Writer, c *client.Client, sent, answered, failed, burstOK, burstFailed uint64, reasons map[string]uint64, interrupted bool) int {
	stats := c.ServerStats()
	var failovers uint64
	for _, s := range stats {
		failovers += s.FailedOver
	}
	fmt.Fprintf(w, "\nsummary after %v\n", time.Since(d.start).Round(100*time.Millisecond))
	fmt.Fprintf(w, "  Access-Requests: %d sent, %d answered, %d failed; %d moved to the next server after %d attempts\n",
		sent, answered, failed, failovers, d.o.retries)
	var late, dups uint64
	for _, s := range stats {
		var u radpeer.UDPStats
		if p, ok := s.Carrier.(*radpeer.UDPPeer); ok {
			u = p.Stats()
		}
		late += u.Late
		dups += u.Duplicates
		var th throttle.Stats
		if s.Throttle != nil {
			th = *s.Throttle
		}
		fmt.Fprintf(w, "  %-8s %-15s sent %d, retransmitted %d, answered %d, probes %d, throttle sent auth %d acct %d\n",
			s.Server, s.Policy, u.Sent, u.Retransmissions, u.Answered, s.Probes, th.Sent[0], th.Sent[1])
	}
	fmt.Fprintf(w, "  late replies dropped %d, duplicate replies dropped %d\n", late, dups)
	keys := make([]string, 0, len(reasons))
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  failed %d: %s\n", reasons[k], k)
	}
	d.mu.Lock()
	twice := d.twice
	quota := (d.o.burstRate + 19) / 20
	counts := make([]int, 0, len(d.slotCount))
	over := 0
	for _, n := range d.slotCount {
		counts = append(counts, n)
		if n > quota {
			over++
		}
	}
	d.mu.Unlock()
	sort.Ints(counts)
	median := 0
	if len(counts) > 0 {
		median = counts[len(counts)/2]
	}
	// Arrivals are timed at the servers: one handled late, across a slot
	// boundary, counts in the next slot, which then shows more than the
	// quota that the throttle sent in it.
	fmt.Fprintf(w, "  accounting burst: %d of %d answered, %d failed, arriving over %d slots of 50 ms: median %d per slot (quota %d), %d slots over it by late arrivals\n",
		burstOK, d.o.burst, burstFailed, len(counts), median, quota, over)
	fmt.Fprintf(w, "  applied twice: %d\n", twice)

	var problems []string
	if interrupted {
		problems = append(problems, "interrupted")
	}
	if answered+failed != sent || burstOK+burstFailed != uint64(d.o.burst) {
		problems = append(problems, "a request got neither an answer nor an error")
	}
	if failed+burstFailed > 0 && len(reasons) == 0 {
		problems = append(problems, "a failure without a reason")
	}
	if twice > 0 {
		problems = append(problems, "a record applied twice")
	}
	if burstFailed > 0 {
		problems = append(problems, "accounting records lost")
	}
	d.mu.Lock()
	for _, step := range []string{"server1 in-service>out-of-service", "server1 out-of-service>probing",
		"server1 probing>out-of-service", "server1 probing>in-service"} {
		if !d.seen[step] {
			problems = append(problems, "never saw "+step)
		}
	}
	d.mu.Unlock()
	if failovers == 0 {
		problems = append(problems, "no failover")
	}
	if len(problems) > 0 {
		fmt.Fprintf(w, "FAILED: %s\n", strings.Join(problems, "; "))
		return 1
	}
	fmt.Fprintln(w, "OK: every request answered or failed with a reason, none applied twice")
	return 0
}

// snapshot is the status page's view of the RADIUS client: the Client's
// (RADIUS over UDP has no watchdog: the watchdog column stays empty), each
// server's row since its last policy state change, and the demo's counts.
func (d *radiusDemo) snapshot(c *client.Client, sent, answered, failed uint64) status.Snapshot {
	snap := status.ClientSnapshot(c)
	snap.Role = status.RoleDemo
	snap.Identity = status.Identity{NASIdentifier: "nas1.example.net", Started: d.start,
		Info: map[string]string{"protocol": "RADIUS/UDP", "access": "direct", "test user": radiusDemoTestUser}}
	snap.Totals.Sent, snap.Totals.Answered, snap.Totals.Failed = sent, answered, failed
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, row := range snap.Peers {
		snap.Peers[i].Since = d.since[row.Server]
		if snap.Peers[i].Since.IsZero() {
			snap.Peers[i].Since = d.start
		}
	}
	return snap
}
