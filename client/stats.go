package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/latency"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/wire"
	lradius "layeh.com/radius"
)

// FailoverRecord is one row of the failover-event table of RFC 3539
// 3.4.2 [5]: which requests moved from which peer to which, and why.
type FailoverRecord struct {
	Time     time.Time       `json:"time"`
	From     string          `json:"from_peer"`
	To       string          `json:"to_peer"` // Moved: the alternate; empty when the throttle chooses it later
	Outcome  FailoverOutcome `json:"outcome"`
	Reason   string          `json:"reason"`
	Moved    int             `json:"moved"`      // requests moved (Moved) or waiting (Parked)
	EndToEnd []uint32        `json:"end_to_end"` // the requests' End-to-End Identifiers (Diameter), or their numbers in this process (RADIUS, whose Identifier changes with each send)
}

// FailoverOutcome says what became of the requests of a FailoverRecord.
type FailoverOutcome uint8

const (
	// Moved: the requests were resent, to To, with the T flag (Diameter)
	// or re-signed with a new Identifier (RADIUS); with a throttle, they
	// went back to its queue, ahead of newer requests, To empty.
	Moved FailoverOutcome = iota + 1
	// Parked: no alternate was in service; the requests wait for one,
	// within their deadlines.
	Parked
	// Refused: the requests named the failed server in Destination-Host
	// and failed with ErrUnableToDeliver.
	Refused
	// NothingPending: the server left service with no request pending;
	// recorded all the same, as RFC 3539 3.4.2 [5]'s table has a row for
	// every failover.
	NothingPending
)

var outcomeNames = [...]string{Moved: "moved", Parked: "parked", Refused: "refused", NothingPending: "nothing_pending"}

// String returns the outcome's name ("moved", "parked"...).
func (o FailoverOutcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "unknown"
}

// MarshalText makes the outcome its name in JSON (the zero value: "").
func (o FailoverOutcome) MarshalText() ([]byte, error) {
	if o == 0 {
		return []byte{}, nil
	}
	return []byte(o.String()), nil
}

// failoverLog is a bounded ring of records.
type failoverLog struct {
	mu    sync.Mutex
	buf   []FailoverRecord
	next  int
	full  bool
	total uint64

	// unsent counts, by reason, the errors of requests that reached no
	// server (UnsentErrors): kept here, beside the failover log, as the
	// Client's statistics that belong to no server.
	unsent [nReasons]atomic.Uint64
}

func (l *failoverLog) init(n int) {
	if n <= 0 {
		n = 256
	}
	l.buf = make([]FailoverRecord, n)
}

func (l *failoverLog) add(r FailoverRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf[l.next] = r
	l.next = (l.next + 1) % len(l.buf)
	l.full = l.full || l.next == 0
	l.total++
}

// FailoverLog returns the failover records kept (oldest first) and how many
// were ever recorded. A record is added once the requests it lists have
// been handed to their alternate (only then is it known where each went),
// so a replayed request can be answered a moment before its record
// appears.
func (c *Client) FailoverLog() (records []FailoverRecord, total uint64) {
	l := &c.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.full {
		records = append(records, l.buf[l.next:]...)
	}
	records = append(records, l.buf[:l.next]...)
	return records, l.total
}

