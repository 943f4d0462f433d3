package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aaatp/aaatp/config"
	servecore "github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/internal/storeurl"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/internal/fault"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/status"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

const serverSynopsis = `usage: aaa-peer server --listen URL [--listen URL...] [--origin-host H --origin-realm R]
       [--tw 30s] [--allow GLOB...] [--events FILE] [--report FILE]
       [--answer-delay D] [--drop-dwa] [--stall-after N]
       [--dedup memory|redis://host:port/db] [--dedup-max-bytes N] [--dedup-max-answer N]
       [--status ADDR] [--shutdown-cause rebooting|busy|do-not-want-to-talk-to-you]
       [--log-level info] [--log-format text|json] [--cpuprofile FILE] [--config FILE]

Accepts Diameter connections and answers Accounting-Requests (application 3)
with DIAMETER_SUCCESS and freeDiameter test_app Test-Requests (application
16777214, vendor 999999) with DIAMETER_SUCCESS, echoing AVP 345678; any
other command gets DIAMETER_COMMAND_UNSUPPORTED (3001). A request seen
before (same Origin-Host, in any case, and End-to-End id, on any connection,
T flag or not; for accounting also the same record: Session-Id,
Accounting-Record-Type and -Number, Event-Timestamp, NAS) gets the
first answer again without being applied twice (RFC 3539 2.5, 3.5): the
--dedup store remembers answers, in memory, or in Redis so that several
servers share it and a request failed over to another server is not
applied twice either (with memory, the default, the server warns at start
and counts the requests with the T flag it had never seen: their client
may have failed over from a server that applied them). SIGTERM or SIGINT
disconnects every peer (DPR with --shutdown-cause, at most 5 s), writes the
report and exits 0.

With --status, an HTTP server shows the server live until it exits: a page
with each connected peer (and the last ones that ended): watchdog state
and time in state, pending, sent and answered, Tw and last DWA, and the
totals received, answered, applied, duplicates and retransmitted, and
the RADIUS records dropped unanswered for a failed --dedup store, not in
answered (/); the same as JSON (/status.json); Prometheus metrics
(/metrics).
`

// shutdownBudget bounds the DPR/DPA exchange with every peer on exit.
const shutdownBudget = 5 * time.Second

type serverOptions struct {
	listen      stringList
	allow       stringList
	originHost  string
	originRealm string
	tw          time.Duration
	events      string
	report      string
	ready       string
	answerDelay time.Duration
	dropDWA     bool
	stallAfter  int64
	noDelay     bool
	tlsCert     string
	tlsKey      string
	tlsClientCA string
	secretFile  string
	secret      []byte                           // from --config, when --secret-file is not given
	clients     []config.Client                  // from --config: the RADIUS clients, by source (none: every source, secret)
	requireMA   radpeer.MessageAuthenticatorMode // RADIUS listeners, radius.go
	proxyState  radpeer.ProxyStateLimit
	logLevel    string
	logFormat   string
	dedup       string
	dedupBytes  int64
	dedupAnswer int
	status      string
	shutdown    string
	cause       uint32 // parsed from shutdown by validate

	agents        stringList
	radiusProxies prefixList
	maxUnanswered int
	inlineTime    time.Duration
	maxOpening    int
	maxOpenPerIP  int
	maxConns      int
	maxConnsPerIP int
	cerTimeout    time.Duration
	idleTimeout   time.Duration
	firstTimeout  time.Duration
	maxHandlers   int
	maxQueued     int
	udpDupBytes   int64
	history       int
	cpuProfile    string
	config        string
}

