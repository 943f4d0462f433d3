package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
)

// idleServerEnv, when set, makes the binary (the harness or its test) run
// the idle peers' server instead: the server lives in a child process so
// that the RSS and CPU of the client peers are measured alone, and each
// process stays within its RLIMIT_NOFILE.
const idleServerEnv = "AAATP_BENCH_IDLE_SERVER"

// idleServer listens with Tw from $AAATP_BENCH_IDLE_SERVER (seconds),
// prints "ADDR host:port", then answers every "STAT" line read from in
// with "STAT <VmRSS KiB> <cpu us> <cpu us after GC> <peers> <DWR sent>
// <DWR received>" (the forced GC that makes VmRSS meaningful is the
// harness's doing: a CPU window starts after it and ends before it); at
// EOF it closes the server and returns.
func idleServer(in io.Reader, out io.Writer) error {
	raiseNoFile(200_000) // as far as the hard limit allows
	tw, err := time.ParseDuration(os.Getenv(idleServerEnv))
	if err != nil {
		return err
	}
	s, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: "idle-server.example.net", OriginRealm: "example.net",
		Logger: quiet, Watchdog: watchdog.Config{Twinit: tw}})
	if err != nil {
		return err
	}
	// The harness dials waves of 500 peers at once from one address, up
	// to tens of thousands: no limit on connections waiting for their CER
	// nor on those open.
	s.MaxOpening, s.MaxOpeningPerAddr, s.MaxConnections, s.MaxConnectionsPerAddr = -1, -1, -1, -1
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	fmt.Fprintf(out, "ADDR %s\n", s.Addr())
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() != "STAT" {
			continue
		}
		var dwrSent, dwrRecv uint64
		ps := s.Peers()
		for _, p := range ps {
			st := p.Stats()
			dwrSent += st.DWRSent
			dwrRecv += st.DWRReceived
		}
		cpu := cpuTime()
		runtime.GC()
		debug.FreeOSMemory()
		fmt.Fprintf(out, "STAT %.0f %d %d %d %d %d\n", rssKiB(), cpu.Microseconds(), cpuTime().Microseconds(), len(ps), dwrSent, dwrRecv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = s.Close(ctx)
	if serr := <-served; err == nil {
		err = serr
	}
	return err
}

type serverStat struct {
	rssKiB           float64
	cpu, cpuAfterGC  time.Duration // CPU time before and after the forced GC
	peers            int
	dwrSent, dwrRecv uint64
}

type idleResult struct {
	peers                  int
	wanted, fdLimit        int // large run: the peers asked for, RLIMIT_NOFILE in force
	clientKiBPerPeer       float64
	serverKiBPerPeer       float64
	clientHeapStackPerPeer float64 // KiB of Go heap in use + stacks
	clientStackPerPeer     float64 // KiB of goroutine stacks
	goroutinesPerPeer      float64
	connectTime            time.Duration
	window                 time.Duration
	clientCPUPct           float64
	serverCPUPct           float64
	cpuPct                 float64 // both
	dwrExchanges           uint64  // DWRs sent by either side during the window
}

