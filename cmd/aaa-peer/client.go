package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

const clientSynopsis = `usage: aaa-peer client --peer URL [--peer URL...] --origin-host H --origin-realm R
       --destination-realm R [--tw 30s] [--rate N] [--concurrency N]
       [--requests N | --duration D] [--nai FORMAT] [--app acct|test]
       [--events FILE] [--report FILE]

Connects to every --peer, waits until one is OKAY, then sends Accounting-
Requests (--app acct) or freeDiameter test_app Test-Requests (--app test)
round-robin over the peers that are OKAY, from --concurrency callers at
--rate requests per second. Prints one progress line a second:
  t=3s sent=1200 answered=1198 failed=0 pending=2 peers=host1:OKAY,host2:SUSPECT
sent counts requests issued (sent = answered + failed + pending); an answer
with Result-Code 2001 is answered, anything else failed. At the end, or on
SIGTERM or SIGINT, writes the report, disconnects (DPR) and exits 0; exit 1
if no peer came up or no request reached a peer.
`

type clientOptions struct {
	peers          stringList
	originHost     string
	originRealm    string
	destRealm      string
	tw             time.Duration
	rate           float64
	concurrency    int
	requests       int64
	duration       time.Duration
	nai            string
	app            string
	events         string
	report         string
	timeout        time.Duration
	connectTimeout time.Duration
	noDelay        bool
	tlsCA          string
	tlsCert        string
	tlsKey         string
	logLevel       string
}

func clientFlags(o *clientOptions, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("client", clientSynopsis, stderr)
	fs.Var(&o.peers, "peer", "`URL` of a server: tcp://host:port, tls://host:port or sctp://host:port; repeat for several (required)")
	fs.StringVar(&o.originHost, "origin-host", "", "our Origin-Host `H`, a DiameterIdentity such as client1.example.net (required)")
	fs.StringVar(&o.originRealm, "origin-realm", "", "our Origin-Realm `R`, such as example.net (required)")
	fs.StringVar(&o.destRealm, "destination-realm", "", "Destination-Realm `R` of the requests, such as example.net (required)")
	fs.DurationVar(&o.tw, "tw", watchdog.DefaultTwinit, "watchdog interval Twinit `D` (RFC 3539: at least 6s; jittered by +-2s)")
	fs.Float64Var(&o.rate, "rate", 0, "`N` requests per second across all callers, paced without bursts; may be fractional (0: as fast as the callers go)")
	fs.IntVar(&o.concurrency, "concurrency", 1, "`N` concurrent callers (at most N requests in flight)")
	fs.Int64Var(&o.requests, "requests", 0, "stop after `N` requests (0: no limit; with neither --requests nor --duration, 10)")
	fs.DurationVar(&o.duration, "duration", 0, "stop issuing requests after `D` (0: no limit); with --requests, whichever comes first")
	fs.StringVar(&o.nai, "nai", "user%d@example.net", "User-Name `FORMAT`; %d is the request number")
	fs.StringVar(&o.app, "app", "acct", "`APP` requests to send: acct (Accounting-Request, application 3) or test (test_app Test-Request, application 16777214)")
	fs.StringVar(&o.events, "events", "", "write every peer event as a JSON line to `FILE` (\"-\" is stdout)")
	fs.StringVar(&o.report, "report", "", "write a JSON report to `FILE` at the end (\"-\" is stdout)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "per-request deadline `D`, including any wait for a peer in service")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 10*time.Second, "wait at most `D` for the first peer to be OKAY, else exit 1")
	fs.BoolVar(&o.noDelay, "no-delay", false, "disable Nagle on TCP and TLS sockets (RFC 3539 3.2 wants it on)")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "PEM CA `FILE` that tls:// servers' certificates must chain to (default: system roots)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM client certificate `FILE` presented to tls:// servers (mutual TLS)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key `FILE` of --tls-cert")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `level` on stderr: debug, info, warn or error")
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
	case o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0):
		return usagef("--rate must be a finite number >= 0")
	case o.concurrency < 1:
		return usagef("--concurrency must be at least 1")
	case o.requests < 0:
		return usagef("--requests must not be negative")
	case o.duration < 0:
		return usagef("--duration must not be negative")
	case o.timeout <= 0:
		return usagef("--timeout must be positive")
	case o.connectTimeout <= 0:
		return usagef("--connect-timeout must be positive")
	case o.app != "acct" && o.app != "test":
		return usagef("--app %q: want acct or test", o.app)
	case strings.Contains(fmt.Sprintf(o.nai, 1), "%!"):
		return usagef("--nai %q: want a format with at most one %%d", o.nai)
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return usagef("--tls-cert and --tls-key go together")
	}
	for _, u := range o.peers {
		if _, err := transport.ParseURL(u); err != nil {
			return usagef("--peer %s: %v", u, err)
		}
	}
	if o.requests == 0 && o.duration == 0 {
		o.requests = 10
	}
	return nil
}

