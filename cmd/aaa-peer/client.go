package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/status"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
)

const clientSynopsis = `usage: aaa-peer client --peer URL [--peer URL...] --origin-host H --origin-realm R
       --destination-realm R [--tw 30s] [--rate N] [--concurrency N]
       [--requests N | --duration D] [--nai FORMAT] [--app acct|test]
       [--mode balance|failover] [--algorithm pearson|hash|direct|round-robin]
       [--wait-peers N] [--connect-timeout 10s] [--timeout D] [--no-delay]
       [--tls-ca F] [--tls-cert F --tls-key F]
       [--max-rate N] [--max-rate-acct N] [--slot D] [--max-outstanding N] [--queue-alarm HIGH,LOW]
       [--down-timeout D] [--hold-down D] [--test-user NAI] [--keepalive D]
       [--weight URL=N...] [--dpr-hold-off 5m] [--events FILE] [--report FILE]
       [--max-failed SHARE] [--status ADDR] [--log-level info] [--log-format text|json]
       [--cpuprofile FILE] [--config FILE]

Connects to every --peer, waits until one (--wait-peers) is OKAY, then sends Accounting-
Requests (--app acct) or freeDiameter test_app Test-Requests (--app test)
through one aaatp client (package client). With --rate N the load is open
loop: request n leaves at start + n/N whatever the earlier ones are doing,
each on a goroutine of its own, and its latency is measured from that
intended time, not from when it left (against coordinated omission, as
wrk2 does); --concurrency bounds the requests in flight (by default
rate x --timeout: room for every request to run its whole timeout): a
request whose time comes while that many are in flight is not sent,
counted in the report (dropped_in_flight) and logged (a warning, at most
once a second).
With --rate 0 the load is closed loop: --concurrency callers, each sending
its next request when its last is done, as fast as they go. Whenever
requests sent to a peer are outstanding and none has been answered for N
seconds, a warning says "no answer for Ns from PEER" (once a second).

--mode balance spreads the requests over the peers in service with
--algorithm (pearson: RFC 3074 hash of the User-Name, so one NAI always
goes to one server); --mode failover sends everything to
the first peer in service, in --peer order. When a peer's watchdog goes
SUSPECT or its connection drops, its pending requests are replayed to
another peer with the T flag (RFC 3539 3.4.1, 3.4.2); the report lists
these failovers. Prints one progress line a second (on stderr while the
report or the events go to stdout):
  t=3s sent=1200 answered=1198 failed=0 pending=2 servers=host1:OKAY,host2:SUSPECT
sent counts requests issued (sent = answered + failed + pending); an answer
with Result-Code 2001 is answered, anything else failed. At the end, or on
SIGTERM or SIGINT, disconnects (DPR with DO_NOT_WANT_TO_TALK_TO_YOU), writes
the report with the final states and exits 0. Exit 1 if no peer came up
(at once when every peer refused us in the capabilities exchange with a
permanent error, such as DIAMETER_UNKNOWN_PEER) or no request reached a
peer; exit 3 if more than --max-failed of the requests failed (by default
any: one failure is enough; requests cut short by a signal do not count).

The garbage collector runs with GOGC=400 unless $GOGC is set: the
client's live heap is small and it allocates every request anew.

With --status, an HTTP server shows the run live: a page with each peer's
watchdog state and time in state, policy state, pending, sent and answered,
Tw and last DWA, the failover table and the queues (/), the same as JSON
(/status.json), and Prometheus metrics (/metrics). It stops when the run
ends.
`

// clientOptions are the Diameter client's: those of both clients
// (server policy and throttling, off unless set, among them) and its own.
type clientOptions struct {
	loadOptions
	originHost  string
	originRealm string
	destRealm   string
	timeout     time.Duration
	noDelay     bool
	dprHoldOff  time.Duration
	cpuProfile  string
}

