package main

// This file: a client run, whatever the protocol: the loops that issue
// the requests through one client.Client, their counts, the progress
// line, the exit code and the report. What differs by protocol (how a
// request is made and what answer counts as answered) is a requester.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/latency"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/status"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/watchdog"
)

// requester makes and sends the requests of a run in one protocol.
type requester interface {
	// exchange sends request n through cl under ctx. err says that no
	// answer came. Otherwise fail is "" for an answer the run counts as
	// answered (rejected: a RADIUS Access-Reject, answered all the
	// same), or the kind of failure the answer is.
	exchange(ctx context.Context, cl *client.Client, n int64) (fail string, rejected bool, err error)
	// identity is the status page's: who the client is, and the details
	// shown under the page's title.
	identity() status.Identity
}

// loadgen is one run of "aaa-peer client" (or the demo's client): the
// requests of its requester, sent through cl.
type loadgen struct {
	o        *loadOptions
	timeout  time.Duration // a request's deadline; 0: the Client's RequestTimeout (unless the run's ctx has a deadline)
	protocol string        // the report's: diameter, radius/udp, radius/tcp or radius/tls
	req      requester
	log      *slog.Logger
	metrics  *status.Metrics // nil without --status
	cl       *client.Client
	epoch    time.Time // the origin of the requests' clock readings (one read each: time.Now reads two clocks)

	// Every peer cl has had, in the order first seen: those of the
	// configuration now, and those a reload removed or replaced (their
	// counts still belong to the run). Under pmu: see peersEver.
	pmu    sync.Mutex
	peers  []*peer.Peer
	stream []*radpeer.Peer
	udp    []*radpeer.UDPPeer

	// opens are the servers' last failures to connect, for waitUp's
	// messages (nil: none known).
	opens *openFailures

	issued   atomic.Int64  // request numbers handed out
	rejected atomic.Uint64 // answered with an Access-Reject
	open     *openLoop     // the open-loop scheduler (--rate > 0), once run starts
	*counter
}

// newLoadgen prepares a run of req under the checked options o (its
// Client is set by the caller).
func newLoadgen(o *loadOptions, timeout time.Duration, protocol string, req requester, log *slog.Logger, metrics *status.Metrics) *loadgen {
	return &loadgen{o: o, timeout: timeout, protocol: protocol, req: req, log: log, metrics: metrics,
		epoch: time.Now(), counter: newCounter(o.concurrency)}
}

// clientReport is the --report document, one for every protocol.
type clientReport struct {
	// Protocol is diameter, radius/udp, radius/tcp or radius/tls; Mode
	// and Algorithm are the --mode and --algorithm in effect.
	Protocol  string `json:"protocol"`
	Mode      string `json:"mode"`
	Algorithm string `json:"algorithm"`
	Sent      uint64 `json:"sent"`
	Answered  uint64 `json:"answered"`
	Rejected  uint64 `json:"rejected"` // of the answered, Access-Rejects (RADIUS)
	Failed    uint64 `json:"failed"`
	// Retransmitted counts the requests sent again: Diameter replays with
	// the T flag after a failover, RADIUS/UDP byte-identical copies.
	Retransmitted uint64            `json:"retransmitted"`
	FailedBy      map[string]uint64 `json:"failed_by"`
	// LatencyUS is the latency of the requests that got an answer; in
	// the open loop from each one's intended send time, not from when it
	// left (against coordinated omission).
	LatencyUS latency.Summary `json:"latency_us"`
	// Servers are the Client's statistics of each server, Policy each
	// one's 7750 SR state ("" without a policy), Queues each one's
	// throttle queue (deepest depth, alarms raised; without a throttle
	// none), in --peer order.
	Servers []client.ServerStats `json:"servers"`
	Policy  []string             `json:"policy"`
	Queues  []client.QueueDepth  `json:"queues"`
	// Failovers are the failover table (the last 256 of FailoversTotal
	// records): from which server, how many requests, why.
	Failovers      []client.FailoverRecord `json:"failovers"`
	FailoversTotal uint64                  `json:"failovers_total"`
	// Peers, Stream and UDP are the counters of every peer the run had,
	// by kind: Diameter peers, RADIUS/TCP or TLS servers, RADIUS/UDP
	// servers. They are read after the disconnect, so they show the
	// states the peers ended with.
	Peers         []peer.Stats       `json:"peers,omitempty"`
	Stream        []radpeer.Stats    `json:"stream,omitempty"`
	UDP           []radpeer.UDPStats `json:"udp,omitempty"`
	EventsDropped uint64             `json:"events_dropped"`
	ElapsedMS     int64              `json:"elapsed_ms"`
	// Loop is "open" (--rate > 0: requests leave at their times, latency
	// from those times) or "closed" (--rate 0: --concurrency callers).
	// DroppedInFlight counts the requests of the open loop not sent
	// because --concurrency requests were in flight at their time.
	Loop            string `json:"loop"`
	DroppedInFlight uint64 `json:"dropped_in_flight"`
}