func serverFlags(o *serverOptions, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("server", serverSynopsis+"\n"+reloadHelp, stderr)
	fs.Var(&o.listen, "listen", "`URL` to listen on: tcp://host:port, tls://host:port or sctp://host:port for Diameter, radius+tcp://host:port, radsec://host:port or radius://host:port (UDP; on port 1813 or 1646 an accounting port, where Status-Server is answered Accounting-Response) for RADIUS (port 0: any free port); repeat for several listeners (required)")
	radiusFlags(fs, &o.secretFile)
	radiusServerFlags(fs, o)
	fs.StringVar(&o.originHost, "origin-host", "", "our Origin-Host `H`, a DiameterIdentity (an FQDN: letters, digits, '-', '_' and '.') such as server1.example.net (required with a Diameter --listen)")
	fs.StringVar(&o.originRealm, "origin-realm", "", "our Origin-Realm `R`, a DiameterIdentity such as example.net (required with a Diameter --listen)")
	fs.DurationVar(&o.tw, "tw", watchdog.DefaultTwinit, "watchdog interval Twinit `D` (RFC 3539: at least 6s; jittered by +-2s)")
	fs.Var(&o.allow, "allow", "admit only peers whose Origin-Host matches this `GLOB` (path.Match syntax); repeat for several; none admits every host")
	fs.StringVar(&o.events, "events", "", "write every peer event as a JSON line to `FILE` (\"-\" is stdout)")
	fs.StringVar(&o.report, "report", "", "write a JSON report to `FILE` on exit (\"-\" is stdout)")
	fs.StringVar(&o.ready, "ready", "", "once listening, write the bound listen URLs (one per line) to `FILE`; useful with port 0")
	fs.DurationVar(&o.answerDelay, "answer-delay", 0, "fault: wait `D` before answering each application request (Diameter and RADIUS; not a DWR nor a Status-Server)")
	fs.BoolVar(&o.dropDWA, "drop-dwa", false, "fault, Diameter listeners: answer DWRs but never send the DWAs (everything else is answered)")
	fs.Int64Var(&o.stallAfter, "stall-after", 0, "fault, Diameter listeners: after `N` application requests received in total, stop reading every connection (0: never)")
	fs.BoolVar(&o.noDelay, "no-delay", false, "disable Nagle on TCP and TLS sockets (RFC 3539 3.2 wants it on)")
	fs.StringVar(&o.shutdown, "shutdown-cause", "rebooting", "Disconnect-Cause `C` of the DPRs sent on SIGTERM or SIGINT: rebooting (clients redial at once), busy or do-not-want-to-talk-to-you (clients hold off, RFC 6733 5.4.3)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate `FILE` presented on tls:// listeners")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key `FILE` of --tls-cert")
	fs.StringVar(&o.tlsClientCA, "tls-client-ca", "", "PEM CA `FILE`: when set, tls:// clients must present a certificate it signed (mutual TLS)")
	logFlags(fs, &o.logLevel, &o.logFormat, "info")
	statusFlag(fs, &o.status, "logged at info")
	cpuProfileFlag(fs, &o.cpuProfile)
	fs.StringVar(&o.dedup, "dedup", "memory", "duplicate-request `STORE`: memory (this process only) or Redis, shared by every server using it: redis://[user:password@]host:port/db, Sentinel redis://sentinel:port/db?master_name=NAME&addr=sentinel2:port..., Cluster redis+cluster://node:port?addr=node2:port... (rediss for TLS)")
	fs.Int64Var(&o.dedupBytes, "dedup-max-bytes", dedup.DefaultMaxBytes, "memory budget `N` of --dedup memory, in bytes: answers plus 80 per key; over it the oldest entries go first")
	fs.IntVar(&o.dedupAnswer, "dedup-max-answer", dedup.DefaultMaxAnswerSize, "answers longer than `N` bytes are sent but not kept by the --dedup store; a duplicate of such a request is refused DIAMETER_UNABLE_TO_COMPLY (5012), never applied again")
	fs.Var(&o.radiusProxies, "radius-proxy", "RADIUS clients at this `ADDR` or prefix (10.0.0.0/8) are proxies relaying many NASes: their accounting records are recognised by NAS identity alone, so a record re-sent through another proxy is not applied twice; from any other client a record is bound to the client's address, so that no client can pre-empt another NAS's record by forging it; repeat for several")
	fs.Var(&o.agents, "agent", "peers whose Origin-Host matches this `GLOB` are agents: their requests may carry another node's Origin-Host (from any other peer such a request is refused 5004); repeat for several")
	fs.IntVar(&o.maxUnanswered, "max-unanswered", peer.DefaultMaxUnanswered, "per connection, stop reading once `N` requests are read and not yet answered on the wire, until answers drain (RADIUS/TCP and TLS: at most 256, one Identifier space)")
	fs.DurationVar(&o.inlineTime, "inline-handler-time", peer.DefaultInlineHandlerTime, "run each request on the connection's reader goroutine, and move the reading to a new goroutine once a request has taken `D` there (later requests then go to goroutines of their own for a while); negative: every request on a goroutine of its own")
	fs.IntVar(&o.maxOpening, "max-opening", peer.DefaultMaxOpening, "at most `N` accepted connections without a finished CER/CEA (Diameter) or a first request signed with the shared secret (RADIUS/TCP: an Access-Request without Message-Authenticator does not count, though its connection is kept while it sends; RADIUS/TLS: a first request passing verification), per listener; more are closed at once (-1: no limit)")
	fs.IntVar(&o.maxOpenPerIP, "max-opening-per-addr", peer.DefaultMaxOpeningPerAddr, "at most `N` of those from one source address, an IPv6 /64 counting as one (-1: no limit)")
	fs.IntVar(&o.maxConns, "max-connections", peer.DefaultMaxConnections, "at most `N` connections open at once per Diameter or RADIUS/TCP and TLS listener, admitted or not; more are closed at once (-1: no limit)")
	fs.IntVar(&o.maxConnsPerIP, "max-connections-per-addr", peer.DefaultMaxConnectionsPerAddr, "at most `N` of those from one source address, an IPv6 /64 counting as one, so that one host cannot take every place (-1: no limit)")
	fs.DurationVar(&o.cerTimeout, "cer-timeout", peer.DefaultCEATimeout, "close an accepted Diameter connection that has not sent its CER within `D`")
	fs.DurationVar(&o.firstTimeout, "first-request-timeout", radpeer.DefaultOpeningTimeout, "close an accepted RADIUS/TCP or TLS connection that has not sent a request passing verification within `D` (TLS handshake included; a client's watchdog may send its first Status-Server only after its Tw)")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", radpeer.DefaultIdleTimeout, "close a RADIUS/TCP or TLS connection that sent no whole request for `D` (a client's Status-Server watchdog keeps a live one busy; negative: never)")
	fs.IntVar(&o.maxHandlers, "max-handlers", radpeer.DefaultMaxInFlight, "at most `N` requests handled at once on workers for each kind, accounting and the others, each kind on its own budget so that a slow --dedup store delays accounting only (Diameter: requests handled on a connection's reader are not counted)")
	fs.IntVar(&o.maxQueued, "max-queued", radpeer.DefaultMaxQueued, "at most `N` requests of each kind waiting for a handler, the connections (over UDP, the clients' addresses) taking turns; when full, a request pushes out the newest waiting one of the connection with the most waiting, or is itself refused if its own has about as many: a refused Diameter request is answered DIAMETER_TOO_BUSY (3004) and a RADIUS one dropped, each counted and logged (-1: none wait)")
	fs.Int64Var(&o.udpDupBytes, "udp-dup-max-bytes", radpeer.DefaultDupBytes, "RADIUS over UDP (radius://): memory budget `N` of the RFC 5080 duplicate cache, in bytes: cached answers plus about 320 per request; over it the oldest requests are forgotten first (it also holds at most 65,536, for 30 s)")
	fs.IntVar(&o.history, "history", defaultHistory, "keep the final stats of the last `N` peers that ended, for --report and the status page")
	configFlag(fs, &o.config)
	return fs
}

// defaultHistory is --history's default.
const defaultHistory = 1024

func (o *serverOptions) validate() error {
	switch o.shutdown {
	case "rebooting":
		o.cause = message.DisconnectRebooting
	case "busy":
		o.cause = message.DisconnectBusy
	case "do-not-want-to-talk-to-you":
		o.cause = message.DisconnectDoNotWantToTalkToU
	default:
		return usagef("--shutdown-cause %q: want rebooting, busy or do-not-want-to-talk-to-you", o.shutdown)
	}
	diameter := slices.ContainsFunc(o.listen, func(u string) bool { return !radpeer.IsURL(u) })
	switch {
	case len(o.listen) == 0:
		return usagef("--listen is required")
	case o.originHost == "" && diameter:
		return usagef("--origin-host is required with a Diameter --listen")
	case o.originRealm == "" && diameter:
		return usagef("--origin-realm is required with a Diameter --listen")
	case !diameter && (o.dropDWA || o.stallAfter > 0):
		return usagef("--drop-dwa and --stall-after act on Diameter listeners, and every --listen is RADIUS")
	case o.tw < watchdog.MinTwinit:
		return usagef("--tw %v is below the RFC 3539 minimum of %v", o.tw, watchdog.MinTwinit)
	case o.answerDelay < 0:
		return usagef("--answer-delay must not be negative")
	case o.stallAfter < 0:
		return usagef("--stall-after must not be negative")
	case o.dedupBytes < 1:
		return usagef("--dedup-max-bytes must be positive")
	case o.dedupAnswer < 1:
		return usagef("--dedup-max-answer must be positive")
	case o.maxUnanswered < 1:
		return usagef("--max-unanswered must be at least 1")
	case o.inlineTime == 0:
		return usagef("--inline-handler-time must not be 0 (negative: a goroutine per request)")
	case o.maxOpening == 0 || o.maxOpenPerIP == 0 || o.maxOpening < -1 || o.maxOpenPerIP < -1:
		return usagef("--max-opening and --max-opening-per-addr must be positive, or -1 for no limit")
	case o.maxConns == 0 || o.maxConns < -1:
		return usagef("--max-connections %d: must be positive, or -1 for no limit", o.maxConns)
	case o.maxConnsPerIP == 0 || o.maxConnsPerIP < -1:
		return usagef("--max-connections-per-addr %d: must be positive, or -1 for no limit", o.maxConnsPerIP)
	case o.maxHandlers < 1:
		return usagef("--max-handlers %d: must be at least 1", o.maxHandlers)
	case o.udpDupBytes < 1:
		return usagef("--udp-dup-max-bytes must be positive")
	case o.maxQueued == 0 || o.maxQueued < -1:
		return usagef("--max-queued %d: must be at least 1, or -1 for none", o.maxQueued)
	case o.firstTimeout <= 0:
		return usagef("--first-request-timeout %s: must be positive", o.firstTimeout)
	case o.idleTimeout == 0:
		return usagef("--idle-timeout 0: give a duration such as 2m, or a negative one for never")
	case o.cerTimeout <= 0:
		return usagef("--cer-timeout must be positive")
	case o.history < 0:
		return usagef("--history must not be negative")
	case o.dedup != "memory" && !strings.HasPrefix(o.dedup, "redis"):
		return usagef("--dedup %q: want memory or a redis:// URL", storeurl.Redacted(o.dedup))
	}
	// A RADIUS-only server has no Diameter identity to check, but one
	// given is checked all the same.
	if diameter || o.originHost != "" {
		if err := checkIdentityFlag("origin-host", o.originHost, "server1.example.net"); err != nil {
			return err
		}
	}
	if diameter || o.originRealm != "" {
		if err := checkIdentityFlag("origin-realm", o.originRealm, "example.net"); err != nil {
			return err
		}
	}
	if err := checkStatusAddr(o.status); err != nil {
		return err
	}
	needTLS := false
	for _, u := range o.listen {
		if err := checkURLScheme("listen", u, serverSchemes); err != nil {
			return err
		}
		if radpeer.IsURL(u) {
			if err := o.validateRADIUSListen(u); err != nil {
				return err
			}
			continue
		}
		ep, err := transport.ParseURL(u)
		if err != nil {
			return usagef("--listen %s: %v", u, err)
		}
		needTLS = needTLS || ep.Scheme == transport.SchemeTLS
	}
	if needTLS && (o.tlsCert == "" || o.tlsKey == "") {
		return usagef("a tls:// listener needs --tls-cert and --tls-key")
	}
	return nil
}

// server is one run of "aaa-peer server".
type server struct {
	o       serverOptions
	cfg     peer.Config
	log     *slog.Logger
	faults  *fault.Switch // nil without --drop-dwa and --stall-after
	started time.Time

	dd            dedup.Counters // received, applied, duplicates, store errors, unseen retransmissions
	retransmitted atomic.Uint64  // application requests received with the T flag
	dedupLost     atomic.Uint64  // losses of the --dedup store's state noticed
	// storeErrs logs why the --dedup store failed, at most once per
	// interval, for the requests refused for it.
	storeErrs *dedup.ErrorLog
	// privateStore: the --dedup store is this process's own (memory), so
	// a request with the T flag it has not seen is logged (noteUnseen).
	privateStore bool

	// lmu guards the listeners, which a reload changes.
	lmu     sync.Mutex
	srvs    []*peer.Server    // one per Diameter --listen
	rls     []*radiusListener // one per RADIUS --listen
	bounds  map[string]string // each --listen URL's bound URL
	wg      sync.WaitGroup    // the Diameter Serve loops
	drains  sync.WaitGroup    // removed listeners draining
	reloads reloadStats
	// listenOrder are the --listen URLs running, in order.
	listenOrder []string
	// removedRADIUS are the last counters of RADIUS listeners a reload
	// removed.
	removedRADIUS []radiusListenerReport
	// secret is the RADIUS listeners' shared secret running (nil: none).
	secret []byte

	// What a listener opened by a reload needs, as at start.
	topts   transport.Options
	store   dedup.Store
	bus     *peer.Bus
	metrics *status.Metrics

	mu    sync.Mutex
	ended history // last Stats of peers that ended
}

// serverReport is the --report document.
type serverReport struct {
	Received      uint64       `json:"received"`       // application requests, duplicates included
	Retransmitted uint64       `json:"retransmitted"`  // of those, with the T flag (replays after a client's failover)
	Applied       uint64       `json:"applied"`        // of those, applied: answered and committed to the --dedup store (once per request), plus passed_through
	PassedThrough uint64       `json:"passed_through"` // of the applied, RADIUS requests other than accounting records: answered, not deduplicated (nothing committed)
	Answered      uint64       `json:"answered"`       // answers sent: applied + duplicates + store_errors + superseded + not_kept + refusals for now (E bit 3002/3004, not kept); not dropped
	Duplicates    uint64       `json:"duplicates"`     // answered from the --dedup store, not applied again
	StoreErrors   uint64       `json:"store_errors"`   // Diameter requests refused DIAMETER_TOO_BUSY: the --dedup store failed
	Dropped       uint64       `json:"dropped"`        // RADIUS accounting records left unanswered: the --dedup store failed (RADIUS has no "try elsewhere" answer)
	CommitUnknown uint64       `json:"commit_unknown"` // of store_errors and dropped, commits whose outcome the --dedup store could not tell (Redis answered neither the commit nor its check)
	Cancelled     uint64       `json:"cancelled"`      // not answered: the connection closed before the store answered
	Superseded    uint64       `json:"superseded"`     // handled here, but another server committed it first (we stalled): answered with its answer
	TooLarge      uint64       `json:"too_large"`      // of the applied, answers over --dedup-max-answer: sent, not kept
	DedupLost     uint64       `json:"dedup_lost"`     // times the --dedup store was found to have lost its entries
	NotKept       uint64       `json:"not_kept"`       // duplicates of those, refused DIAMETER_UNABLE_TO_COMPLY
	Dedup         string       `json:"dedup"`          // the --dedup store (password elided)
	EventsDropped uint64       `json:"events_dropped"`
	Peers         []peer.Stats `json:"peers"` // the last --history peers that ended, oldest first, then the live ones
	// PeersEnded counts every peer that ended; PeersForgotten those of
	// them no longer in Peers (beyond --history).
	PeersEnded     uint64 `json:"peers_ended"`
	PeersForgotten uint64 `json:"peers_forgotten"`
	// UnseenReplays counts the retransmitted (T flag) that the --dedup
	// store had never seen, applied here. With --dedup memory, the server
	// their client failed over from may have applied them too. Diameter
	// only: RADIUS has no T flag.
	UnseenReplays uint64 `json:"unseen_replays"`
	// RefusedOverLimit counts connections closed at once over
	// --max-connections(-per-addr) or --max-opening(-per-addr).
	RefusedOverLimit uint64 `json:"refused_over_limit"`
	// EvictedUnadmitted counts connections still waiting for their CER,
	// closed to make room for a new one over those limits.
	EvictedUnadmitted uint64 `json:"evicted_unadmitted"`
	// RADIUS has each RADIUS listener's counters.
	RADIUS []radiusListenerReport `json:"radius,omitempty"`
	// LogEvents counts, by kind, what the process logs rate-limited
	// (refused connections, bad frames, failed authenticators, timeouts,
	// overload...), suppressed lines included.
	LogEvents map[string]uint64 `json:"log_events"`
}

func runServer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return serveWith(ctx, args, stdout, stderr, serveHooks{reload: hangups})
}