// measureIdle connects n client peers (peer.Dial, Tw o.IdleTw)
// to one aaatp server running in a child process, then measures RSS per
// peer on each side and the CPU of both over o.IdleWindow seconds of
// idleness (watchdog traffic only).
//
// Past 20,000 peers the client peers dial from several loopback source
// addresses (127.0.0.1, 127.0.0.2, ...; 20,000 peers each), since one
// source address has only about 28,000 ephemeral ports.
func measureIdle(o Options, n int) (*idleResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	tw := secs(o.IdleTw)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), idleServerEnv+"="+tw.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	waited := false
	defer func() {
		if !waited {
			stdin.Close()
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	lines := bufio.NewScanner(stdout)
	readLine := func(prefix string) (string, error) {
		if !lines.Scan() {
			return "", fmt.Errorf("idle server: no %s line (%v)", prefix, lines.Err())
		}
		rest, ok := strings.CutPrefix(lines.Text(), prefix+" ")
		if !ok {
			return "", fmt.Errorf("idle server: %q", lines.Text())
		}
		return rest, nil
	}
	addr, err := readLine("ADDR")
	if err != nil {
		return nil, err
	}
	stat := func() (serverStat, error) {
		var st serverStat
		if _, err := io.WriteString(stdin, "STAT\n"); err != nil {
			return st, err
		}
		rest, err := readLine("STAT")
		if err != nil {
			return st, err
		}
		var cpuUs, afterUs int64
		_, err = fmt.Sscan(rest, &st.rssKiB, &cpuUs, &afterUs, &st.peers, &st.dwrSent, &st.dwrRecv)
		st.cpu = time.Duration(cpuUs) * time.Microsecond
		st.cpuAfterGC = time.Duration(afterUs) * time.Microsecond
		return st, err
	}

	s0, err := stat()
	if err != nil {
		return nil, err
	}
	runtime.GC()
	debug.FreeOSMemory()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	rss0 := rssKiB()
	g0 := runtime.NumGoroutine()

	res := &idleResult{peers: n, window: secs(o.IdleWindow)}
	peers := make([]*peer.Peer, 0, n)
	defer func() { closePeers(peers) }()
	t0 := time.Now()
	const wave = 500 // dial in waves: the accept backlog is finite
	for len(peers) < n {
		batch := min(wave, n-len(peers))
		start := len(peers)
		for i := range batch {
			cfg := peer.Config{
				OriginHost: fmt.Sprintf("idle%06d.example.net", start+i), OriginRealm: "example.net",
				Logger: quiet, Watchdog: watchdog.Config{Twinit: tw}}
			if n > perSourceAddr {
				cfg.Dialer = dialFrom(net.IPv4(127, 0, 0, byte(1+(start+i)/perSourceAddr)), cfg.Transport)
			}
			p, err := peer.Dial("tcp://"+addr, cfg)
			if err != nil {
				return nil, err
			}
			peers = append(peers, p)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for _, p := range peers[start:] {
			if err := p.WaitState(ctx, watchdog.Okay); err != nil {
				cancel()
				return nil, fmt.Errorf("peer %d of %d not OKAY: %w", len(peers), n, err)
			}
		}
		cancel()
	}
	res.connectTime = time.Since(t0)

	// Idle window: CPU of both processes, DWR exchanges counted.
	time.Sleep(500 * time.Millisecond)
	s1, err := stat()
	if err != nil {
		return nil, err
	}
	var dwr0 uint64
	for _, p := range peers {
		dwr0 += p.Stats().DWRSent
	}
	c0, w0 := cpuTime(), time.Now()
	time.Sleep(res.window)
	c1, wall := cpuTime(), time.Since(w0)
	s2, err := stat()
	if err != nil {
		return nil, err
	}
	var dwr1 uint64
	for _, p := range peers {
		dwr1 += p.Stats().DWRSent
	}
	res.clientCPUPct = round(100*float64(c1-c0)/float64(wall), 3)
	// From after s1's forced GC to before s2's: the window holds no GC
	// that the harness forced, on either side.
	res.serverCPUPct = round(100*float64(s2.cpu-s1.cpuAfterGC)/float64(wall), 3)
	res.cpuPct = round(res.clientCPUPct+res.serverCPUPct, 3)
	res.dwrExchanges = (dwr1 - dwr0) + (s2.dwrSent - s1.dwrSent)
	if s2.peers != n {
		return nil, fmt.Errorf("server holds %d peers, want %d", s2.peers, n)
	}

	runtime.GC()
	debug.FreeOSMemory()
	runtime.ReadMemStats(&m1)
	if o.memProfile != "" {
		if err := writeHeapProfile(o.memProfile); err != nil {
			return nil, err
		}
	}
	fn := float64(n)
	res.clientKiBPerPeer = round((rssKiB()-rss0)/fn, 2)
	res.serverKiBPerPeer = round((s2.rssKiB-s0.rssKiB)/fn, 2)
	res.clientHeapStackPerPeer = round((float64(m1.HeapInuse+m1.StackInuse)-float64(m0.HeapInuse+m0.StackInuse))/1024/fn, 2)
	res.clientStackPerPeer = round((float64(m1.StackInuse)-float64(m0.StackInuse))/1024/fn, 2)
	res.goroutinesPerPeer = round(float64(runtime.NumGoroutine()-g0)/fn, 2)

	closePeers(peers)
	peers = nil
	stdin.Close()
	waited = true
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("idle server: %w", err)
	}
	return res, nil
}

// perSourceAddr is how many idle peers dial from one source address.
const perSourceAddr = 20_000

// dialFrom is a peer.Config.Dialer binding the local address ip. The
// port is left to connect (IP_BIND_ADDRESS_NO_PORT), which may reuse one
// for another destination and does not stop at the half of the range a
// bind to port 0 picks from.
func dialFrom(ip net.IP, opts transport.Options) func(ctx context.Context, url string) (transport.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			const ipBindAddressNoPort = 24 // linux/in.h
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	return func(ctx context.Context, url string) (transport.Conn, error) {
		u, err := transport.ParseURL(url)
		if err != nil {
			return nil, err
		}
		c, err := d.DialContext(ctx, "tcp", u.Address())
		if err != nil {
			return nil, err
		}
		return transport.NewStreamConn(c, "tcp", opts), nil
	}
}

// closePeers closes peers (DPR/DPA), many at a time.
func closePeers(peers []*peer.Peer) {
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p.Close(ctx)
		}()
	}
	wg.Wait()
}
