package status

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/watchdog"
)

// Roles of a node, for Snapshot.Role.
const (
	RoleServer = "server"
	RoleClient = "client"
	RoleDemo   = "demo"
)

// Source supplies the node's current state. Snapshot is called once per
// request to the page, /status.json and /metrics, from the HTTP server's
// goroutines: it must be safe for concurrent use and quick.
type Source interface {
	Snapshot() Snapshot
}

// SourceFunc adapts a function to Source.
type SourceFunc func() Snapshot

// Snapshot calls f.
func (f SourceFunc) Snapshot() Snapshot { return f() }

// Snapshot is what the page shows and /status.json returns. A zero Time is
// set by the handler to the time of the request; InStateMS of each peer is
// then computed from it when left zero.
type Snapshot struct {
	Time     time.Time `json:"time"`
	Role     string    `json:"role"` // RoleServer, RoleClient or RoleDemo
	Identity Identity  `json:"identity"`

	Peers []PeerStatus `json:"peers"`

	// Failovers is the failover-event table (RFC 3539 3.4.2 [5]), oldest
	// first, as client.Client.FailoverLog returns it; FailoversTotal counts
	// every record ever made (the table keeps only the last ones).
	Failovers      []client.FailoverRecord `json:"failovers"`
	FailoversTotal uint64                  `json:"failovers_total"`

	// Queues are per-server queue depths and their alarms; may be empty.
	Queues []Queue `json:"queues"`

	// UnsentErrors counts a client's requests that ended with an error
	// before reaching any server, by reason (client.Client.UnsentErrors);
	// nil on a server.
	UnsentErrors map[string]uint64 `json:"unsent_errors,omitempty"`

	Totals Totals `json:"totals"`
}

// Identity says which node this is.
type Identity struct {
	OriginHost  string `json:"origin_host"`
	OriginRealm string `json:"origin_realm"`
	// NASIdentifier is a RADIUS client's NAS-Identifier: a RADIUS node
	// has no Origin-Host.
	NASIdentifier string    `json:"nas_identifier,omitempty"`
	Listen        []string  `json:"listen,omitempty"` // bound listener URLs (server)
	Started       time.Time `json:"started,omitzero"`
	// Info is free-form key/value detail shown under the title (mode,
	// algorithm, dedup store...). Keep it small.
	Info map[string]string `json:"info,omitempty"`
}

// PeerStatus is one row of the peer table.
type PeerStatus struct {
	Peer   string `json:"peer"`             // remote Origin-Host once known, else its address
	Server string `json:"server,omitempty"` // configured name (client side)
	// URL is a client's server's configured URL; empty on a server.
	URL string `json:"url,omitempty"`
	// OriginHost is the Diameter peer's Origin-Host once its CER or CEA
	// told it; empty before, and for RADIUS.
	OriginHost string `json:"origin_host,omitempty"`
	// Protocol is "diameter" (the default when empty), "radius" (UDP, or
	// a server's NAS client), "radius+tcp" or "radsec".
	Protocol  string    `json:"protocol,omitempty"`
	State     string    `json:"state"`       // watchdog state: INITIAL, OKAY, SUSPECT, DOWN, REOPEN
	Since     time.Time `json:"since"`       // when State was entered
	InStateMS int64     `json:"in_state_ms"` // Snapshot.Time - Since
	// Policy is the state the selection policy gives the peer: the
	// balancer's "in-service", "suspended", "down" (balance mode), or
	// "primary", "secondary" (primary/secondary mode). Empty when none
	// applies.
	Policy string `json:"policy"`
	// ServerPolicy is a client's server's state in the server policy
	// (client.Config.Policy, the 7750 SR states: "unknown",
	// "in-service", "out-of-service", "probing"); empty without one.
	// Policy shows it too, after the balancer's view when there is one.
	ServerPolicy string `json:"server_policy,omitempty"`
	Pending      int    `json:"pending"`
	// Unanswered counts the requests read from the peer on its current
	// connection and not answered on the wire yet: a Diameter server's
	// backlog for that client (peer.Stats.Unanswered). Reading from it
	// pauses at the server's MaxUnanswered.
	Unanswered int    `json:"unanswered,omitempty"`
	Sent       uint64 `json:"sent"`
	Answered   uint64 `json:"answered"`
	MovedOut   uint64 `json:"moved_out"`
	// RecycledConns counts the connections replaced because requests that
	// never got an answer held all their Identifiers (RADIUS over TCP or
	// TLS; zero otherwise).
	RecycledConns uint64 `json:"recycled_conns,omitempty"`
	// Retransmissions counts the byte-identical copies of requests sent
	// again to a RADIUS server over UDP after its Timeout; Sent counts
	// each request once.
	Retransmissions uint64 `json:"retransmissions,omitempty"`
	// Stray counts a client's RADIUS server's replies that answered no
	// request awaiting them, by reason.
	Stray   StrayReplies  `json:"stray_replies,omitzero"`
	Tw      time.Duration `json:"tw_ns"`
	LastDWA time.Time     `json:"last_dwa,omitzero"` // zero: none yet
	// Counters are the peer's counters for the metrics: a client's of
	// its server, a RADIUS server's of its NAS client; nil for a Diameter
	// server's peer (its handler counts what it answers: WrapHandler).
	Counters *PeerCounters `json:"counters,omitempty"`
}

