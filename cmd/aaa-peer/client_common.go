package main

// This file: what the Diameter and the RADIUS client share: their
// options of one meaning under one flag name (defaults and help texts may
// differ, as the protocols' do), with what the --config file sets of them,
// their checks and the peers they make; and a run's counts and its drive.

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/latency"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
)

// loadOptions are the options of both clients: the peers, the TLS files,
// the throttle and policy settings, the load and where its results go.
type loadOptions struct {
	peers, weights                   stringList
	tw                               time.Duration
	tlsCA, tlsCert, tlsKey           string
	maxRate, maxOutstanding          int
	maxRateAcct                      acctRate
	slot                             time.Duration
	queueAlarm                       string
	downTimeout, holdDown, keepAlive time.Duration
	testUser                         string
	rate                             float64
	concurrency                      int
	requests                         int64
	duration                         time.Duration
	app, algorithm, nai              string
	events, report, status           string
	logLevel, logFormat              string
	maxFailed                        string
	config                           string
	mode                             string
	waitPeers                        int
	connectTimeout                   time.Duration

	// names and secrets are the --config file's names and secrets of
	// its peers, by URL; own, their own tw, TLS and limits.
	names   map[string]string
	secrets map[string][]byte
	own     map[string]ownSetting

	// tlsSum is the digest of the TLS files tlsConfig read (filesSum):
	// a reload tells by it a file rewritten in place.
	tlsSum string

	// Parsed by check.
	clientMode          client.Mode
	alg                 loadbalance.Algorithm
	weightOf            map[string]int
	alarmHigh, alarmLow int
	failShare           float64
}

// loadFlags defines the flags of both clients that are alike in name,
// default and help.
func loadFlags(fs *flag.FlagSet, o *loadOptions) {
	fs.StringVar(&o.nai, "nai", "user%d@example.net", "User-Name `FORMAT`; %d is the request number (without it, every request has the same NAI, so hash and pearson send them all to one server)")
	fs.Var(&o.weights, "weight", "`URL=N`: balance weight N >= 1 of the --peer URL, or of a --config peer by its name (pearson); repeat for several; default 1")
	fs.StringVar(&o.events, "events", "", "write every event of the servers (watchdog, policy state, failover, balancer, queue alarm) as a JSON line to `FILE` (\"-\" is stdout)")
	fs.StringVar(&o.maxFailed, "max-failed", "0", "exit 3 when more than this `SHARE` of the requests failed: a fraction (0.05) or a percentage (5%); 0: any failure; 1: never")
	fs.Var(&o.maxRateAcct, "max-rate-acct", "throttle: at most `N` accounting requests per second to each server, where they differ from the others' (default: --max-rate; 0: no rate limit)")
	fs.DurationVar(&o.slot, "slot", throttle.DefaultSlot, "throttle: rate slot length `D`, one that divides one second (50ms to 1s)")
	fs.StringVar(&o.queueAlarm, "queue-alarm", "", "throttle: raise a server's queue alarm at depth HIGH and clear it at LOW (`HIGH,LOW`)")
	fs.StringVar(&o.mode, "mode", "balance", "`MODE` choosing the server of each new request: balance (spread with --algorithm) or failover (first server in service, in --peer order)")
	fs.IntVar(&o.waitPeers, "wait-peers", 1, "before sending, wait until `N` servers are in service (0: all of them; the default with --mode failover, so the run starts on the primary), at most --connect-timeout; past it, go on with those in service (exit 1 if none)")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 10*time.Second, "wait at most `D` for the first server in service (its connection OKAY; a RADIUS/UDP server at once), else exit 1; a server that refused the connection is dialled again every --tw (RFC 3539)")
}

