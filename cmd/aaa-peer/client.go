package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/latency"
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
       [--max-rate N] [--slot D] [--max-outstanding N] [--queue-alarm HIGH,LOW]
       [--down-timeout D] [--hold-down D] [--test-user NAI] [--keepalive D]
       [--weight URL=N...] [--dpr-hold-off 5m] [--events FILE] [--report FILE]
       [--max-failed SHARE] [--status ADDR] [--log-level info] [--log-format text|json]
       [--cpuprofile FILE]

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
these failovers. Prints one progress line a second:
  t=3s sent=1200 answered=1198 failed=0 pending=2 peers=host1:OKAY,host2:SUSPECT
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
	originHost     string
	originRealm    string
	destRealm      string
	timeout        time.Duration
	connectTimeout time.Duration
	noDelay        bool
	mode           string
	waitPeers      int
	dprHoldOff     time.Duration
	cpuProfile     string

	// Parsed by validate.
	clientMode client.Mode
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
	fs.IntVar(&o.concurrency, "concurrency", 1, "in-flight bound `N`: at most N requests in flight; with --rate, a request whose time comes while N are in flight is not sent (dropped_in_flight in the report, a warning at most once a second); with --rate 0, N callers each sending its next request when its last is done (not given with --rate: rate x --timeout, room for every request to run its whole timeout, at most 100000)")
	fs.Int64Var(&o.requests, "requests", 0, "stop after `N` requests sent (those not sent at the in-flight bound do not count; 0: no limit; with neither --requests nor --duration, 10)")
	fs.DurationVar(&o.duration, "duration", 0, "stop issuing requests after `D` (0: no limit); with --requests, whichever comes first")
	fs.StringVar(&o.nai, "nai", "user%d@example.net", "User-Name `FORMAT`; %d is the request number (without it, every request has the same NAI, so balance mode sends them all to one server)")
	fs.StringVar(&o.app, "app", "acct", "`APP` requests to send: acct (Accounting-Request, application 3) or test (test_app Test-Request, application 16777214)")
	fs.StringVar(&o.events, "events", "", "write every peer event as a JSON line to `FILE` (\"-\" is stdout)")
	fs.StringVar(&o.report, "report", "", "write a JSON report to `FILE` at the end (\"-\" is stdout)")
	fs.DurationVar(&o.timeout, "timeout", 0, "per-request deadline `D` (a request may run up to 1% of it, at most 10ms, longer), including any wait for a peer in service and a failover (default: the failover detection of --tw, or of the longest tw of the --config file's peers, 2 x (tw + 2s), plus 10s for the answer: 74s at --tw 30s; a shorter one is logged as a warning)")
	fs.DurationVar(&o.timeout, "request-timeout", 0, "the same as --timeout: a request's deadline `D` (the RADIUS client's name for it)")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 10*time.Second, "wait at most `D` for the first peer to be OKAY, else exit 1")
	fs.BoolVar(&o.noDelay, "no-delay", false, "disable Nagle on TCP and TLS sockets (RFC 3539 3.2 wants it on)")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "PEM CA `FILE` that tls:// servers' certificates must chain to (default: system roots)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM client certificate `FILE` presented to tls:// servers (mutual TLS)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key `FILE` of --tls-cert")
	logFlags(fs, &o.logLevel, &o.logFormat, "info")
	statusFlag(fs, &o.status, "logged at info")
	cpuProfileFlag(fs, &o.cpuProfile)
	fs.StringVar(&o.mode, "mode", "balance", "`MODE` choosing the peer of each new request: balance (spread with --algorithm) or failover (first peer in service, in --peer order)")
	fs.StringVar(&o.algorithm, "algorithm", "pearson", "balance `ALG`: pearson (weighted RFC 3074 hash of the NAI), hash (unweighted), direct (first --peer in service) or round-robin")
	fs.IntVar(&o.waitPeers, "wait-peers", 1, "before sending, wait until `N` peers are OKAY (0: all of them; the default with --mode failover, so the run starts on the primary), at most --connect-timeout; past it, go on with those OKAY (exit 1 if none)")
	fs.IntVar(&o.maxRate, "max-rate", 0, "throttle: at most `N` requests per second to each server, spread evenly over --slot slots (0: no rate limit)")
	fs.IntVar(&o.maxOutstanding, "max-outstanding", 0, "throttle: at most `N` requests outstanding per server; a place frees when the answer arrives or the request times out (0: 256 when throttling is on)")
	fs.DurationVar(&o.slot, "slot", 50*time.Millisecond, "throttle: rate slot length `D` (at least 50ms)")
	fs.StringVar(&o.queueAlarm, "queue-alarm", "", "throttle: raise a server's queue alarm at depth HIGH and clear it at LOW (`HIGH,LOW`)")
	fs.DurationVar(&o.downTimeout, "down-timeout", 0, "policy: a server with requests sent and no reply for `D` goes out of service (default: --timeout)")
	fs.DurationVar(&o.holdDown, "hold-down", 0, "policy: an out-of-service server gets nothing for `D`, then one probe (default 30s)")
	fs.StringVar(&o.testUser, "test-user", "", "policy: probe (and keep alive) servers with a request for this `NAI` instead of a real one")
	fs.DurationVar(&o.keepAlive, "keepalive", 0, "policy: send the --test-user request to each server every `D` (0: never)")
	fs.DurationVar(&o.dprHoldOff, "dpr-hold-off", peer.DefaultDPRHoldOff, "after a peer's DPR with Disconnect-Cause BUSY or DO_NOT_WANT_TO_TALK_TO_YOU, do not redial it for `D` (RFC 6733 5.4.3; 0: redial at the next Tw, as after REBOOTING)")
	fs.StringVar(&o.maxFailed, "max-failed", "0", "exit 3 when more than this `SHARE` of the requests failed: a fraction (0.05) or a percentage (5%); 0: any failure; 1: never")
	fs.Var(&o.weights, "weight", "`URL=N`: balance weight N >= 1 of the --peer URL (pearson); repeat for several; default 1")
	configFlag(fs, &o.config)
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
	case o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0):
		return usagef("--rate must be a finite number >= 0")
	case o.concurrency < 1:
		return usagef("--concurrency must be at least 1")
	case o.requests < 0:
		return usagef("--requests must not be negative")
	case o.duration < 0:
		return usagef("--duration must not be negative")
	case o.timeout < 0:
		return usagef("--timeout must be positive")
	case o.connectTimeout <= 0:
		return usagef("--connect-timeout must be positive")
	case o.waitPeers < 0 || o.waitPeers > len(o.peers):
		return usagef("--wait-peers %d: want 0 (all) to %d (the number of --peer)", o.waitPeers, len(o.peers))
	case o.app != "acct" && o.app != "test":
		return usagef("--app %q: want acct or test", o.app)
	case strings.Contains(o.nai, "%") && strings.Contains(fmt.Sprintf(o.nai, 1), "%!"):
		return usagef("--nai %q: want a format with at most one %%d", o.nai)
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
		if _, err := transport.ParseURL(u); err != nil {
			return usagef("--peer %s: %v", u, err)
		}
		if seen[u] {
			return usagef("--peer %s given twice", u)
		}
		seen[u] = true
	}
	var err error
	if o.clientMode, err = client.ParseMode(o.mode); err != nil {
		return usagef("--mode %q: want balance or failover", o.mode)
	}
	if err := o.check(); err != nil {
		return err
	}
	if o.requests == 0 && o.duration == 0 {
		o.requests = 10
	}
	switch {
	case o.maxRate < 0 || o.maxOutstanding < 0:
		return usagef("--max-rate and --max-outstanding must not be negative")
	case o.slot < 50*time.Millisecond || o.slot > time.Second:
		return usagef("--slot %v: want 50ms to 1s", o.slot)
	case o.downTimeout < 0 || o.holdDown < 0 || o.keepAlive < 0:
		return usagef("--down-timeout, --hold-down and --keepalive must not be negative")
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
	return o.maxRate > 0 || o.maxOutstanding > 0 || o.alarmHigh > 0
}