// serveHooks are what serveWith takes besides the command line.
type serveHooks struct {
	// store, for tests, is a duplicate store to use instead of opening
	// --dedup (so that in-process servers can share one memory store);
	// the caller owns it.
	store dedup.Store
	// reload says when to re-read --config: SIGHUP.
	reload <-chan os.Signal
}

func serveWith(ctx context.Context, args []string, stdout, stderr io.Writer, hooks serveHooks) int {
	var o serverOptions
	fs := serverFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	cfg, err := loadConfig(o.config, stderr)
	if err != nil {
		return 2
	}
	base, set := o, setFlags(fs) // what a reload applies the file to
	store := hooks.store
	unused := o.applyConfig(cfg, set)
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "aaa-peer server: %v\n", err)
		return 2
	}
	// A RADIUS listener's missing or unreadable secret is a mistake on
	// the command line, as it is the client's (exit 2): found here, before
	// anything listens, though openListener reads it again.
	if len(o.clients) == 0 && o.needsSecret() {
		if _, err := o.radiusSecret(); err != nil {
			fmt.Fprintf(stderr, "aaa-peer server: %v\n", err)
			return 2
		}
	}
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer server: %v\n", err)
		return 2
	}
	for _, u := range unused {
		log.Warn("--config: the server does not use this part of the file", "file", o.config, "ignored", u)
	}
	if err := checkReport(o.report); err != nil {
		fmt.Fprintf(stderr, "aaa-peer server: %v\n", err)
		return 1
	}
	stopProfile, err := startCPUProfile(o.cpuProfile, log)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer server: %v\n", err)
		return 1
	}
	defer stopProfile()
	s := &server{
		o: o, log: log, started: time.Now(), ended: history{max: o.history},
		storeErrs: dedup.NewErrorLog(log, 0),
	}
	if o.dropDWA || o.stallAfter > 0 {
		s.faults = &fault.Switch{DropDWA: o.dropDWA, StallAfter: o.stallAfter}
		s.faults.OnStall = func() {
			s.log.Warn("--stall-after reached: no longer reading from any connection", "requests", o.stallAfter)
		}
	}
	topts := transport.Options{NoDelay: o.noDelay}
	if o.tlsCert != "" || o.tlsKey != "" {
		tc, err := transport.ServerTLSConfig(o.tlsCert, o.tlsKey, o.tlsClientCA)
		if err != nil {
			fmt.Fprintf(stderr, "aaa-peer server: %v\n", err)
			return 2
		}
		topts.TLS = tc
	}
	bus := peer.NewBus()
	if store == nil {
		if strings.HasPrefix(o.dedup, "redis") {
			redis.SetLogger(redisLog{log}) // process-wide: this is main
		}
		st, err := dedup.Open(o.dedup, dedup.WithMaxBytes(o.dedupBytes), dedup.WithMaxAnswerSize(o.dedupAnswer),
			dedup.WithLogger(log), dedup.WithStateLost(func() { s.storeLost(bus) }))
		if err != nil {
			fmt.Fprintf(stderr, "aaa-peer server: --dedup %s: %v\n", storeurl.Redacted(o.dedup), err)
			return 2
		}
		defer func() {
			if err := st.Close(); err != nil {
				log.Warn("closing the --dedup store", "err", err)
			}
		}()
		if err := probeStore(ctx, st); err != nil {
			log.Error("--dedup store unusable", "store", storeurl.Redacted(o.dedup), "err", err)
			return 1
		}
		store = st
		if o.dedup == "memory" {
			s.privateStore = true
			log.Warn("--dedup memory: duplicates are recognised within this process only; without a store shared by the servers of a realm (--dedup redis://...), a request replayed by a client that failed over from another server (Diameter, T flag) or an accounting record re-sent to this server (RADIUS) can be applied twice, there and here")
		}
	}
	metrics := newMetrics(o.status)
	metrics.CountDedupHitsFrom(s.dd.Duplicates.Load)
	s.exportStoreLost(metrics)
	s.exportUnseen(metrics)
	defer metrics.Watch(bus)() // watchdog states, transitions
	defer logPeerEvents(bus, log)()
	s.cfg = s.peerConfig(store, s.handle, bus)
	s.cfg.Transport = topts
	s.cfg.Handler = metrics.WrapHandler(s.cfg.Handler)
	if err := checkConfig(s.cfg); err != nil {
		fmt.Fprintf(stderr, "aaa-peer server: %v\n", err)
		return 2
	}

	ew, err := openEvents(peerLines(bus), o.events, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer server: %v\n", err)
		return 1
	}

	s.topts, s.store, s.bus, s.metrics = topts, store, bus, metrics
	s.listenOrder = append([]string(nil), o.listen...)
	var opened []*openedListener
	abandon := func() {
		for _, l := range opened {
			l.abandon()
		}
		ew.Close()
	}
	for _, u := range o.listen {
		l, err := s.openListener(u)
		if err != nil {
			log.Error("listen failed", "url", u, "err", err)
			abandon()
			return 1
		}
		opened = append(opened, l)
	}
	// Every metric is registered before the page is up: a scrape that
	// follows the page's log line or the --ready file sees them all.
	s.reloads.exportTo(metrics, s.started)
	web, err := openStatus(o.status, status.SourceFunc(func() status.Snapshot { return s.snapshot(s.boundURLs()) }), metrics, log)
	if err != nil {
		log.Error("status page", "err", err)
		abandon()
		return 1
	}
	for _, l := range opened {
		if err := s.serveListener(l); err != nil { // cannot happen: validated
			log.Error("server", "url", l.url, "err", err)
			return 1
		}
	}
	s.writeReady()

	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-hooks.reload:
			reload(s.log, "server", s.o.config, &s.reloads, func() ([]string, error) { return s.reloadConfig(base, set) })
		}
	}
	log.Info("shutting down", "cause", context.Cause(ctx))
	s.closePeers()
	if err := web.Close(); err != nil {
		log.Error("status page", "err", err)
	}

	code := 0
	if err := ew.Close(); err != nil {
		log.Error("writing events", "err", err)
		code = 1
	}
	if o.report != "" {
		if err := writeJSONFile(o.report, s.report(ew.Dropped()), stdout); err != nil {
			log.Error("writing report", "err", err)
			code = 1
		}
	}
	return code
}