// StrayReplies counts the replies of a client's RADIUS server that
// answered no request awaiting them. They are dropped, except a late
// reply over UDP whose caller has no answer yet, which is delivered.
type StrayReplies struct {
	// Late: verified replies to a request given up on (UDP: every
	// attempt timed out) or already complete (TCP, TLS).
	Late uint64 `json:"late,omitempty"`
	// Duplicate (UDP): verified replies to a request answered already.
	Duplicate uint64 `json:"duplicate,omitempty"`
	// Unmatched (TCP, TLS): replies on an Identifier with no request.
	Unmatched uint64 `json:"unmatched,omitempty"`
	// Bad (UDP): malformed, unmatched, or failing verification.
	Bad uint64 `json:"bad,omitempty"`
	// BadAuth (TCP, TLS): replies failing verification; their connection
	// is closed.
	BadAuth uint64 `json:"bad_auth,omitempty"`
	// NoMA: replies without a required Message-Authenticator.
	NoMA uint64 `json:"no_ma,omitempty"`
}

// Values of the "reason" label of aaatp_radius_stray_replies_total.
const (
	StrayLate      = "late"
	StrayDuplicate = "duplicate"
	StrayUnmatched = "unmatched"
	StrayBad       = "bad"
	StrayBadAuth   = "bad_auth"
	StrayNoMA      = "no_ma"
)

type strayCount struct {
	n      uint64
	reason string
}

// counts are the counts that apply to a server over UDP (udp) or over
// TCP or TLS, with their reasons.
func (r StrayReplies) counts(udp bool) []strayCount {
	if udp {
		return []strayCount{{r.Late, StrayLate}, {r.Duplicate, StrayDuplicate}, {r.Bad, StrayBad}, {r.NoMA, StrayNoMA}}
	}
	return []strayCount{{r.Late, StrayLate}, {r.Unmatched, StrayUnmatched}, {r.BadAuth, StrayBadAuth}, {r.NoMA, StrayNoMA}}
}

// String is the page's cell: each count above zero with its reason.
func (r StrayReplies) String() string {
	var b strings.Builder
	for _, c := range [...]strayCount{{r.Late, StrayLate}, {r.Duplicate, StrayDuplicate}, {r.Unmatched, StrayUnmatched},
		{r.Bad, StrayBad}, {r.BadAuth, StrayBadAuth}, {r.NoMA, StrayNoMA}} {
		if c.n > 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d", c.reason, c.n)
		}
	}
	return b.String()
}

// PeerCounters are a peer's counters: a client's of its server, as
// client.ServerStats and client.Client.AnswerLatency keep them, or a
// RADIUS server's of its NAS client (radpeer.NASStats).
type PeerCounters struct {
	Requests uint64            `json:"requests"`         // requests first sent to the server, or received from the NAS
	Answers  map[string]uint64 `json:"answers"`          // answers the server returned, or sent to the NAS, by class
	Errors   map[string]uint64 `json:"errors,omitempty"` // requests first sent to the server that failed, by reason
	// Latency is the time from Send or Exchange to the server's answers,
	// counted at or below each of LatencyBuckets; nil for a NAS.
	Latency *client.ServerLatency `json:"-"`
}