func (o *clientOptions) policed() bool {
	return o.downTimeout > 0 || o.holdDown > 0 || o.testUser != "" || o.keepAlive > 0
}

// loadgen is one run of "aaa-peer client".
type loadgen struct {
	o       clientOptions
	log     *slog.Logger
	metrics *status.Metrics // nil without --status
	cl      *client.Client
	tmpl    *message.RequestTemplate
	pmu     sync.Mutex
	peers   []*peer.Peer // every peer cl has had (a reload adds some), under pmu: see peersEver
	start   int64        // unix nanoseconds, the high part of Session-Ids: two runs started in one second must not reuse them
	epoch   time.Time    // the origin of the requests' clock readings (one read each: time.Now reads two clocks)

	issued atomic.Int64 // request numbers handed out
	open   *openLoop    // the open-loop scheduler (--rate > 0), once run starts
	*counter
}

// clientReport is the --report document.
type clientReport struct {
	Sent          uint64 `json:"sent"`
	Answered      uint64 `json:"answered"`
	Failed        uint64 `json:"failed"`
	Retransmitted uint64 `json:"retransmitted"` // replays sent with T after a failover, over every peer
	// Mode and Algorithm are the --mode and --algorithm in effect.
	Mode           string                  `json:"mode"`
	Algorithm      string                  `json:"algorithm"`
	LatencyUS      latency.Summary         `json:"latency_us"`
	Peers          []peer.Stats            `json:"peers"`
	Servers        []client.ServerStats    `json:"servers"`
	Failovers      []client.FailoverRecord `json:"failovers"`
	FailoversTotal uint64                  `json:"failovers_total"` // records ever made; "failovers" keeps the last 256
	FailedBy       map[string]uint64       `json:"failed_by"`
	// Policy is each server's policy state ("" without --down-timeout,
	// --hold-down, --test-user or --keepalive); Queues each server's
	// throttle queue (deepest depth, alarms raised), without a throttle none.
	Policy        []string            `json:"policy"`
	Queues        []client.QueueDepth `json:"queues"`
	EventsDropped uint64              `json:"events_dropped"`
	ElapsedMS     int64               `json:"elapsed_ms"`
	// Loop is "open" (--rate > 0: requests leave at their times, latency
	// from those times) or "closed" (--rate 0: --concurrency callers).
	// DroppedInFlight counts the requests of the open loop not sent
	// because --concurrency requests were in flight at their time.
	Loop            string `json:"loop"`
	DroppedInFlight uint64 `json:"dropped_in_flight"`
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
	if slices.ContainsFunc(peerArgs(args), radpeer.IsURL) || configNamesRADIUS(args) {
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
	if o.clientMode == client.PrimarySecondary && !set["wait-peers"] {
		// Start on the primary, not on whichever peer answered first.
		o.waitPeers = 0
	}
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
	if ccfg.Peers, err = o.peerSpecs(nil, nil); err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}

	ew, err := openEvents(clientLines(bus), o.events, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 1
	}
	metrics := newMetrics(o.status)
	c := newLoadgen(o, log, metrics)
	if o.testUser != "" {
		// Probes and keep-alives: one request of the test user (S4, S5).
		ccfg.TestRequest = func(string) []byte { return c.tmpl.Build(c.issued.Add(1), o.testUser) }
	}
	names := make([]string, len(ccfg.Peers))
	for i, p := range ccfg.Peers {
		names[i] = p.Name
	}
	refused, cancelRefused := watchRefusals(bus, names)
	defer cancelRefused()
	cancelLog := logClientEvents(bus, log)
	defer cancelLog()
	defer metrics.WatchClient(bus)() // watchdog states, transitions, failovers
	c.cl, err = client.New(ccfg)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		ew.Close()
		return 2
	}
	c.peersEver() // the first peers, before a reload may remove them
	defer watchReload(hup, log, o.config, set["peer"], metrics, func(cfg *config.Config) ([]string, error) { return c.reloadPeers(cfg, base, set) })()
	web, err := openStatus(o.status, status.SourceFunc(c.clientSnapshot), metrics, log)
	if err != nil {
		log.Error("status page", "err", err)
		c.closeClient()
		ew.Close()
		return 1
	}

	code := 0
	began := time.Now()
	if err := c.waitUp(ctx, refused); err != nil {
		log.Error("no peer in service", "err", err)
		code = 1
	} else {
		c.run(ctx, stdout)
		if c.onWire() == 0 {
			log.Error("no request could be sent")
			code = 1
		} else if failed, sent := c.failures(); o.tooManyFailed(failed, sent) {
			log.Error("too many requests failed", "failed", failed, "sent", sent, "max_failed", o.maxFailed)
			code = 3
		}
	}
	elapsed := time.Since(began) // the run, not the disconnect

	if err := web.Close(); err != nil {
		log.Error("status page", "err", err)
	}
	// The report comes after the disconnect, so that it shows the states
	// and counters the peers ended with (DOWN, the last DWR and DPR).
	c.closeClient()
	if o.report != "" {
		r := c.report(ew.Dropped(), elapsed)
		if err := writeJSONFile(o.report, r, stdout); err != nil {
			log.Error("writing report", "err", err)
			code = 1
		}
	}
	if err := ew.Close(); err != nil {
		log.Error("writing events", "err", err)
		code = 1
	}
	return code
}

