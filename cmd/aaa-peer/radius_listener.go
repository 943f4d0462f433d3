package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"reflect"
	"sync"
	"time"

	servecore "github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/transport"
)

// radiusListener is one RADIUS --listen URL of the server: its socket,
// and a radpeer server for each shared secret, or table of [[client]]
// secrets, it has served with since a reload changed it (a generation). The socket is read here and what it
// yields goes to the newest generation: new connections (radius+tcp://,
// radsec://) and every datagram (radius://). radpeer servers take their
// secret once, at creation; a generation per secret changes it without
// closing the socket, so that no connection is refused and no datagram
// lost while it changes.
//
// An older generation stops taking anything new. Over a stream, its
// connections keep the secret they were verified with until they close:
// a NAS still on the old secret loses nothing, and a NAS that moved to
// the new one fails verification on its old connection, which the server
// closes, and reconnects to the new. The generation is closed once it has
// no connection left. Over UDP it is closed at once, after its handlers
// answer through the socket.
type radiusListener struct {
	url, bound string
	udp        bool
	ln         transport.Listener // stream
	pc         net.PacketConn     // UDP
	log        *slog.Logger
	// newGen makes a generation with sec, fed by a handoff listener
	// (stream) or packet conn (UDP).
	newGen func(sec radiusSecrets) (*radiusGen, error)

	mu       sync.Mutex
	gens     []*radiusGen // oldest first; the last one takes what is new
	ended    radiusListenerReport
	stopping bool          // removed or shut down: the socket's reader ends
	quit     chan struct{} // closed at shutdown: reapers close at once
	wg       sync.WaitGroup
}

// radiusGen is one radpeer server of a radiusListener.
type radiusGen struct {
	srv    radiusServer
	stats  func() radiusListenerReport
	conns  chan transport.Conn // stream: accepted connections, handed over
	dgrams chan datagram       // UDP: datagrams read, handed over
	done   chan struct{}       // closed when the generation takes nothing new
	once   sync.Once
	closed sync.Once
}

type datagram struct {
	b    []byte
	from net.Addr
}

// retire stops g taking anything new.
func (g *radiusGen) retire() { g.once.Do(func() { close(g.done) }) }

// close closes g's server (once: a reaper and the shutdown may both).
func (g *radiusGen) close(ctx context.Context, log *slog.Logger, addr string) {
	g.end(ctx, log, addr, g.srv.Close)
}

// shutdown ends retired generation g: a UDP server answers the datagrams
// it had taken before it closes (a datagram handed over as it retired is
// not lost); a stream server closes.
func (g *radiusGen) shutdown(ctx context.Context, log *slog.Logger, addr string) {
	end := g.srv.Close
	if u, ok := g.srv.(interface{ Shutdown(context.Context) error }); ok {
		end = u.Shutdown
	}
	g.end(ctx, log, addr, end)
}

func (g *radiusGen) end(ctx context.Context, log *slog.Logger, addr string, f func(context.Context) error) {
	g.closed.Do(func() {
		if err := f(ctx); err != nil {
			log.Debug("close", "addr", addr, "err", err)
		}
	})
}

// open reports g's open connections (stream; 0 for UDP).
func (g *radiusGen) open() int {
	if r := g.stats(); r.Stream != nil {
		return r.Stream.Open
	}
	return 0
}

// start serves rl's socket with a first generation of sec.
func (rl *radiusListener) start(sec radiusSecrets) error {
	g, err := rl.newGen(sec)
	if err != nil {
		return err
	}
	rl.gens = []*radiusGen{g}
	rl.serveGen(g)
	rl.wg.Add(1)
	go func() {
		defer rl.wg.Done()
		if rl.udp {
			rl.readLoop()
		} else {
			rl.acceptLoop()
		}
	}()
	return nil
}

func (rl *radiusListener) serveGen(g *radiusGen) {
	rl.wg.Add(1)
	go func() {
		defer rl.wg.Done()
		if err := g.srv.Serve(); err != nil {
			rl.log.Error("serve", "addr", rl.bound, "err", err)
		}
	}()
}

// current returns the generation that takes what is new, nil once rl is
// stopping.
func (rl *radiusListener) current() *radiusGen {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.stopping {
		return nil
	}
	return rl.gens[len(rl.gens)-1]
}

// handOff gives what send sends to the current generation, retrying on
// the next one when the generation retires meanwhile; false when rl is
// stopping.
func (rl *radiusListener) handOff(send func(*radiusGen) bool) bool {
	for {
		g := rl.current()
		if g == nil {
			return false
		}
		if send(g) {
			return true
		}
	}
}