// ServerStats are the per-server statistics of RFC 3539 3.4.3 [4].
type ServerStats struct {
	Server     string `json:"server"`
	Peer       string `json:"peer"`        // Origin-Host once known
	State      string `json:"state"`       // the watchdog's; "" over UDP; "not connected" while it has no peer (MaxConnections, a drain)
	Sent       uint64 `json:"sent"`        // requests first sent to this server (replays not counted)
	Answered   uint64 `json:"answered"`    // of those, answered (here or after a failover)
	Failed     uint64 `json:"failed"`      // of those, ended with an error
	FailedOver uint64 `json:"failed_over"` // requests moved away from this server
	Premature  uint64 `json:"premature"`   // of those, answered too busy / unable to deliver here, or (UDP) never replied to
	Probes     uint64 `json:"probes"`      // test requests sent: probes and keep-alives
	// MeanUs and P99Us are the latency of the answers this server gave
	// (AnswerLatency's), from Send or Exchange to the answer: a request
	// answered after a failover counts for the server that answered it.
	MeanUs float64 `json:"mean_latency_us"`
	P99Us  float64 `json:"p99_latency_us"`
	// Throttle is the server's throttle counters (nil without one).
	Throttle *throttle.Stats `json:"throttle,omitempty"`

	// URL is the server's PeerSpec.URL, Protocol what it speaks: one of
	// ProtocolDiameter, ProtocolRADIUS (UDP), ProtocolRADIUSTCP,
	// ProtocolRadSec.
	URL      string `json:"url"`
	Protocol string `json:"protocol"`
	// OriginHost is a Diameter server's Origin-Host as its CEA said,
	// empty before the first CEA and for RADIUS servers.
	OriginHost string `json:"origin_host"`
	// OpenError is why the last attempt to connect to the server failed
	// (it refused the connection, its CEA refused us), until one
	// succeeds; empty if none failed, and for radius:// servers.
	OpenError string `json:"open_error,omitempty"`
	// Answers counts the answers this server returned (it answered the
	// request, first sent here or moved here by a failover), by class:
	// every class of its protocol (DiameterClasses, RADIUSClasses) is
	// present, zeros included.
	Answers map[string]uint64 `json:"answers"`
	// Errors counts the requests first sent to this server that ended
	// with an error, by reason: every one of ErrorReasons is present,
	// zeros included. Client.UnsentErrors counts the requests that never
	// reached a server.
	Errors map[string]uint64 `json:"errors"`
	// Policy is the server policy's state of the server (PolicyStates),
	// empty without a policy.
	Policy string `json:"policy,omitempty"`
	// Carrier is the server's peer, nil while it has none: a *peer.Peer
	// (Diameter), *radpeer.Peer (RADIUS over TCP or TLS) or
	// *radpeer.UDPPeer (radius://). Read in the same look as the rest, it
	// is the peer of this very server, whatever SetPeers changes
	// meanwhile.
	Carrier call.Carrier `json:"-"`

	lat *latency.Histogram // the server's answer latencies (AnswerLatency)
}

// AnswerLatency is Client.AnswerLatency for this one server, read from
// the server of this row, whatever SetPeers changed since; Server alone
// for a ServerStats that Client.ServerStats did not make.
func (s ServerStats) AnswerLatency(bounds []time.Duration) ServerLatency {
	l := ServerLatency{Server: s.Server}
	if s.lat != nil {
		l.AtMost, l.Count, l.Sum = s.lat.Cumulative(bounds)
	}
	return l
}

// Values of ServerStats.Protocol.
const (
	ProtocolDiameter  = "diameter"   // tcp://, tls://, sctp://
	ProtocolRADIUS    = "radius"     // radius:// (UDP)
	ProtocolRADIUSTCP = "radius+tcp" // radius+tcp://
	ProtocolRadSec    = "radsec"     // radsec:// (RADIUS over TLS)
)

// protocolOf names the protocol of a PeerSpec.URL by its scheme.
func protocolOf(url string) string {
	scheme, _, _ := strings.Cut(url, "://")
	switch scheme {
	case "radius", ProtocolRADIUSTCP, ProtocolRadSec:
		return scheme
	}
	return ProtocolDiameter
}

// Answer classes, the keys of ServerStats.Answers: a Diameter answer's
// Result-Code (or Experimental-Result-Code) by its thousand, a RADIUS
// answer by its Code; "other" for the rest (no result code, a code out
// of range, a RADIUS code that is none of these).
var (
	DiameterClasses = []string{"1xxx", "2xxx", "3xxx", "4xxx", "5xxx", ClassOther}
	RADIUSClasses   = []string{"accept", "reject", "challenge", "accounting-response", ClassOther}
)

