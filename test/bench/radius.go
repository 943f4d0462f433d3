package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/latency"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	lradius "layeh.com/radius"
)

// RadiusFigures are the RADIUS/TCP section: aaatp's RADIUS client (the
// client.Client dispatch path over radpeer connections) sending
// Access-Requests to aaatp's RADIUS server in this process, then to two
// server processes under the same load: aaa-peer server and FreeRADIUS.
type RadiusFigures struct {
	InProcess []RadiusCell `json:"in_process"`
	Servers   []RadiusCell `json:"servers"`
	// DiameterAt256 is aaatp's Diameter figure at 256 callers, this run.
	DiameterAt256 float64 `json:"diameter_256_answers_per_s"`
}

// RadiusCell is one RADIUS load measurement.
type RadiusCell struct {
	Server      string  `json:"server"`
	MaxConns    int     `json:"max_conns"`
	ConnsOpen   int     `json:"conns_open"`
	Callers     int     `json:"callers"`
	AnswersPerS float64 `json:"answers_per_s"`
	P50us       float64 `json:"p50_us"`
	P99us       float64 `json:"p99_us"`
	Failed      uint64  `json:"failed"`
	Note        string  `json:"note,omitempty"`
}

const benchRadiusSecret = "bench-radius-secret"

// radiusLoad runs callers loops of Access-Request over url for d after
// warm, through one client.Client with maxConns connections; requireMA is
// the client's Message-Authenticator setting.
func radiusLoad(url string, maxConns, callers int, warm, d time.Duration, requireMA radpeer.MessageAuthenticatorMode) (RadiusCell, error) {
	cell := RadiusCell{MaxConns: maxConns, Callers: callers}
	c, err := client.New(client.Config{
		Peers: []client.PeerSpec{{URL: url}},
		RADIUS: radpeer.Config{Secret: []byte(benchRadiusSecret), Watchdog: watchdog.Config{Twinit: 30 * time.Second},
			MaxConns: maxConns, MaxWaiting: 1 << 20, RequireMessageAuthenticator: requireMA, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
	})
	if err != nil {
		return cell, err
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 1); err != nil {
		return cell, fmt.Errorf("%s not in service in 10 s: %w", url, err)
	}
	var measuring atomic.Bool
	var answers, failed atomic.Uint64
	var hist latency.Histogram
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &radius.Request{Code: lradius.CodeAccessRequest}
			req.Attributes.Add(radius.AttrUserName, lradius.Attribute(fmt.Sprintf("user%d@bench", i)))
			req.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("pw"))
			for {
				select {
				case <-stop:
					return
				default:
				}
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				_, err := c.Exchange(rctx, req)
				rcancel()
				if !measuring.Load() {
					continue
				}
				if err != nil {
					failed.Add(1)
					continue
				}
				hist.Record(time.Since(t0))
				answers.Add(1)
			}
		}()
	}
	time.Sleep(warm)
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(d)
	// A window in which no request ended says nothing of the rate: on a
	// loaded machine (CI's test mode, under the race detector, measures
	// for 0.3 s) the 1020 callers' first round can outlast it. The window
	// goes on until one has, within the requests' own 10 s bound; the
	// rate is over the window as measured.
	for answers.Load() == 0 && failed.Load() == 0 && time.Since(t0) < 12*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	measuring.Store(false)
	el := time.Since(t0)
	close(stop)
	wg.Wait()
	sum := hist.Summary()
	cell.AnswersPerS = float64(answers.Load()) / el.Seconds()
	cell.P50us, cell.P99us, cell.Failed = float64(sum.P50), float64(sum.P99), failed.Load()
	for _, cs := range c.RADIUSPeers()[0].Stats().Conns {
		if cs.State == watchdog.Okay.String() {
			cell.ConnsOpen++
		}
	}
	return cell, nil
}

