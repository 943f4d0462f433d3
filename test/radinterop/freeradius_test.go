// Package radinterop runs package radpeer against FreeRADIUS 3.2
// (Debian's freeradius), started as a subprocess on loopback with a
// throwaway configuration, as a RADIUS/TCP server.
//
// Without freeradius on PATH the tests skip, unless CI=true, where they
// fail: CI must not silently lose its interop coverage.
package radinterop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "fr-interop-secret"

const radiusdConf = `prefix = /usr
localstatedir = {{DIR}}
logdir = {{DIR}}
run_dir = {{DIR}}
raddbdir = {{DIR}}
libdir = /usr/lib/freeradius
pidfile = {{DIR}}/radiusd.pid
max_request_time = 30
log {
	destination = stderr
}
security {
	status_server = yes
	allow_vulnerable_openssl = yes
}
modules {
	always ok {
		rcode = ok
	}
}
client local {
	ipaddr = 127.0.0.1
	proto = *
	secret = {{SECRET}}
	limit {
		idle_timeout = 0
	}
}
server default {
	listen {
		type = auth+acct
		ipaddr = 127.0.0.1
		port = {{PORT}}
		proto = tcp
		limit {
			idle_timeout = 0
		}
	}
	authorize {
		Autz-Type Status-Server {
			ok
		}
		update control {
			&Auth-Type := Accept
		}
	}
	authenticate {
	}
	preacct {
		ok
	}
	accounting {
		ok
	}
	post-auth {
		ok
	}
}
`

// syncBuffer: see testhelp.SyncBuffer.
type syncBuffer = testhelp.SyncBuffer

type freeradius struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	addr string
	vars map[string]string // the placeholders of its configuration
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startFreeRADIUS runs freeradius -f -X on a free loopback port until the
// test ends. The port is free when chosen but may be taken (by another
// test's outgoing connection) before freeradius binds it: then it tries
// another.
func startFreeRADIUS(t *testing.T) *freeradius {
	t.Helper()
	return runFreeRADIUS(t, radiusdConf, func() (map[string]string, string) {
		port := freePort(t)
		return map[string]string{"{{PORT}}": fmt.Sprint(port)}, fmt.Sprintf("127.0.0.1:%d", port)
	})
}

// runFreeRADIUS runs freeradius -f -X with the configuration tmpl until
// the test ends. Each attempt calls ports for the placeholders to replace
// in tmpl besides {{DIR}} and {{SECRET}} (its ports) and the address the
// returned freeradius reports; the placeholders end up in its vars.
func runFreeRADIUS(t *testing.T, tmpl string, ports func() (vars map[string]string, addr string)) *freeradius {
	t.Helper()
	bin, err := exec.LookPath("freeradius")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("freeradius not installed (CI=true: interop tests must run)")
		}
		t.Skip("freeradius not installed")
	}
	for attempt := 1; ; attempt++ {
		f, ok := tryFreeRADIUS(t, bin, tmpl, ports)
		if ok {
			return f
		}
		if attempt == 5 {
			t.Fatalf("freeradius did not start in 5 attempts:\n%s", tail(f.log.String(), 40))
		}
	}
}

