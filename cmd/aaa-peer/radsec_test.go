package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

func radsecServer(t *testing.T, pki testhelp.PKI) (*testServer, string) {
	t.Helper()
	srv := startServer(t, "--listen", "radsec://127.0.0.1:0", "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-client-ca", pki.CAFile)
	for _, u := range readLines(t, srv) {
		if strings.HasPrefix(u, "radsec://") {
			return srv, u
		}
	}
	t.Fatalf("no radsec:// URL in %q", readLines(t, srv))
	return nil, ""
}

// A radsec:// client Peer with a client certificate against aaa-peer
// server's radsec:// listener; a client without one is refused.
func TestRadSecServer(t *testing.T) {
	t.Parallel()
	pki := testhelp.NewPKI(t)
	srv, u := radsecServer(t, pki)
	tlsCfg, err := transport.ClientTLSConfig(pki.CAFile, pki.ClientCert, pki.ClientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	p, err := radpeer.Dial(u, radpeer.Config{Transport: transport.Options{TLS: tlsCfg}, Watchdog: watchdog.Config{Twinit: 6 * time.Second}, RequireMessageAuthenticator: radpeer.RequireMAAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer mustCloseCtx(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	r, err := p.Exchange(ctx, &radius.Request{Code: lradius.CodeAccessRequest, Attributes: lradius.Attributes{{Type: radius.AttrUserName, Attribute: []byte("bob")}}})
	if err != nil || r.Packet.Code != lradius.CodeAccessAccept {
		t.Fatalf("over radsec: %v", err)
	}
	// No client certificate: refused by the config check, and by the
	// server when forced past it.
	if _, err := radpeer.Dial(u, radpeer.Config{Transport: transport.Options{TLS: &tls.Config{MinVersion: tls.VersionTLS12}}}); err == nil {
		t.Fatal("a radsec client without a certificate was configured")
	}
	noCert, _ := transport.ClientTLSConfig(pki.CAFile, "", "", "")
	tc, err := transport.Dial(ctx, "tls://"+strings.TrimPrefix(u, "radsec://"), transport.Options{TLS: noCert, ReadFrame: radius.ReadFrame})
	if err == nil {
		pkt, _, _ := radius.EncodeRequest(&radius.Request{Code: lradius.CodeStatusServer}, 0, radpeer.RadSecSecret)
		_ = tc.WriteMessages(pkt)
		if _, err = tc.ReadMessage(); err == nil {
			t.Fatal("a client without a certificate got an answer")
		}
		tc.Close()
	}
	_ = srv
}

// radsecproxy in front of aaa-peer server over radsec:// (certificates
// made here): radclient sends to radsecproxy over UDP, radsecproxy
// forwards over TLS with its client certificate; auth and accounting are
// answered, and the record radclient repeats is applied once.
func TestRadsecproxyInFront(t *testing.T) {
	t.Parallel()
	bin := needBinary(t, "radsecproxy")
	rc := needBinary(t, "radclient")
	pki := testhelp.NewPKI(t)
	srv, u := radsecServer(t, pki)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(u, "radsec://"))
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	udpAddr := udp.LocalAddr().String()
	udp.Close()
	dir := t.TempDir()
	conf := fmt.Sprintf(`ListenUDP %s
LogLevel 4
tls default {
	CACertificateFile %s
	CertificateFile %s
	CertificateKeyFile %s
}
client 127.0.0.1 {
	type udp
	secret %s
}
server aaapeer {
	host 127.0.0.1
	port %s
	type tls
	secret radsec
	StatusServer on
}
realm * {
	server aaapeer
	accountingServer aaapeer
}
`, udpAddr, pki.CAFile, pki.ClientCert, pki.ClientKey, testRadiusSecret, port)
	cf := filepath.Join(dir, "radsecproxy.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	var plog bytes.Buffer
	proxy := exec.Command(bin, "-f", "-d", "4", "-c", cf, "-i", filepath.Join(dir, "pid"))
	proxy.Stdout, proxy.Stderr = &plog, &plog
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = proxy.Process.Kill()
		_ = proxy.Wait()
		if t.Failed() {
			t.Logf("radsecproxy log:\n%s", plog.String())
		}
	}()
	sf := filepath.Join(dir, "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	send := func(command, input string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// UDP with retries: radsecproxy may still be connecting.
		cmd := exec.CommandContext(ctx, rc, "-P", "udp", "-t", "2", "-r", "5", "-x", "-S", sf, udpAddr, command)
		cmd.Stdin = strings.NewReader(input)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("radclient %s via radsecproxy: %v\n%s", command, err, out.String())
		}
		return out.String()
	}
	if out := send("auth", "User-Name = carol\nUser-Password = pw\nMessage-Authenticator = 0x00\n"); !strings.Contains(out, "Received Access-Accept") {
		t.Fatalf("auth via radsecproxy:\n%s", out)
	}
	acct := "User-Name = carol\nAcct-Session-Id = rs-1\nAcct-Status-Type = Start\nNAS-Identifier = nas9\nEvent-Timestamp = 1800000000\n"
	if out := send("acct", acct+"\n"+acct+"Acct-Delay-Time = 2\n"); strings.Count(out, "Received Accounting-Response") != 2 {
		t.Fatalf("acct via radsecproxy:\n%s", out)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
	rep := srv.readReport(t)
	if rep.Received < 3 || rep.Duplicates != 1 || rep.Applied != rep.Received-1 {
		t.Fatalf("server report: received %d applied %d duplicates %d", rep.Received, rep.Applied, rep.Duplicates)
	}
}
