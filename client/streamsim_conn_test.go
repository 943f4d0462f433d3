package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/transport"
)

// This file is TestSimRADIUSStream's view of each connection the client
// opens (ssimNet, ssimConn: the client's end of every connection,
// wrapping what the server's dial returns), the faults of one connection
// of a server (ssimConnFaults) and the invariants checked on the wire and
// on the client's waiting requests.
//
// Faults of one connection, the others of its server going on (the
// server-wide faults of runSSim act on every connection of a server at
// once): a connection hung (nothing it carries reaches the client for a
// while: its watchdog goes SUSPECT, its requests fail over, the answers
// come late), a connection lost (hung, then its server answers the
// watchdog's Status-Server again but the answers of the requests it
// carries are lost for a few seconds, then it is reset), and a
// connection reset alone. They run in seeds with MaxConns 2 or 3, after
// a burst that opens the servers' further connections.
//
// Invariants:
//   - a request is never written twice on one connection (RFC 6613
//     2.6.1: no retransmission over the same connection);
//   - a request is not written on a connection of a server while it is
//     pending on another of that server's connections whose watchdog is
//     OKAY (RFC 6613 2.6.1, radpeer's Avoids). Seen from the wire: it
//     was written there, no answer with its Identifier reached the
//     client, the connection is open, and no Status-Server of that
//     connection has been unanswered for the last 100 ms (its watchdog
//     goes SUSPECT only on a timer expiry with a Status-Server
//     unanswered, and any message received makes it OKAY again), and
//     that connection is not closed by the end of the instant of the
//     write (ssimSuspect). A connection radpeer recycled (its
//     Identifiers taken by requests that timed out) sends no more
//     Status-Server, its watchdog gone to its replacement, but it is
//     avoided until it closes all the same;
//   - a request parked (waiting for a view change) is not still parked
//     5 to 10 s after a member of the current view could take it (the
//     Client's pick), as TestSim's watchParked: a change that lifts what
//     it had to avoid, and makes no new view, leaves it waiting.

// ssimNet is the client's end of the connections of one schedule.
type ssimNet struct {
	mu      sync.Mutex
	byURL   map[string][]*ssimConn // open, in the order dialed
	servers []*radServer           // by index of urls
	// oneClient: each server's connections are of one radpeer.Peer
	// (no reconfiguration replaces it), for the check across them.
	oneClient bool
	tw        time.Duration // the watchdog's Tw
	// refused: servers down (their process gone, the port closed): a
	// dial to them fails (streamsim_recycle_test.go).
	refused map[string]bool
	errs    []string
	// suspects: writes the check of RFC 6613 2.6.1 found while the
	// connection the request is pending on was open, judged at the end
	// of their instant (ssimSuspect).
	suspects []ssimSuspect
	tracef   func(string, ...any)
}

func newSSimNet(tracef func(string, ...any)) *ssimNet {
	return &ssimNet{byURL: map[string][]*ssimConn{}, refused: map[string]bool{}, tracef: tracef}
}

func (n *ssimNet) violation(format string, args ...any) {
	msg := fmt.Sprintf("%v ", time.Now().Format("04:05.000")) + fmt.Sprintf(format, args...)
	n.mu.Lock()
	if len(n.errs) < 20 {
		n.errs = append(n.errs, msg)
	}
	n.mu.Unlock()
}

func (n *ssimNet) violations() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	v := append([]string(nil), n.errs...)
	for _, s := range n.suspects {
		if len(v) >= 20 {
			break
		}
		v = append(v, s.msg)
	}
	return v
}

// ssimSuspect is a request written on a connection of a server while it
// is pending on y, another of that server's connections, open and OKAY
// as the wire shows them at the write. The wire lags radpeer: radpeer
// decides to close a connection under its lock (a link's failover closes
// its recycled connections and hands their requests over; a hand-over or
// the end of its last live request closes a recycled connection, and the
// Client looks again at what waited on its EventConnDown) and the close
// reaches the wire after the lock, on the goroutine that held it, while
// the requests pending there may already have been sent on another
// connection of the server: the scheduler orders the two. So the write
// is a violation only if y is still open by the end of its instant: in
// the synctest bubble the clock does not move while a goroutine can run,
// and nothing between radpeer's decision and the close waits for time
// (excuseLocked). Any close of y in that instant excuses it (a fault's
// reset too): the check may miss a violation then, never make one up.
type ssimSuspect struct {
	y   *ssimConn
	at  time.Time
	msg string
}

