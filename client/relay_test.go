package client_test

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// relaySeen is a request as an upstream server read it.
type relaySeen struct {
	hbh, e2e uint32
	t        bool
}

// relayUpstream is an upstream server of a relay test: it records every
// request it reads and answers DIAMETER_SUCCESS once hold is closed (nil:
// at once).
type relayUpstream struct {
	srv  *peer.Server
	mu   sync.Mutex
	seen []relaySeen
}

func startRelayUpstream(t *testing.T, host string, hold <-chan struct{}) *relayUpstream {
	t.Helper()
	u := &relayUpstream{}
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost: host, OriginRealm: "example.net",
		AcctApps: []uint32{message.AppAccounting},
		// The relay speaks for others: a request's Origin-Host is the
		// origin's, not the relay's.
		AgentHosts: []string{"relay.example.org"},
		Handler: func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			u.mu.Lock()
			u.seen = append(u.seen, relaySeen{wire.HopByHop(req), wire.EndToEnd(req), wire.Flags(req)&wire.FlagRetransmit != 0})
			u.mu.Unlock()
			if hold != nil {
				select {
				case <-hold:
				case <-ctx.Done():
				}
			}
			id := p.LocalIdentity()
			return message.NewAnswer(req).ResultCode(message.Success).
				String(message.OriginHost, 0, true, id.Host).String(message.OriginRealm, 0, true, id.Realm).Bytes()
		},
		Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Close(ctx)
	})
	u.srv = srv
	return u
}

func (u *relayUpstream) requests() []relaySeen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

// cutProxy relays TCP connections to an address until cut, which closes
// them all and the listener: the connection is lost without a word, as
// when a link drops.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A relay agent is a peer.Server whose Handler forwards through a
// client.Client, with nothing of its own between the two: the
// End-to-End id the origin chose reaches the next hop, each hop has its
// own Hop-by-Hop ids and the answer finds its way back to the origin's
// request, the origin's T flag is forwarded (ForwardRetransmitFlag), and
// when the next hop's connection drops, the forwarded requests pending
// there are replayed to the alternate with the T flag, in the order they
// were forwarded, and answered to the origin.
func TestRelayForwardsAndFailsOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hold := make(chan struct{})
	defer close(hold) // before the upstream servers close (cleanups run after)
	u1 := startRelayUpstream(t, "u1.example.net", hold)
	u2 := startRelayUpstream(t, "u2.example.net", nil)
	link := startCutProxy(t, u1.srv.Addr().String())

	up, err := client.New(client.Config{
		Mode: client.PrimarySecondary,
		Peers: []client.PeerSpec{
			{URL: "tcp://" + link.ln.Addr().String(), Name: "u1"},
			{URL: "tcp://" + u2.srv.Addr().String(), Name: "u2"},
		},
		Peer: peer.Config{OriginHost: "relay.example.org", OriginRealm: "relay.example.org",
			AcctApps: []uint32{message.AppAccounting}, Logger: quiet},
		ForwardRetransmitFlag: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close(context.Background())
	if err := up.WaitReady(ctx, 2); err != nil {
		t.Fatal(err)
	}

	relay, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost: "relay.example.org", OriginRealm: "relay.example.org",
		AcctApps:                []uint32{message.AppAccounting},
		HandleOtherDestinations: true,
		Handler: func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			ans, err := up.Send(ctx, req)
			if err != nil {
				return message.ErrorAnswer(req, p.LocalIdentity(), message.UnableToDeliver, err.Error()).Bytes()
			}
			return ans
		},
		Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	go relay.Serve()
	defer relay.Close(context.Background())

	down, err := client.New(client.Config{
		Peers:                 []client.PeerSpec{{URL: "tcp://" + relay.Addr().String(), Name: "relay"}},
		Peer:                  peerConfig(),
		ForwardRetransmitFlag: true, // the last request is the origin's own retransmission
	})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close(context.Background())
	if err := down.WaitReady(ctx, 1); err != nil {
		t.Fatal(err)
	}

	// Six requests, one at a time, each held at u1 before the next
	// leaves: the forwarded order is known.
	const n = 6
	e2e := make([]uint32, n)
	type result struct {
		i   int
		ans []byte
		err error
	}
	results := make(chan result, n)
	for i := range n {
		req := acr("user"+string(rune('a'+i))+"@example.net", uint32(i))
		e2e[i] = 0x5eed0000 + uint32(i)
		wire.SetEndToEnd(req, e2e[i])
		if i == n-1 {
			wire.SetFlags(req, wire.Flags(req)|wire.FlagRetransmit)
		}
		go func() {
			ans, err := down.Send(ctx, req)
			results <- result{i, ans, err}
		}()
		waitUntil(t, ctx, func() bool {
			select {
			case r := <-results:
				t.Fatalf("request %d returned before the failover: %v %x", r.i, r.err, r.ans)
			default:
			}
			return len(u1.requests()) == i+1
		})
	}

	link.cut()
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatalf("request %d: %v", r.i, r.err)
		}
		rc, _ := message.ResultCodeOf(r.ans)
		if rc != message.Success || answeredBy(r.ans) != "u2.example.net" || wire.EndToEnd(r.ans) != e2e[r.i] {
			t.Errorf("request %d: answer %d from %s with End-to-End %#x; want 2001 from u2 with %#x",
				r.i, rc, answeredBy(r.ans), wire.EndToEnd(r.ans), e2e[r.i])
		}
	}

	at1, at2 := u1.requests(), u2.requests()
	if len(at1) != n || len(at2) != n {
		t.Fatalf("u1 read %d requests, u2 %d; want %d each", len(at1), len(at2), n)
	}
	for i := range n {
		if at1[i].e2e != e2e[i] || at2[i].e2e != e2e[i] {
			t.Errorf("request %d: End-to-End %#x at u1, %#x at u2; want the origin's %#x, in the forwarded order",
				i, at1[i].e2e, at2[i].e2e, e2e[i])
		}
		if at1[i].t != (i == n-1) {
			t.Errorf("request %d at u1: T flag %v; want it only on the origin's retransmission", i, at1[i].t)
		}
		if !at2[i].t {
			t.Errorf("request %d at u2: no T flag on a failover replay", i)
		}
		if i > 0 && (at1[i].hbh == at1[i-1].hbh || at2[i].hbh == at2[i-1].hbh) {
			t.Errorf("request %d: Hop-by-Hop id reused on one connection: u1 %#x %#x, u2 %#x %#x",
				i, at1[i-1].hbh, at1[i].hbh, at2[i-1].hbh, at2[i].hbh)
		}
	}
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(t *testing.T, ctx context.Context, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("timed out")
		case <-time.After(time.Millisecond):
		}
	}
}