// ClassOther is the class of an answer no other class names.
const ClassOther = "other"

// The answer counters of serverStats are indexed by class: in
// DiameterClasses (1xxx to 5xxx, 0 to 4, other 5) or in RADIUSClasses
// (0 to 3, other 4).
const (
	nClasses      = 6
	diameterOther = 5
	radiusOther   = 4
)

// diameterClass is the index in DiameterClasses of the class of an
// answer whose Result-Code (or Experimental-Result-Code) is code.
func diameterClass(code uint32) int {
	if code < 1000 || code >= 6000 {
		return diameterOther
	}
	return int(code/1000) - 1
}

// DiameterClassOf returns the class of a Diameter answer, one of
// DiameterClasses: its Result-Code's thousand ("2xxx"), or its
// Experimental-Result-Code's when it has no Result-Code, else "other".
func DiameterClassOf(ans []byte) string {
	code, _ := wire.CheckAnswer(ans)
	return DiameterClasses[diameterClass(code)]
}

// RADIUSClassOf returns the class of a RADIUS answer (a whole packet),
// one of RADIUSClasses.
func RADIUSClassOf(ans []byte) string {
	if len(ans) == 0 {
		return ClassOther
	}
	return RADIUSClasses[radiusClass(uint32(ans[0]))]
}

// radiusClass is the index in RADIUSClasses of the class of a RADIUS
// answer whose Code is code.
func radiusClass(code uint32) int {
	switch lradius.Code(code) {
	case lradius.CodeAccessAccept:
		return 0
	case lradius.CodeAccessReject:
		return 1
	case lradius.CodeAccessChallenge:
		return 2
	case lradius.CodeAccountingResponse:
		return 3
	}
	return radiusOther
}

// ErrorReasons are the reasons of ServerStats.Errors and
// Client.UnsentErrors: no answer before the deadline (timeout, the
// deadline passing in a throttle queue included), no server in service
// to send it to (no_peer), the caller's context cancelled (canceled),
// the Client or the peer closed (closed), the connection lost and the
// request not replayed (connection_lost), a RADIUS/UDP server never
// replying (no_reply), a Destination-Host that failed
// (unable_to_deliver), a full throttle queue (queue_full), a RADIUS
// server out of Identifiers (busy), and other.
var ErrorReasons = []string{"timeout", "no_peer", "canceled", "closed", "connection_lost", "no_reply",
	"unable_to_deliver", "queue_full", "busy", "other"}

// reasonOf is the index in ErrorReasons of a request's error; noPeer:
// it found no server to go to (Client.foundNoPeer).
func reasonOf(err error, noPeer bool) int {
	switch {
	case noPeer, errors.Is(err, ErrNoPeer):
		return 1
	case errors.Is(err, radpeer.ErrNoReply):
		// Before the timeout: a server's silence (its retransmissions
		// all unanswered) matches ErrTimeout too.
		return 5
	case errors.Is(err, peer.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, throttle.ErrExpired):
		return 0
	case errors.Is(err, context.Canceled):
		return 2
	case errors.Is(err, peer.ErrClosed):
		return 3
	case errors.Is(err, peer.ErrConnectionLost):
		return 4
	case errors.Is(err, ErrUnableToDeliver):
		return 6
	case errors.Is(err, ErrQueueFull):
		return 7
	case errors.Is(err, radpeer.ErrBusy):
		return 8
	}
	return len(ErrorReasons) - 1
}

// nReasons is len(ErrorReasons).
const nReasons = 10

// UnsentErrors counts the requests that ended with an error before
// reaching any server, by reason: every one of ErrorReasons is present,
// zeros included.
func (c *Client) UnsentErrors() map[string]uint64 {
	return countsOf(ErrorReasons, c.log.unsent[:])
}