// ssimExcused counts the suspects excused, over the schedules of a run.
var ssimExcused atomic.Int64

// excuseLocked drops the suspects pending on y written in the instant
// now, y having just closed; n.mu is held.
func (n *ssimNet) excuseLocked(y *ssimConn, now time.Time) {
	k := len(n.suspects)
	n.suspects = slices.DeleteFunc(n.suspects, func(s ssimSuspect) bool { return s.y == y && s.at.Equal(now) })
	ssimExcused.Add(int64(k - len(n.suspects)))
}

// dialer wraps dial's connections.
func (n *ssimNet) dialer(dial func(ctx context.Context, url string) (transport.Conn, error)) func(ctx context.Context, url string) (transport.Conn, error) {
	seq := 0
	return func(ctx context.Context, url string) (transport.Conn, error) {
		n.mu.Lock()
		refused := n.refused[url]
		n.mu.Unlock()
		if refused {
			return nil, fmt.Errorf("dial %s: connection refused", url)
		}
		c, err := dial(ctx, url)
		if err != nil {
			return nil, err
		}
		n.mu.Lock()
		seq++
		sc := n.addLocked(c, url, fmt.Sprintf("%s#%d", url, seq))
		n.mu.Unlock()
		go sc.pump()
		return sc, nil
	}
}

// addLocked makes c, just dialed to url, one of the open connections,
// named name; n.mu is held.
func (n *ssimNet) addLocked(c transport.Conn, url, name string) *ssimConn {
	sc := &ssimConn{Conn: c, n: n, url: url, name: name, more: make(chan struct{}, 1), closed: make(chan struct{}),
		pending: map[byte]string{}, written: map[string]bool{}, idleSince: time.Now()}
	n.byURL[url] = append(n.byURL[url], sc)
	return sc
}

// open returns the open connections to url.
func (n *ssimNet) open(url string) []*ssimConn {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*ssimConn(nil), n.byURL[url]...)
}

// ssimConn is the client's end of one connection.
type ssimConn struct {
	transport.Conn
	n         *ssimNet
	url, name string
	more      chan struct{} // a message queued (cap 1)
	closed    chan struct{}
	closeOnce sync.Once

	// Under n.mu.
	q          [][]byte // read ahead, not yet handed to the client
	qerr       error
	hold       chan struct{} // hung: closed when it ends
	lose       bool          // answers of requests are lost
	gone       bool
	pending    map[byte]string // Identifier -> User-Name ("": a Status-Server) written, unanswered
	statusOut  int             // Status-Servers written, unanswered
	idleSince  time.Time       // since when statusOut is 0
	written    map[string]bool // User-Names ever written here
	lastStatus time.Time       // of a Status-Server
}