func clientFlags(o *clientOptions, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("client", clientSynopsis+"\n"+clientReloadHelp, stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprint(out, clientSynopsis+"\n"+clientReloadHelp)
		fmt.Fprintln(out, "\nflags:")
		fs.PrintDefaults()
		// The RADIUS client's flags, whatever the order of -h and --peer.
		fmt.Fprint(out, "\nWith a RADIUS --peer (radius://, radius+tcp:// or radsec://) the client sends\n"+
			"RADIUS requests and takes these flags instead (run 'aaa-peer client --peer\n"+
			"radius://HOST:PORT -h' for its description):\n\n")
		radiusClientFlags(&radiusClientOptions{}, out).PrintDefaults()
	}
	fs.Var(&o.peers, "peer", "`URL` of a server: tcp://host:port, tls://host:port or sctp://host:port; repeat for several (required)")
	fs.StringVar(&o.originHost, "origin-host", "", "our Origin-Host `H`, a DiameterIdentity (an FQDN: letters, digits, '-', '_' and '.') such as client1.example.net (required)")
	fs.StringVar(&o.originRealm, "origin-realm", "", "our Origin-Realm `R`, a DiameterIdentity such as example.net (required)")
	fs.StringVar(&o.destRealm, "destination-realm", "", "Destination-Realm `R` of the requests, a DiameterIdentity such as example.net (required)")
	fs.DurationVar(&o.tw, "tw", watchdog.DefaultTwinit, "watchdog interval Twinit `D` (RFC 3539: at least 6s; jittered by +-2s)")
	fs.Float64Var(&o.rate, "rate", 0, "`N` requests per second, open loop: each request leaves at its intended time (start + n/N) whatever the earlier ones are doing, and its latency is measured from that time, not from when it left (against coordinated omission, as wrk2); may be fractional (0: closed loop, --concurrency callers as fast as they go)")
	fs.IntVar(&o.concurrency, "concurrency", 1, "in-flight bound `N`, 1 to 100000: at most N requests in flight; with --rate, a request whose time comes while N are in flight is not sent (dropped_in_flight in the report, a warning at most once a second); with --rate 0, N callers (no more than --requests) each sending its next request when its last is done (not given with --rate: rate x --timeout, room for every request to run its whole timeout, at most 100000)")
	fs.Int64Var(&o.requests, "requests", 0, "stop after `N` requests sent (those not sent at the in-flight bound do not count; 0: no limit; with neither --requests nor --duration, 10)")
	fs.DurationVar(&o.duration, "duration", 0, "stop issuing requests after `D` (0: no limit); with --requests, whichever comes first")
	fs.StringVar(&o.app, "app", "acct", "`APP` requests to send: acct (Accounting-Request, application 3) or test (test_app Test-Request, application 16777214)")
	fs.StringVar(&o.report, "report", "", "write a JSON report to `FILE` at the end (\"-\" is stdout)")
	fs.DurationVar(&o.timeout, "timeout", 0, "per-request deadline `D` (a request may run up to 1% of it, at most 10ms, longer), including any wait for a peer in service and a failover (default: the failover detection of --tw, or of the longest tw of the --config file's peers, 2 x (tw + 2s), plus 10s for the answer: 74s at --tw 30s; a shorter one is logged as a warning)")
	fs.DurationVar(&o.timeout, "request-timeout", 0, "the same as --timeout: a request's deadline `D` (the RADIUS client's name for it)")
	fs.BoolVar(&o.noDelay, "no-delay", false, "disable Nagle on TCP and TLS sockets (RFC 3539 3.2 wants it on)")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "PEM CA `FILE` that tls:// servers' certificates must chain to (default: system roots)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM client certificate `FILE` presented to tls:// servers (mutual TLS)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key `FILE` of --tls-cert")
	logFlags(fs, &o.logLevel, &o.logFormat, "info")
	statusFlag(fs, &o.status, "logged at info")
	cpuProfileFlag(fs, &o.cpuProfile)
	fs.StringVar(&o.algorithm, "algorithm", "pearson", "balance `ALG`: pearson (weighted RFC 3074 hash of the NAI), hash (unweighted), direct (first --peer in service) or round-robin")
	fs.IntVar(&o.maxRate, "max-rate", 0, "throttle: at most `N` requests per second of each class (accounting, the others) to each server, spread evenly over --slot slots (0: no rate limit)")
	fs.IntVar(&o.maxOutstanding, "max-outstanding", 0, "throttle: at most `N` requests outstanding per server; a place frees when the answer arrives or the request times out (0: 256 when throttling is on)")
	fs.DurationVar(&o.downTimeout, "down-timeout", 0, "policy: a server with requests sent and no reply for `D` goes out of service, and the requests pending there go to another server (but those whose Destination-Host names it) (default: --timeout)")
	fs.DurationVar(&o.holdDown, "hold-down", 0, "policy: an out-of-service server gets nothing for `D`, then one probe (default 30s)")
	fs.StringVar(&o.testUser, "test-user", "", "policy: probe (and keep alive) servers with a request for this `NAI` instead of a real one")
	fs.DurationVar(&o.keepAlive, "keepalive", 0, "policy: send the --test-user request to each server every `D` (0: never)")
	fs.DurationVar(&o.dprHoldOff, "dpr-hold-off", peer.DefaultDPRHoldOff, "after a peer's DPR with Disconnect-Cause BUSY or DO_NOT_WANT_TO_TALK_TO_YOU, do not redial it for `D` (RFC 6733 5.4.3; 0: redial at the next Tw, as after REBOOTING)")
	configFlag(fs, &o.config)
	loadFlags(fs, &o.loadOptions)
	return fs
}

