package hostile

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hangingRedis speaks just enough RESP for the dedup store to start (the
// server probes its --dedup store before listening) and serve: HELLO is
// refused (RESP2), a claim script answers "first", the others 0. Once
// hung, it accepts connections and reads commands and never replies: a
// Redis stuck in a long command, a full network path, a SIGSTOPped
// process.
type hangingRedis struct {
	addr      string
	hung      atomic.Bool
	commands  atomic.Int64
	unreplied atomic.Int64
	stop      func() // closes the listener and every connection
}

func startHangingRedis(t *testing.T) *hangingRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &hangingRedis{addr: ln.Addr().String()}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.serve(c)
			}()
		}
	}()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			ln.Close()
			mu.Lock()
			for _, c := range conns {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	t.Cleanup(r.stop)
	return r
}

func (r *hangingRedis) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		args, err := readRESP(br)
		if err != nil {
			return
		}
		r.commands.Add(1)
		if r.hung.Load() {
			r.unreplied.Add(1)
			continue
		}
		var reply string
		switch strings.ToUpper(args[0]) {
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "PING":
			reply = "+PONG\r\n"
		case "EVAL", "EVALSHA":
			reply = ":0\r\n"
			if len(args) >= 4 {
				// The claim script's first key is the store's epoch
				// key: answer {epoch, lost 0, 0 = every key marked
				// ours}. The other scripts (complete, abandon) answer 0.
				if nkeys, err := strconv.Atoi(args[2]); err == nil && nkeys >= 1 && strings.HasSuffix(args[3], "epoch") {
					reply = "*3\r\n$6\r\nepoch1\r\n:0\r\n:0\r\n"
				}
			}
		default:
			reply = "+OK\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readRESP reads one command: an array of bulk strings.
func readRESP(br *bufio.Reader) ([]string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "*") {
		return strings.Fields(line), nil // inline command
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 1 {
		return nil, fmt.Errorf("RESP: %q", line)
	}
	args := make([]string, n)
	for i := range args {
		h, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		l, err := strconv.Atoi(strings.TrimRight(h, "\r\n")[1:])
		if err != nil {
			return nil, err
		}
		b := make([]byte, l+2)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:l])
	}
	return args, nil
}

// nasLink is one NAS's connection (a UDP socket or a stream) carrying
// both its Access-Requests (Identifiers 0-127) and its
// Accounting-Requests (128-255), as a NAS multiplexes them on RFC 6613's
// one connection; answers are matched by Identifier.
type nasLink struct {
	rc      *radConn
	secret  string
	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[byte]chan []byte
	done    chan struct{}
}

func newNASLink(rc *radConn, secret string) *nasLink {
	l := &nasLink{rc: rc, secret: secret, pending: map[byte]chan []byte{}, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			resp, err := rc.read(time.Hour)
			if err != nil {
				return
			}
			if len(resp) < radHeaderLen {
				continue
			}
			l.mu.Lock()
			ch := l.pending[resp[1]]
			delete(l.pending, resp[1])
			l.mu.Unlock()
			if ch != nil {
				ch <- resp
			}
		}
	}()
	return l
}

// send writes req and returns where its answer will come (a later
// request with the same Identifier takes the place).
func (l *nasLink) send(req []byte) (<-chan []byte, error) {
	ch := make(chan []byte, 1)
	l.mu.Lock()
	l.pending[req[1]] = ch
	l.mu.Unlock()
	l.wmu.Lock()
	err := l.rc.write(req)
	l.wmu.Unlock()
	return ch, err
}

