package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/status"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

const radiusClientSynopsis = `usage: aaa-peer client --peer radius://HOST:PORT [--peer ...] [--acct-peer radius://HOST:PORT ...]
       aaa-peer client --peer radius+tcp://HOST:PORT|radsec://HOST[:PORT] [--peer ...] [--tw 30s]
       [--max-conns 1] [--request-timeout D] [--tls-ca F --tls-cert F --tls-key F] [--weight URL=N ...]
       [--secret-file FILE] [--app auth|acct|status] [--mode balance|failover]
       [--algorithm direct|round-robin|hash|pearson] [--wait-peers N] [--connect-timeout 10s]
       [--require-message-authenticator auto|always|never]
       [--timeout 3s] [--retries 3] [--down-timeout D] [--hold-down 30s]
       [--test-user NAME --test-password PW | --status-server] [--keepalive D]
       [--max-rate N] [--max-rate-acct N] [--max-outstanding N] [--slot 50ms]
       [--queue-alarm HIGH,LOW] [--rate N] [--concurrency N] [--requests N | --duration D]
       [--nai FORMAT] [--events FILE] [--report FILE] [--status ADDR] [--log-level info]
       [--log-format text|json] [--no-delay] [--cpuprofile FILE] [--config FILE]

Every transport goes through package client, the path Diameter requests
take. As the Diameter client does, it waits for --wait-peers servers in
service (a connection OKAY; a UDP server at once), at most
--connect-timeout, before sending. RADIUS over UDP (radius://): each request is sent
up to --retries times, --timeout apart, byte for byte, to the server the
access algorithm gives (direct: the in-service server of lowest --peer
index; hash: of User-Name), then to the next server in service, each at
most once. The Nokia 7750 SR server states decide which servers are in
service (down-timeout, default timeout x retries, reset by any reply;
--hold-down; one probe, never retried: the test user's Access-Request,
Status-Server with --status-server, else one real request). The Cisco ASR5K
throttle limits each server, each class apart (--max-rate; --max-rate-acct
where accounting's differs). --acct-peer, given once per --peer in the
same order, is where that server's Accounting-Requests go (its accounting
port). The shared secret comes from --secret-file or $AAATP_RADIUS_SECRET.

Every reply to an Access-Request must carry a valid Message-Authenticator
(BlastRADIUS); one without is dropped and counted, and its request fails
(no_ma in the report). --require-message-authenticator always requires
one in replies to Status-Server too; never requires none, for servers
that sign no reply (FreeRADIUS before 3.2.5): their replies can be forged.

Over TCP (radius+tcp://, RFC 6613) and TLS (radsec://, RFC 6614, mutual
certificates from --tls-ca, --tls-cert, --tls-key; secret "radsec") the
same path runs with the RFC 3539 watchdog on every connection, Status-Server
every --tw: no retransmission; when a connection goes SUSPECT or drops,
its pending requests go to another server in service, re-signed with a new
Identifier, never to the same connection nor another connection of that
server while it is OKAY; with none in service they wait until their
--request-timeout (default: two Tw plus 10s). Each server may open
--max-conns connections of 255 requests each; --max-outstanding is at most
255 x --max-conns (over UDP 1024: four sockets of 256). --weight sets a server's share of the pearson table.
The load is open loop: request n leaves at start + n/--rate whatever the
earlier ones are doing, and its latency (latency_us in the report) is
measured from that intended time, not from when it left (against
coordinated omission, as wrk2 does). --concurrency bounds the requests in
flight: a request whose time comes while that many are in flight is not
sent, counted (dropped_in_flight) and logged (a warning, at most once a
second). With --rate 0 the load is closed loop, as the Diameter client's:
--concurrency callers, each sending its next request when its last is
done. Whenever requests sent to a server are outstanding and none has
been answered for N seconds, a warning says "no answer for Ns from
SERVER" (once a second).
Prints one progress line a second (on stderr while the report or the
events go to stdout), then the report (JSON), the Diameter client's
document: each server's state and counters, and each peer's under
"stream" or "udp". An answer is any reply, an Access-Reject included
(counted apart as rejected). Exit 1 when no request reached a server, 2
on a usage error, 3 when more than --max-failed of the requests failed
(by default any), else 0.
`