// Name is the row's value of the "peer" label in every series: a
// client's configured name of the server (client.PeerSpec.Name, by
// default its URL), else the peer's own name (a server's client: its
// Origin-Host, or a NAS's address).
func (ps *PeerStatus) Name() string {
	if ps.Server != "" {
		return ps.Server
	}
	return ps.Peer
}

// Queue is one server's queue depth and whether it is in alarm.
type Queue struct {
	Server string `json:"server"`
	Depth  int    `json:"depth"`
	Alarm  bool   `json:"alarm"`
}

// Totals are the node's counters. A server fills Received, Answered,
// Retransmitted and Duplicates; a client Sent, Answered, Failed, Pending
// and Moved. Fields that do not apply stay zero.
type Totals struct {
	Sent          uint64 `json:"sent"`
	Received      uint64 `json:"received"`
	Answered      uint64 `json:"answered"`
	Failed        uint64 `json:"failed"`
	Pending       uint64 `json:"pending"`
	Moved         uint64 `json:"moved"`         // requests moved by failover
	Retransmitted uint64 `json:"retransmitted"` // requests sent or received with the T flag
	Duplicates    uint64 `json:"duplicates"`    // duplicates caught (server dedup)
}

// PeerRow converts a peer's Stats into a row. Policy and Server are left
// empty.
func PeerRow(st peer.Stats) PeerStatus {
	return PeerStatus{
		Peer: st.Peer, State: st.State, Since: st.Since,
		Pending: st.Pending, Unanswered: st.Unanswered, Sent: st.Sent, Answered: st.Answered, MovedOut: st.MovedOut,
		Tw: st.Tw, LastDWA: st.LastDWA,
	}
}

// PeerRows returns one row per peer, in the given order (a server's live
// peers, for instance).
func PeerRows(ps []*peer.Peer) []PeerStatus {
	rows := make([]PeerStatus, 0, len(ps))
	for _, p := range ps {
		if p == nil { // a configured server not connected (client.Config.MaxConnections)
			rows = append(rows, PeerStatus{State: "not connected"})
			continue
		}
		rows = append(rows, PeerRow(p.Stats()))
	}
	return rows
}

// ServerPeers returns a server's rows: its live peers sorted by name,
// then the peers that ended, in the order given (latest first, say), one
// row per name not live.
func ServerPeers(live []*peer.Peer, ended []peer.Stats) []PeerStatus {
	rows := PeerRows(live)
	slices.SortFunc(rows, func(a, b PeerStatus) int { return strings.Compare(a.Peer, b.Peer) })
	defer func() {
		for i := range rows {
			rows[i].OriginHost = originHostOf(rows[i].Peer)
		}
	}()
	seen := make(map[string]bool, len(rows)+len(ended))
	for _, r := range rows {
		seen[r.Peer] = true
	}
	for _, st := range ended {
		if !seen[st.Peer] {
			seen[st.Peer] = true
			rows = append(rows, PeerRow(st))
		}
	}
	return rows
}

// originHostOf is a server's peer's Origin-Host: its name once the CER
// told it, "" while the peer is named by its address (host:port; a
// DiameterIdentity has no colon).
func originHostOf(name string) string {
	if strings.Contains(name, ":") {
		return ""
	}
	return name
}

// NASRows returns a RADIUS server's rows for its clients: one row a
// client name (the addresses of one configured client together, under its
// name), else one a NAS address. Protocol radius, Policy "nas", Answered
// the answers sent to it, Since when it was last heard from, and
// Counters: the requests received and the answers sent by class. A NAS
// has no watchdog: State stays empty.
func NASRows(nas []radpeer.NASStats) []PeerStatus {
	rows := make([]PeerStatus, 0, len(nas))
	at := make(map[string]int, len(nas)) // row by client name
	for _, n := range nas {
		a := n.Answers
		counts := map[string]uint64{
			"accept": a.Accept, "reject": a.Reject, "challenge": a.Challenge, "accounting-response": a.AccountingResponse, client.ClassOther: a.Other,
		}
		if i, ok := at[n.Name]; ok && n.Name != "" {
			r := &rows[i]
			r.Answered += n.Answered
			r.Counters.Requests += n.Received
			for k, v := range counts {
				r.Counters.Answers[k] += v
			}
			if n.LastSeen.After(r.Since) {
				r.Since = n.LastSeen
			}
			continue
		}
		at[n.Name] = len(rows)
		rows = append(rows, PeerStatus{Peer: cmp.Or(n.Name, n.Addr), Protocol: ProtocolRADIUS, Policy: "nas", Since: n.LastSeen, Answered: n.Answered,
			Counters: &PeerCounters{Requests: n.Received, Answers: counts}})
	}
	return rows
}

