package radpeer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/transport"
	"go.uber.org/goleak"
)

// raceTable is one state of the clients of TestServersSetClientsShutdownRace:
// every source a client of shared, or each client (by index) of its own
// secret, nil for a client removed. A secret taken from a client is
// never given back to it: each change makes a new one.
type raceTable struct {
	shared  []byte
	secrets [][]byte
}

func (t *raceTable) lookup(i int) []byte {
	if t.shared != nil {
		return t.shared
	}
	return t.secrets[i]
}

// args are SetClients' arguments for t, its clients at addrs.
func (t *raceTable) args(addrs []netip.Addr) ([]byte, func(netip.Addr) (Client, bool)) {
	if t.shared != nil {
		return t.shared, nil
	}
	return nil, func(a netip.Addr) (Client, bool) {
		for i, b := range addrs {
			if a == b && t.secrets[i] != nil {
				return Client{Name: fmt.Sprint("nas", i), Secret: t.secrets[i]}, true
			}
		}
		return Client{}, false
	}
}

// raceState is what the test's clients know of the secrets: the
// current table, and the secrets a SetClients that has returned took
// from their client. A request signed with one of those and sent
// afterwards must not be answered: over a stream, once its client was
// removed (its connections closed at once, a new one refused); over UDP,
// once the secret changed at all (each datagram is verified with the
// secrets of its time).
type raceState struct {
	table   atomic.Pointer[raceTable]
	gen     int             // for new secrets; the changing goroutine's
	removed sync.Map        // "i|secret" of a client removed
	changed sync.Map        // "i|secret" of a client removed or given another secret
	ops     [4]atomic.Int64 // rotations, removals, shared on, shared off
}

func deadKey(i int, secret []byte) string { return fmt.Sprint(i, "|", string(secret)) }

func (s *raceState) isRemoved(i int, secret []byte) bool {
	_, ok := s.removed.Load(deadKey(i, secret))
	return ok
}

func (s *raceState) isChanged(i int, secret []byte) bool {
	_, ok := s.changed.Load(deadKey(i, secret))
	return ok
}

func (s *raceState) fresh(what string) []byte {
	s.gen++
	return fmt.Appendf(nil, "%s-%d", what, s.gen)
}

// stableClients are never removed, only given new secrets: their
// connections end only by the end of a grace or by Shutdown, so that a
// drain that never closes shows.
const stableClients = 2

// next returns a random change of cur.
func (s *raceState) next(cur *raceTable) *raceTable {
	n := &raceTable{secrets: append([][]byte(nil), cur.secrets...)}
	i := rand.IntN(len(n.secrets))
	gone := stableClients + rand.IntN(len(n.secrets)-stableClients)
	perClient := func(removed int) {
		for j := range n.secrets {
			n.secrets[j] = s.fresh(fmt.Sprint("s", j))
		}
		if removed >= 0 {
			n.secrets[removed] = nil
		}
	}
	switch r := rand.IntN(10); {
	case r < 4: // a secret rotated (a client removed comes back)
		s.ops[0].Add(1)
		if cur.shared != nil {
			n.shared = s.fresh("shared")
		} else {
			n.secrets[i] = s.fresh(fmt.Sprint("s", i))
		}
	case r < 7: // a client removed
		s.ops[1].Add(1)
		if cur.shared != nil {
			perClient(gone)
		} else {
			n.secrets[gone] = nil
		}
	case r < 8: // one secret for every source
		s.ops[2].Add(1)
		n.shared = s.fresh("shared")
	default: // a secret for each client, none removed
		s.ops[3].Add(1)
		perClient(-1)
	}
	return n
}