// radiusClientOptions are the RADIUS client's: those of both clients
// and its own.
type radiusClientOptions struct {
	loadOptions
	// base and set are the command line's options alone and the flags
	// given there: a reload applies --config over them.
	base *radiusClientOptions
	set  map[string]bool

	acctPeers      stringList
	secretFile     string
	secret         []byte        // the run's shared secret: see sharedSecret
	timeout        time.Duration // each attempt's
	retries        int
	testPassword   string
	statusServer   bool
	requireMA      radpeer.MessageAuthenticatorMode
	stream         bool // radius+tcp:// and radsec://
	requestTimeout time.Duration
	maxConns       int
	noDelay        bool   // stream: Nagle off
	cpuProfile     string // --cpuprofile
}

// radiusClientFlags returns the flags of the RADIUS client, set into o.
func radiusClientFlags(o *radiusClientOptions, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("client", radiusClientSynopsis+"\n"+clientReloadHelp, stderr)
	fs.Var(&o.peers, "peer", "`URL` of a RADIUS server, radius://host:port, radius+tcp://host:port or radsec://host[:port], in index order (repeat; one transport kind)")
	configFlag(fs, &o.config)
	fs.Var(&o.acctPeers, "acct-peer", "`URL`: the accounting address of each --peer, in the same order (repeat; default: the --peer address)")
	radiusFlags(fs, &o.secretFile)
	fs.StringVar(&o.app, "app", "auth", "`APP` to send: auth (Access-Request), acct (Accounting-Request Stop), status (Status-Server)")
	fs.StringVar(&o.algorithm, "algorithm", "direct", "access algorithm `ALG`: direct, round-robin, hash or pearson")
	fs.TextVar(&o.requireMA, "require-message-authenticator", radpeer.RequireMAAuto, "which replies must carry a Message-Authenticator (BlastRADIUS): `MODE` auto (every reply to an Access-Request), always (replies to Status-Server too) or never (servers that sign no reply, such as FreeRADIUS before 3.2.5)")
	fs.DurationVar(&o.timeout, "timeout", radpeer.DefaultUDPTimeout, "wait `D` for a reply to each attempt, as radclient's -t (over TCP and TLS, with --retries, the down-timeout's default); a request's deadline is --request-timeout, in both clients")
	fs.IntVar(&o.retries, "retries", radpeer.DefaultUDPRetries, "`N` attempts per request and server (UDP)")
	fs.DurationVar(&o.downTimeout, "down-timeout", 0, "no reply for `D` while sending puts a server out of service; over TCP and TLS the requests pending there go to another server then (over UDP each goes on once its retries are spent) (default timeout x retries)")
	fs.DurationVar(&o.holdDown, "hold-down", policy.DefaultHoldDown, "an out-of-service server gets nothing for `D`")
	fs.StringVar(&o.testUser, "test-user", "", "`NAI`: User-Name of the test user that probes (and with --keepalive keeps alive) servers")
	fs.StringVar(&o.testPassword, "test-password", "", "`PW`: the test user's User-Password (a test account's, not the shared secret)")
	fs.BoolVar(&o.statusServer, "status-server", false, "probe and keep alive with Status-Server (RFC 5997) instead of a test user")
	fs.DurationVar(&o.keepAlive, "keepalive", 0, "send the test message to each server every `D` (needs --test-user or --status-server)")
	fs.IntVar(&o.maxRate, "max-rate", 0, "throttle: at most `N` requests per second of each class (Accounting-Requests, the others) to each server, spread evenly over --slot slots (0: no rate limit)")
	fs.IntVar(&o.maxOutstanding, "max-outstanding", 0, "throttle: at most `N` requests of each class awaiting a reply per server, up to the server's Identifiers: 255 a connection over TCP and TLS (--max-conns), 256 a socket over UDP (default 256, or those)")
	fs.Float64Var(&o.rate, "rate", 100, "`N` requests per second, open loop: each request leaves at its intended time (start + n/N) whatever the earlier ones are doing, and its latency is measured from that time, not from when it left (against coordinated omission, as wrk2); may be fractional (0: closed loop, --concurrency callers as fast as they go)")
	fs.IntVar(&o.concurrency, "concurrency", 256, "in-flight bound `N`, 1 to 100000: at most N requests in flight; with --rate, a request whose time comes while N are in flight is not sent (dropped_in_flight in the report, a warning at most once a second); with --rate 0, N callers (no more than --requests) each sending its next request when its last is done")
	fs.Int64Var(&o.requests, "requests", 0, "stop after `N` requests sent (those not sent at the in-flight bound do not count; 0: no limit)")
	fs.DurationVar(&o.duration, "duration", 0, "stop issuing requests after `D` (0: no limit); with --requests, whichever comes first; with neither, 10s")
	fs.StringVar(&o.report, "report", "-", "write the JSON report to `FILE` (- is stdout)")
	statusFlag(fs, &o.status, "logged at info")
	logFlags(fs, &o.logLevel, &o.logFormat, "info")
	fs.DurationVar(&o.tw, "tw", watchdog.DefaultTwinit, "stream: watchdog interval Twinit `D` of every connection (at least 6s)")
	fs.IntVar(&o.maxConns, "max-conns", 1, "stream: `N` connections per server, 255 requests each, opened as needed")
	fs.DurationVar(&o.requestTimeout, "request-timeout", 0, "a request's deadline `D`, any failover and throttle queue included (0: over a stream two Tw plus 10s; over UDP every server's attempts, plus 10s)")
	fs.BoolVar(&o.noDelay, "no-delay", false, "stream: disable Nagle on TCP and TLS sockets")
	cpuProfileFlag(fs, &o.cpuProfile)
	fs.StringVar(&o.tlsCA, "tls-ca", "", "radsec: PEM CA `FILE` the servers' certificates must chain to")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "radsec: PEM client certificate `FILE` (RFC 6614: mutual)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "radsec: PEM private key `FILE` of --tls-cert")
	loadFlags(fs, &o.loadOptions)
	return fs
}