// DedupTotals returns the totals of a server whose handlers are wrapped by
// dedup.Wrap or radpeer.Dedup with counters dd: Received, Answered
// (applied once, from the store, refused by the store or for now by the
// handler, or answered without the store: every request answered; not
// the requests dropped, dd.Dropped) and Duplicates.
func DedupTotals(dd *dedup.Counters) Totals {
	return Totals{
		Received: dd.Received.Load(), Duplicates: dd.Duplicates.Load(),
		Answered: dd.Applied.Load() + dd.Duplicates.Load() + dd.StoreErrs.Load() + dd.Superseded.Load() + dd.NotKept.Load() + dd.Transient.Load() +
			dd.PassedThrough.Load(),
	}
}

// ClientPeers returns the rows of a client's servers in configured order,
// Server set to the configured name, with their URL, protocol, Origin-Host
// and Counters. A Diameter server's row is its
// peer's (PeerRow), Policy the balancer's view of the server (balance
// mode) or primary/secondary (primary/secondary mode: the first peer OKAY
// is the primary, the other OKAY ones secondary), followed by
// "; server " and the server policy's state when there is one. A RADIUS
// server's row has the Client's view of it, Policy the server policy's
// state, and its peer's counters: over TCP and TLS the Identifiers in use
// and waiting, Tw and the recycled connections; over UDP the requests in
// flight or waiting, each request counted once as sent and its copies
// sent again as Retransmissions; and its Stray replies.
func ClientPeers(c *client.Client) []PeerStatus {
	return readClient(c).rows()
}

// latencyBounds are LatencyBuckets as durations.
var latencyBounds = func() []time.Duration {
	ds := make([]time.Duration, len(LatencyBuckets))
	for i, b := range LatencyBuckets {
		ds[i] = time.Duration(b * float64(time.Second))
	}
	return ds
}()

// clientRead is one read of a Client's servers: ServerStats, whose rows
// carry each server's peer, policy state and latencies from the same
// look, so that a SetPeers meanwhile cannot mix two servers in a row;
// the balancer's view is looked up by name.
type clientRead struct {
	ss  []client.ServerStats
	bal map[string]string // the balancer's view of each server, by name; nil in primary/secondary mode
}

func readClient(c *client.Client) *clientRead {
	r := &clientRead{ss: c.ServerStats()}
	if snap, ok := c.Balancer(); ok {
		r.bal = make(map[string]string, len(snap.Servers))
		for _, s := range snap.Servers {
			p := s.State.String()
			if s.State == loadbalance.InService && s.Buckets > 0 {
				p = fmt.Sprintf("%s (%d buckets)", p, s.Buckets)
			}
			r.bal[s.Name] = p
		}
	}
	return r
}

