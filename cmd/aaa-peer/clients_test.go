package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/config"
	servecore "github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/transport"
	lradius "layeh.com/radius"
)

func mustClients(t *testing.T, src string) []config.Client {
	t.Helper()
	cfg, err := config.Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Clients
}

// TestClientTable: the most specific prefix holding a source wins,
// whatever the order of the file; IPv4 and IPv6 are apart (an
// IPv4-mapped source is its IPv4 address); a client of one protocol is
// in the tables of that transport's listeners alone.
func TestClientTable(t *testing.T) {
	clients := mustClients(t, `
[[client]]
name = "all4"
source = "0.0.0.0/0"
secret = "s-all4"
[[client]]
name = "nas7"
source = "10.1.2.7"
secret = "s-nas7"
[[client]]
name = "ten"
source = "10.0.0.0/8"
secret = "s-ten"
[[client]]
name = "pop"
source = "10.1.2.0/24"
secret = "s-pop"
[[client]]
name = "v6"
source = "2001:db8::/32"
secret = "s-v6"
[[client]]
name = "tcp-only"
source = "192.0.2.0/24"
secret = "s-tcp"
protocol = "tcp"
`)
	udp, tcp := newClientTable(clients, config.ClientUDP), newClientTable(clients, config.ClientTCP)
	for _, tc := range []struct {
		table *clientTable
		src   string
		want  string // "" none
	}{
		{udp, "10.1.2.7", "nas7"},
		{udp, "10.1.2.8", "pop"},
		{udp, "10.1.3.8", "ten"},
		{udp, "11.0.0.1", "all4"},
		{udp, "::ffff:10.1.2.7", "nas7"},
		{udp, "2001:db8::5", "v6"},
		{udp, "2001:db9::5", ""},
		{udp, "192.0.2.9", "all4"}, // tcp-only is not a UDP client
		{tcp, "192.0.2.9", "tcp-only"},
		{tcp, "10.1.2.7", "nas7"},
	} {
		c, ok := tc.table.lookup(netip.MustParseAddr(tc.src))
		if c.Name != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: client %q (%v), want %q", tc.src, c.Name, ok, tc.want)
		}
		if want := "s-" + strings.TrimSuffix(tc.want, "-only"); ok && string(c.Secret) != want {
			t.Errorf("%s: secret %q of client %s, want %q", tc.src, c.Secret, c.Name, want)
		}
	}
	if _, ok := newClientTable(nil, config.ClientUDP).lookup(netip.MustParseAddr("10.1.2.7")); ok {
		t.Error("an empty table knows a source")
	}
}

// Loopback sources: Linux answers every 127/8 address on lo.
const (
	srcNAS2    = "127.0.0.2" // client nas2, the most specific
	srcNAS3    = "127.0.0.3" // client lo30, by its prefix
	srcUnknown = "127.0.0.4" // no client (until one is added)
)

// clientsConfig is a server's file with clients lo30 (127.0.0.0/30) and
// nas2 (127.0.0.2, its secret in the file nas2), plus extra.
func clientsConfig(t *testing.T, nas2, extra string) string {
	secretFile := filepath.Join(t.TempDir(), "nas2.secret")
	writeTestFile(t, secretFile, nas2+"\n")
	return reloadBase + `listen = ["radius://127.0.0.1:0", "radius+tcp://127.0.0.1:0"]
secret = "top-secret"
[[client]]
name = "lo30"
source = "127.0.0.0/30"
secret = "lo30-secret"
[[client]]
name = "nas2"
source = "127.0.0.2"
secret-file = "` + secretFile + `"
` + extra
}

// hostPort is the address of a bound listener URL.
func hostPort(u string) string { _, hp, _ := strings.Cut(u, "://"); return hp }

// errNoAnswer is a UDP request's fate when nothing came back in time.
var errNoAnswer = errors.New("no answer")

// udpAskFrom sends one Access-Request from src to addr with secret and waits
// up to wait for an answer, which must verify with secret.
func udpAskFrom(src, addr, secret string, wait time.Duration) error {
	d := net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	req, auth, err := radius.EncodeRequest(&radius.Request{Code: lradius.CodeAccessRequest, Attributes: lradius.Attributes{
		{Type: radius.AttrUserName, Attribute: []byte("alice")},
	}}, 1, []byte(secret))
	if err != nil {
		return err
	}
	if _, err := c.Write(req); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return errNoAnswer
	}
	return radius.VerifyResponse(buf[:n], auth, []byte(secret), true)
}