// metricDedupLost counts the losses of the --dedup store's state.
const metricDedupLost = "aaatp_dedup_store_lost_total"

// storeLost reports that the --dedup store lost its entries (the store
// has logged it): counted, and an error event on bus.
func (s *server) storeLost(bus *peer.Bus) {
	s.dedupLost.Add(1)
	bus.Publish(context.Background(), peer.Event{Time: time.Now(), Peer: "dedup", Kind: peer.EventError,
		Reason: "the --dedup store lost its entries (Redis restarted empty, flushed or failed over): duplicates of requests answered before may be applied again"})
}

// exportStoreLost adds the count of storeLost to metrics (nil: none).
func (s *server) exportStoreLost(metrics *status.Metrics) {
	if reg := metrics.Registry(); reg != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: metricDedupLost,
			Help: "Times the --dedup store was found to have lost its entries (Redis restarted empty, flushed or failed over): duplicates of requests answered before may have been applied again.",
		}, func() float64 { return float64(s.dedupLost.Load()) }))
	}
}

// metricUnseen counts the requests with the T flag the --dedup store had
// never seen.
const metricUnseen = "aaatp_dedup_unseen_retransmissions_total"

// exportUnseen adds the count of requests with the T flag that the
// --dedup store had never seen to metrics (nil: none).
func (s *server) exportUnseen(metrics *status.Metrics) {
	if reg := metrics.Registry(); reg != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: metricUnseen,
			Help: "Diameter requests with the T flag (a client's replay after a failover) that the --dedup store had never seen, so they were applied here: with --dedup memory, the server the client failed over from may have applied them too. RADIUS has no T flag and is not counted.",
		}, func() float64 { return float64(s.dd.UnseenRetransmits.Load()) }))
	}
}