// check parses and checks what both clients take alike: the load
// (--rate, --concurrency, --requests, --duration), the start (--mode,
// --wait-peers, --connect-timeout), --algorithm, --weight, --max-failed,
// --queue-alarm and --status.
func (o *loadOptions) check() error {
	switch {
	case o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0):
		return usagef("--rate must be a finite number >= 0")
	case o.concurrency < 1 || o.concurrency > maxConcurrency:
		return usagef("--concurrency %d: want 1 to %d", o.concurrency, maxConcurrency)
	case o.requests < 0:
		return usagef("--requests must not be negative")
	case o.duration < 0:
		return usagef("--duration must not be negative")
	case strings.Contains(o.nai, "%") && strings.Contains(fmt.Sprintf(o.nai, 1), "%!"):
		return usagef("--nai %q: want a format with at most one %%d", o.nai)
	case o.maxRate < 0 || o.maxRate > throttle.MaxRate:
		return usagef("--max-rate %d: want 0 (no limit) to %d requests a second", o.maxRate, throttle.MaxRate)
	case o.maxOutstanding < 0:
		return usagef("--max-outstanding %d: must not be negative", o.maxOutstanding)
	case o.slot == 0 || throttle.CheckSlot(o.slot) != nil:
		var ok []string
		for _, l := range throttle.Slots() {
			ok = append(ok, l.String())
		}
		return usagef("--slot %v: want a length that divides one second: %s", o.slot, strings.Join(ok, ", "))
	case o.connectTimeout <= 0:
		return usagef("--connect-timeout must be positive")
	case o.waitPeers < 0 || o.waitPeers > len(o.peers):
		return usagef("--wait-peers %d: want 0 (all) to %d (the number of --peer)", o.waitPeers, len(o.peers))
	}
	var err error
	if o.clientMode, err = client.ParseMode(o.mode); err != nil {
		return usagef("--mode %q: want balance or failover", o.mode)
	}
	if o.alg, err = loadbalance.ParseAlgorithm(o.algorithm); err != nil {
		return usagef("--algorithm %q: want pearson, hash, direct or round-robin", o.algorithm)
	}
	o.weightOf = make(map[string]int)
	for _, w := range o.weights {
		u, n, err := parseNameWeight(w, true)
		if err != nil {
			return usagef("--weight %q: %v", w, err)
		}
		if !slices.Contains(o.peers, u) {
			// A --config file's peer may be named by its name.
			named := slices.IndexFunc(o.peers, func(p string) bool { return o.names[p] == u })
			if named < 0 {
				return usagef("--weight %q: %s is neither a --peer nor the name of a --config peer", w, u)
			}
			u = o.peers[named]
		}
		o.weightOf[u] = n
	}
	if o.failShare, err = parseShare(o.maxFailed); err != nil {
		return usagef("--max-failed %q: %v", o.maxFailed, err)
	}
	if o.queueAlarm != "" {
		hi, lo, ok := strings.Cut(o.queueAlarm, ",")
		h, err1 := strconv.Atoi(hi)
		l, err2 := strconv.Atoi(lo)
		if !ok || err1 != nil || err2 != nil || h <= 0 || l < 0 || l >= h {
			return usagef("--queue-alarm %q: want HIGH,LOW with HIGH > LOW >= 0", o.queueAlarm)
		}
		o.alarmHigh, o.alarmLow = h, l
	}
	return checkStatusAddr(o.status)
}

// checkPeerAddr checks that the server u of --NAME (peer, acct-peer)
// can be reached: it has a host and a port, and the port is not 0 (which
// a listener takes as any port, but a client cannot dial). radsec:// may
// leave the port out (2083). What else a URL needs, its protocol's parse
// checks afterwards.
func checkPeerAddr(name, u string) error {
	pu, err := url.Parse(u)
	if err != nil {
		return nil // the protocol's parse says what is wrong
	}
	scheme := strings.ToLower(pu.Scheme)
	example := "3868"
	if radpeer.IsURL(u) {
		example = "1812"
	}
	host := cmp.Or(pu.Hostname(), "127.0.0.1")
	switch port := pu.Port(); {
	case pu.Opaque != "":
		return nil
	case pu.Hostname() == "":
		return usagef("--%s %s: the server's host is missing (e.g. %s://%s:%s)", name, u, scheme, host, cmp.Or(port, example))
	case port == "" && scheme != radpeer.SchemeRadSec:
		return usagef("--%s %s: the server's port is missing (e.g. %s://%s)", name, u, scheme, net.JoinHostPort(host, example))
	case port != "" && strings.Trim(port, "0") == "":
		return usagef("--%s %s: port 0: a client needs the server's port (e.g. %s://%s)", name, u, scheme, net.JoinHostPort(host, example))
	}
	return nil
}