// Before the change: with --dedup on a Redis that accepts and never replies,
// Accounting-Requests held every handler slot of the UDP socket (and of
// a TCP connection), so the Access-Requests on it, which never touch the
// store, got 0-2 answers a second. Authentication and accounting now have
// handler budgets of their own: a NAS sending 150 Accounting-Requests and
// 50 Access-Requests a second on one socket or connection keeps at least
// 90% of its Access-Requests answered while the accounting hangs.
func TestRADIUSHungRedisKeepsAccessRequestsAnswered(t *testing.T) {
	for _, scheme := range []string{schemeUDP, schemeTCP} {
		t.Run(scheme, func(t *testing.T) {
			rd := startHangingRedis(t)
			s := startRADIUS(t, 0, "--dedup", "redis://"+rd.addr+"/0", "--max-unanswered", "4096")
			rc := s.mustDial(t, scheme, "127.0.0.1")
			nas := newNASLink(rc, radiusSecret)
			type phase struct {
				access, accessOK, acct, acctOK atomic.Int64
				lastErr                        atomic.Value
			}
			var ph atomic.Pointer[phase]
			ph.Store(&phase{})
			stop := make(chan struct{})
			var wg sync.WaitGroup
			// Access-Requests, 50 a second, each waited for 2 s.
			wg.Add(1)
			go func() {
				defer wg.Done()
				tk := time.NewTicker(20 * time.Millisecond)
				defer tk.Stop()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					case <-tk.C:
					}
					p := ph.Load()
					req := accessRequest(byte(n%128), fmt.Sprintf("user%d@example.net", n), radiusSecret)
					ch, err := nas.send(req)
					p.access.Add(1)
					if err != nil {
						p.lastErr.Store(err.Error())
						continue
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						select {
						case resp := <-ch:
							if err := checkResponse(req, resp, radiusSecret); err != nil {
								p.lastErr.Store(err.Error())
								return
							}
							p.accessOK.Add(1)
						case <-time.After(2 * time.Second):
							p.lastErr.Store("no answer within 2 s")
						}
					}()
				}
			}()
			// Accounting-Requests, 150 a second, each a new record.
			wg.Add(1)
			go func() {
				defer wg.Done()
				tk := time.NewTicker(time.Second / 150)
				defer tk.Stop()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					case <-tk.C:
					}
					p := ph.Load()
					ch, err := nas.send(acctRecord(byte(128+n%128), "nas1", fmt.Sprintf("session-%d", n), uint32(time.Now().Unix()), radiusSecret))
					p.acct.Add(1)
					if err != nil {
						continue
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						select {
						case <-ch:
							p.acctOK.Add(1)
						case <-time.After(2 * time.Second):
						}
					}()
				}
			}()
			report := func(name string, p *phase, d time.Duration) float64 {
				share := float64(p.accessOK.Load()) / float64(max(p.access.Load(), 1))
				t.Logf("FIGURES hung-redis %s %s: Access-Requests %d sent, %d answered (%.1f/s, %.0f%%); Accounting-Requests %d sent, %d answered (%.1f/s); last error %v",
					scheme, name, p.access.Load(), p.accessOK.Load(), float64(p.accessOK.Load())/d.Seconds(), 100*share,
					p.acct.Load(), p.acctOK.Load(), float64(p.acctOK.Load())/d.Seconds(), p.lastErr.Load())
				return share
			}
			time.Sleep(2 * time.Second)
			before := ph.Swap(&phase{})
			rd.hung.Store(true)
			pk := s.sample()
			time.Sleep(6 * time.Second)
			during := ph.Swap(&phase{})
			time.Sleep(2100 * time.Millisecond) // the last answers of the phase
			close(stop)
			wg.Wait()
			s.alive()
			rd.stop() // the store's calls fail at once: no handler left for the shutdown to wait for
			rss, gs := pk.end()
			within(t, "hung-redis "+scheme, rss, gs)
			report("before (Redis answering)", before, 2*time.Second)
			share := report("while Redis hangs", during, 6*time.Second)
			t.Logf("FIGURES hung-redis %s: Redis got %d commands, %d of them unanswered", scheme, rd.commands.Load(), rd.unreplied.Load())
			if before.accessOK.Load() == 0 || before.acctOK.Load() == 0 {
				t.Fatalf("nothing answered before Redis hung: the test proves nothing")
			}
			if share < 0.9 {
				t.Errorf("%.0f%% of the Access-Requests answered while Accounting-Requests hang on Redis; want at least 90%%", 100*share)
			}
		})
	}
}