// finish ends a run that issued its requests for elapsed: it disconnects
// the Client, writes the report (after the disconnect, so that it shows
// the states and counters the peers ended with) and closes the events;
// code is the run's exit code so far. It returns the exit code: 1 when no
// request reached a server, or the report or events could not be
// written; 3 when more than --max-failed of the requests failed.
func (c *loadgen) finish(code int, elapsed time.Duration, ew *eventWriter, stdout io.Writer) int {
	if code == 0 {
		if c.onWire() == 0 {
			c.log.Error("no request could be sent")
			code = 1
		} else if failed, sent := c.failures(); c.o.tooManyFailed(failed, sent) {
			c.log.Error("too many requests failed", "failed", failed, "sent", sent, "max_failed", c.o.maxFailed)
			code = 3
		}
	}
	c.closeClient()
	// The events end before the report is written: both may go to
	// stdout, the report last.
	if err := ew.Close(); err != nil {
		c.log.Error("writing events", "err", err)
		code = 1
	}
	rep := c.report(ew.Dropped(), elapsed)
	// Every run ends with its result on stderr, --report or not.
	c.log.Info("run finished", "sent", rep.Sent, "answered", rep.Answered, "failed", rep.Failed,
		"retransmitted", rep.Retransmitted, "elapsed", elapsed.Round(time.Millisecond),
		"p50_us", rep.LatencyUS.P50, "p99_us", rep.LatencyUS.P99)
	switch {
	case c.o.report == "-" && c.o.events == "-":
		// One line, as the events are: stdout stays JSON Lines.
		if err := json.NewEncoder(stdout).Encode(rep); err != nil {
			c.log.Error("writing report", "err", err)
			code = 1
		}
	case c.o.report != "":
		if err := writeJSONFile(c.o.report, rep, stdout); err != nil {
			c.log.Error("writing report", "err", err)
			code = 1
		}
	}
	return code
}

