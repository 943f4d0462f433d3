package peer

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path"
	"strings"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
)

// BringDownInterval is RFC 3539 3.3's BRINGDOWN_INTERVAL: an idle
// connection may not be closed sooner.
const BringDownInterval = 5 * time.Minute

// Defaults for Config's timeouts.
const (
	DefaultCEATimeout     = 10 * time.Second
	DefaultRequestTimeout = 10 * time.Second
	DefaultDPATimeout     = 5 * time.Second
	DefaultDPRHoldOff     = 5 * time.Minute
)

// DefaultMaxUnanswered is Config.MaxUnanswered's default: four times the
// 256 requests a client throttle keeps in flight per server.
const DefaultMaxUnanswered = 1024

// Defaults of Config.MaxHandlers and Config.MaxQueuedHandlers, as for
// every listener.
const (
	DefaultMaxHandlers       = serve.DefaultLaneMax
	DefaultMaxQueuedHandlers = serve.DefaultLaneQueue
)

// DefaultInlineHandlerTime is Config.InlineHandlerTime's default.
const DefaultInlineHandlerTime = 500 * time.Microsecond

// DefaultMaxUnmatched is Config.MaxUnmatched's default.
const DefaultMaxUnmatched = 16

// ErrConfig is matched by every configuration error, as is the same
// error of package radpeer and of package client.
var ErrConfig = call.ErrConfig

// VendorApp is one Vendor-Specific-Application-Id advertised in CER/CEA.
// Exactly one of AuthAppID and AcctAppID is set.
type VendorApp struct {
	VendorID  uint32
	AuthAppID uint32
	AcctAppID uint32
}