func (rl *radiusListener) acceptLoop() {
	var backoff servecore.Backoff
	for {
		c, err := rl.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || rl.current() == nil {
				return
			}
			backoff.Wait(rl.log, servecore.KindAcceptFailed, "accept failed; retrying", "addr", rl.bound, "err", err)
			continue
		}
		backoff.Reset()
		if !rl.handOff(func(g *radiusGen) bool {
			select {
			case g.conns <- c:
				return true
			case <-g.done:
				return false
			}
		}) {
			c.Close()
		}
	}
}

func (rl *radiusListener) readLoop() {
	buf := make([]byte, radius.MaxLength+1)
	var backoff servecore.Backoff
	for {
		n, from, err := rl.pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || rl.current() == nil {
				return
			}
			backoff.Wait(rl.log, servecore.KindReadFailed, "RADIUS/UDP read failed; retrying", "addr", rl.bound, "err", err)
			continue
		}
		backoff.Reset()
		d := datagram{b: append([]byte(nil), buf[:n]...), from: from}
		rl.handOff(func(g *radiusGen) bool {
			select {
			case g.dgrams <- d:
				return true
			case <-g.done:
				return false
			}
		})
	}
}

// rotate serves what is new with a generation of sec; the one before
// retires (see radiusListener).
func (rl *radiusListener) rotate(sec radiusSecrets) error {
	g, err := rl.newGen(sec)
	if err != nil {
		return err
	}
	rl.mu.Lock()
	old := rl.gens[len(rl.gens)-1]
	rl.gens = append(rl.gens, g)
	rl.mu.Unlock()
	rl.serveGen(g)
	old.retire()
	rl.reap(old, time.Time{})
	return nil
}

// reapEvery is how often a retired stream generation is checked for
// connections left: radpeer.Server tells its open connections, not when
// the last one closes.
const reapEvery = 200 * time.Millisecond