// tcpDial connects to addr from src.
func tcpDial(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// tcpAsk sends one Access-Request of identifier id on c with secret and
// reads its answer, which must verify with secret; io.EOF when the server
// closed the connection.
func tcpAsk(c net.Conn, id byte, secret string) error {
	req, auth, err := radius.EncodeRequest(&radius.Request{Code: lradius.CodeAccessRequest, Attributes: lradius.Attributes{
		{Type: radius.AttrUserName, Attribute: []byte("bob")},
	}}, id, []byte(secret))
	if err != nil {
		return err
	}
	if _, err := c.Write(req); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	h := make([]byte, radius.HeaderLen)
	if _, err := io.ReadFull(c, h); err != nil {
		return err
	}
	b := make([]byte, binary.BigEndian.Uint16(h[2:4]))
	copy(b, h)
	if _, err := io.ReadFull(c, b[radius.HeaderLen:]); err != nil {
		return err
	}
	return radius.VerifyResponse(b, auth, []byte(secret), true)
}

// closedByServer reports whether err says the server closed the
// connection: at the read (EOF), or before the request reached it (a
// reset, a broken pipe).
func closedByServer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// tcpAskOnce connects from src and asks once.
func tcpAskOnce(src, addr, secret string) error {
	c, err := tcpDial(src, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return tcpAsk(c, 1, secret)
}

// checkLoopbackSources skips the test where 127.0.0.2 cannot be a source.
func checkLoopbackSources(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", srcUnknown+":0")
	if err != nil {
		t.Skipf("no loopback address %s: %v", srcUnknown, err)
	}
	ln.Close()
}

// TestServerClientsFromConfig: with [[client]] tables, the RADIUS
// listeners verify each source with its client's secret, the most
// specific prefix first, over UDP and TCP; one client's secret from
// another client is refused; a source of no client is refused (UDP:
// dropped; TCP: closed at accept), logged with its address and counted
// (aaatp_log_events_total{kind="unknown_client"}, the report's
// unknown_client); the metrics count each NAS under its client's name.
func TestServerClientsFromConfig(t *testing.T) {
	t.Parallel()
	checkLoopbackSources(t)
	rs := startReloadServer(t, clientsConfig(t, "nas2-secret", ""))
	udp, tcp := hostPort(rs.listener(t, "radius://")), hostPort(rs.listener(t, "radius+tcp://"))
	if v := rs.metric(t, "aaatp_log_events_total", map[string]string{"kind": "unknown_client"}); v < 0 {
		t.Fatalf("unknown_client log events %v", v)
	}
	logged := servecore.Count(servecore.KindUnknownClient) // process-wide: tests in parallel may add

	for _, tc := range []struct {
		what, src, secret string
		answered          bool
	}{
		{"nas2 with its secret", srcNAS2, "nas2-secret", true},
		{"nas2 with its prefix's secret (the most specific prefix wins)", srcNAS2, "lo30-secret", false},
		{"nas2 with the top-level secret", srcNAS2, "top-secret", false},
		{"lo30's address with its secret", srcNAS3, "lo30-secret", true},
		{"lo30's address with nas2's secret", srcNAS3, "nas2-secret", false},
	} {
		err := udpAskFrom(tc.src, udp, tc.secret, map[bool]time.Duration{true: 5 * time.Second, false: 300 * time.Millisecond}[tc.answered])
		if (err == nil) != tc.answered {
			t.Errorf("UDP, %s: %v (want answered: %v)", tc.what, err, tc.answered)
		}
		err = tcpAskOnce(tc.src, tcp, tc.secret)
		if tc.answered && err != nil || !tc.answered && !closedByServer(err) {
			t.Errorf("TCP, %s: %v (want answered: %v, else the connection closed)", tc.what, err, tc.answered)
		}
	}
	for _, secret := range []string{"top-secret", "lo30-secret"} {
		if err := udpAskFrom(srcUnknown, udp, secret, 300*time.Millisecond); !errors.Is(err, errNoAnswer) {
			t.Errorf("UDP from %s, of no client, with %s: %v, want no answer", srcUnknown, secret, err)
		}
	}
	c, err := tcpDial(srcUnknown, tcp)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !closedByServer(err) {
		t.Errorf("TCP from %s, of no client: read %v, want the connection closed at accept", srcUnknown, err)
	}
	c.Close()
	if n := servecore.Count(servecore.KindUnknownClient) - logged; n < 3 {
		t.Errorf("unknown_client log events +%d, want at least the 3 refused here", n)
	}
	if v := rs.metric(t, "aaatp_log_events_total", map[string]string{"kind": "unknown_client"}); v < 3 {
		t.Errorf("aaatp_log_events_total{kind=unknown_client} = %v, want at least 3", v)
	}
	for _, name := range []string{"nas2", "lo30"} {
		// Answered: one over UDP, one over TCP. Refused: not received.
		if v := rs.metric(t, "aaatp_requests_total", map[string]string{"peer": name}); v != 2 {
			t.Errorf("aaatp_requests_total{peer=%s} = %v, want 2", name, v)
		}
	}
	if code := rs.stop(t); code != 0 {
		t.Fatalf("server exit %d:\n%s", code, rs.stderr)
	}
	out := rs.stderr.String()
	for _, want := range []string{
		"RADIUS datagram dropped: its source is no configured client",
		"RADIUS connection closed at once: its source is no configured client",
		"source=" + srcUnknown,
	} {
		// The lines are rate-limited process-wide: with -count, later runs
		// find them suppressed.
		if !strings.Contains(out, want) && logged == 0 {
			t.Errorf("server log lacks %q", want)
		}
	}
	rep := rs.readReport(t)
	for _, r := range rep.RADIUS {
		switch {
		case r.UDP != nil && r.UDP.UnknownClient != 2, r.Stream != nil && r.Stream.UnknownClient != 1:
			t.Errorf("report of %s: unknown_client %+v %+v, want 2 datagrams (UDP), 1 connection (TCP)", r.URL, r.UDP, r.Stream)
		}
	}
}

// TestReloadRotatesClientSecret: SIGHUP applies a file in which nas2's
// secret changed and a client nas4 is added, while a TCP connection of
// nas2 and UDP requests of lo30 run without pause. Nothing is lost: the
// TCP connection keeps the secret it was accepted with until it closes,
// lo30's datagrams all answered. After it, new connections and datagrams
// of nas2 need its new secret, and nas4 is answered. A file that does
// not validate changes nothing.
func TestReloadRotatesClientSecret(t *testing.T) {
	t.Parallel()
	checkLoopbackSources(t)
	rs := startReloadServer(t, clientsConfig(t, "old-nas2", ""))
	udp, tcp := hostPort(rs.listener(t, "radius://")), hostPort(rs.listener(t, "radius+tcp://"))
	if err := udpAskFrom(srcUnknown, udp, "nas4-secret", 300*time.Millisecond); !errors.Is(err, errNoAnswer) {
		t.Fatalf("nas4 before it is added: %v, want no answer", err)
	}

	conn, err := tcpDial(srcNAS2, tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := tcpAsk(conn, 0, "old-nas2"); err != nil {
		t.Fatalf("nas2's connection before the reload: %v", err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var tcpSent, tcpErrs, udpSent, udpErrs int
	var firstErr [2]error
	wg.Add(2)
	go func() { // nas2's connection, accepted with its old secret
		defer wg.Done()
		for id := 1; ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			tcpSent++
			if err := tcpAsk(conn, byte(id), "old-nas2"); err != nil {
				tcpErrs++
				if firstErr[0] == nil {
					firstErr[0] = err
				}
				return
			}
		}
	}()
	go func() { // lo30, unchanged, over UDP
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			udpSent++
			if err := udpAskFrom(srcNAS3, udp, "lo30-secret", 5*time.Second); err != nil {
				udpErrs++
				if firstErr[1] == nil {
					firstErr[1] = err
				}
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	line := rs.reload(t, clientsConfig(t, "new-nas2", `[[client]]
name = "nas4"
source = "127.0.0.4"
secret = "nas4-secret"
`))
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	for _, want := range []string{`msg="configuration reloaded"`, "RADIUS clients changed on 2 listener(s): added nas4; changed nas2"} {
		if !strings.Contains(line, want) {
			t.Errorf("reload log line %q: no %q", line, want)
		}
	}
	if tcpErrs != 0 || tcpSent < 10 {
		t.Errorf("nas2's connection through the reload: %d sent, %d failed (first: %v); want many, none failed", tcpSent, tcpErrs, firstErr[0])
	}
	if udpErrs != 0 || udpSent < 10 {
		t.Errorf("lo30 over UDP through the reload: %d sent, %d failed (first: %v); want many, none failed", udpSent, udpErrs, firstErr[1])
	}
	if err := tcpAsk(conn, 0, "old-nas2"); err != nil {
		t.Errorf("nas2's connection after the reload, old secret: %v; want it kept until the connection closes", err)
	}

	check := func(when string, wantOld bool) {
		t.Helper()
		for _, tc := range []struct {
			secret   string
			answered bool
		}{{"old-nas2", wantOld}, {"new-nas2", !wantOld}} {
			err := udpAskFrom(srcNAS2, udp, tc.secret, map[bool]time.Duration{true: 5 * time.Second, false: 300 * time.Millisecond}[tc.answered])
			if (err == nil) != tc.answered {
				t.Errorf("%s: UDP from nas2 with %s: %v (want answered: %v)", when, tc.secret, err, tc.answered)
			}
			err = tcpAskOnce(srcNAS2, tcp, tc.secret)
			if tc.answered && err != nil || !tc.answered && !closedByServer(err) {
				t.Errorf("%s: new TCP connection of nas2 with %s: %v (want answered: %v)", when, tc.secret, err, tc.answered)
			}
		}
	}
	check("after the reload", false)
	if err := udpAskFrom(srcUnknown, udp, "nas4-secret", 5*time.Second); err != nil {
		t.Errorf("nas4, added by the reload: %v", err)
	}

	// A file with a bad [[client]]: refused whole, the clients running kept.
	line = rs.reload(t, clientsConfig(t, "newer-nas2", "[[client]]\nname = \"nas2\"\nsource = \"127.0.0.9/24\"\nsecret = \"x\"\n"))
	for _, want := range []string{`msg="configuration reload refused`, `client.name: two clients named \"nas2\"`, "client.source: \\\"127.0.0.9/24\\\" has bits set past its length"} {
		if !strings.Contains(line, want) {
			t.Errorf("refused reload's log line %q: no %q", line, want)
		}
	}
	check("after the refused reload", false)
	if code := rs.stop(t); code != 0 {
		t.Fatalf("server exit %d:\n%s", code, rs.stderr)
	}
}

// TestConfigCheckClients: aaa-peer config check prints each [[client]]
// problem with its line.
func TestConfigCheckClients(t *testing.T) {
	bad := writeConfig(t, `[[client]]
name = "a"
source = "10.0.0.0/33"
secret = "x"
[[client]]
name = "a"
source = "10.0.0.2"
secret = "y"
secret-file = "y.secret"
[[client]]
name = "b"
secret = "z"
nastype = "other"
`)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"config", "check", bad}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2; stderr %q", code, stderr.String())
	}
	for _, want := range []string{
		bad + `:3: client.source: "10.0.0.0/33": the prefix length must be 0 to 32`,
		bad + `:6: client.name: two clients named "a" (the other at line 1): names must differ`,
		bad + `:9: client.secret-file: give secret or secret-file, not both`,
		bad + `:10: client: no source: every [[client]] needs one`,
		bad + `:13: client.nastype: unknown key "nastype" (known here: name, source, secret, secret-file, protocol)`,
		bad + ": 5 problems\n",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestReloadAddsAndRemovesClients: a server started with the top-level
// secret alone takes [[client]] tables on SIGHUP (the top-level secret
// then answers no one), and goes back to the top-level secret for every
// source when they are removed; a file that removes them and has no
// secret to fall back on is refused whole.
func TestReloadAddsAndRemovesClients(t *testing.T) {
	checkLoopbackSources(t)
	t.Setenv(secretEnv, "") // no fallback but the file's
	plain := reloadBase + `listen = ["radius://127.0.0.1:0", "radius+tcp://127.0.0.1:0"]
secret = "top-secret"
`
	rs := startReloadServer(t, plain)
	udp, tcp := hostPort(rs.listener(t, "radius://")), hostPort(rs.listener(t, "radius+tcp://"))
	ask := func(when, src, secret string, answered bool) {
		t.Helper()
		err := udpAskFrom(src, udp, secret, map[bool]time.Duration{true: 5 * time.Second, false: 300 * time.Millisecond}[answered])
		if (err == nil) != answered {
			t.Errorf("%s: UDP from %s with %s: %v (want answered: %v)", when, src, secret, err, answered)
		}
		err = tcpAskOnce(src, tcp, secret)
		if answered && err != nil || !answered && !closedByServer(err) {
			t.Errorf("%s: TCP from %s with %s: %v (want answered: %v)", when, src, secret, err, answered)
		}
	}
	ask("no clients", srcUnknown, "top-secret", true)

	line := rs.reload(t, clientsConfig(t, "nas2-secret", ""))
	if !strings.Contains(line, "RADIUS clients changed on 2 listener(s): added lo30, nas2") {
		t.Errorf("reload log line %q: want the clients added", line)
	}
	ask("clients added", srcNAS2, "nas2-secret", true)
	ask("clients added", srcNAS2, "top-secret", false)
	ask("clients added", srcUnknown, "top-secret", false)

	line = rs.reload(t, reloadBase+`listen = ["radius://127.0.0.1:0", "radius+tcp://127.0.0.1:0"]
`)
	if !strings.Contains(line, "configuration reload refused") || !strings.Contains(line, "RADIUS shared secret") {
		t.Errorf("clients removed, no secret left: log line %q; want it refused for the secret", line)
	}
	ask("refused removal", srcNAS2, "nas2-secret", true)

	line = rs.reload(t, plain)
	if !strings.Contains(line, "RADIUS clients changed on 2 listener(s): none left") {
		t.Errorf("reload log line %q: want the clients removed", line)
	}
	ask("clients removed", srcNAS2, "top-secret", true)
	ask("clients removed", srcUnknown, "top-secret", true)
	ask("clients removed", srcNAS2, "nas2-secret", false)
	if code := rs.stop(t); code != 0 {
		t.Fatalf("server exit %d:\n%s", code, rs.stderr)
	}
}

// TestRadSecClients: on a radsec:// listener the [[client]] table is an
// allow-list of sources (the secret stays "radsec"): a client of
// protocol tls, certificate presented, is answered; another source is
// closed at accept, before its handshake.
func TestRadSecClients(t *testing.T) {
	t.Parallel()
	checkLoopbackSources(t)
	pki := testhelp.NewPKI(t)
	rs := startReloadServer(t, reloadBase+`listen = ["radsec://127.0.0.1:0"]
tls-cert = "`+pki.ServerCert+`"
tls-key = "`+pki.ServerKey+`"
tls-client-ca = "`+pki.CAFile+`"
[[client]]
name = "tls2"
source = "127.0.0.2"
protocol = "tls"
`)
	addr := hostPort(rs.listener(t, "radsec://"))
	tlsCfg, err := transport.ClientTLSConfig(pki.CAFile, pki.ClientCert, pki.ClientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	dial := func(src string) (net.Conn, error) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", addr, tlsCfg.Clone())
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	c, err := dial(srcNAS2)
	if err != nil {
		t.Fatalf("tls2 from %s: %v", srcNAS2, err)
	}
	if err := tcpAsk(c, 1, string(radpeer.RadSecSecret)); err != nil {
		t.Errorf("tls2 over radsec: %v", err)
	}
	c.Close()
	if c, err := dial(srcNAS3); err == nil {
		err = tcpAsk(c, 1, string(radpeer.RadSecSecret))
		c.Close()
		if err == nil {
			t.Errorf("%s, of no client, answered over radsec", srcNAS3)
		}
	}
	if code := rs.stop(t); code != 0 {
		t.Fatalf("server exit %d:\n%s", code, rs.stderr)
	}
	for _, r := range rs.readReport(t).RADIUS {
		if r.Stream == nil || r.Stream.UnknownClient != 1 || r.Stream.Received != 1 {
			t.Errorf("report of %s: %+v, want 1 received, 1 unknown client", r.URL, r.Stream)
		}
	}
}
