package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/internal/memudp"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
)

// RADIUS over UDP through Client on an in-memory network (package
// memudp), inside synctest bubbles: exact virtual times. These tests
// carry over what radudp.Client's tests checked, for the one dispatch
// core.

// arrival is one datagram a memory server was sent.
type arrival struct {
	at   time.Time
	code lradius.Code
	user string
}

// memNet is a memudp network whose drop hook records what reaches each
// server address, loses what is sent to a hung server or comes from a
// server whose answers are lost, and runs an extra hook.
type memNet struct {
	*memudp.Net
	mu       sync.Mutex
	got      map[string][]arrival
	deaf     map[string]func(arrival) bool // what a server receives and does not answer
	lostFrom map[string]bool
	servers  map[string]bool
	hook     func(from, to string, b []byte) // extra observer, nil: none
}

func newMemNet() *memNet {
	n := &memNet{Net: memudp.New(), got: map[string][]arrival{}, deaf: map[string]func(arrival) bool{}, lostFrom: map[string]bool{}, servers: map[string]bool{}}
	n.SetDrop(n.drop)
	return n
}

func (n *memNet) drop(from, to string, b []byte) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hook != nil {
		n.hook(from, to, b)
	}
	if n.servers[to] {
		u, _ := radius.Attr(b, radius.AttrUserName)
		a := arrival{at: time.Now(), code: radius.Code(b), user: string(u)}
		n.got[to] = append(n.got[to], a)
		if deaf := n.deaf[to]; deaf != nil && deaf(a) {
			return true
		}
	}
	return n.lostFrom[from]
}

// setHung makes the server at addr receive and never answer (or answer
// again).
func (n *memNet) setHung(addr string, hung bool) {
	n.setDeaf(addr, func(arrival) bool { return hung })
}

// setDeaf makes the server at addr not answer what deaf says (nil:
// answer everything).
func (n *memNet) setDeaf(addr string, deaf func(arrival) bool) {
	n.mu.Lock()
	n.deaf[addr] = deaf
	n.mu.Unlock()
}

// loseAnswersFrom loses every datagram the server at addr sends.
func (n *memNet) loseAnswersFrom(addr string) {
	n.mu.Lock()
	n.lostFrom[addr] = true
	n.mu.Unlock()
}

func (n *memNet) setHook(h func(from, to string, b []byte)) {
	n.mu.Lock()
	n.hook = h
	n.mu.Unlock()
}

// arrivals returns what reached addr, in order.
func (n *memNet) arrivals(addr string) []arrival {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.got[addr])
}

// users returns the User-Name of each arrival at addr.
func (n *memNet) users(addr string) []string {
	var out []string
	for _, a := range n.arrivals(addr) {
		out = append(out, a.user)
	}
	return out
}

// memServer is a radpeer.UDPServer on the memory network that accepts
// everything and counts its handler's runs (applications); the handler
// can be held on a gate.
type memServer struct {
	*radpeer.UDPServer
	applied atomic.Int64
	gate    chan struct{} // when not nil, the handler waits for it to close
}

// startMemServer serves addr with secret (nil: udpSecret); with store,
// accounting records go through radpeer.Dedup (a store shared by servers
// makes a record applied once across them).
func startMemServer(t *testing.T, n *memNet, addr string, secret []byte, store dedup.Store) *memServer {
	t.Helper()
	if secret == nil {
		secret = udpSecret
	}
	ms := &memServer{}
	var h radpeer.Handler = func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		ms.applied.Add(1)
		if ms.gate != nil {
			<-ms.gate
		}
		return radpeer.AcceptAll(ctx, req, raw)
	}
	if store != nil {
		h = radpeer.Dedup(store, h, nil)
	}
	pc, err := n.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.servers[addr] = true
	n.mu.Unlock()
	s, err := radpeer.NewUDPServer(pc, radpeer.ServerConfig{Secret: secret, Handler: h, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ms.UDPServer = s
	done := make(chan struct{})
	go func() { s.Serve(); close(done) }()
	t.Cleanup(func() { s.Close(context.Background()); <-done })
	return ms
}

// memClient is a Client of radius:// servers on n: Balance mode, the
// UDP defaults (3 s x 3 attempts) and their 7750 SR policy unless tune
// changes them. It is closed when the test ends.
func memClient(t *testing.T, n *memNet, specs []PeerSpec, tune func(*Config)) *Client {
	t.Helper()
	cfg := Config{Peers: specs, Mode: Balance, RADIUS: radpeer.Config{Secret: udpSecret, Logger: quiet},
		UDP: radpeer.UDPConfig{Dial: n.Dial}}
	if tune != nil {
		tune(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// memSpecs names servers "a", "b"... at radius://a:1812...
func memSpecs(names ...string) []PeerSpec {
	var out []PeerSpec
	for _, name := range names {
		out = append(out, PeerSpec{Name: name, URL: "radius://" + name + ":1812"})
	}
	return out
}

func udpAcctStop(session string) *radius.Request {
	r := &radius.Request{Code: lradius.CodeAccountingRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute("user-"+session))
	r.Attributes.Add(radius.AttrNASIdentifier, lradius.Attribute("nas1"))
	r.Attributes.Add(radius.AttrAcctSessionID, lradius.Attribute(session))
	r.Attributes.Add(radius.AttrAcctStatusType, lradius.Attribute([]byte{0, 0, 0, 2}))
	return r
}

// policyLog records the Client's policy events as "+T server from->to",
// T from start.
type policyLog struct {
	mu    sync.Mutex
	start time.Time
	lines []string
}

func watchPolicy(c *Client, start time.Time) (*policyLog, func()) {
	l := &policyLog{start: start}
	cancel := c.Events().Subscribe(func(_ context.Context, e Event) {
		if e.Kind != EventPolicy {
			return
		}
		l.mu.Lock()
		l.lines = append(l.lines, fmt.Sprintf("+%v %s %s->%s", e.Time.Sub(l.start), e.Server, e.Policy.From, e.Policy.To))
		l.mu.Unlock()
	})
	return l, cancel
}

// of returns the lines of one server, in order.
func (l *policyLog) of(server string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		var at, name, change string
		fmt.Sscan(s, &at, &name, &change)
		if name == server {
			out = append(out, at+" "+change)
		}
	}
	return out
}
