package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lossyRelay forwards UDP datagrams between one client and a server, and
// loses the first drop answers, as a lossy path would.
type lossyRelay struct {
	front, up net.PacketConn
	server    net.Addr
	mu        sync.Mutex
	client    net.Addr
	drop      int
	requests  [][]byte
	answers   [][]byte
	wg        sync.WaitGroup
}

func startLossyRelay(t *testing.T, server string, drop int) *lossyRelay {
	t.Helper()
	sa, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		t.Fatal(err)
	}
	front, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &lossyRelay{front: front, up: up, server: sa, drop: drop}
	r.wg.Add(2)
	go func() { // client -> server
		defer r.wg.Done()
		buf := make([]byte, 4096)
		for {
			n, from, err := front.ReadFrom(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.client = from
			r.requests = append(r.requests, append([]byte(nil), buf[:n]...))
			r.mu.Unlock()
			up.WriteTo(buf[:n], sa)
		}
	}()
	go func() { // server -> client, the first answers lost
		defer r.wg.Done()
		buf := make([]byte, 4096)
		for {
			n, _, err := up.ReadFrom(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.answers = append(r.answers, append([]byte(nil), buf[:n]...))
			lose := len(r.answers) <= r.drop
			to := r.client
			r.mu.Unlock()
			if !lose && to != nil {
				front.WriteTo(buf[:n], to)
			}
		}
	}()
	t.Cleanup(func() { front.Close(); up.Close(); r.wg.Wait() })
	return r
}

// radclient over UDP against aaa-peer server, the first answer lost on the
// way back: radclient's own retransmission (the same bytes from the same
// port) is answered from the duplicate cache, byte for byte, without the
// request being handled again.
func TestRadclientUDPRetransmissionAnsweredFromCache(t *testing.T) {
	t.Parallel()
	bin := needBinary(t, "radclient")
	sf := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(sf, []byte(testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, "--listen", "radius://127.0.0.1:0", "--secret-file", sf)
	var addr string
	for _, u := range readLines(t, srv) {
		if strings.HasPrefix(u, "radius://") {
			addr = strings.TrimPrefix(u, "radius://")
		}
	}
	relay := startLossyRelay(t, addr, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-P", "udp", "-t", "1", "-r", "3", "-x", "-S", sf, relay.front.LocalAddr().String(), "auth")
	cmd.Stdin = strings.NewReader("User-Name = alice\nUser-Password = pw\nMessage-Authenticator = 0x00\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "Received Access-Accept") {
		t.Fatalf("radclient: %v\n%s", err, out.String())
	}
	relay.mu.Lock()
	reqs, answers := relay.requests, relay.answers
	relay.mu.Unlock()
	if len(reqs) != 2 || !bytes.Equal(reqs[0], reqs[1]) {
		t.Fatalf("radclient sent %d packets, want 2 identical ones", len(reqs))
	}
	if len(answers) != 2 || !bytes.Equal(answers[0], answers[1]) {
		t.Fatalf("the server sent %d answers, want 2 identical ones (the second from its cache)", len(answers))
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d", code)
	}
	if rep := srv.readReport(t); rep.Received != 1 || rep.Applied != 1 {
		t.Fatalf("server report: received %d applied %d, want the request handled once", rep.Received, rep.Applied)
	}
}