func tryFreeRADIUS(t *testing.T, bin, tmpl string, ports func() (map[string]string, string)) (*freeradius, bool) {
	dir := t.TempDir()
	vars, addr := ports()
	pairs := []string{"{{DIR}}", dir, "{{SECRET}}", secret}
	for k, v := range vars {
		pairs = append(pairs, k, v)
	}
	conf := strings.NewReplacer(pairs...).Replace(tmpl)
	if err := os.WriteFile(filepath.Join(dir, "radiusd.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &freeradius{log: &syncBuffer{}, addr: addr, vars: vars}
	f.cmd = exec.Command(bin, "-f", "-X", "-d", dir, "-D", "/usr/share/freeradius")
	f.cmd.Stdout, f.cmd.Stderr = f.log, f.log
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(exited) }()
	stop := func() {
		_ = f.cmd.Process.Signal(syscall.SIGCONT)
		_ = f.cmd.Process.Kill()
		<-exited
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(f.log.String(), "Ready to process requests") {
		select {
		case <-exited:
			return f, false // e.g. the port was taken meanwhile
		default:
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("freeradius not ready after 10 s:\n%s", tail(f.log.String(), 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("freeradius log (tail):\n%s", tail(f.log.String(), 60))
		}
	})
	return f, true
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// transitions records watchdog transitions and wakes waiters.
type transitions struct {
	mu   sync.Mutex
	seq  []string
	wake chan struct{}
}

func watch(b *peer.Bus) (*transitions, func()) {
	tr := &transitions{wake: make(chan struct{}, 1)}
	cancel := b.Subscribe(func(_ context.Context, e peer.Event) {
		if e.Kind != peer.EventWatchdog {
			return
		}
		tr.mu.Lock()
		tr.seq = append(tr.seq, e.From.String()+">"+e.To.String())
		tr.mu.Unlock()
		select {
		case tr.wake <- struct{}{}:
		default:
		}
	})
	return tr, cancel
}

// waitFor waits until step has been seen, or fails after d.
func (tr *transitions) waitFor(t *testing.T, step string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		tr.mu.Lock()
		seen := false
		for _, s := range tr.seq {
			seen = seen || s == step
		}
		seq := append([]string(nil), tr.seq...)
		tr.mu.Unlock()
		if seen {
			return
		}
		select {
		case <-tr.wake:
		case <-deadline:
			t.Fatalf("no %s within %v; transitions %v", step, d, seq)
		}
	}
}

func (tr *transitions) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.seq...)
}

// dial returns a client Peer of the FreeRADIUS at addr; require is its
// Message-Authenticator setting: FreeRADIUS 3.2.1 signs no Access-Accept,
// so the default (RequireMAAuto) drops them and RequireMANever accepts
// them.
func dial(t *testing.T, addr string, require radpeer.MessageAuthenticatorMode) *radpeer.Peer {
	t.Helper()
	return dialOn(t, addr, require, nil)
}

// dialOn is dial publishing on events (nil: a bus of the Peer's own): a
// test that watches the first connection's INITIAL > OKAY subscribes
// before Dial, which may see the connection up before it returns.
func dialOn(t *testing.T, addr string, require radpeer.MessageAuthenticatorMode, events *peer.Bus) *radpeer.Peer {
	t.Helper()
	p, err := radpeer.Dial("radius+tcp://"+addr, radpeer.Config{
		Secret:                      []byte(secret),
		Watchdog:                    watchdog.Config{Twinit: 6 * time.Second},
		RequireMessageAuthenticator: require,
		Events:                      events,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Close(ctx)
	})
	return p
}

func accessRequest() *radius.Request {
	return &radius.Request{Code: lradius.CodeAccessRequest, Attributes: lradius.Attributes{
		{Type: radius.AttrUserName, Attribute: []byte("alice@example.net")},
		{Type: radius.AttrUserPassword, Attribute: []byte("pw")},
	}}
}

// FreeRADIUS answers our Access-Request (Message-Authenticator and hidden
// password accepted), Accounting-Request (Request Authenticator accepted)
// and the watchdog's Status-Servers; its answers pass our checks. With
// the default setting, which requires a Message-Authenticator in answers
// to Access-Requests, its Access-Accepts (3.2.1 sends none) are dropped
// and the calls fail clearly, and the connection stays up: its
// Status-Server answers, also without one, keep the watchdog OKAY.
func TestFreeRADIUSExchange(t *testing.T) {
	t.Parallel()
	fr := startFreeRADIUS(t)
	p := dial(t, fr.addr, radpeer.RequireMANever)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	r, err := p.Exchange(ctx, accessRequest())
	if err != nil || r.Packet.Code != lradius.CodeAccessAccept {
		t.Fatalf("Access-Request: %v", err)
	}
	ts, _ := lradius.NewDate(time.Now())
	r, err = p.Exchange(ctx, &radius.Request{Code: lradius.CodeAccountingRequest, Attributes: lradius.Attributes{
		{Type: radius.AttrAcctSessionID, Attribute: []byte("s1")},
		{Type: radius.AttrAcctStatusType, Attribute: lradius.NewInteger(1)},
		{Type: radius.AttrEventTimestamp, Attribute: ts},
		{Type: radius.AttrNASIdentifier, Attribute: []byte("nas1")},
	}})
	if err != nil || r.Packet.Code != lradius.CodeAccountingResponse {
		t.Fatalf("Accounting-Request: %v", err)
	}
	// 200 requests in flight at once on the one connection.
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Exchange(ctx, accessRequest()); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("parallel Access-Request: %v", err)
	}
	time.Sleep(9 * time.Second) // Tw in [4 s, 8 s]: one Status-Server at least
	st := p.Stats()
	if st.StatusSent < 1 || st.StatusAnswered != st.StatusSent || st.BadAuth != 0 || st.Answered != 202 || !st.InService {
		t.Fatalf("stats %+v", st)
	}

	strict := dial(t, fr.addr, radpeer.RequireMAAuto) // the default
	if err := strict.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Exchange(ctx, accessRequest()); !errors.Is(err, radius.ErrNoMessageAuthenticator) {
		t.Fatalf("required Message-Authenticator: %v", err)
	}
	if st := strict.Stats(); st.NoMA != 1 || !st.InService {
		t.Fatalf("strict stats %+v", st)
	}
}

// SIGSTOP of freeradius drives the watchdog OKAY -> SUSPECT -> DOWN; the
// kernel still accepts the reconnection (REOPEN), and after SIGCONT three
// answered Status-Servers bring it back to OKAY.
func TestFreeRADIUSStopped(t *testing.T) {
	t.Parallel()
	fr := startFreeRADIUS(t)
	events := peer.NewBus()
	tr, cancel := watch(events)
	defer cancel()
	p := dialOn(t, fr.addr, radpeer.RequireMANever, events)
	tr.waitFor(t, "INITIAL>OKAY", 10*time.Second)
	ctx, cancelCtx := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelCtx()
	if _, err := p.Exchange(ctx, accessRequest()); err != nil {
		t.Fatal(err)
	}
	if err := fr.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Tw <= 8 s: a Status-Server within one, SUSPECT within two.
	tr.waitFor(t, "OKAY>SUSPECT", 17*time.Second)
	if _, err := p.Exchange(ctx, accessRequest()); !errors.Is(err, radpeer.ErrNotInService) {
		t.Fatalf("Exchange while SUSPECT: %v", err)
	}
	tr.waitFor(t, "SUSPECT>DOWN", 9*time.Second)
	tr.waitFor(t, "DOWN>REOPEN", 9*time.Second)
	if err := fr.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	tr.waitFor(t, "REOPEN>OKAY", 30*time.Second)
	got := tr.get()
	want := []string{"INITIAL>OKAY", "OKAY>SUSPECT", "SUSPECT>DOWN", "DOWN>REOPEN", "REOPEN>OKAY"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("transitions %v, want %v", got, want)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if _, err := p.Exchange(ctx2, accessRequest()); err != nil {
		t.Fatalf("after OKAY again: %v", err)
	}
	if st := p.Stats(); st.StatusAnswered < 3 || st.BadAuth != 0 {
		t.Fatalf("stats %+v", st)
	}
}