func (o *clientOptions) validate() error {
	switch {
	case len(o.peers) == 0:
		return usagef("--peer is required")
	case o.originHost == "":
		return usagef("--origin-host is required")
	case o.originRealm == "":
		return usagef("--origin-realm is required")
	case o.destRealm == "":
		return usagef("--destination-realm is required")
	case o.tw < watchdog.MinTwinit:
		return usagef("--tw %v is below the RFC 3539 minimum of %v", o.tw, watchdog.MinTwinit)
	case o.dprHoldOff < 0:
		return usagef("--dpr-hold-off must not be negative")
	case o.timeout < 0:
		return usagef("--timeout must be positive")
	case o.app != "acct" && o.app != "test":
		return usagef("--app %q: want acct or test", o.app)
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return usagef("--tls-cert and --tls-key go together")
	}
	for _, f := range []struct{ name, v, example string }{
		{"origin-host", o.originHost, "client1.example.net"},
		{"origin-realm", o.originRealm, "example.net"},
		{"destination-realm", o.destRealm, "example.net"},
	} {
		if err := checkIdentityFlag(f.name, f.v, f.example); err != nil {
			return err
		}
	}
	seen := make(map[string]bool, len(o.peers))
	for _, u := range o.peers {
		if err := checkURLScheme("peer", u, clientSchemes); err != nil {
			return err
		}
		if err := checkPeerAddr("peer", u); err != nil {
			return err
		}
		if _, err := transport.ParseURL(u); err != nil {
			return usagef("--peer %s: %v", u, err)
		}
		if seen[u] {
			return usagef("--peer %s given twice", u)
		}
		seen[u] = true
	}
	if err := o.check(); err != nil {
		return err
	}
	if o.requests == 0 && o.duration == 0 {
		o.requests = 10
	}
	switch {
	case o.downTimeout < 0:
		return usagef("--down-timeout %v: must not be negative", o.downTimeout)
	case o.holdDown < 0:
		return usagef("--hold-down %v: must not be negative", o.holdDown)
	case o.keepAlive < 0:
		return usagef("--keepalive %v: must not be negative", o.keepAlive)
	case o.keepAlive > 0 && o.testUser == "":
		return usagef("--keepalive needs --test-user")
	}
	if o.timeout == 0 {
		// Long enough for a hung peer's requests to be replayed (F11),
		// whichever peer: the longest Tw.
		tw := o.tw
		for _, s := range o.own {
			tw = max(tw, s.tw)
		}
		o.timeout = client.FailoverDetection(tw) + peer.DefaultRequestTimeout
	}
	return nil
}

// throttled and policed say whether any throttle or policy flag was given.
func (o *clientOptions) throttled() bool {
	for _, s := range o.own {
		if s.limits != nil {
			return true // a peer's own limits need the throttle
		}
	}
	return o.maxRate > 0 || o.maxRateAcct.n > 0 || o.maxOutstanding > 0 || o.alarmHigh > 0
}

func (o *clientOptions) policed() bool {
	return o.downTimeout > 0 || o.holdDown > 0 || o.testUser != "" || o.keepAlive > 0
}

// diameterRequests are the Diameter client's requests: Accounting-
// Requests or test_app Test-Requests of one template.
type diameterRequests struct {
	o       *clientOptions
	tmpl    *message.RequestTemplate
	metrics *status.Metrics // nil without --status
}

// exchange sends request n; an answer with a Result-Code other than
// DIAMETER_SUCCESS is a failure of the kind "result CODE".
func (r *diameterRequests) exchange(ctx context.Context, cl *client.Client, n int64) (string, bool, error) {
	req := r.tmpl.Build(n, "")
	r.metrics.ObserveWire(req, status.DirOut)
	ans, err := cl.Send(ctx, req)
	if err != nil {
		return "", false, err
	}
	r.metrics.ObserveWire(ans, status.DirIn)
	switch rc, ok := message.ResultCodeOf(ans); {
	case !ok:
		return "no result code", false, nil
	case rc != message.Success:
		return fmt.Sprintf("result %d", rc), false, nil
	}
	return "", false, nil
}

