package faults

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The userspace delay proxy, for kernels without sch_netem. The test binary
// re-executes itself inside a server's namespace with proxyEnv set to
// "LISTEN TARGET DELAY JITTER READYFILE"; the proxy forwards TCP from
// LISTEN to TARGET and, while enabled (SIGUSR1 on, SIGUSR2 off), holds
// every chunk DELAY +- JITTER (uniform) in each direction. Order within a
// direction is kept, as TCP would deliver it: a chunk never overtakes the
// one before it.
const proxyEnv = "AAATPF_DELAY_PROXY"

func proxyMain(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 5 {
		fmt.Fprintf(os.Stderr, "proxy: bad %s %q\n", proxyEnv, spec)
		return 2
	}
	delay, err1 := time.ParseDuration(f[2])
	jitter, err2 := time.ParseDuration(f[3])
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		return 2
	}
	ln, err := net.Listen("tcp", f[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		return 1
	}
	p := &delayProxy{target: f[1], delay: delay, jitter: jitter}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM)
	go func() {
		for s := range sig {
			switch s {
			case syscall.SIGUSR1:
				p.on.Store(true)
				fmt.Fprintln(os.Stderr, "proxy: delay on")
			case syscall.SIGUSR2:
				p.on.Store(false)
				fmt.Fprintln(os.Stderr, "proxy: delay off")
			default:
				os.Exit(0)
			}
		}
	}()
	if err := os.WriteFile(f[4], []byte(ln.Addr().String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		return 1
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "proxy:", err)
			return 1
		}
		go p.serve(c)
	}
}

type delayProxy struct {
	target string
	delay  time.Duration
	jitter time.Duration
	on     atomic.Bool
}

func (p *delayProxy) serve(a net.Conn) {
	b, err := net.Dial("tcp", p.target)
	if err != nil {
		a.Close()
		return
	}
	var once sync.Once
	closeBoth := func() { once.Do(func() { a.Close(); b.Close() }) }
	go p.relay(a, b, closeBoth)
	go p.relay(b, a, closeBoth)
}

type chunk struct {
	b  []byte
	at time.Time
}

// relay copies src to dst, each chunk released at its due time.
func (p *delayProxy) relay(src, dst net.Conn, closeBoth func()) {
	ch := make(chan chunk, 1<<14)
	go func() {
		for c := range ch {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				closeBoth()
				for range ch {
				}
				return
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	var last time.Time
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			at := time.Now()
			if p.on.Load() {
				d := p.delay
				if p.jitter > 0 {
					d += time.Duration(rand.Int64N(int64(2*p.jitter)+1)) - p.jitter
				}
				at = at.Add(d)
			}
			if at.Before(last) {
				at = last
			}
			last = at
			ch <- chunk{append([]byte(nil), buf[:n]...), at}
		}
		if err != nil {
			close(ch)
			if !errors.Is(err, io.EOF) {
				closeBoth()
			}
			return
		}
	}
}
