// Package interop runs package peer against a Diameter implementation
// nobody here wrote: Debian's freeDiameter (packages freediameterd and
// freediameter-extensions, binary freeDiameterd), started as a subprocess
// on loopback with a throwaway configuration.
//
// Without freeDiameterd on PATH the tests skip, unless CI=true, where they
// fail: CI must not silently lose its interop coverage.
package interop

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// TestMain raises -parallel to 3 unless it was given: the three tests
// spend nearly all their time waiting for watchdog timers, and with the
// default (GOMAXPROCS, often 2 on CI machines) the third would wait for
// the others and the package would take about a minute instead of 30 s.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if f := flag.Lookup("test.parallel"); f != nil && !explicit {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < 3 {
			_ = flag.Set("test.parallel", "3")
		}
	}
	goleak.VerifyTestMain(m)
}

const (
	fdBinary = "freeDiameterd"
	fdRealm  = "example.org" // freeDiameter's realm
	ourRealm = "example.net" // ours; acl_wl admits *.example.net

	// stay is how long each test watches an established connection: with
	// Tw drawn in [4 s, 8 s] (6 s +- 2 s, ours and freeDiameter's alike)
	// the side driving the watchdog sends at least two DWRs in it.
	stay = 20 * time.Second
)

// extension finds a freeDiameter extension next to the usual Debian path.
func extension(t *testing.T, name string) string {
	t.Helper()
	for _, dir := range []string{"/usr/lib/freeDiameter", "/usr/lib/x86_64-linux-gnu/freeDiameter", "/usr/local/lib/freeDiameter"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	matches, _ := filepath.Glob("/usr/lib/*/freeDiameter/" + name)
	if len(matches) > 0 {
		return matches[0]
	}
	unavailable(t, "freeDiameter extension "+name+" not found (install freediameter-extensions)")
	return ""
}

// unavailable skips, or fails under CI=true.
func unavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; CI=true, so interop must not be skipped", why)
	}
	t.Skip(why)
}

// freeDiameterPath returns freeDiameterd's path, or skips/fails.
func freeDiameterPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath(fdBinary)
	if err != nil {
		unavailable(t, fdBinary+" not on PATH (apt-get install freediameterd freediameter-extensions)")
	}
	return p
}

// freePort returns a TCP port free on every IPv4 address: freeDiameter
// 1.2.1 ignores ListenOn and binds 0.0.0.0.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatalf("picking a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// fdOptions is what varies between the tests' freeDiameter configurations.
type fdOptions struct {
	Identity string // freeDiameter's Diameter identity (in fdRealm)
	Port     int    // where it listens (TCP, clear text)
	TwTimer  int    // seconds; 6 is the RFC 3539 minimum it accepts
	// ConnectPeer, when set, makes freeDiameter dial our server at
	// 127.0.0.1:ConnectPort; it must be the Origin-Host our CEA carries.
	ConnectPeer string
	ConnectPort int
	// Dumps loads dbg_msg_dumps.fdx: every message sent and received is
	// logged (handy when a test fails; on by default here).
	Dumps bool
}