// rows are the ClientPeers rows of r.
func (r *clientRead) rows() []PeerStatus {
	rows := make([]PeerStatus, len(r.ss))
	// Every server of a Client has one protocol.
	radius := slices.ContainsFunc(r.ss, func(s client.ServerStats) bool { return s.Protocol != client.ProtocolDiameter })
	primary := false
	for i, s := range r.ss {
		switch p := s.Carrier.(type) {
		case *radpeer.UDPPeer:
			st := p.Stats()
			rows[i] = PeerStatus{Peer: s.Peer, Server: s.Server, Policy: s.Policy, ServerPolicy: s.Policy, Protocol: ProtocolRADIUS,
				Pending: st.InFlight + st.Waiting, Sent: st.Sent, Retransmissions: st.Retransmissions, Answered: st.Answered,
				Stray: StrayReplies{Late: st.Late, Duplicate: st.Duplicates, Bad: st.BadReplies, NoMA: st.NoMA}}
		case *radpeer.Peer:
			rows[i] = PeerStatus{Peer: s.Peer, Server: s.Server, Policy: s.Policy, ServerPolicy: s.Policy, Protocol: ProtocolRADIUS, State: s.State}
			rows[i].addStream(p.Stats())
		default:
			if radius {
				rows[i] = PeerStatus{Peer: s.Peer, Server: s.Server, Policy: s.Policy, ServerPolicy: s.Policy, Protocol: ProtocolRADIUS, State: s.State}
				break
			}
			if dp, ok := p.(*peer.Peer); ok {
				rows[i] = PeerRow(dp.Stats())
			} else {
				rows[i] = PeerStatus{State: "not connected"} // client.Config.MaxConnections
			}
			rows[i].Server = s.Server
			switch {
			case r.bal != nil:
				rows[i].Policy = r.bal[s.Server]
			case rows[i].State != watchdog.Okay.String():
				rows[i].Policy = ""
			case !primary:
				rows[i].Policy, primary = "primary", true
			default:
				rows[i].Policy = "secondary"
			}
			if s.Policy != "" {
				rows[i].ServerPolicy = s.Policy
				if rows[i].Policy == "" {
					rows[i].Policy = s.Policy
				} else {
					rows[i].Policy += "; server " + s.Policy
				}
			}
		}
		rows[i].URL, rows[i].OriginHost, rows[i].Protocol = s.URL, s.OriginHost, s.Protocol
		lat := s.AnswerLatency(latencyBounds)
		rows[i].Counters = &PeerCounters{Requests: s.Sent, Answers: s.Answers, Errors: s.Errors, Latency: &lat}
	}
	return rows
}

// addStream adds a RADIUS stream peer's counters to a row.
func (ps *PeerStatus) addStream(w radpeer.Stats) {
	ps.Pending, ps.Sent, ps.Answered, ps.MovedOut, ps.RecycledConns = w.Waiting, w.Sent, w.Answered, w.MovedOut, w.RecycledConns
	ps.Stray = StrayReplies{Late: w.Late, Unmatched: w.Unmatched, BadAuth: w.BadAuth, NoMA: w.NoMA}
	for _, cs := range w.Conns {
		ps.Pending += cs.Pending
		ps.Tw = cs.Tw
	}
}

// ClientSnapshot is the status of a client: its rows (ClientPeers), its
// failover table, its queues, and the totals it keeps: Answered and Failed
// by its servers, Moved by failover, Pending in its queues, and
// Retransmitted, the replays its Diameter peers sent with the T flag. Role
// and Identity, and Sent, are the caller's to set (and any total it counts
// otherwise).
func ClientSnapshot(c *client.Client) Snapshot {
	r := readClient(c)
	s := Snapshot{Peers: r.rows()}
	s.Failovers, s.FailoversTotal = c.FailoverLog()
	s.UnsentErrors = c.UnsentErrors()
	for _, q := range c.QueueDepths() {
		s.Queues = append(s.Queues, Queue{Server: q.Server, Depth: q.Depth, Alarm: q.Alarm})
		s.Totals.Pending += uint64(q.Depth)
	}
	for _, st := range r.ss {
		s.Totals.Answered += st.Answered
		s.Totals.Failed += st.Failed
		s.Totals.Moved += st.FailedOver
	}
	for _, st := range r.ss {
		if p, ok := st.Carrier.(*peer.Peer); ok {
			s.Totals.Retransmitted += p.Stats().Retransmitted
		}
	}
	return s
}

// complete fills what the handler computes: Time, InStateMS, and non-nil
// slices so that JSON has [] rather than null.
func (s *Snapshot) complete(now time.Time) {
	if s.Time.IsZero() {
		s.Time = now
	}
	for i := range s.Peers {
		p := &s.Peers[i]
		if p.InStateMS == 0 && !p.Since.IsZero() {
			p.InStateMS = max(0, s.Time.Sub(p.Since).Milliseconds())
		}
	}
	if s.Peers == nil {
		s.Peers = []PeerStatus{}
	}
	if s.Failovers == nil {
		s.Failovers = []client.FailoverRecord{}
	}
	if s.Queues == nil {
		s.Queues = []Queue{}
	}
}