// reap closes retired generation g once it has no connection left (UDP:
// at once), or at deadline (zero: none), or at shutdown, and folds its
// counters into rl's.
func (rl *radiusListener) reap(g *radiusGen, deadline time.Time) {
	rl.wg.Add(1)
	go func() {
		defer rl.wg.Done()
		t := time.NewTicker(reapEvery)
		defer t.Stop()
		for g.open() > 0 && (deadline.IsZero() || time.Now().Before(deadline)) {
			select {
			case <-t.C:
			case <-rl.quit:
				return // close closes it
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
		defer cancel()
		g.shutdown(ctx, rl.log, rl.bound)
		rl.mu.Lock()
		defer rl.mu.Unlock()
		for i, x := range rl.gens {
			if x == g {
				rl.gens = append(rl.gens[:i:i], rl.gens[i+1:]...)
				rl.ended = mergeRADIUSReports(rl.ended, g.stats())
				break
			}
		}
	}()
}

// drain is a removed listener's end: the socket takes nothing new, the
// connections get until shutdownBudget to finish (RADIUS has no DPR: a
// client sees its connection close and fails its pending requests over),
// the datagrams read are answered; then the socket is closed.
func (rl *radiusListener) drain() {
	rl.mu.Lock()
	rl.stopping = true
	gens := rl.gens
	rl.mu.Unlock()
	if rl.udp {
		// The socket stays open for the answers of the datagrams read:
		// a deadline ends the reader instead.
		_ = rl.pc.SetReadDeadline(time.Now())
	} else {
		rl.ln.Close()
	}
	deadline := time.Now().Add(shutdownBudget)
	for _, g := range gens {
		g.retire()
		rl.reap(g, deadline)
	}
	if rl.udp {
		rl.wg.Add(1)
		go func() {
			defer rl.wg.Done()
			for {
				rl.mu.Lock()
				n := len(rl.gens)
				rl.mu.Unlock()
				if n == 0 {
					break
				}
				select {
				case <-time.After(reapEvery):
				case <-rl.quit:
				}
			}
			rl.pc.Close()
		}()
	}
}

// close is the shutdown: the socket closes, every generation closes (its
// connections with it), bounded by ctx; then rl's goroutines have ended.
func (rl *radiusListener) close(ctx context.Context) {
	rl.mu.Lock()
	rl.stopping = true
	gens := append([]*radiusGen(nil), rl.gens...)
	select {
	case <-rl.quit:
	default:
		close(rl.quit)
	}
	rl.mu.Unlock()
	if rl.udp {
		rl.pc.Close()
	} else {
		rl.ln.Close()
	}
	for _, g := range gens {
		g.retire()
		g.close(ctx, rl.log, rl.bound)
	}
	rl.wg.Wait()
}

// report is rl's counters: those of the generations closed, plus those of
// the live ones.
func (rl *radiusListener) report() radiusListenerReport {
	rl.mu.Lock()
	r := rl.ended
	gens := append([]*radiusGen(nil), rl.gens...)
	rl.mu.Unlock()
	for _, g := range gens {
		r = mergeRADIUSReports(r, g.stats())
	}
	r.URL = rl.bound
	return r
}

// mergeRADIUSReports adds b's counters to a's: the numbers summed, the
// per-source tables merged by address (at most 256 addresses, as each
// server keeps, the rest under "other").
func mergeRADIUSReports(a, b radiusListenerReport) radiusListenerReport {
	switch {
	case b.Stream != nil:
		sum := radpeer.ServerStats{}
		if a.Stream != nil {
			sum = *a.Stream
		}
		addStats(&sum, b.Stream)
		a.Stream = &sum
	case b.UDP != nil:
		sum := radpeer.UDPServerStats{}
		if a.UDP != nil {
			sum = *a.UDP
		}
		addStats(&sum, b.UDP)
		a.UDP = &sum
	}
	return a
}

// maxSources bounds the per-source tables of a merged report, as radpeer
// bounds a server's.
const maxSources = 256

// addStats adds *src's fields to *dst's (pointers to the same struct
// type of radpeer's server statistics): integers summed, a
// map[string]uint64 by key, []radpeer.NASStats by address.
func addStats(dst, src any) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	for i := range d.NumField() {
		df, sf := d.Field(i), s.Field(i)
		switch v := df.Addr().Interface().(type) {
		case *map[string]uint64:
			*v = addBySource(*v, sf.Interface().(map[string]uint64))
		case *[]radpeer.NASStats:
			*v = addNAS(*v, sf.Interface().([]radpeer.NASStats))
		default:
			switch df.Kind() {
			case reflect.Uint64, reflect.Uint32:
				df.SetUint(df.Uint() + sf.Uint())
			case reflect.Int, reflect.Int64:
				df.SetInt(df.Int() + sf.Int())
			}
		}
	}
}

func addBySource(a, b map[string]uint64) map[string]uint64 {
	if len(b) == 0 {
		return a
	}
	out := make(map[string]uint64, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if _, ok := out[k]; !ok && len(out) >= maxSources {
			k = "other"
		}
		out[k] += v
	}
	return out
}

func addNAS(a, b []radpeer.NASStats) []radpeer.NASStats {
	if len(b) == 0 {
		return a
	}
	out := append([]radpeer.NASStats(nil), a...)
	at := make(map[string]int, len(out))
	for i, n := range out {
		at[n.Addr] = i
	}
	for _, n := range b {
		i, ok := at[n.Addr]
		if !ok && len(out) >= maxSources {
			i, ok = at["other"]
			n.Addr = "other"
		}
		if !ok {
			at[n.Addr] = len(out)
			out = append(out, n)
			continue
		}
		o := &out[i]
		if n.Name != "" && n.Addr != "other" {
			o.Name = n.Name // b is the newer generation's: its client's name
		}
		o.Received += n.Received
		o.Answered += n.Answered
		o.BadAuth += n.BadAuth
		if n.LastSeen.After(o.LastSeen) {
			o.LastSeen = n.LastSeen
		}
	}
	return out
}

// handoffListener is a generation's transport.Listener: the connections
// the radiusListener accepted and handed over.
type handoffListener struct {
	g    *radiusGen
	addr net.Addr
}

func (l handoffListener) Accept() (transport.Conn, error) {
	select {
	case c := <-l.g.conns:
		return c, nil
	case <-l.g.done:
		return nil, net.ErrClosed
	}
}

// Close retires the generation; the socket is the radiusListener's.
func (l handoffListener) Close() error { l.g.retire(); return nil }

func (l handoffListener) Addr() net.Addr { return l.addr }

// handoffPacketConn is a generation's net.PacketConn: it reads the
// datagrams the radiusListener read and handed over, and writes to the
// socket (also once retired: the answers of its handlers).
type handoffPacketConn struct {
	g  *radiusGen
	pc net.PacketConn
}

func (c handoffPacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	select {
	case d := <-c.g.dgrams:
		return copy(p, d.b), d.from, nil
	case <-c.g.done:
		return 0, nil, net.ErrClosed
	}
}

func (c handoffPacketConn) WriteTo(p []byte, to net.Addr) (int, error) { return c.pc.WriteTo(p, to) }
func (c handoffPacketConn) Close() error                               { c.g.retire(); return nil }
func (c handoffPacketConn) LocalAddr() net.Addr                        { return c.pc.LocalAddr() }

// The deadlines are the socket's, read by the radiusListener alone.
func (c handoffPacketConn) SetDeadline(time.Time) error      { return nil }
func (c handoffPacketConn) SetReadDeadline(time.Time) error  { return nil }
func (c handoffPacketConn) SetWriteDeadline(time.Time) error { return nil }