// newLoadgen prepares a run of validated options o (its Client is set by
// the caller).
func newLoadgen(o clientOptions, log *slog.Logger, metrics *status.Metrics) *loadgen {
	now := time.Now()
	c := &loadgen{o: o, log: log, metrics: metrics, start: now.UnixNano(), epoch: now, counter: newCounter(o.concurrency)}
	app := uint32(message.AppAccounting)
	if o.app == "test" {
		app = message.AppTest
	}
	c.tmpl, _ = message.NewRequestTemplate(message.Series{App: app, From: message.Identity{Host: o.originHost, Realm: o.originRealm},
		DestinationRealm: o.destRealm, SessionPrefix: o.originHost + ";" + strconv.FormatInt(c.start, 10) + ";", UserName: o.nai}) // app is one of the two
	return c
}

// onWire is how many requests (first sends and replays) the peers sent.
func (c *loadgen) onWire() uint64 {
	var n uint64
	for _, p := range c.peersEver() {
		n += p.Stats().Sent
	}
	return n
}

// failures returns the requests that failed and those sent, leaving out
// those a signal interrupted.
func (c *loadgen) failures() (failed, sent uint64) {
	c.mu.Lock()
	cut := c.failedBy["interrupted"]
	c.mu.Unlock()
	sent, _, failed = c.counts()
	return failed - cut, sent - cut
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

// watchRefusals reports, once, on the channel it returns when every one
// of peers has refused us with a permanent error at its last attempt and
// none is connected: nothing will come up by waiting.
func watchRefusals(bus *client.Bus, peers []string) (<-chan string, func()) {
	all := make(chan string, 1)
	var mu sync.Mutex
	last := make(map[string]string, len(peers)) // peer -> its permanent refusal
	cancel := bus.Subscribe(func(_ context.Context, e client.Event) {
		if e.Kind != client.EventPeer {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch e.Peer.Kind {
		case peer.EventOpenFailed:
			if !permanentRefusal(e.Peer.ResultCode) {
				delete(last, e.Server)
				return
			}
			last[e.Server] = e.Peer.Reason
			if len(last) == len(peers) {
				reasons := make([]string, 0, len(peers))
				for _, p := range peers {
					reasons = append(reasons, p+": "+last[p])
				}
				select {
				case all <- strings.Join(reasons, "; "):
				default:
				}
			}
		case peer.EventConnUp:
			delete(last, e.Server)
		}
	})
	return all, cancel
}

// waitUp waits until --wait-peers peers are in service, --connect-timeout
// or ctx. Past --connect-timeout, one peer in service is enough. When every
// peer refused us for good (refused), it returns at once.
func (c *loadgen) waitUp(ctx context.Context, refused <-chan string) error {
	want := c.o.waitPeers
	if want == 0 {
		want = len(c.cl.Peers())
	}
	wctx, cancel := context.WithTimeout(ctx, c.o.connectTimeout)
	defer cancel()
	rctx, stop := context.WithCancelCause(wctx)
	defer stop(nil)
	go func() {
		select {
		case why := <-refused:
			stop(fmt.Errorf("every peer refused us with a permanent error: %s", why))
		case <-rctx.Done():
		}
	}()
	err := c.cl.WaitReady(rctx, want)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted while connecting: %w", context.Cause(ctx))
	case wctx.Err() == nil: // refused by every peer: waiting changes nothing
		return context.Cause(rctx)
	case c.cl.WaitReady(wctx, 1) == nil: // wctx is done: this only counts
		c.log.Warn("not every peer wanted is in service; going on", "err", err, "wait_peers", want, "connect_timeout", c.o.connectTimeout)
		return nil
	}
	return fmt.Errorf("none of %d peers OKAY within %v (--connect-timeout)", len(c.cl.Peers()), c.o.connectTimeout)
}

// closeClient disconnects every peer (DPR/DPA), bounded by shutdownBudget.
func (c *loadgen) closeClient() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	if err := c.cl.Close(ctx); err != nil {
		c.log.Debug("close", "err", err)
	}
}