// identity is the status page's: the Origin-Host and the run's settings.
func (r *diameterRequests) identity() status.Identity {
	o := r.o
	info := map[string]string{"mode": o.clientMode.String(), "tw": o.tw.String(), "app": o.app}
	if o.clientMode == client.Balance {
		info["algorithm"] = o.alg.String()
	}
	if o.rate > 0 {
		info["rate"] = fmt.Sprintf("%g/s", o.rate)
	}
	if o.throttled() {
		info["throttle"] = fmt.Sprintf("max-rate %d, max-rate-acct %d, max-outstanding %d", o.maxRate, o.maxRateAcct.of(o.maxRate), o.maxOutstanding)
	}
	if o.policed() {
		info["policy"] = "on"
	}
	return status.Identity{OriginHost: o.originHost, OriginRealm: o.originRealm, Info: info}
}

func runClient(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runClientWith(ctx, args, stdout, stderr, hangups)
}

// runClientWith is runClient with hup in place of the process's SIGHUP
// (a test's channel).
func runClientWith(ctx context.Context, args []string, stdout, stderr io.Writer, hup <-chan os.Signal) int {
	// A --peer with no or an unknown scheme is neither client's: say so
	// before either parses flags the other does not take.
	for _, u := range peerArgs(args) {
		if err := checkURLScheme("peer", u, clientSchemes); err != nil {
			fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
			return 2
		}
	}
	// Each client's flags are its own: a mix of Diameter and RADIUS
	// --peer would reach one of them and fail on the other's flags or
	// URLs, naming neither the mix nor the --peer at fault.
	peers := peerArgs(args)
	if r := slices.IndexFunc(peers, radpeer.IsURL); r >= 0 {
		if d := slices.IndexFunc(peers, func(u string) bool { return !radpeer.IsURL(u) }); d >= 0 {
			fmt.Fprintf(stderr, "aaa-peer client: --peer %s and --peer %s: one run speaks one protocol: give Diameter servers (tcp://, tls://, sctp://) or RADIUS servers (radius://, radius+tcp://, radsec://), not both\n",
				peers[min(d, r)], peers[max(d, r)])
			return 2
		}
	}
	if slices.ContainsFunc(peers, radpeer.IsURL) || configNamesRADIUS(args) {
		return runRadiusClient(ctx, args, stdout, stderr, hup)
	}
	var o clientOptions
	fs := clientFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	base, set := o, setFlags(fs) // the command line's alone: a reload starts from them
	cfg, err := loadConfig(o.config, stderr)
	if err != nil {
		return 2
	}
	unused, err := o.applyConfig(cfg, set)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	if o.rate > 0 && !set["concurrency"] {
		// Open loop: room for every request to run its --timeout.
		o.concurrency = openLoopBound(o.rate, o.timeout)
	}
	o.startOnPrimary(set)
	// The log and the progress lines may share stderr (progressWriter).
	stderr = &lockedWriter{w: stderr}
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	for _, u := range unused {
		log.Warn("--config: the client does not use this part of the file", "file", o.config, "ignored", u)
	}
	topts := transport.Options{NoDelay: o.noDelay}
	if topts.TLS, err = o.tlsConfig(); err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	defer tuneClientGCFromEnv()()
	stopProfile, err := startCPUProfile(o.cpuProfile, log)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 1
	}
	defer stopProfile()
	bus := client.NewBus()
	ccfg := o.clientConfig(log, topts, bus)
	if ccfg.Peers, err = o.peerSpecs(nil); err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}

	if err := checkReport(o.report); err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 1
	}
	ew, err := openEvents(clientLines(bus), o.events, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 1
	}
	metrics := newMetrics(o.status)
	c, reqs := newDiameterLoad(o, log, metrics)
	if o.testUser != "" {
		// Probes and keep-alives: one request of the test user (S4, S5).
		ccfg.TestRequest = func(string) []byte { return reqs.tmpl.Build(c.issued.Add(1), o.testUser) }
	}
	cancelLog := logClientEvents(bus, log)
	defer cancelLog()
	var cancelOpens func()
	c.opens, cancelOpens = watchOpenFailures(bus, ccfg.Peers)
	defer cancelOpens()
	defer metrics.WatchClient(bus)() // watchdog states, transitions, failovers
	c.cl, err = client.New(ccfg)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		ew.Close()
		return 2
	}
	c.peersEver() // the first peers, before a reload may remove them
	defer watchReload(hup, log, o.config, set["peer"], metrics, func(cfg *config.Config) ([]string, error) { return reqs.reloadPeers(c, cfg, base, set) })()
	web, err := openStatus(o.status, status.SourceFunc(c.clientSnapshot), metrics, log)
	if err != nil {
		log.Error("status page", "err", err)
		c.closeClient()
		ew.Close()
		return 1
	}

	code := 0
	began := time.Now()
	if err := c.waitUp(ctx, o.waitPeers, o.connectTimeout); err != nil {
		log.Error("no peer in service", "err", err)
		code = 1
	} else {
		c.run(ctx, progressWriter(&o.loadOptions, stdout, stderr))
	}
	elapsed := time.Since(began) // the run, not the disconnect
	if err := web.Close(); err != nil {
		log.Error("status page", "err", err)
	}
	return c.finish(code, elapsed, ew, stdout)
}