// client is one run of "aaa-peer client".
type client struct {
	o     clientOptions
	log   *slog.Logger
	peers []*peer.Peer
	start int64 // unix seconds, in Session-Ids

	issued   atomic.Int64  // request numbers handed out
	sent     atomic.Uint64 // requests issued
	onWire   atomic.Uint64 // requests a peer accepted to send
	answered atomic.Uint64
	failed   atomic.Uint64
	rr       atomic.Uint64
	lat      histogram

	mu       sync.Mutex
	failedBy map[string]uint64
}

// clientReport is the --report document.
type clientReport struct {
	Sent          uint64            `json:"sent"`
	Answered      uint64            `json:"answered"`
	Failed        uint64            `json:"failed"`
	Retransmitted uint64            `json:"retransmitted"`
	LatencyUS     latencySummary    `json:"latency_us"`
	Peers         []peer.Stats      `json:"peers"`
	FailedBy      map[string]uint64 `json:"failed_by"`
	EventsDropped uint64            `json:"events_dropped"`
	ElapsedMS     int64             `json:"elapsed_ms"`
}

func runClient(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o clientOptions
	fs := clientFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	log, err := newLogger(stderr, o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	topts := transport.Options{NoDelay: o.noDelay}
	if o.tlsCA != "" || o.tlsCert != "" {
		tc, err := transport.ClientTLSConfig(o.tlsCA, o.tlsCert, o.tlsKey, "")
		if err != nil {
			fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
			return 2
		}
		topts.TLS = tc
	}
	bus := peer.NewBus()
	cfg := peer.Config{
		OriginHost: o.originHost, OriginRealm: o.originRealm,
		Watchdog:       watchdog.Config{Twinit: o.tw},
		Transport:      topts,
		Events:         bus,
		Logger:         log,
		RequestTimeout: o.timeout,
		DPATimeout:     shutdownBudget,
	}
	if o.app == "test" {
		cfg.VendorApps = []peer.VendorApp{{VendorID: message.VendorTest, AuthAppID: message.AppTest}}
	} else {
		cfg.AcctApps = []uint32{message.AppAccounting}
	}

	var ew *eventWriter
	if o.events != "" {
		if ew, err = openEvents(bus, o.events, stdout); err != nil {
			fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
			return 1
		}
	}
	c := &client{o: o, log: log, start: time.Now().Unix(), failedBy: make(map[string]uint64)}
	// Watch the bus before dialing so the first OKAY is not missed.
	up := make(chan struct{}, 1)
	cancelUp := bus.Subscribe(func(e peer.Event) {
		if e.Type == peer.EventWatchdog && e.To == watchdog.Okay.String() {
			select {
			case up <- struct{}{}:
			default:
			}
		}
	})
	for _, u := range o.peers {
		p, err := peer.Dial(u, cfg)
		if err != nil {
			fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
			cancelUp()
			c.closePeers()
			ew.Close()
			return 2
		}
		c.peers = append(c.peers, p)
	}

	code := 0
	began := time.Now()
	if err := c.waitUp(ctx, up); err != nil {
		log.Error("no peer in service", "err", err)
		code = 1
	} else {
		c.run(ctx, stdout)
		if c.onWire.Load() == 0 {
			log.Error("no request could be sent")
			code = 1
		}
	}
	cancelUp()

	if o.report != "" {
		r := c.report(ew.Dropped(), time.Since(began))
		if err := writeJSONFile(o.report, r, stdout); err != nil {
			log.Error("writing report", "err", err)
			code = 1
		}
	}
	c.closePeers()
	if err := ew.Close(); err != nil {
		log.Error("writing events", "err", err)
		code = 1
	}
	return code
}

// waitUp waits until a peer is OKAY, --connect-timeout or ctx.
func (c *client) waitUp(ctx context.Context, up <-chan struct{}) error {
	t := time.NewTimer(c.o.connectTimeout)
	defer t.Stop()
	for {
		if c.pick() != nil {
			return nil
		}
		select {
		case <-up:
		case <-t.C:
			return fmt.Errorf("none of %d peers OKAY within %v (--connect-timeout)", len(c.peers), c.o.connectTimeout)
		case <-ctx.Done():
			return fmt.Errorf("interrupted while connecting: %w", context.Cause(ctx))
		}
	}
}

func (c *client) closePeers() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range c.peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Close(ctx); err != nil {
				c.log.Debug("close", "peer", p.Name(), "err", err)
			}
		}()
	}
	wg.Wait()
}