// run sends requests until --requests, --duration or ctx, printing
// progress every second.
func (c *loadgen) run(ctx context.Context, stdout io.Writer) {
	drive(ctx, c.o.duration, stdout, c.progress, c.cl, c.log, func(runCtx context.Context) {
		dl := newDeadlines(ctx, c.o.timeout)
		defer dl.close() // after the requests in flight
		if c.o.rate > 0 {
			c.open = newOpenLoop(c.o.rate, c.o.concurrency, c.o.requests, c.log)
			c.openLoop(ctx, runCtx, dl, c.open)
		} else {
			c.closedLoop(ctx, runCtx, dl)
		}
	})
}

// openLoop runs l: each request leaves at its time, latency from that
// time. In-flight requests finish when runCtx ends; only ctx (a signal)
// interrupts them.
func (c *loadgen) openLoop(ctx, runCtx context.Context, dl *deadlines, l *openLoop) {
	l.run(runCtx, func(_ int64, intended time.Time) {
		n := c.issued.Add(1)
		c.one(ctx, dl, n, c.tally(n), nil, intended.Sub(c.epoch))
	})
}

// closedLoop is --rate 0: --concurrency callers, each sending its next
// request when its last one is done, as fast as they go.
func (c *loadgen) closedLoop(ctx, runCtx context.Context, dl *deadlines) {
	var wg sync.WaitGroup
	for i := range c.o.concurrency {
		t := c.tally(int64(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat latencies
			defer lat.flush(&c.lat) // before wg.Done: the report sees them
			for runCtx.Err() == nil {
				n := c.issued.Add(1)
				if c.o.requests > 0 && n > c.o.requests {
					return
				}
				// In-flight requests finish when --duration ends; only
				// ctx (a signal) interrupts them.
				c.one(ctx, dl, n, t, &lat, -1)
			}
		}()
	}
	wg.Wait()
}

func (c *loadgen) progress(elapsed time.Duration) string {
	sent, answered, failed := c.counts()
	var b strings.Builder
	fmt.Fprintf(&b, "t=%ds sent=%d answered=%d failed=%d pending=%d peers=",
		int64(elapsed.Round(time.Second)/time.Second), sent, answered, failed, sent-answered-failed)
	for i, p := range c.cl.Peers() {
		if p == nil {
			continue // waiting for a connection slot
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.Name() + ":" + p.State().String())
	}
	return b.String()
}

// one sends request n through the Client and counts its outcome in t,
// its latency in lat (nil: straight into the run's histogram); dl, under
// ctx, gives it its --timeout. The latency runs from intended, the time
// since c.epoch the request was meant to leave (open loop), or from now
// when intended is negative (closed loop).
func (c *loadgen) one(ctx context.Context, dl *deadlines, n int64, t *tally, lat *latencies, intended time.Duration) {
	t.sent.Add(1)
	req := c.tmpl.Build(n, "")
	c.metrics.ObserveWire(req, status.DirOut)
	now := time.Since(c.epoch)
	t0 := intended
	if t0 < 0 {
		t0 = now
	}
	s := dl.at(c.epoch.Add(now))
	ans, err := c.cl.Send(s.ctx, req)
	s.release()
	if err != nil {
		kind := errorKind(err)
		if ctx.Err() != nil {
			kind = "interrupted"
		}
		c.fail(t, kind)
		c.log.Debug("request failed", "n", n, "kind", kind, "err", err)
		return
	}
	took := time.Since(c.epoch) - t0
	if lat != nil {
		lat.add(took, &c.lat)
	} else {
		c.lat.Record(took)
	}
	c.metrics.ObserveLatency(took)
	c.metrics.ObserveWire(ans, status.DirIn)
	rc, ok := message.ResultCodeOf(ans)
	switch {
	case !ok:
		c.fail(t, "no result code")
	case rc != message.Success:
		c.fail(t, fmt.Sprintf("result %d", rc))
		c.log.Debug("request failed", "n", n, "result", rc)
	default:
		t.answered.Add(1)
	}
}

func errorKind(err error) string {
	switch {
	case errors.Is(err, client.ErrNoPeer), errors.Is(err, peer.ErrNotInService):
		return "not in service"
	case errors.Is(err, peer.ErrTimeout):
		return "timeout"
	case errors.Is(err, peer.ErrConnectionLost):
		return "connection lost"
	case errors.Is(err, peer.ErrClosed):
		return "peer closed"
	case errors.Is(err, client.ErrUnableToDeliver):
		return "unable to deliver"
	}
	return "error"
}

func (c *loadgen) report(dropped uint64, elapsed time.Duration) clientReport {
	sent, answered, failed := c.counts()
	r := clientReport{
		Sent: sent, Answered: answered, Failed: failed,
		LatencyUS: c.lat.Summary(), FailedBy: c.failedKinds(),
		EventsDropped: dropped, ElapsedMS: elapsed.Milliseconds(),
		Mode: c.o.clientMode.String(), Algorithm: c.o.alg.String(),
		Servers: c.cl.ServerStats(), Failovers: []client.FailoverRecord{},
		Loop: "closed",
	}
	if c.o.rate > 0 {
		r.Loop = "open"
	}
	if c.open != nil {
		r.DroppedInFlight = c.open.dropped.Load()
	}
	for _, p := range c.peersEver() {
		st := p.Stats()
		r.Retransmitted += st.Retransmitted
		r.Peers = append(r.Peers, st)
	}
	r.Policy = c.cl.PolicyStates()
	r.Queues = append([]client.QueueDepth{}, c.cl.QueueDepths()...)
	recs, total := c.cl.FailoverLog()
	r.Failovers = append(r.Failovers, recs...)
	r.FailoversTotal = total
	return r
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
		ccfg.Throttle = &client.Throttle{Auth: lim, Accounting: lim, Slot: o.slot, AlarmHigh: o.alarmHigh, AlarmLow: o.alarmLow}
	}
	if o.policed() {
		ccfg.Policy = &policy.Config{RequestTimeout: o.timeout, Retries: 1, DownTimeout: o.downTimeout,
			HoldDown: o.holdDown, TestUser: o.testUser != "", KeepAlive: o.keepAlive}
	}
	return ccfg
}

// peersEver returns every peer the client has had, in the order first
// seen: those of the configuration now, and those a reload removed or
// replaced (their counts still belong to the run).
func (c *loadgen) peersEver() []*peer.Peer {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for _, p := range c.cl.Peers() {
		if p != nil && !slices.Contains(c.peers, p) {
			c.peers = append(c.peers, p)
		}
	}
	return slices.Clone(c.peers)
}