// Config configures a Peer. OriginHost and OriginRealm are required; every
// other zero field means its documented default. A Config is copied by Dial
// and Serve; changing it afterwards has no effect.
type Config struct {
	OriginHost  string
	OriginRealm string

	// HostIPAddresses are advertised in CER/CEA. Default: the local address
	// of the connection.
	HostIPAddresses []netip.Addr
	VendorID        uint32
	ProductName     string // default "aaatp"
	// OriginStateID is advertised in CER/CEA. Default: the process start
	// time in seconds, so it grows across restarts (RFC 6733 8.16).
	OriginStateID uint32

	// Applications advertised. The default, when all three are empty, is
	// the base accounting application (3).
	AuthApps   []uint32
	AcctApps   []uint32
	VendorApps []VendorApp

	// Watchdog configures the RFC 3539 machine (Twinit, jitter source,
	// OkayDWAs, SuspectTimeouts). Leave Watchdog.Rand nil outside tests:
	// a Rand set here is shared by every peer made from this Config and
	// must then be safe for concurrent use.
	Watchdog watchdog.Config
	// Transport configures dialing and framing (Nagle, deadlines, TLS).
	Transport transport.Options

	// Dialer opens a client's transport connection. Default:
	// transport.Dial(ctx, url, Transport). Tests use it to dial over
	// net.Pipe; deployments to pick a source address.
	Dialer func(ctx context.Context, url string) (transport.Conn, error)

	// CEATimeout bounds the capabilities exchange. Default 10 s.
	CEATimeout time.Duration
	// RequestTimeout bounds a Request whose context has no deadline.
	// Default 10 s.
	RequestTimeout time.Duration
	// DPATimeout bounds how long Close waits for the DPA, then for the
	// answers still owed once it came (requests that crossed our DPR);
	// and how long a peer that received a DPR holds its DPA back for the
	// answers it still owes and keeps the connection open for the answers
	// to its own requests on it (it sends no new ones there); the
	// connection then closes once the DPA is written, which the
	// transport's WriteTimeout bounds. Default 5 s.
	DPATimeout time.Duration
	// DPRHoldOff is how long a client waits before it redials a peer
	// that disconnected with Disconnect-Cause BUSY or
	// DO_NOT_WANT_TO_TALK_TO_YOU: RFC 6733 5.4.3 says not to reconnect
	// then. After REBOOTING the client redials as after any loss.
	// Default 5 minutes; negative: no hold-off.
	DPRHoldOff time.Duration
	// DrainTimeout bounds how long a graceful disconnect (Close, the idle
	// bring-down, a client's connection limit) waits for the answers in
	// flight before it sends DPR; what is still unanswered then fails over.
	// Default: RequestTimeout, at most the watchdog's Twinit.
	DrainTimeout time.Duration
	// IdleTimeout, when set, closes the connection (DPR) after that long
	// without application traffic (watchdog messages do not count), and
	// ends the Peer. Zero means never; anything below BringDownInterval
	// (5 minutes, RFC 3539 3.3) is an error. That DPR carries
	// Disconnect-Cause DO_NOT_WANT_TO_TALK_TO_YOU, which asks the peer
	// not to connect again soon (RFC 6733 5.4.3): a peer that dials us
	// holds off for long (freeDiameter 200 times its Tc, 100 minutes by
	// default; a client Peer of this package DPRHoldOff), so set it only
	// where the peer is not expected back before then.
	IdleTimeout time.Duration

	// Table, shared by a Server and the client Peers of the same node,
	// keeps one connection per remote identity: a second CER from an
	// identity already connected is refused, and simultaneous
	// connections are resolved by election (see Table). Default: a
	// Server makes its own; a client Peer without one holds no election.
	Table *Table
	// RemoteHost, for Dial: the Origin-Host the peer is expected to
	// answer with. A CEA with another Origin-Host (identities compare
	// ignoring ASCII case) fails the open, with an EventOpenFailed that
	// names both, and the connection is closed; the open is retried as
	// any other that failed. Empty: whatever identity answers is taken.
	// With Table, it lets the election happen while our CER awaits its
	// CEA, before the peer has ever answered, and a connection the peer
	// opens to us while this Peer has none becomes this Peer's. Dial
	// refuses a second Peer with the same RemoteHost and Table while the
	// first is not closed.
	RemoteHost string

	// AllowHosts, for accepted connections: glob patterns (path.Match) of
	// Origin-Hosts admitted. Empty admits every host. A CER from another
	// host gets CEA DIAMETER_UNKNOWN_PEER (3010) and the connection closes.
	AllowHosts []string

	// AgentHosts: glob patterns (path.Match, ignoring ASCII case) of
	// peer identities that are agents, allowed to send requests whose
	// Origin-Host is another node.
	// From any other peer, a request whose Origin-Host is not the identity
	// of its connection is answered DIAMETER_INVALID_AVP_VALUE (5004) with
	// the Origin-Host in a Failed-AVP, and the Handler never sees it.
	AgentHosts []string

	// ServedRealms are the realms this node serves besides OriginRealm:
	// exact names, not patterns, compared ignoring ASCII case. A request
	// is for this node when its Destination-Host is OriginHost, or when it
	// has no Destination-Host and its Destination-Realm, if it has one,
	// is OriginRealm or one of ServedRealms (RFC 6733 6.1.4). Any other
	// request is addressed to another node and, as a node that does not
	// relay must, is answered before the Handler: a Destination-Realm not
	// served here DIAMETER_REALM_NOT_SERVED (3003), otherwise (a
	// Destination-Host that is another node) DIAMETER_UNABLE_TO_DELIVER
	// (3002), with an Error-Message and the AVP in a Failed-AVP; such
	// requests count in Stats.Refused. See HandleOtherDestinations.
	ServedRealms []string

	// HandleOtherDestinations hands the Handler the requests addressed to
	// another node too, instead of answering them 3003 or 3002 (see
	// ServedRealms): set it on a relay or proxy agent, whose Handler
	// forwards them. Default false: the node serves only requests
	// addressed to it.
	HandleOtherDestinations bool

	// Handler answers requests other than CER, DWR and DPR. Nil answers
	// them with DIAMETER_COMMAND_UNSUPPORTED (3001). It sees only
	// requests that passed the base protocol's checks: requests with the E
	// bit (answered 3008), with a malformed AVP (5014), without Origin-Host
	// or Origin-Realm (5005), with one of those, Session-Id,
	// Destination-Realm or Destination-Host twice (5009), with an
	// identity AVP that is not a DiameterIdentity (5004), for an
	// application we did not advertise (3007) or for the base
	// application (3001), and requests addressed to another node (3003,
	// 3002; see ServedRealms) are answered before it.
	Handler Handler

	// InlineHandlerTime is how long the Handler may run on the goroutine
	// that read its request, the connection's reader, before the reading
	// moves to a new goroutine (see Handler). The guard that moves it
	// looks every InlineHandlerTime, or every 5 ms when that is shorter,
	// while Handlers run: a Handler that blocks is moved off after
	// InlineHandlerTime, or at the guard's first look after it started,
	// at most 5 ms. Running a fast Handler there
	// saves the wake-up of another goroutine per request, a few
	// microseconds of CPU and latency each. Default
	// DefaultInlineHandlerTime; negative: every request is handed to a
	// goroutine of its own, never run on the reader.
	InlineHandlerTime time.Duration

	// slowRequests: see slowRequests; tests set -1 for none, to hand
	// over as often as they can.
	slowRequests int32

	// MaxUnanswered bounds, per connection, the requests read from the
	// peer and not yet answered on the wire (in the Handler, or answers
	// queued behind a peer that does not read them). When it is reached
	// the connection's reader stops reading until answers drain, so that
	// TCP flow control pushes back on the peer; a connection's memory is
	// then bounded by about MaxUnanswered times the largest message.
	// Default DefaultMaxUnanswered.
	MaxUnanswered int

	// MaxHandlers bounds the Handlers that run at once on workers for
	// each kind of request, accounting (Accounting-Request) and the
	// others, across the connections of a Server (or of one Peer dialed
	// or accepted alone), and MaxQueuedHandlers those waiting for a
	// worker. The connections take turns for the next free worker; when
	// MaxQueuedHandlers wait, a request pushes out the newest waiting one
	// of the connection with the most waiting, or is itself refused if
	// its own connection has about as many. A refused request is answered
	// DIAMETER_TOO_BUSY (3004), so that its client tries another server.
	// So Handlers stuck on a slow store hold only their own kind, never
	// the others', and a connection that pipelines more than the workers
	// keep up with delays the others' requests by about one of its own
	// each. Handlers running on a connection's reader (InlineHandlerTime)
	// are not counted.
	// Defaults DefaultMaxHandlers and DefaultMaxQueuedHandlers; a
	// negative MaxQueuedHandlers: none wait.
	MaxHandlers, MaxQueuedHandlers int
	// lanes runs the Handlers on workers; shared by a Server's peers.
	// ownLanes: this Peer made them, and closes them when a connection
	// ends (a Server closes its own when it closes).
	lanes    *handlerLanes
	ownLanes bool
	// guard watches the Handlers that run on readers; shared by a
	// Server's peers as lanes are.
	guard *handlerGuard

	// MaxUnmatched bounds the answers in a row, on one connection, that
	// match no request sent there (a wrong Hop-by-Hop id): when it is
	// reached the connection is closed as broken, its pending requests
	// leave it as after any lost connection (a Client replays them
	// elsewhere) and the peer reconnects as it does after a loss. An
	// answer that matches resets the count. An answer with an id sent
	// there whose request the connection has forgotten (more than 4096
	// requests left it unanswered: a slow server catching up), or that
	// repeats an answer, is counted late, not unmatched, when the id is
	// one of the last 2^20 sent there; one late does not reset the count.
	// Default DefaultMaxUnmatched; negative: never close for this.
	MaxUnmatched int

	// Failover receives requests that left this peer's connection
	// (Moved), in their original send order: its pending requests when
	// the watchdog calls Failover() (OKAY -> SUSPECT, OKAY -> DOWN) or the
	// connection drops, those still unanswered when a graceful disconnect
	// has drained, and one request at a time answered DIAMETER_TOO_BUSY or
	// DIAMETER_UNABLE_TO_DELIVER (the call's RefusedBy tells those apart).
	// It runs on the peer's notifier, without its mutex. A late answer
	// here still completes a call once. Nil: pending requests keep
	// waiting here and fail when the connection closes; error answers go
	// to the caller. Package client sets it for the peers it dials.
	Failover call.Failover

	// Replied, when set, is told of every answer that matches a request
	// sent on this peer's connection, before it completes the request:
	// also of a late one (its caller gave up, the request moved on) and
	// of a refusal. Each shows the peer alive. It runs on the reader's
	// goroutine, without the peer's mutex. When package client keeps
	// server states (its Policy) it sets its own, which calls the one its
	// template has after it: any answer keeps a server in service.
	Replied func(from call.Carrier)

	// Events receives every event of this peer. Default: a new Bus; share
	// one Bus between peers to watch them all.
	Events *Bus

	// Logger gets one line per state change, and rate-limited warnings of
	// what the remote peer did. Lines are written on the goroutine that
	// delivers the events, in order with them: a slow Logger delays the
	// events, never the connection. Default slog.Default().
	Logger *slog.Logger
}

