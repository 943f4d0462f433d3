package client

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
)

// The additions to TestSimUDP of this file: what the client writes on its
// sockets (usimConn, before any loss), a test user's probes, and a flood
// phase that runs a server out of Identifiers.
//
// Every datagram a UDPPeer writes is recorded by request (User-Name) with
// its virtual time and a sequence number, whatever the network then does
// with it. From that record TestSimUDP checks, besides the counts at the
// servers:
//
//   - no datagram of a request is written after its Exchange returned: a
//     request complete (its caller's deadline, another server's answer)
//     is retransmitted nowhere;
//   - in the schedules with a test user (Policy.TestUser), each probe is
//     written once: a probe is one message, never retransmitted.
//
// The flood (an eighth of the schedules without the throttle, whose
// places would keep it below 256 requests a server; primary and
// secondary, MaxSockets 1 or 2, each socket's dial taking a while): once
// the main schedule is over and every server is back, and in service by
// its policy (what it decides of the sends before the heal decided),
// MaxSockets x 256 +
// 30 to 100 patient Access-Requests, one a millisecond, at servers that
// hold each for three quarters of an attempt's Timeout: the Identifiers
// run out and requests wait for one, for a freed one or a new socket's.
// In half of them the server taking them goes dead after the first few
// (the stall) for longer than the policy's down-timeout, requests going on
// coming one in 100 ms (a down-timeout starts with a request sent after
// the last reply), so that the requests waiting there for an Identifier
// are handed over (HandOver) to the next server. Its checks:
//
//   - every flood request is answered, within usimHealedBound of the last
//     one's start (after the stall): none waits for an Identifier freed
//     to no one, none stays boarded at the server it was handed over from;
//   - at a server, the flood requests first sent there are sent in the
//     order they started (one a millisecond, so the order they came to
//     it): the requests waiting for an Identifier get one in the order
//     they came, from a freed one as from a new socket. With the stall,
//     only at the stalled server (the requests handed over from it are
//     sent elsewhere after some started later).

// usimWrite is one datagram a client socket wrote.
type usimWrite struct {
	at   time.Time
	seq  int
	to   string
	sock string // the socket's local address
	pkt  []byte
}

// usimConn records what a UDPPeer's socket writes.
type usimConn struct {
	net.Conn
	n  *usimNet
	to string
}

func (c *usimConn) Write(b []byte) (int, error) {
	if radius.IsRequest(radius.Code(b)) {
		u, _ := radius.Attr(b, radius.AttrUserName)
		c.n.wmu.Lock()
		c.n.wseq++
		c.n.writes[string(u)] = append(c.n.writes[string(u)], usimWrite{at: time.Now(), seq: c.n.wseq, to: c.to, sock: c.LocalAddr().String(), pkt: bytes.Clone(b)})
		c.n.wmu.Unlock()
	}
	return c.Conn.Write(b)
}

// dial is the UDPPeers' Dial: after dialDelay (a name's lookup), a socket
// whose writes are recorded.
func (n *usimNet) dial(ctx context.Context, addr string) (net.Conn, error) {
	if d := n.dialDelay; d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c, err := n.Net.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &usimConn{Conn: c, n: n, to: addr}, nil
}

// writesOf returns the datagrams written for user.
func (n *usimNet) writesOf(user string) []usimWrite {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	return slices.Clone(n.writes[user])
}

// usimProbeUser is the test user's name in the schedules that have one.
const usimProbeUser = "probe"

// usimTestUser sets a test user in half the schedules (a source of its
// own): the policy's probes are its Access-Requests, one attempt each.
func usimTestUser(seed uint64, cfg *Config) bool {
	if rand.New(rand.NewPCG(seed, 0x9e0be)).IntN(2) != 0 {
		return false
	}
	cfg.Policy = &policy.Config{RequestTimeout: cfg.UDP.Timeout, Retries: cfg.UDP.Retries, TestUser: true}
	cfg.RADIUSTestRequest = func(string) *radius.Request {
		r := &radius.Request{Code: lradius.CodeAccessRequest}
		r.Attributes.Add(radius.AttrUserName, lradius.Attribute(usimProbeUser))
		r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("pw"))
		return r
	}
	return true
}