func runRadiusClient(ctx context.Context, args []string, stdout, stderr io.Writer, hup <-chan os.Signal) int {
	var o radiusClientOptions
	fs := radiusClientFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	base, set := o, setFlags(fs) // the command line's alone: a reload starts from them
	o.base, o.set = &base, set
	cfg, err := loadConfig(o.config, stderr)
	if err != nil {
		return 2
	}
	if o.secrets, err = o.applyConfig(cfg, set); err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	o.startOnPrimary(set)
	// The log and the progress lines share stderr from two goroutines.
	stderr = &lockedWriter{w: stderr}
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	for _, u := range append(radiusUnused(cfg), clientUnused(cfg, o.peers, set)...) {
		log.Warn("--config: the client does not use this part of the file", "file", o.config, "ignored", u)
	}
	if o.secret, err = o.sharedSecret(); err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	return o.run(ctx, o.secret, log, stdout, stderr, hup)
}

// sharedSecret is the secret of the servers without one of their own
// (o.secrets): --secret-file's content, else $AAATP_RADIUS_SECRET; nil
// when every server has its own, or uses "radsec" (RFC 6614 2.3). A
// reload reads it again: the file's content may have changed.
func (o *radiusClientOptions) sharedSecret() ([]byte, error) {
	if o.radsec() || !slices.ContainsFunc(o.peers, func(u string) bool { return o.secrets[u] == nil }) {
		return nil, nil
	}
	return readSecret(o.secretFile)
}

// identifiers is how many requests a server can have in flight: one per
// Identifier of its connections, or of the Client's UDP sockets to it.
func (o *radiusClientOptions) identifiers() int {
	if o.stream {
		return radpeer.IDsPerConn * o.maxConns
	}
	return radpeer.IDsPerSocket * radpeer.DefaultUDPSockets
}

// radsec reports whether the peers are radsec:// (validated: all alike).
func (o *radiusClientOptions) radsec() bool {
	ep, err := radpeer.ParseURL(o.peers[0])
	return err == nil && ep.Scheme == radpeer.SchemeRadSec
}