// noteUnseen logs, at a bounded rate, each request with the T flag that
// reaches apply when the --dedup store is this process's own: dedup.Wrap
// runs apply for a request the store had never seen, so if the client
// failed over from another server, that server may have applied it too.
func (s *server) noteUnseen(apply peer.Handler) peer.Handler {
	if !s.privateStore {
		return apply
	}
	return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		if wire.Flags(req)&wire.FlagRetransmit != 0 {
			args := []any{"command", message.CommandName(req), "end_to_end", wire.EndToEnd(req)}
			if p != nil {
				args = append(args, "peer", p.Name())
			}
			servecore.Log(s.log, slog.LevelWarn, servecore.KindUnseenReplay,
				"request with the T flag never seen by the --dedup memory store: applied here; if its client failed over from another server, it may have been applied there too (share a redis:// store)", args...)
		}
		return apply(ctx, p, req)
	}
}

// checkConfig catches what peer's validation would refuse in the parts of
// the Config that come from flags, naming the flag.
func checkConfig(cfg peer.Config) error {
	for _, g := range cfg.AllowHosts {
		if _, err := path.Match(g, ""); err != nil {
			return usagef("--allow %q: %v", g, err)
		}
	}
	for _, g := range cfg.AgentHosts {
		if _, err := path.Match(g, ""); err != nil {
			return usagef("--agent %q: %v", g, err)
		}
	}
	if _, err := watchdog.New(cfg.Watchdog); err != nil {
		return usagef("--tw: %v", err)
	}
	return nil
}