// onWire is how many requests (first sends, replays and retransmissions
// alike) the peers sent.
func (c *loadgen) onWire() uint64 {
	var n uint64
	ps, ss, us := c.peersEver()
	for _, p := range ps {
		n += p.Stats().Sent
	}
	for _, p := range ss {
		n += p.Stats().Sent
	}
	for _, p := range us {
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

// waitUp waits until want peers are in service (0: all), connect or
// ctx. Past connect, one peer in service is enough. When every peer
// refused us for good (c.opens), it returns at once.
func (c *loadgen) waitUp(ctx context.Context, want int, connect time.Duration) error {
	if want == 0 {
		want = len(c.cl.Peers())
	}
	wctx, cancel := context.WithTimeout(ctx, connect)
	defer cancel()
	rctx, stop := context.WithCancelCause(wctx)
	defer stop(nil)
	go func() {
		select {
		case why := <-c.opens.allRefused():
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
		down, failed := c.notInService()
		args := []any{"wait_peers", want, "connect_timeout", connect, "not_in_service", down}
		if failed {
			args = append(args, "redial", c.redialHint())
		}
		c.log.Warn("not every server wanted is in service; going on", args...)
		return nil
	}
	msg := fmt.Sprintf("none of %d servers in service within %v (--connect-timeout)", len(c.cl.ServerStats()), connect)
	down, failed := c.notInService()
	if down != "" {
		msg += ": " + down
	}
	if failed {
		msg += ". " + c.redialHint()
	}
	return errors.New(msg)
}

// notInService names the servers whose connection is not OKAY, each with
// its watchdog state and, where known, its last failure to connect;
// failed says whether any failed to connect. (A RADIUS/UDP server has no
// watchdog: it is in service at once.)
func (c *loadgen) notInService() (names string, failed bool) {
	var parts []string
	for _, s := range c.cl.ServerStats() {
		if s.State == "" || s.State == watchdog.Okay.String() {
			continue
		}
		part := s.Server + " " + s.State
		if s.OpenError != "" {
			part += " (open failed: " + s.OpenError + ")"
			failed = true
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; "), failed
}

// redialHint says when a server that could not be reached is tried
// again: a client that starts before its server does reaches it only
// then, which a --connect-timeout shorter than Tw does not wait for.
func (c *loadgen) redialHint() string {
	return fmt.Sprintf("A server that refused the connection is redialled every Tw (RFC 3539; --tw %v): "+
		"one started after the client is reached at the next Tw, not before", c.o.tw)
}

// openFailures remembers why each server's last attempt to connect
// failed (its open_failed event), until it connects, and says once
// (allRefused) when every one of the servers refused us with a permanent
// error at its last attempt: nothing will come up by waiting.
type openFailures struct {
	mu        sync.Mutex
	last      map[string]string // server name -> reason
	permanent map[string]bool   // those whose last failure was a permanent refusal (a CEA's)
	servers   []string
	all       chan string
}

// watchOpenFailures follows the open failures of servers on bus until the
// function it returns is called.
func watchOpenFailures(bus *client.Bus, servers []client.PeerSpec) (*openFailures, func()) {
	f := &openFailures{last: make(map[string]string), permanent: make(map[string]bool), all: make(chan string, 1)}
	for _, s := range servers {
		f.servers = append(f.servers, s.Name)
	}
	cancel := bus.Subscribe(func(_ context.Context, e client.Event) {
		if e.Kind != client.EventPeer || e.Peer == nil {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		switch e.Peer.Kind {
		case peer.EventOpenFailed:
			f.last[e.Server] = e.Peer.Reason
			if !permanentRefusal(e.Peer.ResultCode) {
				delete(f.permanent, e.Server)
				return
			}
			f.permanent[e.Server] = true
			if len(f.permanent) == len(f.servers) {
				reasons := make([]string, 0, len(f.servers))
				for _, s := range f.servers {
					reasons = append(reasons, s+": "+f.last[s])
				}
				select {
				case f.all <- strings.Join(reasons, "; "):
				default:
				}
			}
		case peer.EventConnUp:
			delete(f.last, e.Server)
			delete(f.permanent, e.Server)
		}
	})
	return f, cancel
}

// allRefused is where the reasons come when every server refused us for
// good (nil f: never).
func (f *openFailures) allRefused() <-chan string {
	if f == nil {
		return nil
	}
	return f.all
}

// closeClient disconnects every peer (DPR/DPA over Diameter), bounded by
// shutdownBudget, and waits as long for the Client's last events.
func (c *loadgen) closeClient() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	if err := c.cl.Close(ctx); err != nil {
		c.log.Debug("close", "err", err)
	}
	select {
	case <-c.cl.Done():
	case <-ctx.Done():
	}
}

// run sends requests until --requests, --duration or ctx, printing
// progress every second.
func (c *loadgen) run(ctx context.Context, stdout io.Writer) {
	drive(ctx, c.o.duration, stdout, c.progress, c.cl, c.log, func(runCtx context.Context) {
		dl := newDeadlines(ctx, c.timeout)
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
// request when its last one is done, as fast as they go; no more callers
// than --requests, as the others would have nothing to send.
func (c *loadgen) closedLoop(ctx, runCtx context.Context, dl *deadlines) {
	callers := c.o.concurrency
	if c.o.requests > 0 && c.o.requests < int64(callers) {
		callers = int(c.o.requests)
	}
	var wg sync.WaitGroup
	for i := range callers {
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

// progress is the line printed every second: the counts, and each
// server's peer name and state (its watchdog's, or "-" over UDP, which
// has none) and, with a policy, its 7750 SR state.
func (c *loadgen) progress(elapsed time.Duration) string {
	sent, answered, failed := c.counts()
	var b strings.Builder
	fmt.Fprintf(&b, "t=%ds sent=%d answered=%d failed=%d pending=%d servers=",
		int64(elapsed.Round(time.Second)/time.Second), sent, answered, failed, sent-answered-failed)
	for i, s := range c.cl.ServerStats() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(cmp.Or(s.Peer, s.Server) + ":" + strings.ReplaceAll(cmp.Or(s.State, "-"), " ", "-"))
		if s.Policy != "" {
			b.WriteString(":" + s.Policy)
		}
	}
	return b.String()
}

// one sends request n through the Client and counts its outcome in t,
// its latency in lat (nil: straight into the run's histogram); dl, under
// ctx, gives it its deadline (with none, the Client's applies). The
// latency runs from intended, the time since c.epoch the request was
// meant to leave (open loop), or from now when intended is negative
// (closed loop).
func (c *loadgen) one(ctx context.Context, dl *deadlines, n int64, t *tally, lat *latencies, intended time.Duration) {
	t.sent.Add(1)
	now := time.Since(c.epoch)
	t0 := intended
	if t0 < 0 {
		t0 = now
	}
	rctx := ctx
	if c.timeout > 0 {
		s := dl.at(c.epoch.Add(now))
		defer s.release()
		rctx = s.ctx
	}
	fail, rejected, err := c.req.exchange(rctx, c.cl, n)
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
	switch {
	case fail != "":
		c.fail(t, fail)
		c.log.Debug("request failed", "n", n, "kind", fail)
	default:
		if rejected {
			c.rejected.Add(1)
		}
		t.answered.Add(1)
	}
}

// errorKind is the report's key for a request that got no answer: the
// name of a known cause, else the error's words without their varying
// details.
func errorKind(err error) string {
	switch {
	case errors.Is(err, radius.ErrNoMessageAuthenticator):
		return "no reply with the required Message-Authenticator"
	case errors.Is(err, radpeer.ErrSecretMismatch):
		return "no reply that verifies: shared secret mismatch?"
	case errors.Is(err, radpeer.ErrNoReply):
		return "no reply"
	case errors.Is(err, client.ErrNoPeer), errors.Is(err, peer.ErrNotInService):
		return "not in service"
	case errors.Is(err, peer.ErrTimeout), errors.Is(err, throttle.ErrExpired):
		return "timeout"
	case errors.Is(err, peer.ErrConnectionLost):
		return "connection lost"
	case errors.Is(err, peer.ErrClosed), errors.Is(err, peer.ErrDisconnecting):
		return "peer closed"
	case errors.Is(err, client.ErrUnableToDeliver):
		return "unable to deliver"
	case errors.Is(err, client.ErrQueueFull):
		return "queue full"
	case errors.Is(err, radpeer.ErrBusy):
		return "busy"
	}
	s := strings.TrimPrefix(err.Error(), "client: ")
	if i := strings.Index(s, " ("); i > 0 {
		s = s[:i]
	}
	return s
}

// report is the run's report, elapsed its time and dropped the event
// lines lost.
func (c *loadgen) report(dropped uint64, elapsed time.Duration) clientReport {
	sent, answered, failed := c.counts()
	r := clientReport{
		Protocol: c.protocol, Mode: c.o.clientMode.String(), Algorithm: c.o.alg.String(),
		Sent: sent, Answered: answered, Failed: failed, Rejected: c.rejected.Load(),
		LatencyUS: c.lat.Summary(), FailedBy: c.failedKinds(),
		EventsDropped: dropped, ElapsedMS: elapsed.Milliseconds(),
		Servers: c.cl.ServerStats(), Failovers: []client.FailoverRecord{},
		Loop: "closed",
	}
	if c.o.rate > 0 {
		r.Loop = "open"
	}
	if c.open != nil {
		r.DroppedInFlight = c.open.dropped.Load()
	}
	ps, ss, us := c.peersEver()
	for _, p := range ps {
		st := p.Stats()
		r.Retransmitted += st.Retransmitted
		r.Peers = append(r.Peers, st)
	}
	for _, p := range ss {
		r.Stream = append(r.Stream, p.Stats())
	}
	for _, p := range us {
		st := p.Stats()
		r.Retransmitted += st.Retransmissions
		r.UDP = append(r.UDP, st)
	}
	r.Policy = c.cl.PolicyStates()
	r.Queues = append([]client.QueueDepth{}, c.cl.QueueDepths()...)
	recs, total := c.cl.FailoverLog()
	r.Failovers = append(r.Failovers, recs...)
	r.FailoversTotal = total
	return r
}

// clientSnapshot is the status of a client: the Client's, with the
// requests counted by their callers.
func (c *loadgen) clientSnapshot() status.Snapshot {
	s := status.ClientSnapshot(c.cl)
	s.Role = status.RoleClient
	s.Identity = c.req.identity()
	s.Identity.Started = c.epoch
	sent, answered, failed := c.counts() // sent >= answered + failed
	s.Totals.Sent, s.Totals.Answered, s.Totals.Failed, s.Totals.Pending = sent, answered, failed, sent-answered-failed
	return s
}

// peersEver returns every peer the client has had, by kind, in the order
// first seen.
func (c *loadgen) peersEver() ([]*peer.Peer, []*radpeer.Peer, []*radpeer.UDPPeer) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	c.peers = addNew(c.peers, c.cl.Peers())
	c.stream = addNew(c.stream, c.cl.RADIUSPeers())
	c.udp = addNew(c.udp, c.cl.UDPPeers())
	return slices.Clone(c.peers), slices.Clone(c.stream), slices.Clone(c.udp)
}

// addNew appends to have the non-nil entries of now it does not hold.
func addNew[T comparable](have, now []T) []T {
	var zero T
	for _, p := range now {
		if p != zero && !slices.Contains(have, p) {
			have = append(have, p)
		}
	}
	return have
}

// progressWriter is where a run's progress lines go: stdout, unless the
// report or the events are written there; then stderr, which the log
// shares.
func progressWriter(o *loadOptions, stdout, stderr io.Writer) io.Writer {
	if o.report == "-" || o.events == "-" {
		return stderr
	}
	return stdout
}