func (o *radiusClientOptions) validate() error {
	if len(o.peers) == 0 {
		return usagef("at least one --peer is required")
	}
	first, _, _ := strings.Cut(strings.ToLower(o.peers[0]), "://")
	o.stream = first != radpeer.SchemeUDP
	for i, p := range append(append(stringList{}, o.peers...), o.acctPeers...) {
		name := "peer"
		if i >= len(o.peers) {
			name = "acct-peer"
		}
		if err := checkPeerAddr(name, p); err != nil {
			return err
		}
		// One run, one transport: say so before a parse of the first's
		// transport finds the URL wrong for its own reasons.
		if scheme, _, _ := strings.Cut(strings.ToLower(p), "://"); scheme != first {
			return usagef("--%s %s: every --peer and --acct-peer must have the scheme of the first --peer, %s:// (one run, one transport)", name, p, first)
		}
		var err error
		if o.stream {
			_, err = radpeer.ParseURL(p)
		} else {
			_, err = radpeer.ParseUDPURL(p)
		}
		if err != nil {
			return usagef("--%s %s: %v", name, p, err)
		}
	}
	if o.stream {
		switch {
		case len(o.acctPeers) > 0:
			return usagef("--acct-peer is for radius:// (UDP); a TCP or TLS connection carries every code")
		case o.tw < watchdog.MinTwinit:
			return usagef("--tw %v is below the RFC 3539 minimum of %v", o.tw, watchdog.MinTwinit)
		case o.maxConns < 1 || o.maxConns > radpeer.MaxConnsLimit:
			return usagef("--max-conns %d: want 1..%d", o.maxConns, radpeer.MaxConnsLimit)
		case (o.tlsCert == "") != (o.tlsKey == ""):
			return usagef("--tls-cert and --tls-key go together")
		}
	} else {
		// Given on the command line for UDP, these would be taken and do
		// nothing: there is no connection, and no watchdog.
		for _, f := range []string{"tw", "max-conns", "no-delay", "tls-ca", "tls-cert", "tls-key"} {
			if o.set[f] {
				return usagef("--%s is for radius+tcp:// and radsec:// servers; over radius:// (UDP) there is no connection: each request is sent up to --retries times, --timeout apart", f)
			}
		}
	}
	most := o.identifiers()
	if o.maxOutstanding > most {
		return usagef("--max-outstanding %d: a server takes at most %d requests in flight here, one per Identifier (raise --max-conns over TCP and TLS)", o.maxOutstanding, most)
	}
	for _, u := range o.peers { // a --config server's own, in --peer order
		if l := o.own[u].limits; l != nil && l.MaxOutstanding > most {
			return usagef("--config: server %s: max-outstanding %d: a server takes at most %d requests in flight here, one per Identifier (raise max-conns over TCP and TLS)", cmp.Or(o.names[u], u), l.MaxOutstanding, most)
		}
	}
	if o.requestTimeout < 0 { // every transport's: 0 is the default
		return usagef("--request-timeout must not be negative")
	}
	if len(o.acctPeers) != 0 && len(o.acctPeers) != len(o.peers) {
		return usagef("give one --acct-peer per --peer, or none")
	}
	switch o.app {
	case "auth", "acct", "status":
	default:
		return usagef("--app %q: want auth, acct or status", o.app)
	}
	switch {
	case o.timeout <= 0:
		return usagef("--timeout %v: must be positive (each attempt's wait for a reply)", o.timeout)
	case o.retries < 1:
		return usagef("--retries %d: must be at least 1", o.retries)
	case o.holdDown <= 0:
		return usagef("--hold-down %v: must be positive", o.holdDown)
	case o.downTimeout < 0:
		return usagef("--down-timeout %v: must not be negative", o.downTimeout)
	case o.testUser != "" && o.statusServer:
		return usagef("--test-user and --status-server are two kinds of probe: choose one")
	case o.keepAlive > 0 && o.testUser == "" && !o.statusServer:
		return usagef("--keepalive needs --test-user or --status-server")
	}
	if err := o.check(); err != nil {
		return err
	}
	if o.requests == 0 && o.duration == 0 {
		o.duration = defaultRADIUSDuration
	}
	return nil
}

func (o *radiusClientOptions) request(n int64) *radius.Request {
	user := lradius.Attribute(message.UserNameOf(o.nai, n))
	var r *radius.Request
	switch o.app {
	case "status":
		return &radius.Request{Code: lradius.CodeStatusServer}
	case "acct":
		r = &radius.Request{Code: lradius.CodeAccountingRequest}
		r.Attributes.Add(radius.AttrUserName, user)
		r.Attributes.Add(radius.AttrNASIdentifier, lradius.Attribute(nasIdentifier))
		r.Attributes.Add(radius.AttrAcctSessionID, lradius.Attribute(fmt.Sprintf("aaa-peer-%d-%d", time.Now().UnixNano(), n)))
		r.Attributes.Add(radius.AttrAcctStatusType, lradius.Attribute([]byte{0, 0, 0, 2}))
		ts := make([]byte, 4)
		binary.BigEndian.PutUint32(ts, uint32(time.Now().Unix()))
		r.Attributes.Add(radius.AttrEventTimestamp, lradius.Attribute(ts))
	default:
		r = &radius.Request{Code: lradius.CodeAccessRequest}
		r.Attributes.Add(radius.AttrUserName, user)
		r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("aaa-peer"))
		r.Attributes.Add(radius.AttrNASIdentifier, lradius.Attribute(nasIdentifier)) // RFC 2865 4.1: NAS-IP-Address or NAS-Identifier
	}
	return r
}