// start serves srv, keeping the last Stats of the peers that end and
// dropping their metric series.
func (s *server) start(srv *peer.Server, m *status.Metrics) {
	srv.OnPeerEnd = func(p *peer.Peer) {
		st := p.Stats()
		s.mu.Lock()
		s.ended.add(st)
		s.mu.Unlock()
		if !s.isLive(st.Peer, p) {
			m.ForgetPeer(st.Peer)
		}
	}
	s.lmu.Lock()
	s.srvs = append(s.srvs, srv)
	s.lmu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(); err != nil {
			s.log.Error("serve", "addr", srv.Addr().String(), "err", err)
		}
	}()
}

// wrap applies the fault knobs to an accepted connection.
func (s *server) wrap(tc transport.Conn) transport.Conn {
	if s.faults == nil {
		return tc
	}
	return s.faults.Wrap(tc, nil)
}

// live returns the peers connected now, over every listener.
func (s *server) live() []*peer.Peer {
	var ps []*peer.Peer
	for _, srv := range s.diameterServers() {
		ps = append(ps, srv.Peers()...)
	}
	return ps
}

// closePeers stops accepting and disconnects every peer (DPR/DPA),
// bounded by shutdownBudget, then waits for the Serve loops.
func (s *server) closePeers() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	var wg sync.WaitGroup
	for _, srv := range s.diameterServers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Disconnect(ctx, s.o.cause); err != nil {
				s.log.Debug("close", "addr", srv.Addr().String(), "err", err)
			}
		}()
	}
	s.closeRADIUS(ctx)
	wg.Wait()
	s.drains.Wait()
	s.wg.Wait()
}