// pump reads the server's messages ahead: a hung connection holds them
// from the client, not from the server.
func (sc *ssimConn) pump() {
	for {
		m, err := sc.Conn.ReadMessage()
		sc.n.mu.Lock()
		if err != nil {
			sc.qerr = err
		} else {
			sc.q = append(sc.q, m)
		}
		sc.n.mu.Unlock()
		select {
		case sc.more <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

func radAnswer(code byte) bool {
	switch lradius.Code(code) {
	case lradius.CodeAccessAccept, lradius.CodeAccessReject, lradius.CodeAccountingResponse, lradius.CodeAccessChallenge:
		return true
	}
	return false
}

// radUser returns the User-Name of a RADIUS packet ("" if none).
func radUser(b []byte) string {
	for i := 20; i+2 <= len(b); {
		t, l := b[i], int(b[i+1])
		if l < 2 || i+l > len(b) {
			return ""
		}
		if t == 1 {
			return string(b[i+2 : i+l])
		}
		i += l
	}
	return ""
}

func (sc *ssimConn) ReadMessage() ([]byte, error) {
	for {
		sc.n.mu.Lock()
		if h := sc.hold; h != nil {
			sc.n.mu.Unlock()
			select {
			case <-h:
			case <-sc.closed:
				return nil, net.ErrClosed
			}
			continue
		}
		if len(sc.q) > 0 {
			m := sc.q[0]
			sc.q = sc.q[1:]
			if len(m) >= 20 && radAnswer(m[0]) {
				if u, ok := sc.pending[m[1]]; ok {
					if u != "" && sc.lose {
						sc.n.mu.Unlock()
						continue // lost: still pending here
					}
					delete(sc.pending, m[1])
					if u == "" {
						if sc.statusOut--; sc.statusOut == 0 {
							sc.idleSince = time.Now()
						}
					}
				}
			}
			sc.n.mu.Unlock()
			return m, nil
		}
		if err := sc.qerr; err != nil {
			sc.goneLocked()
			sc.n.mu.Unlock()
			return nil, err
		}
		sc.n.mu.Unlock()
		select {
		case <-sc.more:
		case <-sc.closed:
			return nil, net.ErrClosed
		}
	}
}

// goneLocked takes sc out of the open connections; n.mu is held.
func (sc *ssimConn) goneLocked() {
	if sc.gone {
		return
	}
	sc.gone = true
	sc.n.excuseLocked(sc, time.Now())
	l := sc.n.byURL[sc.url]
	for i, x := range l {
		if x == sc {
			sc.n.byURL[sc.url] = append(l[:i:i], l[i+1:]...)
			break
		}
	}
}

func (sc *ssimConn) WriteMessages(msgs ...[]byte) error {
	sc.n.mu.Lock()
	for _, m := range msgs {
		if len(m) < 20 {
			continue
		}
		switch lradius.Code(m[0]) {
		case lradius.CodeStatusServer:
			sc.lastStatus = time.Now()
			if u, ok := sc.pending[m[1]]; !ok || u != "" {
				sc.statusOut++
			}
			sc.pending[m[1]] = ""
		case lradius.CodeAccessRequest, lradius.CodeAccountingRequest:
			u := radUser(m)
			if u == "" {
				continue
			}
			if !sc.gone {
				sc.checkWriteLocked(u)
			}
			sc.written[u] = true
			if old, ok := sc.pending[m[1]]; ok && old == "" {
				sc.statusOut--
			}
			sc.pending[m[1]] = u
		}
	}
	sc.n.mu.Unlock()
	return sc.Conn.WriteMessages(msgs...)
}

// checkWriteLocked checks the write of u's request on sc; n.mu is held.
func (sc *ssimConn) checkWriteLocked(u string) {
	if sc.written[u] {
		sc.n.errsAppendLocked("request %s written twice on connection %s (RFC 6613 2.6.1: no retransmission on one connection)", u, sc.name)
	}
	now := time.Now()
	for _, y := range sc.n.byURL[sc.url] {
		if !sc.n.oneClient || y == sc || y.gone || y.statusOut > 0 || now.Sub(y.idleSince) < 100*time.Millisecond {
			continue
		}
		for _, pu := range y.pending {
			if pu == u {
				msg := fmt.Sprintf("%v request %s written on %s while pending on %s, whose watchdog is OKAY (no Status-Server unanswered for %v; %d Identifiers pending there at the write, open by the end of that instant) (RFC 6613 2.6.1)",
					now.Format("04:05.000"), u, sc.name, y.name, now.Sub(y.idleSince), len(y.pending))
				sc.n.suspects = append(sc.n.suspects, ssimSuspect{y: y, at: now, msg: msg})
				break
			}
		}
	}
}

func (n *ssimNet) errsAppendLocked(format string, args ...any) {
	if len(n.errs) < 20 {
		n.errs = append(n.errs, fmt.Sprintf("%v ", time.Now().Format("04:05.000"))+fmt.Sprintf(format, args...))
	}
}

func (sc *ssimConn) Close() error {
	sc.n.mu.Lock()
	sc.goneLocked()
	sc.n.mu.Unlock()
	sc.closeOnce.Do(func() { close(sc.closed) })
	return sc.Conn.Close()
}

// hang holds what sc carries to the client for d; then, when lose, the
// answers of requests are lost for d2 and sc is reset.
func (sc *ssimConn) hang(d time.Duration, lose bool, d2 time.Duration) {
	h := make(chan struct{})
	sc.n.mu.Lock()
	sc.hold = h
	sc.n.mu.Unlock()
	time.Sleep(d)
	sc.n.mu.Lock()
	sc.hold = nil
	sc.lose = lose
	sc.n.mu.Unlock()
	close(h)
	if lose {
		time.Sleep(d2)
		sc.n.tracef("fault: %s reset, its answers lost for %v", sc.name, d2)
		sc.Close()
	}
}

// hangThroughSuspect hangs sc until back after its watchdog goes
// SUSPECT (one Tw after the Status-Server it has unanswered, or sends
// next), before it goes DOWN (a Tw later); then, when lose, the answers
// of requests are lost until resetAt, when sc is reset.
func (sc *ssimConn) hangThroughSuspect(back time.Duration, lose bool, resetAt time.Time) {
	start := time.Now()
	h := make(chan struct{})
	sc.n.mu.Lock()
	sc.hold = h
	ts := time.Time{}
	if sc.statusOut > 0 {
		ts = sc.lastStatus
	}
	sc.n.mu.Unlock()
	for ts.IsZero() && time.Since(start) < 2*sc.n.tw {
		time.Sleep(100 * time.Millisecond)
		sc.n.mu.Lock()
		if sc.lastStatus.After(start) {
			ts = sc.lastStatus
		}
		gone := sc.gone
		sc.n.mu.Unlock()
		if gone {
			break
		}
	}
	if ts.IsZero() {
		ts = start
	}
	time.Sleep(time.Until(ts.Add(sc.n.tw + back)))
	sc.n.mu.Lock()
	sc.hold = nil
	sc.lose = lose
	sc.n.mu.Unlock()
	close(h)
	if lose {
		time.Sleep(time.Until(resetAt))
		sc.n.tracef("fault: %s reset, its answers lost since %v", sc.name, ts.Add(sc.n.tw+back).Format("04:05.000"))
		sc.Close()
	}
}

// ssimConnFaults runs the faults of one connection until stop is closed,
// on the servers from first (the others stay healthy).
func ssimConnFaults(rng *rand.Rand, n *ssimNet, urls []string, first int, stop <-chan struct{}, wg *sync.WaitGroup) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(2+rng.IntN(10)) * time.Second):
		}
		if first >= len(urls) {
			continue
		}
		u := urls[first+rng.IntN(len(urls)-first)]
		cs := n.open(u)
		if len(cs) < 2 {
			continue
		}
		sc := cs[rng.IntN(len(cs))]
		k := rng.IntN(5)
		if first > 0 {
			// Server s0 stays healthy: the schedules check that a
			// request with the default deadline (one failover detection
			// and an answer) is answered, which a request that meets a
			// hung connection after another of one server cannot be.
			// Only resets there.
			k = 2
		}
		switch k {
		case 3, 4:
			// A cascade: every connection of the server hangs, each
			// until a moment after its watchdog went SUSPECT (its
			// requests fail over, to the other servers, which freeze a
			// moment later); one comes back answering the watchdog but
			// losing its requests' answers, the rest come back whole;
			// the other servers go SUSPECT and their requests come back
			// (the server's connections they were pending on: the
			// losing one OKAY, the others answered them); the losing
			// connection is reset; the others thaw a while later.
			si := slices.Index(urls, u)
			t0 := time.Now()
			a := time.Duration(4+rng.IntN(5)) * time.Second
			resetAt := t0.Add(a + 2*n.tw + time.Duration(2+rng.IntN(5))*time.Second)
			after := time.Duration(12+rng.IntN(9)) * time.Second
			n.tracef("fault: a cascade at s%d: its %d connections hung through SUSPECT, %s then loses its answers until %v; the others frozen after %v until %v",
				si, len(cs), sc.name, resetAt.Format("04:05.000"), a, resetAt.Add(after).Format("04:05.000"))
			for _, x := range cs {
				back := time.Duration(500+rng.IntN(3500)) * time.Millisecond
				wg.Go(func() { x.hangThroughSuspect(back, x == sc, resetAt) })
			}
			time.Sleep(a)
			var frozen []*radServer
			for i := first; i < len(urls); i++ {
				if i != si {
					frozen = append(frozen, n.servers[i])
					n.servers[i].faults.Freeze()
				}
			}
			time.Sleep(time.Until(resetAt.Add(after)))
			n.tracef("fault: the cascade's others thawed")
			for _, s := range frozen {
				s.faults.Thaw()
			}
		case 0:
			d := time.Duration(1+rng.IntN(20)) * time.Second
			n.tracef("fault: %s hung for %v (%d open to the server)", sc.name, d, len(cs))
			wg.Go(func() { sc.hang(d, false, 0) })
		case 1:
			d, d2 := time.Duration(2+rng.IntN(14))*time.Second, time.Duration(1+rng.IntN(6))*time.Second
			n.tracef("fault: %s hung for %v, then its answers lost (%d open to the server)", sc.name, d, len(cs))
			wg.Go(func() { sc.hang(d, true, d2) })
		case 2:
			n.tracef("fault: %s reset (%d open to the server)", sc.name, len(cs))
			sc.Close()
		}
	}
}