// newDiameterLoad prepares a Diameter run of validated options o (its
// Client is set by the caller).
func newDiameterLoad(o clientOptions, log *slog.Logger, metrics *status.Metrics) (*loadgen, *diameterRequests) {
	r := &diameterRequests{o: &o, metrics: metrics}
	g := newLoadgen(&o.loadOptions, o.timeout, "diameter", r, log, metrics)
	app := uint32(message.AppAccounting)
	if o.app == "test" {
		app = message.AppTest
	}
	// The run's start in nanoseconds is the high part of the Session-Ids:
	// two runs started in one second must not reuse them.
	r.tmpl, _ = message.NewRequestTemplate(message.Series{App: app, From: message.Identity{Host: o.originHost, Realm: o.originRealm},
		DestinationRealm: o.destRealm, SessionPrefix: o.originHost + ";" + strconv.FormatInt(g.epoch.UnixNano(), 10) + ";", UserName: o.nai}) // app is one of the two
	return g, r
}

// permanentRefusal says whether a CEA's Result-Code refuses us for good:
// a protocol error (DIAMETER_UNKNOWN_PEER, 3010...) other than too busy
// and unable to deliver, or a permanent failure (5xxx). Trying again
// changes nothing until someone changes a configuration.
func permanentRefusal(rc uint32) bool {
	switch {
	case rc == message.TooBusy, rc == message.UnableToDeliver:
		return false
	case rc >= 3000 && rc < 4000, rc >= 5000 && rc < 6000:
		return true
	}
	return false
}

// clientConfig is the client's client.Config but its Peers, the one place
// it is built for both the client command and the demo's client.
func (o *clientOptions) clientConfig(log *slog.Logger, topts transport.Options, bus *client.Bus) client.Config {
	pcfg := peer.Config{
		OriginHost: o.originHost, OriginRealm: o.originRealm,
		Watchdog:       watchdog.Config{Twinit: o.tw},
		Transport:      topts,
		Logger:         log,
		RequestTimeout: o.timeout,
		DPATimeout:     shutdownBudget,
		DPRHoldOff:     o.dprHoldOff,
	}
	if o.dprHoldOff == 0 {
		pcfg.DPRHoldOff = -1 // none
	}
	if o.app == "test" {
		pcfg.VendorApps = []peer.VendorApp{{VendorID: message.VendorTest, AuthAppID: message.AppTest}}
	} else {
		pcfg.AcctApps = []uint32{message.AppAccounting}
	}
	ccfg := client.Config{
		Mode: o.clientMode, Algorithm: o.alg, Peer: pcfg,
		RequestTimeout: o.timeout, Events: bus,
	}
	if o.throttled() {
		lim := throttle.Limits{MaxRate: o.maxRate, MaxOutstanding: o.maxOutstanding}
		acct := throttle.Limits{MaxRate: o.maxRateAcct.of(o.maxRate), MaxOutstanding: o.maxOutstanding}
		ccfg.Throttle = &client.Throttle{Auth: lim, Accounting: acct, Slot: o.slot, AlarmHigh: o.alarmHigh, AlarmLow: o.alarmLow}
	}
	if o.policed() {
		ccfg.Policy = &policy.Config{RequestTimeout: o.timeout, Retries: 1, DownTimeout: o.downTimeout,
			HoldDown: o.holdDown, TestUser: o.testUser != "", KeepAlive: o.keepAlive}
	}
	return ccfg
}