// diameterServers returns the Diameter listeners' servers.
func (s *server) diameterServers() []*peer.Server {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return append([]*peer.Server(nil), s.srvs...)
}

// radiusReports returns the RADIUS listeners' counters.
func (s *server) radiusReports() []radiusListenerReport {
	s.lmu.Lock()
	rls := append([]*radiusListener(nil), s.rls...)
	out := append([]radiusListenerReport(nil), s.removedRADIUS...)
	s.lmu.Unlock()
	for _, rl := range rls {
		out = append(out, rl.report())
	}
	return out
}

func (s *server) report(dropped uint64) serverReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := status.DedupTotals(&s.dd)
	r := serverReport{
		Received: t.Received, Retransmitted: s.retransmitted.Load(),
		Applied: s.dd.Applied.Load() + s.dd.PassedThrough.Load(), PassedThrough: s.dd.PassedThrough.Load(),
		Answered: t.Answered, Duplicates: t.Duplicates, StoreErrors: s.dd.StoreErrs.Load(),
		Dropped: s.dd.Dropped.Load(), CommitUnknown: s.dd.CommitUnknown.Load(),
		Cancelled: s.dd.Cancelled.Load(), Superseded: s.dd.Superseded.Load(), TooLarge: s.dd.TooLarge.Load(), NotKept: s.dd.NotKept.Load(),
		DedupLost: s.dedupLost.Load(), UnseenReplays: s.dd.UnseenRetransmits.Load(),
		Dedup:         storeurl.Redacted(s.o.dedup),
		EventsDropped: dropped, Peers: s.ended.list(), PeersEnded: s.ended.total, PeersForgotten: s.ended.total - uint64(s.ended.len()),
	}
	for _, srv := range s.diameterServers() {
		st := srv.Stats()
		r.RefusedOverLimit += st.RefusedOverLimit
		r.EvictedUnadmitted += st.EvictedUnadmitted
	}
	r.RADIUS = append(r.RADIUS, s.radiusReports()...)
	r.LogEvents = servecore.Counts()
	for _, p := range s.live() { // none after a clean shutdown
		r.Peers = append(r.Peers, p.Stats())
	}
	return r
}

// isLive reports whether a peer other than p is connected under name.
func (s *server) isLive(name string, p *peer.Peer) bool {
	for _, q := range s.live() {
		if q != p && q.Name() == name {
			return true
		}
	}
	return false
}

// statusEnded is how many of the peers that ended the status page lists.
const statusEnded = 16