// ssimParked watches the requests of one Client that waited (onWait):
// a request still parked 5 to 10 s after a member of the view could take
// it was forgotten (ssimParkedLooks).
//
// Only while the Client holds it: once submitted to a server
// (beforeSent), a request that found no free Identifier waits in the
// server's queue (radpeer.Peer's waiting), still in state call.Parked
// (radpeer boards it, InFlight, only as an Identifier frees), and pick
// names that server, which took it. Counted as parked, such requests
// made the violations of seeds 3849, 4636, 6869 and 7019 of 8,000: every
// one was in the server's queue, behind OKAY connections with no free
// Identifier (in three of them mostly held by requests that had ended:
// radpeer recycled such a connection only when a request came, see
// TestRADIUSWaitingRequestsGoOnceTheReservationsGoStale). It is the
// Client's again when it waits next (onWait): a hand-back, or a refusal
// of that submit.
type ssimParked struct {
	c     *Client
	n     *ssimNet
	mu    sync.Mutex
	calls map[*call.Call]*ssimLooks // requests that waited, by the Client or a server
}

// ssimLooks is what the watch knows of a request that waited.
type ssimLooks struct {
	n     int  // looks in a row that found it parked while a member could take it
	taken bool // submitted to a server since it last waited
}

var ssimWatchOf sync.Map // *call.Call that waited -> its *ssimParked