// defaultRADIUSDuration is the RADIUS client's run without --requests or
// --duration (the Diameter client's is 10 requests).
const defaultRADIUSDuration = 10 * time.Second

// nasIdentifier is the RADIUS client's NAS-Identifier: what names it to
// its servers, and in aaatp_node_info, as a RADIUS node has no Origin-Host.
const nasIdentifier = "aaa-peer"

func (o *radiusClientOptions) run(ctx context.Context, secret []byte, log *slog.Logger, stdout, stderr io.Writer, hup <-chan os.Signal) int {
	events := client.NewBus()
	defer logClientEvents(events, log)()
	protocol := "RADIUS/UDP"
	if o.stream {
		protocol = "RADIUS/TCP"
		if o.radsec() {
			protocol = "RADIUS/TLS"
		}
	}
	if err := checkReport(o.report); err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 1
	}
	ew, err := openEvents(clientLines(events), o.events, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 1
	}
	cfg, err := o.clientConfig(secret, events, log)
	if err != nil {
		ew.Close()
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	metrics := newMetrics(o.status)
	defer metrics.WatchClient(events)()
	g := newLoadgen(&o.loadOptions, o.requestTimeout, strings.ToLower(protocol), &radiusRequests{o: o, protocol: protocol}, log, metrics)
	var cancelOpens func()
	g.opens, cancelOpens = watchOpenFailures(events, cfg.Peers)
	defer cancelOpens()
	if g.cl, err = client.New(cfg); err != nil {
		ew.Close()
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 2
	}
	g.peersEver() // the first peers, before a reload may remove them
	stopProfile, err := startCPUProfile(o.cpuProfile, log)
	if err != nil {
		g.closeClient()
		ew.Close()
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 1
	}
	defer stopProfile()
	defer watchReload(hup, log, o.config, o.set["peer"], metrics, func(cfg *config.Config) ([]string, error) {
		g.peersEver() // those about to be removed keep their counts in the report
		return o.reloadPeers(cfg, g.cl, metrics)
	})()
	web, err := openStatus(o.status, status.SourceFunc(g.clientSnapshot), metrics, log)
	if err != nil {
		g.closeClient()
		ew.Close()
		fmt.Fprintf(stderr, "aaa-peer client: %v\n", err)
		return 1
	}
	code := 0
	began := time.Now()
	if err := g.waitUp(ctx, o.waitPeers, o.connectTimeout); err != nil {
		log.Error("no server in service", "err", err)
		code = 1
	} else {
		g.run(ctx, progressWriter(&o.loadOptions, stdout, stderr))
	}
	elapsed := time.Since(began) // the run, not the disconnect
	if err := web.Close(); err != nil {
		log.Error("status page", "err", err)
	}
	return g.finish(code, elapsed, ew, stdout)
}

// radiusRequests are the RADIUS client's requests: Access-Requests,
// Accounting-Requests or Status-Server.
type radiusRequests struct {
	o        *radiusClientOptions
	protocol string // RADIUS/UDP, RADIUS/TCP or RADIUS/TLS
}

// exchange sends request n; any reply is an answer, an Access-Reject
// among them.
func (r *radiusRequests) exchange(ctx context.Context, cl *client.Client, n int64) (string, bool, error) {
	resp, err := cl.Exchange(ctx, r.o.request(n))
	if err != nil {
		return "", false, err
	}
	return "", resp.Packet.Code == lradius.CodeAccessReject, nil
}

// identity is the status page's: a RADIUS client has no Origin-Host, so
// its NAS-Identifier.
func (r *radiusRequests) identity() status.Identity {
	info := map[string]string{"protocol": r.protocol, "mode": r.o.clientMode.String()}
	if r.o.clientMode == client.Balance {
		info["access"] = r.o.alg.String()
	}
	return status.Identity{NASIdentifier: nasIdentifier, Info: info}
}

// lockedWriter serialises the writes of several goroutines to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