// measureRadius runs the RADIUS/TCP section.
func measureRadius(o Options, diameter256 float64) (*RadiusFigures, error) {
	warm, d := time.Duration(o.Warmup*float64(time.Second)), time.Duration(o.RoundTrip*float64(time.Second))
	fig := &RadiusFigures{DiameterAt256: diameter256}
	// In this process: aaatp's server with the in-memory dedup store, as
	// aaa-peer server runs it.
	ln, err := radpeer.Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		return nil, err
	}
	store := dedup.NewMemory()
	defer store.Close()
	srv, err := radpeer.NewServer(ln, radpeer.SchemeTCP, radpeer.ServerConfig{Secret: []byte(benchRadiusSecret),
		Handler: radpeer.Dedup(store, radpeer.AcceptAll, nil), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		ln.Close()
		return nil, err
	}
	go srv.Serve()
	url := "radius+tcp://" + ln.Addr().String()
	for _, cfg := range []struct{ conns, callers int }{{1, 256}, {4, 256}, {4, 1020}} {
		cell, err := radiusLoad(url, cfg.conns, cfg.callers, warm, d, radpeer.RequireMAAuto)
		if err != nil {
			srv.Close(context.Background())
			return nil, err
		}
		cell.Server = "aaatp (in process)"
		fig.InProcess = append(fig.InProcess, cell)
		fmt.Fprintf(os.Stderr, "bench: RADIUS/TCP in process, %d conns, %d callers: %.0f answers/s\n", cfg.conns, cfg.callers, cell.AnswersPerS)
	}
	srv.Close(context.Background())

	// Two server processes under the same load (256 callers, one
	// connection): aaa-peer server, then FreeRADIUS.
	x, err := newXprocEnv(o.aaaPeerBin)
	if err != nil {
		return nil, err
	}
	defer x.close()
	for _, kind := range []string{"aaa-peer", "freeradius"} {
		c, u, err := x.startRadiusServer(kind)
		if err != nil {
			fig.Servers = append(fig.Servers, RadiusCell{Server: kind, Note: err.Error()})
			continue
		}
		for _, conns := range []int{1, 4} {
			callers := 256
			if conns > 1 {
				callers = 255 * conns
			}
			// FreeRADIUS 3.2.1 (Debian 12) signs no Access-Accept: a client
			// with the BlastRADIUS default would drop every answer.
			requireMA := radpeer.RequireMAAuto
			if kind == "freeradius" {
				requireMA = radpeer.RequireMANever
			}
			cell, err := radiusLoad(u, conns, callers, warm, d, requireMA)
			cell.Server = kind
			if err != nil {
				cell.Note = err.Error()
			}
			fig.Servers = append(fig.Servers, cell)
			fmt.Fprintf(os.Stderr, "bench: RADIUS/TCP %s, %d conns, %d callers: %.0f answers/s\n", kind, conns, callers, cell.AnswersPerS)
		}
		c.stop()
		if err := c.wait(10 * time.Second); err != nil && kind == "aaa-peer" {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}
	return fig, nil
}

// radiusdBenchConf is FreeRADIUS 3.2 answering Access-Request with
// Access-Accept over TCP, without debug output, with its default thread
// pool.
const radiusdBenchConf = `prefix = /usr
localstatedir = {{DIR}}
logdir = {{DIR}}
run_dir = {{DIR}}
raddbdir = {{DIR}}
libdir = /usr/lib/freeradius
pidfile = {{DIR}}/radiusd.pid
max_request_time = 30
log {
	destination = files
	file = {{DIR}}/radius.log
}
security {
	status_server = yes
	allow_vulnerable_openssl = yes
}
thread pool {
	start_servers = 8
	max_servers = 32
	min_spare_servers = 4
	max_spare_servers = 16
	max_requests_per_server = 0
	max_queue_size = 65536
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
		max_connections = 64
		idle_timeout = 0
	}
}
server default {
	listen {
		type = auth
		ipaddr = 127.0.0.1
		port = {{PORT}}
		proto = tcp
		limit {
			max_connections = 64
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
	post-auth {
		ok
	}
}
`

// startRadiusServer starts aaa-peer server on radius+tcp:// or
// freeradius (when installed) and returns its URL.
func (x *xprocEnv) startRadiusServer(kind string) (*child, string, error) {
	dir, err := os.MkdirTemp(x.scratch, "radius-"+kind+"-")
	if err != nil {
		return nil, "", err
	}
	sf := filepath.Join(dir, "secret")
	if err := os.WriteFile(sf, []byte(benchRadiusSecret+"\n"), 0o600); err != nil {
		return nil, "", err
	}
	switch kind {
	case "aaa-peer":
		ready := filepath.Join(dir, "ready")
		cmd := exec.Command(x.aaaPeer, "server", "--listen", "radius+tcp://127.0.0.1:0", "--secret-file", sf,
			"--origin-host", xServerHost, "--origin-realm", xRealm, "--ready", ready, "--log-level", "error")
		c, err := startChild("aaa-peer server", cmd, dir)
		if err != nil {
			return nil, "", err
		}
		c.stop = func() { syscall.Kill(c.pid(), syscall.SIGTERM) }
		go drain(c)
		for t0 := time.Now(); time.Since(t0) < 10*time.Second; time.Sleep(10 * time.Millisecond) {
			if b, err := os.ReadFile(ready); err == nil && strings.HasSuffix(string(b), "\n") {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "radius+tcp://") }); i >= 0 {
					return c, lines[i], nil
				}
			}
		}
		c.kill()
		return nil, "", fmt.Errorf("aaa-peer server not ready in 10 s%s", c.stderrTail())
	case "freeradius":
		bin, err := exec.LookPath("freeradius")
		if err != nil {
			return nil, "", errors.New("freeradius not installed")
		}
		port, err := freeTCPPort()
		if err != nil {
			return nil, "", err
		}
		conf := strings.NewReplacer("{{DIR}}", dir, "{{SECRET}}", benchRadiusSecret, "{{PORT}}", fmt.Sprint(port)).Replace(radiusdBenchConf)
		if err := os.WriteFile(filepath.Join(dir, "radiusd.conf"), []byte(conf), 0o600); err != nil {
			return nil, "", err
		}
		cmd := exec.Command(bin, "-f", "-d", dir, "-D", "/usr/share/freeradius")
		c, err := startChild("freeradius", cmd, dir)
		if err != nil {
			return nil, "", err
		}
		c.stop = func() { syscall.Kill(-c.pid(), syscall.SIGTERM) }
		go drain(c)
		u := fmt.Sprintf("radius+tcp://127.0.0.1:%d", port)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		for t0 := time.Now(); time.Since(t0) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
			if conn, err := net.Dial("tcp", addr); err == nil {
				conn.Close()
				return c, u, nil
			}
		}
		c.kill()
		b, _ := os.ReadFile(filepath.Join(dir, "radius.log"))
		return nil, "", fmt.Errorf("freeradius not answering in 10 s%s %s", c.stderrTail(), b)
	}
	return nil, "", fmt.Errorf("unknown RADIUS server %q", kind)
}

// printRadius prints the RADIUS/TCP section.
func printRadius(w io.Writer, f *RadiusFigures) {
	if f == nil {
		return
	}
	fmt.Fprintln(w, "\n## RADIUS/TCP (Access-Request -> Access-Accept, loopback)")
	fmt.Fprintln(w, "\naaatp's RADIUS client (client.Client over radpeer connections, 255 Identifiers each); each cell measures for the round-trip time, longer if no request has ended by then.")
	fmt.Fprintf(w, "Diameter, aaatp, 256 callers, same run: %.0f answers/s.\n\n", f.DiameterAt256)
	fmt.Fprintln(w, "| server | max conns | conns open | callers | answers/s | p50 us | p99 us | failed | note |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, c := range append(append([]RadiusCell{}, f.InProcess...), f.Servers...) {
		fmt.Fprintf(w, "| %s | %d | %d | %d | %.0f | %.0f | %.0f | %d | %s |\n", c.Server, c.MaxConns, c.ConnsOpen, c.Callers,
			c.AnswersPerS, c.P50us, c.P99us, c.Failed, c.Note)
	}
}