func countsOf(names []string, cs []atomic.Uint64) map[string]uint64 {
	out := make(map[string]uint64, len(names))
	for i, n := range names {
		out[n] = cs[i].Load()
	}
	return out
}

// ServerLatency is a server's answer latencies as a Prometheus
// histogram counts them: the time from Send or Exchange to the answer of
// the requests this server answered.
type ServerLatency struct {
	Server string
	// AtMost are the counts at or below each of the bounds given to
	// AnswerLatency; Count and Sum are of every answer.
	AtMost []uint64
	Count  uint64
	Sum    time.Duration
}

// AnswerLatency returns each server's answer latencies in configured
// order, counted at or below each of bounds (increasing), within 1/64
// of a bound (see latency.Histogram.Cumulative).
func (c *Client) AnswerLatency(bounds []time.Duration) []ServerLatency {
	order := c.ros.Load().order
	out := make([]ServerLatency, len(order))
	for i, m := range order {
		out[i].Server = m.spec.Name
		out[i].AtMost, out[i].Count, out[i].Sum = m.stats.answerLat.Cumulative(bounds)
	}
	return out
}

// ServerStats returns the statistics of every server in configured order.
func (c *Client) ServerStats() []ServerStats {
	order := c.ros.Load().order
	out := make([]ServerStats, len(order))
	for i, m := range order {
		s := &m.stats
		out[i] = ServerStats{
			Server: m.spec.Name, Sent: s.sent.Load(), Answered: s.answered.Load(),
			Failed: s.failed.Load(), FailedOver: s.failedOver.Load(), Premature: s.premature.Load(),
			MeanUs: s.answerLat.Mean(), P99Us: float64(s.answerLat.Quantile(0.99)),
		}
		out[i].Probes = s.probes.Load()
		if why := m.openErr.Load(); why != nil {
			out[i].OpenError = *why
		}
		out[i].URL, out[i].Protocol = m.spec.URL, protocolOf(m.spec.URL)
		if c.group != nil {
			out[i].Policy = c.group.State(m.index).String()
		}
		out[i].Carrier, out[i].lat = m.carrier(), &s.answerLat
		classes := DiameterClasses
		if c.radius {
			classes = RADIUSClasses
		}
		out[i].Answers, out[i].Errors = countsOf(classes, s.answers[:]), countsOf(ErrorReasons, s.errors[:])
		if c.sched != nil {
			c.tmu.Lock()
			ts := c.sched.Stats(m.index) // the scheduler knows it by its member, not its place
			c.unlockThrottle()
			out[i].Throttle = &ts
		}
		if up := m.up.Load(); up != nil {
			out[i].Peer = up.Name() // no watchdog over UDP: no State
		} else if name, st, ok := m.stateOf(); ok {
			out[i].Peer, out[i].State = name, st.String()
			if name != m.spec.URL && !c.radius { // a Diameter peer is named by its URL until its CEA
				out[i].OriginHost = name
			}
		} else {
			out[i].State = "not connected"
		}
	}
	return out
}

type serverStats struct {
	sent, answered, failed, failedOver, premature, probes atomic.Uint64

	// The metrics' counters (account): answers here by class, their
	// latency (one histogram, recorded once per answer: it is shared by
	// every caller, and each record costs them its cache lines), errors
	// of requests first sent here by reason.
	answers   [nClasses]atomic.Uint64
	errors    [nReasons]atomic.Uint64
	answerLat latency.Histogram
}

func (s *serverStats) done(ok bool) {
	if ok {
		s.answered.Add(1)
	} else {
		s.failed.Add(1)
	}
}

// UnmarshalText reads the outcome's name; an unknown name is an error.
func (o *FailoverOutcome) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*o = 0
		return nil
	}
	for i, n := range outcomeNames {
		if n != "" && n == string(b) {
			*o = FailoverOutcome(i)
			return nil
		}
	}
	return fmt.Errorf("client: unknown failover outcome %q", b)
}