var processStart = uint32(time.Now().Unix())

func (c Config) validate() (Config, error) {
	if c.OriginHost == "" || c.OriginRealm == "" {
		return c, fmt.Errorf("peer: %w: OriginHost and OriginRealm are required", ErrConfig)
	}
	if c.ProductName == "" {
		c.ProductName = "aaatp"
	}
	if c.OriginStateID == 0 {
		c.OriginStateID = processStart
	}
	if len(c.AuthApps) == 0 && len(c.AcctApps) == 0 && len(c.VendorApps) == 0 {
		c.AcctApps = []uint32{message.AppAccounting}
	}
	for _, v := range c.VendorApps {
		if (v.AuthAppID == 0) == (v.AcctAppID == 0) {
			return c, fmt.Errorf("peer: %w: vendor application %+v needs exactly one of AuthAppID and AcctAppID", ErrConfig, v)
		}
	}
	if c.CEATimeout <= 0 {
		c.CEATimeout = DefaultCEATimeout
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.DPATimeout <= 0 {
		c.DPATimeout = DefaultDPATimeout
	}
	if c.DPRHoldOff == 0 {
		c.DPRHoldOff = DefaultDPRHoldOff
	} else if c.DPRHoldOff < 0 {
		c.DPRHoldOff = 0
	}
	if c.IdleTimeout < 0 || (c.IdleTimeout > 0 && c.IdleTimeout < BringDownInterval) {
		return c, fmt.Errorf("peer: %w: IdleTimeout %v is below RFC 3539's BRINGDOWN_INTERVAL of %v", ErrConfig, c.IdleTimeout, BringDownInterval)
	}
	for _, g := range c.AllowHosts {
		if _, err := path.Match(g, ""); err != nil {
			return c, fmt.Errorf("peer: %w: allow pattern %q: %v", ErrConfig, g, err)
		}
	}
	for _, g := range c.AgentHosts {
		if _, err := path.Match(g, ""); err != nil {
			return c, fmt.Errorf("peer: %w: agent pattern %q: %v", ErrConfig, g, err)
		}
	}
	for _, r := range c.ServedRealms {
		if err := message.CheckIdentity(r); err != nil {
			return c, fmt.Errorf("peer: %w: served realm: %w", ErrConfig, err)
		}
	}
	if c.MaxUnanswered < 0 {
		return c, fmt.Errorf("peer: %w: MaxUnanswered %d is negative", ErrConfig, c.MaxUnanswered)
	}
	if c.MaxUnanswered == 0 {
		c.MaxUnanswered = DefaultMaxUnanswered
	}
	if c.MaxHandlers < 0 {
		return c, fmt.Errorf("peer: %w: MaxHandlers %d is negative", ErrConfig, c.MaxHandlers)
	}
	if c.MaxHandlers == 0 {
		c.MaxHandlers = DefaultMaxHandlers
	}
	if c.MaxQueuedHandlers == 0 {
		c.MaxQueuedHandlers = DefaultMaxQueuedHandlers
	}
	if c.lanes == nil {
		c.lanes, c.ownLanes = newHandlerLanes(c.MaxHandlers, c.MaxQueuedHandlers), true
	}
	if c.InlineHandlerTime == 0 {
		c.InlineHandlerTime = DefaultInlineHandlerTime
	}
	if c.guard == nil && c.InlineHandlerTime > 0 {
		c.guard = newHandlerGuard(c.InlineHandlerTime)
	}
	if c.slowRequests == 0 {
		c.slowRequests = slowRequests
	}
	if c.MaxUnmatched == 0 {
		c.MaxUnmatched = DefaultMaxUnmatched
	}
	if c.Events == nil {
		c.Events = NewBus()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	// Validate the watchdog settings now, so a bad Twinit fails Dial, not
	// its first step. Each Peer builds its own Machine from c.Watchdog
	// (a nil Rand draws from the process-wide generator).
	if _, err := watchdog.New(c.Watchdog); err != nil {
		return c, fmt.Errorf("peer: %w: %w", ErrConfig, err)
	}
	return c, nil
}

func (c *Config) drainTimeout() time.Duration {
	if c.DrainTimeout > 0 {
		return c.DrainTimeout
	}
	return min(c.RequestTimeout, cmp.Or(c.Watchdog.Twinit, watchdog.DefaultTwinit))
}

// allowed reports whether host matches AllowHosts.
func (c *Config) allowed(host string) bool {
	if len(c.AllowHosts) == 0 {
		return true
	}
	// A DiameterIdentity is ASCII and compared ignoring case.
	host = strings.ToLower(host)
	for _, g := range c.AllowHosts {
		if ok, _ := path.Match(strings.ToLower(g), host); ok {
			return true
		}
	}
	return false
}