// run sends requests until --requests, --duration or ctx, printing
// progress every second.
func (c *client) run(ctx context.Context, stdout io.Writer) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.o.duration > 0 {
		var cancelT context.CancelFunc
		runCtx, cancelT = context.WithTimeout(runCtx, c.o.duration)
		defer cancelT()
	}
	pace := newPacer(c.o.rate)
	began := time.Now()

	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				fmt.Fprintln(stdout, c.progress(now.Sub(began)))
			case <-stopProgress:
				return
			}
		}
	}()

	var wg sync.WaitGroup
	for range c.o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if c.o.requests > 0 && c.issued.Load() >= c.o.requests {
					return
				}
				if !pace.wait(runCtx) {
					return
				}
				n := c.issued.Add(1)
				if c.o.requests > 0 && n > c.o.requests {
					return
				}
				// In-flight requests finish when --duration ends; only
				// ctx (a signal) interrupts them.
				c.one(ctx, n)
			}
		}()
	}
	wg.Wait()
	close(stopProgress)
	<-progressDone
}

func (c *client) progress(elapsed time.Duration) string {
	sent, answered, failed := c.sent.Load(), c.answered.Load(), c.failed.Load()
	var b strings.Builder
	fmt.Fprintf(&b, "t=%ds sent=%d answered=%d failed=%d pending=%d peers=",
		int64(elapsed.Round(time.Second)/time.Second), sent, answered, failed, sent-answered-failed)
	for i, p := range c.peers {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.Name() + ":" + p.State().String())
	}
	return b.String()
}

// pick returns the next OKAY peer round-robin, nil when none is.
func (c *client) pick() *peer.Peer {
	n := uint64(len(c.peers))
	first := c.rr.Add(1)
	for i := range n {
		if p := c.peers[(first+i)%n]; p.State() == watchdog.Okay {
			return p
		}
	}
	return nil
}

// notInServiceRetry is how often a caller looks again for a peer in
// service while none is.
const notInServiceRetry = 20 * time.Millisecond

// one sends request n and counts its outcome.
func (c *client) one(ctx context.Context, n int64) {
	c.sent.Add(1)
	req := c.build(n)
	rctx, cancel := context.WithTimeout(ctx, c.o.timeout)
	defer cancel()
	t0 := time.Now()
	ans, err := c.send(rctx, req)
	if err != nil {
		kind := errorKind(err)
		if ctx.Err() != nil {
			kind = "interrupted"
		}
		c.fail(kind)
		c.log.Debug("request failed", "n", n, "kind", kind, "err", err)
		return
	}
	c.lat.Record(time.Since(t0))
	rc, ok := message.ResultCodeOf(ans)
	switch {
	case !ok:
		c.fail("no result code")
	case rc != message.Success:
		c.fail(fmt.Sprintf("result %d", rc))
		c.log.Debug("request failed", "n", n, "result", rc)
	default:
		c.answered.Add(1)
	}
}