// SetClients changing secrets and removing clients, on a stream server
// and a UDP server, every few milliseconds, while 6 stream clients and 2
// UDP clients send signed requests without pause (the stream ones
// reconnecting as their connections close), then Shutdown twice on each
// server while all that goes on (run with -race). Every request sent
// over a stream is answered or its connection closes: none waits for
// ever; every answer, over either, is to a request outstanding and
// signed with that request's secret; no request sent after SetClients
// took its client's secret (removed the client, or over UDP changed the
// secret) is answered; Shutdown returns nil within its context, having
// drained connections; and no goroutine is left. The clients' counts
// and the reasons connections closed are logged, and each reason must
// have happened.
func TestServersSetClientsShutdownRace(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const nTCP, nUDP = 6, 2
	addrs := make([]netip.Addr, nTCP+nUDP)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{127, 0, 0, byte(40 + i)})
		if c, err := net.ListenPacket("udp", netip.AddrPortFrom(addrs[i], 0).String()); err != nil {
			t.Skipf("no loopback address %s: %v", addrs[i], err)
		} else {
			c.Close()
		}
	}
	st := &raceState{}
	first := &raceTable{secrets: make([][]byte, len(addrs))}
	for i := range first.secrets {
		first.secrets[i] = st.fresh(fmt.Sprint("s", i))
	}
	st.table.Store(first)
	secret, clients := first.args(addrs)

	var evMu sync.Mutex
	closes := map[string]int{}
	events := peer.NewBus()
	defer events.Subscribe(func(_ context.Context, e peer.Event) {
		if e.Kind == peer.EventConnDown {
			why := "other"
			for _, w := range []string{"removed", "secret changed", "shutting down", "failed verification", "by the client"} {
				if strings.Contains(e.Reason, w) {
					why = w
				}
			}
			evMu.Lock()
			closes[why]++
			evMu.Unlock()
		}
	})()
	ln, err := Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ln, SchemeTCP, ServerConfig{Secret: secret, Clients: clients, SecretGrace: 20 * time.Millisecond,
		Events: events, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	usrv, err := NewUDPServer(pc, ServerConfig{Secret: secret, Clients: clients, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	userved := make(chan error, 1)
	go func() { userved <- usrv.Serve() }()

	var (
		stop, shutting                            atomic.Bool
		wg                                        sync.WaitGroup
		mu                                        sync.Mutex
		errs                                      []string
		sent, answered, cut, udpSent, udpAnswered atomic.Int64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}

	// A stream client keeps 4 requests outstanding, each signed with the
	// secret it dialed with (sticky, as a NAS that keeps its connection
	// through a rotation) or with the current one (a NAS moved to the new
	// secret on its old connection, which fails verification there), and
	// reconnects whenever its connection closes.
	session := func(i int, sticky bool) (answers int) {
		secret := st.table.Load().lookup(i)
		if secret == nil {
			secret = []byte("removed") // refused at once anyway
		}
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: addrs[i].AsSlice()}, Timeout: time.Second}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			if !shutting.Load() {
				fail("client %d: dial before Shutdown: %v", i, err)
			}
			return -1
		}
		defer c.Close()
		br := bufio.NewReader(c)
		type pending struct {
			auth    [16]byte
			secret  []byte
			removed bool
		}
		out := map[byte]pending{}
		id := byte(0)
		send := func() bool {
			s := secret
			if !sticky {
				if s = st.table.Load().lookup(i); s == nil {
					s = secret
				}
			}
			for id++; ; id++ {
				if _, busy := out[id]; !busy {
					break
				}
			}
			req, auth, _ := radius.EncodeRequest(accessReq(fmt.Sprint("nas", i)), id, s)
			removed := st.isRemoved(i, s) // before the write: SetClients returned before it
			c.SetWriteDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write(req); err != nil {
				return false
			}
			out[id] = pending{auth, s, removed}
			sent.Add(1)
			return true
		}
		for range 4 {
			if !send() {
				break
			}
		}
		for len(out) > 0 {
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			ans, err := radius.ReadFrame(br)
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				fail("client %d: %d requests neither answered nor their connection closed within 3s", i, len(out))
				return answers
			case err != nil: // closed: what is outstanding goes elsewhere
				cut.Add(int64(len(out)))
				return answers
			}
			p, ok := out[radius.Identifier(ans)]
			if !ok {
				fail("client %d: answer %d to no request outstanding", i, radius.Identifier(ans))
				return answers
			}
			delete(out, radius.Identifier(ans))
			if err := radius.VerifyResponse(ans, p.auth, p.secret, true); err != nil {
				fail("client %d: answer %d is not signed with its request's secret %q: %v", i, radius.Identifier(ans), p.secret, err)
			}
			if p.removed {
				fail("client %d: answer %d to a request sent on secret %q after its client was removed", i, radius.Identifier(ans), p.secret)
			}
			answers++
			answered.Add(1)
			if !stop.Load() {
				send()
			}
		}
		return answers
	}
	for i := range nTCP {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				n := session(i, i%2 == 0)
				if n < 0 && shutting.Load() {
					return
				}
				if n <= 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}

	// A UDP client sends one request after another, each signed with the
	// current secret, and waits briefly for each: a request dropped for
	// its secret gets none. An answer must verify against a request of
	// its Identifier sent in the last second.
	for i := nTCP; i < nTCP+nUDP; i++ {
		d := net.Dialer{LocalAddr: &net.UDPAddr{IP: addrs[i].AsSlice()}}
		c, err := d.Dial("udp", pc.LocalAddr().String())
		if err != nil {
			t.Fatalf("cannot send from %s: %v", addrs[i], err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := map[byte][]udpPending{}
			buf := make([]byte, 4096)
			for id := byte(0); !stop.Load(); id++ {
				s := st.table.Load().lookup(i)
				if s == nil {
					s = []byte("removed")
				}
				req, auth, _ := radius.EncodeRequest(accessReq(fmt.Sprint("nas", i)), id, s)
				changed := st.isChanged(i, s)
				now := time.Now()
				out[id] = append(dropOld(out[id], now), udpPending{auth, s, changed, now})
				c.Write(req)
				udpSent.Add(1)
				c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
				n, err := c.Read(buf)
				if err != nil {
					continue // none within 20ms, or refused once the server is closed
				}
				ans := buf[:n]
				if radius.Validate(ans) != nil {
					fail("udp client %d: a malformed answer", i)
					continue
				}
				var match *udpPending
				for k, p := range out[radius.Identifier(ans)] {
					if radius.VerifyResponse(ans, p.auth, p.secret, true) == nil {
						match = &out[radius.Identifier(ans)][k]
						break
					}
				}
				switch {
				case match == nil:
					fail("udp client %d: answer %d verifies against none of its requests of the last second", i, radius.Identifier(ans))
				case match.changed:
					fail("udp client %d: answer %d to a request sent on secret %q after SetClients took it", i, radius.Identifier(ans), match.secret)
				default:
					udpAnswered.Add(1)
				}
			}
		}()
	}

	// SetClients, without pause, on both servers; once each has returned,
	// the secrets it took are marked.
	changing := make(chan struct{})
	go func() {
		defer close(changing)
		for !stop.Load() {
			cur := st.table.Load()
			n := st.next(cur)
			st.table.Store(n)
			secret, clients := n.args(addrs)
			if err := srv.SetClients(secret, clients); err != nil {
				fail("SetClients: %v", err)
			}
			if err := usrv.SetClients(secret, clients); err != nil {
				fail("UDP SetClients: %v", err)
			}
			for i := range addrs {
				was, now := cur.lookup(i), n.lookup(i)
				if was != nil && now == nil {
					st.removed.Store(deadKey(i, was), true)
				}
				if was != nil && string(now) != string(was) {
					st.changed.Store(deadKey(i, was), true)
				}
			}
			srv.Stats()
			usrv.Stats()
			time.Sleep(time.Duration(1+rand.IntN(5)) * time.Millisecond)
		}
	}()

	time.Sleep(1500 * time.Millisecond)
	shutting.Store(true)
	const budget = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	var sw sync.WaitGroup
	shutdownErrs := make(chan error, 4)
	began := time.Now()
	for range 2 {
		sw.Add(2)
		go func() { defer sw.Done(); shutdownErrs <- srv.Shutdown(ctx) }()
		go func() { defer sw.Done(); shutdownErrs <- usrv.Shutdown(ctx) }()
	}
	sw.Wait()
	took := time.Since(began)
	close(shutdownErrs)
	for err := range shutdownErrs {
		if err != nil {
			t.Errorf("Shutdown: %v (after %v)", err, took)
		}
	}
	if took >= budget {
		t.Errorf("Shutdown took %v, its context %v", took, budget)
	}
	time.Sleep(50 * time.Millisecond) // traffic and SetClients on the closed servers
	stop.Store(true)
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); <-changing; close(clientsDone) }()
	select {
	case <-clientsDone:
	case <-time.After(10 * time.Second):
		t.Fatal("clients still running 10s after the end")
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if err := <-userved; err != nil {
		t.Errorf("UDP Serve: %v", err)
	}
	for _, e := range errs {
		t.Error(e)
	}
	evMu.Lock()
	defer evMu.Unlock()
	t.Logf("stream: %d requests sent, %d answered, %d outstanding when their connection closed; UDP: %d sent, %d answered; "+
		"SetClients: %d rotations, %d removals, %d to one secret, %d to one each; Shutdown took %v; closes %v",
		sent.Load(), answered.Load(), cut.Load(), udpSent.Load(), udpAnswered.Load(),
		st.ops[0].Load(), st.ops[1].Load(), st.ops[2].Load(), st.ops[3].Load(), took, closes)
	// What the test is for happened: traffic, and connections closed by
	// each cause.
	if answered.Load() < 500 || udpAnswered.Load() < 50 {
		t.Errorf("too little traffic answered: %d over streams, %d over UDP", answered.Load(), udpAnswered.Load())
	}
	for _, why := range []string{"removed", "secret changed", "failed verification", "shutting down"} {
		if closes[why] == 0 {
			t.Errorf("no connection closed with %q: %v", why, closes)
		}
	}
}

// udpPending is a request a UDP client of
// TestServersSetClientsShutdownRace sent.
type udpPending struct {
	auth    [16]byte
	secret  []byte
	changed bool // sent after SetClients took its secret
	at      time.Time
}

// dropOld drops the requests sent more than a second before now.
func dropOld(ps []udpPending, now time.Time) []udpPending {
	return slices.DeleteFunc(ps, func(p udpPending) bool { return now.Sub(p.at) > time.Second })
}