// ssimParkedLooks: the looks, 5 s apart, that find a request parked
// while a member could take it before that is a violation (5 to 10 s).
// A connection recycled (radpeer's recycleStale) lifts what a request
// pending on it had to avoid: its close, and its replacement's opening,
// make a new view (Client.bump), and such a request goes at once (before
// 6b4bdf4 the replacement's opening made none, and such a request waited
// for the next view change, 4 to 7 s at seeds 529 and 665 with 1,500
// seeds, which kept this at 3 looks).
const ssimParkedLooks = 2

var ssimParkedBy sync.Map // the first *member of a Client -> *ssimParked

// ssimWaited is onWait for TestSimRADIUSStream.
func ssimWaited(cl *call.Call, v *avail, _ string) {
	if len(v.ros.all) == 0 {
		return
	}
	x, ok := ssimParkedBy.Load(v.ros.all[0])
	if !ok {
		return
	}
	w := x.(*ssimParked)
	w.mu.Lock()
	if l, ok := w.calls[cl]; ok {
		l.taken = false
	} else {
		w.calls[cl] = &ssimLooks{}
		ssimWatchOf.Store(cl, w)
	}
	w.mu.Unlock()
}

// ssimSent is beforeSent for TestSimRADIUSStream: the requests a server
// took (or refused: those wait next, onWait) leave the Client's hands.
func ssimSent(calls []*call.Call) {
	for _, cl := range calls {
		x, ok := ssimWatchOf.Load(cl)
		if !ok {
			continue
		}
		w := x.(*ssimParked)
		w.mu.Lock()
		if l, ok := w.calls[cl]; ok {
			l.taken, l.n = true, 0
		}
		w.mu.Unlock()
	}
}

// watchParked starts the watch of c; the returned function stops it.
func (n *ssimNet) watchParked(c *Client) (stop func()) {
	w := &ssimParked{c: c, n: n, calls: map[*call.Call]*ssimLooks{}}
	key := c.view().ros.all[0]
	ssimParkedBy.Store(key, w)
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			v := c.view()
			w.mu.Lock()
			for cl, l := range w.calls {
				if cl.IsDone() {
					delete(w.calls, cl)
					ssimWatchOf.Delete(cl)
					continue
				}
				if cl.State() != call.Parked || l.taken {
					l.n = 0
					continue
				}
				m := c.pick(cl, v)
				if m == nil {
					l.n = 0
					continue
				}
				if l.n++; l.n == ssimParkedLooks {
					n.violation("request %s parked for %v while %s, in service, could take it (view %d)", ssimCallUser(cl), (ssimParkedLooks-1)*5*time.Second, m.spec.Name, v.gen)
				}
			}
			w.mu.Unlock()
		}
	}()
	return func() {
		close(done)
		<-ended
		ssimParkedBy.Delete(key)
		w.mu.Lock()
		for cl := range w.calls {
			ssimWatchOf.Delete(cl)
		}
		w.mu.Unlock()
	}
}

func ssimCallUser(cl *call.Call) string { return fmt.Sprint(cl.Ref) }