// send hands req to an OKAY peer, waiting for one (up to rctx's deadline)
// while none is.
func (c *client) send(rctx context.Context, req []byte) ([]byte, error) {
	for {
		if p := c.pick(); p != nil {
			ans, err := p.Request(rctx, req)
			if !errors.Is(err, peer.ErrNotInService) {
				c.onWire.Add(1)
				return ans, err
			}
			// It left OKAY between pick and Request: try again.
		}
		t := time.NewTimer(notInServiceRetry)
		select {
		case <-t.C:
		case <-rctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: no peer OKAY before the deadline", peer.ErrNotInService)
		}
	}
}

func (c *client) fail(kind string) {
	c.failed.Add(1)
	c.mu.Lock()
	c.failedBy[kind]++
	c.mu.Unlock()
}

func errorKind(err error) string {
	switch {
	case errors.Is(err, peer.ErrNotInService):
		return "not in service"
	case errors.Is(err, peer.ErrTimeout):
		return "timeout"
	case errors.Is(err, peer.ErrConnectionLost):
		return "connection lost"
	case errors.Is(err, peer.ErrClosed):
		return "peer closed"
	}
	return "error"
}

// build encodes request n.
func (c *client) build(n int64) []byte {
	o := &c.o
	sid := fmt.Sprintf("%s;%d;%d", o.originHost, c.start, n)
	user := o.nai
	if strings.Contains(user, "%") {
		user = fmt.Sprintf(o.nai, n)
	}
	var b *message.Builder
	if o.app == "test" {
		b = message.NewRequest(message.CmdTest, message.AppTest, wire.FlagProxiable)
	} else {
		b = message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable)
	}
	b.String(message.SessionID, 0, true, sid).
		String(message.OriginHost, 0, true, o.originHost).
		String(message.OriginRealm, 0, true, o.originRealm).
		String(message.DestinationRealm, 0, true, o.destRealm).
		String(message.UserName, 0, true, user)
	if o.app == "test" {
		b.Uint32(message.AVPTestValue, message.VendorTest, true, uint32(n))
	} else {
		// One session per request: START_RECORD numbered n.
		b.Uint32(message.AccountingRecordType, 0, true, 2).
			Uint32(message.AccountingRecordNumber, 0, true, uint32(n)).
			Uint32(message.AcctApplicationID, 0, true, message.AppAccounting)
	}
	msg := b.Bytes()
	wire.SetEndToEnd(msg, peer.NextEndToEnd())
	return msg
}

func (c *client) report(dropped uint64, elapsed time.Duration) clientReport {
	r := clientReport{
		Sent: c.sent.Load(), Answered: c.answered.Load(), Failed: c.failed.Load(),
		LatencyUS: c.lat.Summary(), FailedBy: make(map[string]uint64),
		EventsDropped: dropped, ElapsedMS: elapsed.Milliseconds(),
	}
	for _, p := range c.peers {
		r.Peers = append(r.Peers, p.Stats())
	}
	c.mu.Lock()
	for k, v := range c.failedBy {
		r.FailedBy[k] = v
	}
	c.mu.Unlock()
	return r
}

// pacer spaces calls to wait 1/rate apart across all callers. A caller
// that is late takes the next slot from now, so a stall is not followed by
// a burst to catch up.
type pacer struct {
	interval time.Duration
	mu       sync.Mutex
	next     time.Time
}

func newPacer(rate float64) *pacer {
	if rate <= 0 {
		return &pacer{}
	}
	return &pacer{interval: time.Duration(float64(time.Second) / rate)}
}

// wait blocks until the caller's slot; false when ctx ends first.
func (p *pacer) wait(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	if p.interval <= 0 {
		return true
	}
	p.mu.Lock()
	now := time.Now()
	slot := p.next
	if slot.Before(now) {
		slot = now
	}
	p.next = slot.Add(p.interval)
	p.mu.Unlock()
	d := time.Until(slot)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