// checkProbes: every probe the client wrote, written once.
func (n *usimNet) checkProbes(t *testing.T) (probes int) {
	count := map[string]int{}
	var order []string
	for _, w := range n.writesOf(usimProbeUser) {
		k := w.to + "\x00" + string(w.pkt)
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	for _, k := range order {
		if c := count[k]; c > 1 {
			t.Errorf("a probe of the test user was written %d times to %s: a probe is one message, never retransmitted", c, k[:strings.IndexByte(k, 0)])
		}
	}
	return len(order)
}

// checkAfterReturn: nothing of user written after its Exchange returned.
func (n *usimNet) checkAfterReturn(t *testing.T, user string, done time.Time) {
	for _, w := range n.writesOf(user) {
		if w.at.After(done) {
			t.Errorf("%s: a datagram written to %s %v after its Exchange returned: a complete request is retransmitted", user, w.to, w.at.Sub(done))
			return
		}
	}
}

// usimFlood is the flood phase's plan, drawn from its own source.
type usimFlood struct {
	sockets int
	n       int           // requests
	hold    time.Duration // how long a server takes to answer a flood request
	stall   int           // from the request of this index on, once the first is sent, the server taking them goes dead (0: no stall)
	stalled atomic.Bool   // the stall began: the healthy server's policy may hold it down
}

// usimFloodPlan decides whether seed floods (an eighth of the schedules
// without the throttle) and sets cfg for it: primary and secondary, so
// that one server takes the flood, at most 1 or 2 sockets, and a dial
// that takes a while (requests wait for it).
func usimFloodPlan(seed uint64, cfg *Config, n *usimNet, throttled bool) *usimFlood {
	rng := rand.New(rand.NewPCG(seed, 0xf100d))
	if throttled || rng.IntN(8) != 0 {
		return nil
	}
	f := &usimFlood{sockets: 1 + rng.IntN(2)}
	f.n = f.sockets*256 + 30 + rng.IntN(70)
	// Off the millisecond the requests start on, as the dial's delay: no
	// reply, and no socket opened, in the instant a request starts (whose
	// Submit would take a new socket's Identifier as its dial's goroutine
	// hands them to the requests that waited: a race of two goroutines in
	// one instant, which the order check leaves out only with the stall).
	f.hold = cfg.UDP.Timeout*3/4 + 300*time.Microsecond
	if rng.IntN(2) == 0 {
		// Early: the few requests the server answered before free too
		// few Identifiers for all that wait, which then still wait at
		// the down-timeout.
		f.stall = 5 + rng.IntN(30)
	}
	cfg.Mode = PrimarySecondary
	cfg.UDP.MaxSockets = f.sockets
	n.dialDelay = time.Duration(20+rng.IntN(100))*time.Millisecond + 500*time.Microsecond
	return f
}

func usimFloodUser(i int) string { return fmt.Sprintf("f%d", i) }

// isFloodUser: the server holds a flood request for usimFlood.hold.
func isFloodUser(u []byte) bool { return len(u) > 1 && u[0] == 'f' }

// run is the flood phase, once the main schedule is over and every server
// answers again; it checks what it sent.
func (f *usimFlood) run(t *testing.T, c *Client, n *usimNet, healed time.Time, timeout time.Duration, retries, servers int) (answered, failed uint64) {
	// What the policy decides of the datagrams sent before the heal is
	// decided first: a probe (one attempt, a Timeout) or a down-timeout
	// (Timeout x Retries) of a send the server, dead then, never answered
	// puts it out of service after the heal, for a hold-down. The flood
	// started while one was pending (a server probing, its probe sent just
	// before the heal) had, once its probe timed out, no server in service
	// but the stalled one, whose refused requests then rightly got its
	// refusal (seeds 49630, 44468).
	time.Sleep(time.Until(healed.Add(timeout*time.Duration(retries) + policyTick)))
	// Then every configured server in service, or probing with its probe
	// still to claim (without a test user a real request probes it: the
	// flood's first does, to a server that answers). With a probe out,
	// its outcome is awaited.
	for range 300 {
		ok := true
		if c.group != nil {
			for _, m := range c.ros.Load().order {
				if s := c.group.State(m.index); !s.Takes() && !c.group.WantsProbe(m.index) {
					ok = false
				}
			}
		}
		if ok {
			break
		}
		time.Sleep(time.Second)
	}
	type outcome struct {
		user  string
		start time.Time
		done  time.Time
		resp  *lradius.Packet
		err   error
	}
	var outs []*outcome
	var wg sync.WaitGroup
	stalledAddr := ""
	// The stall outlasts the down-timeout, which starts with the first
	// request sent after the last reply.
	stallFor := timeout*time.Duration(retries+1) + 2*time.Second
	var stallEnd time.Time
	for i := 0; ; i++ {
		switch {
		case i < f.n:
			time.Sleep(time.Millisecond)
		case stalledAddr != "" && time.Now().Before(stallEnd):
			// Requests go on coming, one in 100 ms, while the server is
			// dead: they start its down-timeout.
			time.Sleep(100 * time.Millisecond)
		}
		if i >= f.n && (stalledAddr == "" || !time.Now().Before(stallEnd)) {
			break
		}
		if f.stall > 0 && i >= f.stall && stalledAddr == "" {
			// The server that took the first flood request goes dead,
			// when another is configured to take its requests (the
			// reconfiguration may have left one).
			if ws := n.writesOf(usimFloodUser(0)); len(ws) > 0 && len(c.ros.Load().order) > 1 {
				stalledAddr = ws[0].to
				f.stalled.Store(true)
				n.mu.Lock()
				n.servers[stalledAddr].dead = true
				n.mu.Unlock()
				stallEnd = time.Now().Add(stallFor)
				wg.Go(func() {
					time.Sleep(stallFor)
					n.mu.Lock()
					n.servers[stalledAddr].dead = false
					n.mu.Unlock()
				})
			}
		}
		o := &outcome{}
		outs = append(outs, o)
		o.user, o.start = usimFloodUser(i), time.Now()
		r := &radius.Request{Code: lradius.CodeAccessRequest}
		r.Attributes.Add(radius.AttrUserName, lradius.Attribute(o.user))
		r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("pw"))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			resp, err := c.Exchange(ctx, r)
			o.done, o.err = time.Now(), err
			if resp != nil {
				o.resp = resp.Packet
			}
		})
	}
	last := maxTime(time.Now(), stallEnd)
	wg.Wait()
	bound := usimHealedBound(timeout, retries, servers)
	// The first write of each, by server, in the order they started.
	byServer := map[string][]int{}
	firsts := make([]usimWrite, len(outs))
	for i, o := range outs {
		if o.err != nil || o.resp == nil || o.resp.Code != lradius.CodeAccessAccept {
			failed++
			t.Errorf("flood %s: not answered (err %v), every server answering but the stalled one (%q) for a while", o.user, o.err, stalledAddr)
		} else {
			answered++
		}
		if late := o.done.Sub(last); late > bound {
			t.Errorf("flood %s: returned %v after the last flood request started and every server answered (err %v)", o.user, late, o.err)
		}
		n.checkAfterReturn(t, o.user, o.done)
		if ws := n.writesOf(o.user); len(ws) > 0 {
			firsts[i] = ws[0]
			byServer[ws[0].to] = append(byServer[ws[0].to], i)
		}
	}
	// A request placed (given its Identifier) is written at once, in the
	// same instant of virtual time: one that started later and was placed
	// later is never written at an earlier instant. Within one instant,
	// requests placed by two goroutines (the readers of two sockets, two
	// timers releasing Identifiers) may be written in either order; one
	// goroutine writes what it placed in the order it placed it. Without
	// the stall no two goroutines place requests on one socket in one
	// instant (the replies of a socket come on its reader, no timer
	// expires, a new socket's waiting requests are placed by its dial),
	// so there the order on one socket within an instant counts too.
	for addr, is := range byServer {
		if stalledAddr != "" && addr != stalledAddr {
			continue
		}
		var latest usimWrite // the latest first write of those started before
		latestI := -1
		inInstant := map[string]int{} // socket and instant: the index of the highest-seq write of those started before
		for _, i := range is {
			w := firsts[i]
			key := w.sock + "\x00" + w.at.String()
			bad := -1
			if latestI >= 0 && w.at.Before(latest.at) {
				bad = latestI
			} else if j, ok := inInstant[key]; ok && stalledAddr == "" && firsts[j].seq > w.seq {
				bad = j
			}
			if bad >= 0 {
				t.Errorf("at %s flood %s, started %v after %s, was first sent %v before it (on the same socket: %v): requests waiting for an Identifier are not served in the order they came",
					addr, outs[i].user, outs[i].start.Sub(outs[bad].start), outs[bad].user, firsts[bad].at.Sub(firsts[i].at), firsts[i].sock == firsts[bad].sock)
				break
			}
			if latestI < 0 || w.at.After(latest.at) {
				latest, latestI = w, i
			}
			if j, ok := inInstant[key]; !ok || firsts[j].seq < w.seq {
				inInstant[key] = i
			}
		}
	}
	return answered, failed
}