// startOnPrimary makes a failover-mode run wait for every server before
// it starts (unless --wait-peers is given), so that it starts on the
// primary, not on whichever server came up first.
func (o *loadOptions) startOnPrimary(set map[string]bool) {
	if o.clientMode == client.PrimarySecondary && !set["wait-peers"] {
		o.waitPeers = 0
	}
}

// parseShare parses a share of requests: a fraction in [0, 1] or a
// percentage in [0%, 100%].
func parseShare(s string) (float64, error) {
	div := 1.0
	if t, ok := strings.CutSuffix(s, "%"); ok {
		s, div = t, 100
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || f < 0 || f/div > 1 {
		return 0, errors.New("want a fraction from 0 to 1 or a percentage from 0% to 100%")
	}
	return f / div, nil
}

// tooManyFailed says whether failed of sent requests are more than
// --max-failed allows.
func (o *loadOptions) tooManyFailed(failed, sent uint64) bool {
	return failed > 0 && float64(failed) > o.failShare*float64(sent)
}

// tlsConfig is the TLS of every peer from --tls-ca, --tls-cert and
// --tls-key; nil without --tls-ca and --tls-cert. It keeps the files'
// digest in o.tlsSum, taken before they are loaded: a file rewritten
// between the two is seen as changed at the next reload, not missed.
func (o *loadOptions) tlsConfig() (*tls.Config, error) {
	o.tlsSum = o.tlsFilesSum()
	if o.tlsCA == "" && o.tlsCert == "" {
		return nil, nil
	}
	return transport.ClientTLSConfig(o.tlsCA, o.tlsCert, o.tlsKey, "")
}

// tlsFilesSum is the digest of o's TLS files, names and contents; ""
// without any.
func (o *loadOptions) tlsFilesSum() string {
	if o.tlsCA == "" && o.tlsCert == "" && o.tlsKey == "" {
		return ""
	}
	return filesSum(o.tlsCA, o.tlsCert, o.tlsKey)
}

// fileDefaults sets what both clients take from the file's top level
// (tw, the TLS files, the limits) where its flag was not given.
func (o *loadOptions) fileDefaults(cfg *config.Config, set map[string]bool) {
	if cfg.Tw != 0 && !set["tw"] {
		o.tw = cfg.Tw
	}
	setStr(&o.tlsCA, cfg.TLS.CA, set["tls-ca"])
	setStr(&o.tlsCert, cfg.TLS.Cert, set["tls-cert"])
	setStr(&o.tlsKey, cfg.TLS.Key, set["tls-key"])
	if cfg.Limits.MaxRate != 0 && !set["max-rate"] {
		o.maxRate = cfg.Limits.MaxRate
	}
	if cfg.Limits.MaxOutstanding != 0 && !set["max-outstanding"] {
		o.maxOutstanding = cfg.Limits.MaxOutstanding
	}
}

// filePeers makes the file's peers the client's, the primaries first and
// each group in file order, with their names, secrets and own settings,
// and their weights unless --weight is given; with roles, --mode is
// failover unless given. It returns them in that order.
func (o *loadOptions) filePeers(peers []config.Peer, set map[string]bool) []config.Peer {
	peers = byRole(peers)
	if peers[0].Role != config.RoleNone && !set["mode"] {
		o.mode = client.PrimarySecondary.String()
	}
	o.peers, o.names, o.secrets = nil, make(map[string]string, len(peers)), make(map[string][]byte, len(peers))
	for _, p := range peers {
		o.peers = append(o.peers, p.URL)
		o.names[p.URL] = p.Name
		if p.Secret != nil {
			o.secrets[p.URL] = p.Secret
		}
		if p.Weight > 0 && !set["weight"] {
			o.weights = append(o.weights, fmt.Sprintf("%s=%d", p.URL, p.Weight))
		}
	}
	o.own = ownSettings(peers, set, o.template())
	return peers
}

// peerTemplate is what every peer gets but for its own settings: the
// watchdog interval, the TLS files and the limits.
type peerTemplate struct {
	tw  time.Duration
	tls config.TLS
	lim config.Limits
}

// template is o's peerTemplate.
func (o *loadOptions) template() peerTemplate {
	return peerTemplate{o.tw, config.TLS{CA: o.tlsCA, Cert: o.tlsCert, Key: o.tlsKey}, config.Limits{MaxRate: o.maxRate, MaxOutstanding: o.maxOutstanding}}
}

// staleWeights takes out of o.weights each --weight naming no peer of
// o (after a reload's file is applied: it may have removed the peer the
// command line weighed) and returns a warning for each. A reload is not
// refused for it: every reload until a restart would be.
func (o *loadOptions) staleWeights() (warnings []string) {
	var kept stringList
	for _, w := range o.weights {
		u, _, err := parseNameWeight(w, true)
		if err == nil && !slices.Contains(o.peers, u) && !slices.ContainsFunc(o.peers, func(p string) bool { return o.names[p] == u }) {
			warnings = append(warnings, fmt.Sprintf("%s%q ignored: %s is neither a --peer nor the name of a peer of the file", warnPrefix+"--weight ", w, u))
			continue
		}
		kept = append(kept, w)
	}
	o.weights = kept
	return warnings
}

// ownOverRunning makes the peers' own settings of the file read again
// (cfg, its peers used: no --peer given) those that differ from the
// running client's template (running): the file's new top level needs a
// restart and is not applied, so a peer that takes it takes the running
// one, and a peer's own setting stays its own even where the new top
// level is now the same.
func (o *loadOptions) ownOverRunning(cfg *config.Config, set map[string]bool, running *loadOptions) {
	if len(cfg.Peers) > 0 && !set["peer"] {
		o.own = ownSettings(byRole(cfg.Peers), set, running.template())
	}
}

// peerSpecs are the client's peers in --peer order, each named as the
// --config file names it, else by its URL, with its weight (--weight,
// else the file's), its own secret and its own tw, TLS (its files read)
// and limits; acct, when given, are their accounting URLs, and acctRate
// the accounting rate of a peer's own limits (see ownSetting.apply).
func (o *loadOptions) peerSpecs(acct []string) ([]client.PeerSpec, error) {
	specs := make([]client.PeerSpec, 0, len(o.peers))
	for i, u := range o.peers {
		spec := client.PeerSpec{URL: u, Name: cmp.Or(o.names[u], u), Weight: o.weightOf[u], Secret: o.secrets[u]}
		if len(acct) > 0 {
			spec.AccountingURL = acct[i]
		}
		if err := o.own[u].apply(&spec, o.maxRateAcct); err != nil {
			return nil, err
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// acctRate is --max-rate-acct: the accounting requests' own rate to each
// server, where it differs from --max-rate, which is every class's
// otherwise, over every protocol.
type acctRate struct {
	n     int
	given bool
}

func (r *acctRate) String() string {
	if r == nil || !r.given {
		return ""
	}
	return strconv.Itoa(r.n)
}

func (r *acctRate) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > throttle.MaxRate {
		return fmt.Errorf("%q: want a whole number of requests per second, 0 (no limit) to %d", s, throttle.MaxRate)
	}
	r.n, r.given = n, true
	return nil
}

// of returns the accounting requests' rate where the others' is rate.
func (r acctRate) of(rate int) int {
	if r.given {
		return r.n
	}
	return rate
}

// tally is one share of a run's counts. Callers are spread over several,
// so that the bookkeeping of each request does not move one cache line
// between cores.
type tally struct {
	sent     atomic.Uint64 // requests issued
	answered atomic.Uint64
	failed   atomic.Uint64
	_        [64 - 24]byte // the next tally on a line of its own
}

// maxTallies bounds the tallies of a run.
const maxTallies = 64

// latencies is one caller's latest latencies, recorded into the run's
// histogram together (latency.Histogram.RecordAll): per request, that
// histogram cost about as much as the balancer's pick, its lines moving
// between the cores or missing in the cache.
type latencies struct {
	n int
	d [64]time.Duration
}

// add keeps d, and records the batch into h once full.
func (l *latencies) add(d time.Duration, h *latency.Histogram) {
	l.d[l.n] = d
	if l.n++; l.n == len(l.d) {
		l.flush(h)
	}
}

// flush records what l keeps into h.
func (l *latencies) flush(h *latency.Histogram) {
	h.RecordAll(l.d[:l.n])
	l.n = 0
}

// counter is a run's counts and latencies, both clients': the callers'
// tallies, the answered requests' latencies and the failures by kind.
type counter struct {
	tallies []tally // the callers' counts: caller i keeps tallies[i%len]
	lat     latency.Histogram

	mu       sync.Mutex
	failedBy map[string]uint64
}

// newCounter returns the counter of a run of callers (in the open loop,
// its in-flight bound).
func newCounter(callers int) *counter {
	return &counter{tallies: make([]tally, min(max(callers, 1), maxTallies)), failedBy: make(map[string]uint64)}
}

// tally is the share of request n (the open loop's callers) or caller n.
func (c *counter) tally(n int64) *tally { return &c.tallies[int(n)%len(c.tallies)] }

// counts sums the tallies: outcomes before sent, and each caller counts
// sent first, so sent >= answered + failed holds.
func (c *counter) counts() (sent, answered, failed uint64) {
	for i := range c.tallies {
		answered += c.tallies[i].answered.Load()
		failed += c.tallies[i].failed.Load()
	}
	for i := range c.tallies {
		sent += c.tallies[i].sent.Load()
	}
	return sent, answered, failed
}

// maxFailKinds bounds the failures by kind: a server chooses the result
// codes it answers, and errors carry its words. Past the bound, new kinds
// count together as otherFailKinds.
const (
	maxFailKinds   = 64
	otherFailKinds = "other kinds"
)

// fail counts a failure of kind in t.
func (c *counter) fail(t *tally, kind string) {
	t.failed.Add(1)
	c.mu.Lock()
	if _, ok := c.failedBy[kind]; !ok && len(c.failedBy) >= maxFailKinds-1 {
		kind = otherFailKinds
	}
	c.failedBy[kind]++
	c.mu.Unlock()
}

// failedKinds returns the failures by kind so far.
func (c *counter) failedKinds() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.failedBy)
}

// drive runs load, printing progress(elapsed) on w once a second and
// warning of the servers of cl that stop answering, until load returns.
// load issues requests until runCtx ends: with ctx, or after duration
// (0: no limit).
func drive(ctx context.Context, duration time.Duration, w io.Writer, progress func(elapsed time.Duration) string, cl *client.Client, log *slog.Logger, load func(runCtx context.Context)) {
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, duration)
	}
	defer cancel()
	began := time.Now()
	stopProgress := every(time.Second, func(now time.Time) { fmt.Fprintln(w, progress(now.Sub(began))) })
	stopWatch := newStallWatch(cl.ServerStats, log).start()
	load(runCtx)
	stopWatch()
	stopProgress() // no progress line after the report
}