// writeFDConfig writes freeDiameter's configuration and its acl_wl
// whitelist into dir and returns the configuration's path. freeDiameter
// 1.2.1 needs no certificate when SecPort = 0 and every peer is No_TLS.
func writeFDConfig(t *testing.T, dir string, o fdOptions) string {
	t.Helper()
	wl := filepath.Join(dir, "acl_wl.conf")
	// ALLOW_IPSEC admits clear-text CERs; each entry needs a dot.
	if err := os.WriteFile(wl, []byte("ALLOW_IPSEC *."+ourRealm+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Identity = %q;\n", o.Identity)
	fmt.Fprintf(&b, "Realm = %q;\n", fdRealm)
	fmt.Fprintf(&b, "Port = %d;\n", o.Port)
	b.WriteString("SecPort = 0;\n")
	b.WriteString("No_SCTP;\n")
	b.WriteString("No_IPv6;\n")
	fmt.Fprintf(&b, "TwTimer = %d;\n", o.TwTimer)
	b.WriteString("TcTimer = 2;\n")
	b.WriteString("ListenOn = \"127.0.0.1\";\n") // ignored by 1.2.1, which binds 0.0.0.0
	fmt.Fprintf(&b, "LoadExtension = %q : %q;\n", extension(t, "acl_wl.fdx"), wl)
	if o.Dumps {
		fmt.Fprintf(&b, "LoadExtension = %q;\n", extension(t, "dbg_msg_dumps.fdx"))
	}
	if o.ConnectPeer != "" {
		fmt.Fprintf(&b, "ConnectPeer = %q { ConnectTo = \"127.0.0.1\"; Port = %d; No_TLS; No_SCTP; };\n", o.ConnectPeer, o.ConnectPort)
	}
	path := filepath.Join(dir, "freeDiameter.conf")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// freeDiameter is one running freeDiameterd.
type freeDiameter struct {
	opts    fdOptions
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has been reaped
	waitErr error         // valid after exited
}

// startFreeDiameter writes a configuration, starts freeDiameterd in its own
// process group with its output in a file, and waits until it listens on
// 127.0.0.1:o.Port. The process (group) is killed on cleanup and its log
// is attached to the test output when the test failed.
func startFreeDiameter(t *testing.T, o fdOptions) *freeDiameter {
	t.Helper()
	bin := freeDiameterPath(t)
	dir := t.TempDir()
	conf := writeFDConfig(t, dir, o)
	fd := &freeDiameter{opts: o, logPath: filepath.Join(dir, "freeDiameterd.log"), exited: make(chan struct{})}
	logf, err := os.Create(fd.logPath)
	if err != nil {
		t.Fatal(err)
	}
	// The deadline is a backstop for a hung test; cleanup kills it first.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, bin, "-c", conf)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf // *os.File: no copying goroutines
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		logf.Close()
		t.Fatalf("starting %s: %v", bin, err)
	}
	fd.cmd = cmd
	go func() {
		fd.waitErr = cmd.Wait()
		logf.Close()
		close(fd.exited)
	}()
	t.Cleanup(func() {
		fd.stop(t)
		cancel()
		if t.Failed() {
			t.Logf("freeDiameterd output (%s):\n%s", fd.logPath, fd.log())
		}
		// INTEROP_LOGDIR keeps every freeDiameter log (CI artifacts).
		if dir := os.Getenv("INTEROP_LOGDIR"); dir != "" {
			name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + ".freeDiameterd.log"
			if err := os.MkdirAll(dir, 0o755); err == nil {
				_ = os.WriteFile(filepath.Join(dir, name), []byte(fd.log()), 0o644)
			}
		}
	})
	fd.waitListening(t, 10*time.Second)
	return fd
}

// stop asks freeDiameter to shut down (SIGTERM: it sends DPR to its open
// peers), then kills the whole process group if it lingers.
func (fd *freeDiameter) stop(t *testing.T) {
	pgid := fd.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-fd.exited:
	case <-time.After(5 * time.Second):
		t.Logf("freeDiameterd still running 5 s after SIGTERM: killing its process group")
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-fd.exited
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // anything it may have forked
}

func (fd *freeDiameter) log() string {
	b, err := os.ReadFile(fd.logPath)
	if err != nil {
		return "(log unreadable: " + err.Error() + ")"
	}
	return string(b)
}

func (fd *freeDiameter) running() bool {
	select {
	case <-fd.exited:
		return false
	default:
		return true
	}
}

// waitListening polls 127.0.0.1:Port until freeDiameter accepts or the
// bound passes. Only ever connect to it on loopback.
func (fd *freeDiameter) waitListening(t *testing.T, bound time.Duration) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", fd.opts.Port)
	deadline := time.Now().Add(bound)
	for {
		if !fd.running() {
			t.Fatalf("freeDiameterd exited before listening on %s (%v)", addr, fd.waitErr)
		}
		c, err := net.DialTimeout("tcp4", addr, 250*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("freeDiameterd not listening on %s within %v: %v", addr, bound, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stateLine matches freeDiameter's peer state changes, e.g.
// 'STATE_WAITCEA' -> 'STATE_OPEN'.
// The separator is a tab then "-> ".
var stateLine = regexp.MustCompile(`'(STATE_[A-Z_]+)'\s*->\s*'(STATE_[A-Z_]+)'`)

// transitions lists the state changes freeDiameter logged, "FROM->TO".
func (fd *freeDiameter) transitions() []string {
	var out []string
	for _, m := range stateLine.FindAllStringSubmatch(fd.log(), -1) {
		out = append(out, m[1]+"->"+m[2])
	}
	return out
}

// waitLog waits until freeDiameter's log matches re, up to bound.
func (fd *freeDiameter) waitLog(re *regexp.Regexp, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for {
		if re.MatchString(fd.log()) {
			return true
		}
		if time.Now().After(deadline) || !fd.running() {
			return re.MatchString(fd.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// assertStayedOpen checks that freeDiameter reached STATE_OPEN and never
// left it.
func (fd *freeDiameter) assertStayedOpen(t *testing.T) {
	t.Helper()
	tr := fd.transitions()
	opened := false
	for _, s := range tr {
		if strings.HasSuffix(s, "->STATE_OPEN") {
			opened = true
		}
		if strings.HasPrefix(s, "STATE_OPEN->") {
			t.Errorf("freeDiameter left STATE_OPEN while we were connected: %s (all: %v)", s, tr)
		}
	}
	if !opened {
		t.Errorf("freeDiameter never logged a transition to STATE_OPEN (transitions: %v)", tr)
	}
}

// fdMsg is one message in freeDiameter's dbg_msg_dumps output.
type fdMsg struct {
	Dir      string // "RCV" or "SND", from freeDiameter's side
	Peer     string // '<unknown peer>' for a CER before the exchange
	Name     string // e.g. "Device-Watchdog-Request"
	Request  bool
	HopByHop uint32
	EndToEnd uint32
}

var (
	dumpStart = regexp.MustCompile(`\b(RCV from|SND to) '([^']*)':\s*$`)
	dumpName  = regexp.MustCompile(`^\S+\s+\S+\s+'([A-Za-z-]+)'\s*$`)
	dumpFlags = regexp.MustCompile(`Flags: 0x([0-9A-Fa-f]{2})`)
	dumpHbH   = regexp.MustCompile(`Hop-by-Hop Identifier: 0x([0-9A-Fa-f]{8})`)
	dumpE2E   = regexp.MustCompile(`End-to-End Identifier: 0x([0-9A-Fa-f]{8})`)
)

// messages parses the message dumps in freeDiameter's log.
func (fd *freeDiameter) messages() []fdMsg {
	var out []fdMsg
	var cur *fdMsg
	for _, line := range strings.Split(fd.log(), "\n") {
		if m := dumpStart.FindStringSubmatch(line); m != nil {
			cur = &fdMsg{Dir: strings.Fields(m[1])[0], Peer: m[2]}
			continue
		}
		if cur == nil {
			continue
		}
		if m := dumpName.FindStringSubmatch(line); m != nil && cur.Name == "" {
			cur.Name = m[1]
		} else if m := dumpFlags.FindStringSubmatch(line); m != nil {
			f, _ := strconv.ParseUint(m[1], 16, 8)
			cur.Request = f&0x80 != 0
		} else if m := dumpHbH.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseUint(m[1], 16, 32)
			cur.HopByHop = uint32(v)
		} else if m := dumpE2E.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseUint(m[1], 16, 32)
			cur.EndToEnd = uint32(v)
			out = append(out, *cur)
			cur = nil
		}
	}
	return out
}

// assertOurRequestIDs checks the End-to-End ids of the requests
// freeDiameter received from us (CER, DWR, DPR, ACR...): RFC 6733 section
// 3, "The originator of a request MUST insert a unique identifier on every
// message", locally unique for at least 4 minutes.
func (fd *freeDiameter) assertOurRequestIDs(t *testing.T, ourHost string) {
	t.Helper()
	e2e := map[uint32][]string{}
	hbh := map[uint32][]string{}
	n := 0
	for _, m := range fd.messages() {
		if m.Dir != "RCV" || !m.Request || (m.Peer != ourHost && m.Peer != "<unknown peer>") {
			continue
		}
		n++
		e2e[m.EndToEnd] = append(e2e[m.EndToEnd], m.Name)
		hbh[m.HopByHop] = append(hbh[m.HopByHop], m.Name)
	}
	if n == 0 {
		t.Errorf("no request from %s in freeDiameter's message dumps", ourHost)
	}
	for id, names := range e2e {
		if len(names) > 1 {
			t.Errorf("%d of our %d requests share End-to-End id %#08x (RFC 6733 3: unique per request): %v", len(names), n, id, names)
		}
	}
	// RFC 6733 requires Hop-by-Hop ids unique only among a connection's
	// outstanding requests, which a dump with one-second timestamps cannot
	// tell; a reused id is only noted (a DPR sent while a DWR is
	// outstanding with the same id would be a violation).
	for id, names := range hbh {
		if len(names) > 1 {
			t.Logf("note: %d of our %d requests share Hop-by-Hop id %#08x on one connection: %v", len(names), n, id, names)
		}
	}
}

// count counts the dumped messages in direction dir with that peer and name.
func (fd *freeDiameter) count(dir, peerName, name string) int {
	n := 0
	for _, m := range fd.messages() {
		if m.Dir == dir && m.Peer == peerName && m.Name == name {
			n++
		}
	}
	return n
}

// recorder keeps every event published on a bus.
type recorder struct {
	mu     sync.Mutex
	events []peer.Event
}

func record(t *testing.T, b *peer.Bus) *recorder {
	r := &recorder{}
	t.Cleanup(b.Subscribe(func(_ context.Context, e peer.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	}))
	return r
}

func (r *recorder) ofKind(k peer.EventKind) []peer.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []peer.Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events {
		fmt.Fprintf(&b, "  %s %s %s %s->%s %s\n", e.Time.Format("15:04:05.000"), e.Peer, e.Kind, e.From, e.To, e.Reason)
	}
	return b.String()
}

// assertOnlyWentOkay checks that the only watchdog transition was the
// first INITIAL -> OKAY: no SUSPECT, DOWN or REOPEN while connected.
func (r *recorder) assertOnlyWentOkay(t *testing.T) {
	t.Helper()
	wd := r.ofKind(peer.EventWatchdog)
	if len(wd) != 1 || wd[0].From != watchdog.Initial || wd[0].To != watchdog.Okay {
		t.Errorf("watchdog transitions: want only INITIAL->OKAY, got %d; events:\n%s", len(wd), r)
	}
	if errs := r.ofKind(peer.EventError); len(errs) > 0 {
		t.Errorf("%d error events; events:\n%s", len(errs), r)
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// acr builds an Accounting-Request to freeDiameter's realm. freeDiameter
// has no accounting application loaded: it must answer with an error
// Result-Code (it advertises Relay and cannot deliver it), not stay silent.
func acr(originHost string, n int) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, fmt.Sprintf("%s;%d;%d", originHost, time.Now().Unix(), n)).
		String(message.OriginHost, 0, true, originHost).
		String(message.OriginRealm, 0, true, ourRealm).
		String(message.DestinationRealm, 0, true, fdRealm).
		Uint32(message.AccountingRecordType, 0, true, 1). // EVENT_RECORD
		Uint32(message.AccountingRecordNumber, 0, true, uint32(n)).Bytes()
}

// watch samples the peer's state every 100 ms for d and reports any
// sample that was not OKAY.
func watch(t *testing.T, name string, d time.Duration, state func() watchdog.State) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if s := state(); s != watchdog.Okay {
			t.Errorf("%s: watchdog %s at %v, want OKAY throughout", name, s, time.Now().Format("15:04:05.000"))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dialFreeDiameter starts freeDiameter as a server with TwTimer fdTw and
// dials it with our Twinit ourTw; it returns once our peer is OKAY.
func dialFreeDiameter(t *testing.T, fdIdentity, ourHost string, fdTw int, ourTw time.Duration) (*freeDiameter, *peer.Peer, *recorder) {
	t.Helper()
	fd := startFreeDiameter(t, fdOptions{Identity: fdIdentity, Port: freePort(t), TwTimer: fdTw, Dumps: true})
	bus := peer.NewBus()
	rec := record(t, bus)
	cfg := peer.Config{
		OriginHost:  ourHost,
		OriginRealm: ourRealm,
		Watchdog:    watchdog.Config{Twinit: ourTw},
		Events:      bus,
		Logger:      testLogger(t),
	}
	p, err := peer.Dial(fmt.Sprintf("tcp://127.0.0.1:%d", fd.opts.Port), cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { // a backstop: the tests close it themselves
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatalf("our client never reached OKAY with freeDiameter: %v\nstats: %+v\nevents:\n%s", err, p.Stats(), rec)
	}
	// Reaching OKAY means the CEA carried DIAMETER_SUCCESS (2001): any
	// other Result-Code is an open failure (CapabilitiesError).
	if n := p.Stats().OpenFailed; n != 0 {
		t.Errorf("%d failed opens before OKAY; events:\n%s", n, rec)
	}
	for _, e := range rec.ofKind(peer.EventOpenFailed) {
		t.Errorf("open failed event: %s", e.Reason)
	}
	if p.Name() != fdIdentity {
		t.Errorf("peer name %q, want freeDiameter's Origin-Host %q from its CEA", p.Name(), fdIdentity)
	}
	return fd, p, rec
}

// closeClient closes p and checks freeDiameter saw the DPR.
func closeClient(t *testing.T, fd *freeDiameter, p *peer.Peer, rec *recorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*peer.DefaultDPATimeout)
	defer cancel()
	start := time.Now()
	err := p.Close(ctx)
	took := time.Since(start)
	if err != nil {
		t.Errorf("Close: %v (after %v)", err, took)
	}
	if took > peer.DefaultDPATimeout {
		t.Errorf("Close took %v, more than DPATimeout %v: no DPA from freeDiameter?", took, peer.DefaultDPATimeout)
	}
	// freeDiameter answers the DPR and then closes the connection itself
	// (RFC 6733 5.6: R-Rcv-DPR -> R-Snd-DPA, R-Disc), so our close ends
	// whichever of its DPA and its close reaches the loop first; never
	// without a DPA.
	var notes []string
	for _, e := range rec.ofKind(peer.EventConnDown) {
		notes = append(notes, e.Reason)
		if e.DPR && !e.DPA {
			t.Errorf("closed without freeDiameter's DPA: %q", e.Reason)
		}
	}
	t.Logf("connection events: %q", notes)
	t.Logf("Close returned %v after %v", err, took)
	if !fd.waitLog(regexp.MustCompile(`'STATE_OPEN'\s*->\s*'STATE_CLOSING`), 3*time.Second) {
		t.Errorf("freeDiameter's log shows no STATE_OPEN -> STATE_CLOSING after our DPR (transitions %v)", fd.transitions())
	}
	// Close means this side is done with the peer (RFC 6733 5.4.3).
	if !fd.waitLog(regexp.MustCompile(`sent a DPR with cause: DO_NOT_WANT_TO_TALK_TO_YOU`), time.Second) {
		t.Errorf("freeDiameter's log shows no DPR with cause DO_NOT_WANT_TO_TALK_TO_YOU from us")
	}
}

// TestClientToFreeDiameter: our client dials freeDiameter. freeDiameter's
// Tw is long (30 s) so that our watchdog alone drives the DWR/DWA
// exchange: a DWR from either side resets the other's Tw (RFC 3539 3.4.1
// [2]), so with both at 6 s either may end up sending them all.
func TestClientToFreeDiameter(t *testing.T) {
	t.Parallel()
	const fdID, ourHost = "fd-server1.example.org", "aaatp-client.example.net"
	fd, p, rec := dialFreeDiameter(t, fdID, ourHost, 30, 6*time.Second)

	// Requests freeDiameter cannot deliver are answered, with a Result-Code.
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ans, err := p.Request(ctx, acr(ourHost, i))
		cancel()
		if err != nil {
			t.Errorf("ACR %d: no answer from freeDiameter: %v", i, err)
			continue
		}
		if wire.IsRequest(ans) || wire.CommandCode(ans) != message.CmdAccounting {
			t.Errorf("ACR %d: got command %d flags %#x, want an ACA", i, wire.CommandCode(ans), wire.Flags(ans))
		}
		rc, ok := message.ResultCodeOf(ans)
		if !ok {
			t.Errorf("ACR %d: answer without Result-Code: %x", i, ans)
		}
		from, _ := message.StringOf(ans, message.OriginHost, 0)
		errMsg, _ := message.StringOf(ans, message.ErrorMessage, 0)
		t.Logf("ACR %d: answer from %s: Result-Code %d, E bit %v, Error-Message %q", i, from, rc, wire.Flags(ans)&wire.FlagError != 0, errMsg)
	}

	watch(t, "client", stay, p.State)

	st := p.Stats()
	t.Logf("after %v: %+v", stay, st)
	if st.DWRSent < 2 {
		t.Errorf("DWRSent = %d after %v with Tw 6 s +- 2 s, want >= 2", st.DWRSent, stay)
	}
	if st.DWAReceived+1 < st.DWRSent {
		t.Errorf("DWAReceived = %d for DWRSent = %d: freeDiameter left DWRs unanswered", st.DWAReceived, st.DWRSent)
	}
	if st.Answered != 3 || st.TimedOut != 0 || st.Unmatched != 0 || st.BadFrames != 0 {
		t.Errorf("answered %d (want 3), timed out %d, unmatched %d, bad frames %d", st.Answered, st.TimedOut, st.Unmatched, st.BadFrames)
	}
	rec.assertOnlyWentOkay(t)
	fd.assertStayedOpen(t)

	closeClient(t, fd, p, rec)
	fd.assertOurRequestIDs(t, ourHost)
}

// TestFreeDiameterToServer: freeDiameter dials our server. Our Tw is long
// (30 s) so that freeDiameter's watchdog (TwTimer 6) drives the exchange
// and we must answer its DWRs.
func TestFreeDiameterToServer(t *testing.T) {
	t.Parallel()
	const fdID, ourHost = "fd-client.example.org", "aaatp-server.example.net"
	freeDiameterPath(t) // skip (or fail under CI) before listening
	bus := peer.NewBus()
	rec := record(t, bus)
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost:  ourHost,
		OriginRealm: ourRealm,
		AllowHosts:  []string{fdID},
		Watchdog:    watchdog.Config{Twinit: 30 * time.Second},
		Events:      bus,
		Logger:      testLogger(t),
	})
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	closed := false
	closeServer := func() {
		if closed {
			return
		}
		closed = true
		ctx, cancel := context.WithTimeout(context.Background(), 2*peer.DefaultDPATimeout)
		defer cancel()
		start := time.Now()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("Server.Close: %v", err)
		}
		t.Logf("Server.Close took %v", time.Since(start))
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(closeServer) // in case freeDiameter fails to start

	port := srv.Addr().(*net.TCPAddr).Port
	fd := startFreeDiameter(t, fdOptions{
		Identity: fdID, Port: freePort(t), TwTimer: 6, Dumps: true,
		ConnectPeer: ourHost, ConnectPort: port,
	})
	t.Cleanup(closeServer) // cleanups run last-in first-out: before freeDiameter stops

	var p *peer.Peer
	deadline := time.Now().Add(20 * time.Second)
	for p == nil {
		for _, q := range srv.Peers() {
			if q.State() == watchdog.Okay {
				p = q
			}
		}
		if p == nil {
			if time.Now().After(deadline) {
				t.Fatalf("no peer of our server reached OKAY within 20 s; events:\n%s", rec)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if p.Name() != fdID {
		t.Errorf("server peer name %q, want %q", p.Name(), fdID)
	}
	if !fd.waitLog(regexp.MustCompile(`'STATE_WAITCEA'\s*->\s*'STATE_OPEN'`), 5*time.Second) {
		t.Errorf("freeDiameter's log shows no 'STATE_WAITCEA' -> 'STATE_OPEN' (transitions %v)", fd.transitions())
	}

	watch(t, "server", stay, p.State)

	st := p.Stats()
	t.Logf("after %v: %+v", stay, st)
	if st.DWRReceived < 2 {
		t.Errorf("DWRReceived = %d after %v with freeDiameter's Tw 6 s, want >= 2", st.DWRReceived, stay)
	}
	if st.DWAReceived+1 < st.DWRSent {
		t.Errorf("DWAReceived = %d for DWRSent = %d", st.DWAReceived, st.DWRSent)
	}
	if st.BadFrames != 0 || st.Discarded != 0 {
		t.Errorf("bad frames %d, discarded %d", st.BadFrames, st.Discarded)
	}
	if n := len(srv.Peers()); n != 1 {
		t.Errorf("%d server peers, want 1 (freeDiameter reconnected?)", n)
	}
	rec.assertOnlyWentOkay(t)
	fd.assertStayedOpen(t)
	// Every DWR freeDiameter sent was answered: it received our DWAs.
	sent, answered := fd.count("SND", ourHost, "Device-Watchdog-Request"), fd.count("RCV", ourHost, "Device-Watchdog-Answer")
	t.Logf("freeDiameter sent %d DWRs and received %d DWAs", sent, answered)
	if sent < 2 || answered+1 < sent {
		t.Errorf("freeDiameter sent %d DWRs and received %d DWAs from us", sent, answered)
	}

	closeServer()
	if !fd.waitLog(regexp.MustCompile(`'STATE_OPEN'\s*->\s*'STATE_CLOSING`), 3*time.Second) {
		t.Errorf("freeDiameter's log shows no STATE_OPEN -> STATE_CLOSING after our DPR (transitions %v)", fd.transitions())
	}
	fd.assertOurRequestIDs(t, ourHost)
}

// TestBothWatchdogsAt6s: both sides at Tw 6 s +- 2 s, the configuration
// of a real deployment at the RFC minimum: DWRs go both ways, sometimes
// crossing, and neither side may leave OKAY/STATE_OPEN.
func TestBothWatchdogsAt6s(t *testing.T) {
	t.Parallel()
	const fdID, ourHost = "fd-server2.example.org", "aaatp-client2.example.net"
	fd, p, rec := dialFreeDiameter(t, fdID, ourHost, 6, 6*time.Second)

	watch(t, "client", stay, p.State)

	st := p.Stats()
	t.Logf("after %v: %+v", stay, st)
	if st.DWRSent+st.DWRReceived < 2 {
		t.Errorf("%d DWRs sent + %d received in %v at Tw 6 s on both sides, want >= 2", st.DWRSent, st.DWRReceived, stay)
	}
	if st.DWAReceived+1 < st.DWRSent {
		t.Errorf("DWAReceived = %d for DWRSent = %d", st.DWAReceived, st.DWRSent)
	}
	rec.assertOnlyWentOkay(t)
	fd.assertStayedOpen(t)
	closeClient(t, fd, p, rec)
	fd.assertOurRequestIDs(t, ourHost)
}