// snapshot is the server's status: its live peers (by name), then the
// last statusEnded peers that ended (latest first, one row per name not
// live), and its totals.
func (s *server) snapshot(bound []string) status.Snapshot {
	live := s.live()
	s.mu.Lock()
	var ended []peer.Stats
	for i := s.ended.len() - 1; i >= 0 && len(ended) < statusEnded; i-- {
		ended = append(ended, s.ended.at(i))
	}
	s.mu.Unlock()
	t := status.DedupTotals(&s.dd)
	t.Retransmitted = s.retransmitted.Load()
	info := map[string]string{"dedup": storeurl.Redacted(s.o.dedup), "tw": s.o.tw.String(), "applied": strconv.FormatUint(s.dd.Applied.Load()+s.dd.PassedThrough.Load(), 10)}
	if n := s.dd.Dropped.Load(); n > 0 { // not in the answered total
		info["dropped"] = strconv.FormatUint(n, 10)
	}
	var faults []string
	if s.o.answerDelay > 0 {
		faults = append(faults, "answer-delay "+s.o.answerDelay.String())
	}
	if s.o.dropDWA {
		faults = append(faults, "drop-dwa (Diameter listeners)")
	}
	if s.o.stallAfter > 0 {
		faults = append(faults, fmt.Sprintf("stall-after %d (Diameter listeners)", s.o.stallAfter))
	}
	if len(faults) > 0 {
		info["faults"] = strings.Join(faults, ", ")
	}
	peers := status.ServerPeers(live, ended)
	for _, r := range s.radiusReports() { // the NAS clients of the RADIUS listeners
		switch {
		case r.Stream != nil:
			peers = append(peers, status.NASRows(r.Stream.NAS)...)
		case r.UDP != nil:
			peers = append(peers, status.NASRows(r.UDP.NAS)...)
		}
	}
	return status.Snapshot{
		Role: status.RoleServer, Peers: peers, Totals: t,
		Identity: status.Identity{OriginHost: s.o.originHost, OriginRealm: s.o.originRealm, Listen: bound, Started: s.started, Info: info},
	}
}

// countT counts the requests that carry the T flag, then calls h.
func (s *server) countT(h peer.Handler) peer.Handler {
	return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		if wire.Flags(req)&wire.FlagRetransmit != 0 {
			s.retransmitted.Add(1)
		}
		return h(ctx, p, req)
	}
}

// probeStore checks that st answers (a Redis server may be unreachable):
// it begins and abandons a request under a key no client can produce.
func probeStore(ctx context.Context, st dedup.Store) error {
	ctx, cancel := context.WithTimeout(ctx, shutdownBudget)
	defer cancel()
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	o, err := st.Begin(ctx, dedup.RequestKey("aaa-peer.probe.invalid", binary.BigEndian.Uint32(nonce[:])))
	if err != nil {
		return err
	}
	return o.Abandon()
}

// handle answers one application request: the --dedup wrapper calls it
// once per request key.
func (s *server) handle(ctx context.Context, _ *peer.Peer, req []byte) []byte {
	if d := s.o.answerDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil // the connection is gone
		}
	}
	return s.answer(req)
}

func (s *server) answer(req []byte) []byte {
	app, cmd := wire.AppID(req), wire.CommandCode(req)
	me := message.Identity{Host: s.o.originHost, Realm: s.o.originRealm}
	switch {
	case app == message.AppAccounting && cmd == message.CmdAccounting:
		return message.SuccessAnswer(req, me, message.AVPID{Code: message.AccountingRecordType}, message.AVPID{Code: message.AccountingRecordNumber})
	case app == message.AppTest && cmd == message.CmdTest:
		return message.SuccessAnswer(req, me, message.AVPID{Code: message.AVPTestValue, Vendor: message.VendorTest})
	}
	return message.ErrorAnswer(req, me, message.CommandUnsupported, fmt.Sprintf("command %d of application %d is not supported", cmd, app)).Bytes()
}

// peerConfig is the server's peer.Config, the one place it is built for
// both the server command and the demo's servers: the accounting and test
// applications, the options' identity, Tw and peer limits, s.log, and a handler that
// applies each request once through store (dedup) and counts T-flagged
// requests, with apply doing the work.
func (s *server) peerConfig(store dedup.Store, apply peer.Handler, bus *peer.Bus) peer.Config {
	return peer.Config{
		OriginHost: s.o.originHost, OriginRealm: s.o.originRealm,
		AcctApps:   []uint32{message.AppAccounting},
		VendorApps: []peer.VendorApp{{VendorID: message.VendorTest, AuthAppID: message.AppTest}},
		Watchdog:   watchdog.Config{Twinit: s.o.tw},
		AllowHosts: s.o.allow,
		AgentHosts: s.o.agents,
		Handler:    s.countT(dedup.Wrap(store, s.noteUnseen(apply), &s.dd, dedup.LogStoreErrors(s.storeErrs))),
		Events:     bus,
		Logger:     s.log,
		DPATimeout: shutdownBudget,

		MaxUnanswered:     s.o.maxUnanswered,
		MaxHandlers:       s.o.maxHandlers,
		MaxQueuedHandlers: s.o.maxQueued,
		InlineHandlerTime: s.o.inlineTime,
		CEATimeout:        s.o.cerTimeout,
	}
}
