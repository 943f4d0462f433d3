package client

import (
	"context"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

// sendLog records when the client wrote the watchdog requests of one
// server: DWRs (Diameter) or Status-Servers (RADIUS).
type sendLog struct {
	mu sync.Mutex
	at []time.Time
}

func (l *sendLog) times() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at...)
}

// watchedConn is the client's end of a connection, logging the watchdog
// requests written on it into log.
type watchedConn struct {
	transport.Conn
	log   *sendLog
	isWDR func([]byte) bool
}

func (w watchedConn) WriteMessages(msgs ...[]byte) error {
	for _, m := range msgs {
		if w.isWDR(m) {
			w.log.mu.Lock()
			w.log.at = append(w.log.at, time.Now())
			w.log.mu.Unlock()
		}
	}
	return w.Conn.WriteMessages(msgs...)
}

func isDWR(m []byte) bool {
	return wire.IsRequest(m) && wire.CommandCode(m) == wire.CmdDeviceWatchdog
}

func isStatusServer(m []byte) bool {
	return len(m) > 0 && lradius.Code(m[0]) == lradius.CodeStatusServer
}

// assertEvery checks that the watchdog requests of at came every tw
// (within the timer grid), at least n of them.
func assertEvery(t *testing.T, name string, at []time.Time, tw time.Duration, n int) {
	t.Helper()
	require.GreaterOrEqual(t, len(at), n, "%s: watchdog requests sent", name)
	for i := 1; i < len(at); i++ {
		assert.InDelta(t, float64(tw), float64(at[i].Sub(at[i-1])), float64(100*time.Millisecond), "%s: interval %d", name, i)
	}
}

// Each Diameter peer's watchdog runs at its own PeerSpec.Tw; a peer with
// none takes the template's.
func TestPerPeerTw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net"), "tcp://c:1": newFakeServer("c.example.net")}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1", "tcp://c:1")
		// The template's Tw is shorter than the servers' 30 s, so that
		// every DWR is the client's.
		cfg.Peer.Watchdog.Twinit = 25 * time.Second
		cfg.Peers[0].Tw = 10 * time.Second
		cfg.Peers[1].Tw = 20 * time.Second
		logs := map[string]*sendLog{"tcp://a:1": {}, "tcp://b:1": {}, "tcp://c:1": {}}
		cfg.Peer.Dialer = func(ctx context.Context, u string) (transport.Conn, error) {
			c, err := n.dialer(ctx, u)
			if err != nil {
				return nil, err
			}
			return watchedConn{Conn: c, log: logs[u], isWDR: isDWR}, nil
		}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		require.NoError(t, c.WaitReady(context.Background(), 3))
		time.Sleep(126 * time.Second)
		assertEvery(t, "a (Tw 10s)", logs["tcp://a:1"].times(), 10*time.Second, 12)
		assertEvery(t, "b (Tw 20s)", logs["tcp://b:1"].times(), 20*time.Second, 6)
		assertEvery(t, "c (the template's 25s)", logs["tcp://c:1"].times(), 25*time.Second, 5)
	})
}

// A RADIUS stream server's watchdog (its Status-Servers) runs at its own
// PeerSpec.Tw too.
func TestPerPeerTwRADIUS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newRADServer(t, "secret-a"), newRADServer(t, "secret-b")
		n := radNetwork{"radius+tcp://a:1812": a, "radius+tcp://b:1812": b}
		defer n.close()
		cfg := radClientConfig(n, Balance, "radius+tcp://a:1812", "radius+tcp://b:1812") // template: 6 s
		cfg.RADIUS.MaxConns = 1
		cfg.Peers[1].Tw = 15 * time.Second
		logs := map[string]*sendLog{"radius+tcp://a:1812": {}, "radius+tcp://b:1812": {}}
		cfg.RADIUS.Dialer = func(ctx context.Context, u string) (transport.Conn, error) {
			c, err := n[u].dial(ctx)
			if err != nil {
				return nil, err
			}
			return watchedConn{Conn: c, log: logs[u], isWDR: isStatusServer}, nil
		}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		require.NoError(t, c.WaitReady(context.Background(), 2))
		start := time.Now()
		time.Sleep(61 * time.Second)
		since := func(l *sendLog) []time.Time {
			var out []time.Time
			for _, at := range l.times() {
				if !at.Before(start) {
					out = append(out, at)
				}
			}
			return out
		}
		assertEvery(t, "a (the template's 6s)", since(logs["radius+tcp://a:1812"]), 6*time.Second, 9)
		assertEvery(t, "b (Tw 15s)", since(logs["radius+tcp://b:1812"]), 15*time.Second, 4)
	})
}

// Each server's outstanding requests are bounded by its own
// PeerSpec.Throttle, the others' by Config.Throttle; checked at the
// servers.
func TestPerPeerThrottleMaxOutstanding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		peaks := map[string]*atomic.Int32{}
		n := network{}
		for _, h := range []string{"a", "b"} {
			srv := newFakeServer(h + ".example.net")
			var inFlight, peak atomic.Int32
			peaks[h] = &peak
			base := srv.handler
			srv.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
				now := inFlight.Add(1)
				for {
					old := peak.Load()
					if now <= old || peak.CompareAndSwap(old, now) {
						break
					}
				}
				time.Sleep(100 * time.Millisecond)
				inFlight.Add(-1)
				return base(ctx, p, req)
			}
			n["tcp://"+h+":1"] = srv
		}
		defer n.close()
		cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
		cfg.Algorithm = loadbalance.RoundRobin
		cfg.Throttle = &Throttle{Accounting: throttle.Limits{MaxOutstanding: 8}}
		cfg.Peers[1].Throttle = &ThrottleLimits{Accounting: throttle.Limits{MaxOutstanding: 3}}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		require.NoError(t, c.WaitReady(context.Background(), 2))
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Send(context.Background(), acr(i, "u"+itoa(i)+"@example.net"))
				assert.NoError(t, err)
			}()
		}
		wg.Wait()
		assert.Equal(t, int32(8), peaks["a"].Load(), "a: Config.Throttle's limit in flight, never more")
		assert.Equal(t, int32(3), peaks["b"].Load(), "b: its own limit in flight, never more")
	})
}

// A PeerSpec.TLS is used for its server only: a trusts only CA A (the
// template's), b only CA B (its own). Real TLS over loopback, outside a
// bubble; bounded by the context.
func TestPerPeerTLS(t *testing.T) {
	pa, pb := testhelp.NewPKI(t), testhelp.NewPKI(t)
	start := func(p testhelp.PKI, host string) *peer.Server {
		tc, err := transport.ServerTLSConfig(p.ServerCert, p.ServerKey, "")
		require.NoError(t, err)
		s, err := peer.Listen("tls://127.0.0.1:0", peer.Config{
			OriginHost: host, OriginRealm: "example.net", AcctApps: []uint32{message.AppAccounting},
			Transport: transport.Options{TLS: tc}, Handler: newFakeServer(host).handler, Logger: quiet,
		})
		require.NoError(t, err)
		go s.Serve()
		t.Cleanup(func() { s.Close(context.Background()) })
		return s
	}
	sa, sb := start(pa, "a.example.net"), start(pb, "b.example.net")
	ca, err := transport.ClientTLSConfig(pa.CAFile, "", "", "")
	require.NoError(t, err)
	cb, err := transport.ClientTLSConfig(pb.CAFile, "", "", "")
	require.NoError(t, err)
	ua, ub := (&url.URL{Scheme: "tls", Host: sa.Addr().String()}).String(), (&url.URL{Scheme: "tls", Host: sb.Addr().String()}).String()
	c, err := New(Config{
		Peers: []PeerSpec{{URL: ua, Name: "a"}, {URL: ub, Name: "b", TLS: cb}},
		Peer: peer.Config{OriginHost: "client.example.net", OriginRealm: "example.net", AcctApps: []uint32{message.AppAccounting},
			Transport: transport.Options{TLS: ca, DialTimeout: 2 * time.Second}, Logger: quiet},
	})
	require.NoError(t, err)
	defer func() {
		c.Close(context.Background())
		<-c.Done()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.WaitReady(ctx, 2), "both servers in service, each through its own CA")
	for _, s := range c.ServerStats() {
		assert.Equal(t, "OKAY", s.State, s.Server)
	}
}

// Overrides that cannot apply are refused by New, with the server named.
func TestPerPeerOverridesRefused(t *testing.T) {
	tc, err := transport.ClientTLSConfig("", "", "", "")
	require.NoError(t, err)
	lim := &ThrottleLimits{Auth: throttle.Limits{MaxOutstanding: 1}}
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"Tw over UDP", Config{Peers: []PeerSpec{{URL: "radius://127.0.0.1:1812", Tw: 10 * time.Second, Secret: []byte("s")}}},
			"peer radius://127.0.0.1:1812: a Tw is for servers with a watchdog"},
		{"Tw below the minimum", Config{Peers: []PeerSpec{{URL: "tcp://127.0.0.1:3868", Tw: time.Second}},
			Peer: peer.Config{OriginHost: "c.example.net", OriginRealm: "example.net", Logger: quiet}},
			"peer tcp://127.0.0.1:3868: Tw 1s is below the RFC 3539 minimum of 6s"},
		{"negative Tw", Config{Peers: []PeerSpec{{URL: "tcp://127.0.0.1:3868", Tw: -time.Second}}}, "peer tcp://127.0.0.1:3868: Tw -1s is negative"},
		{"TLS over TCP", Config{Peers: []PeerSpec{{URL: "tcp://127.0.0.1:3868", TLS: tc}}},
			"peer tcp://127.0.0.1:3868: a TLS configuration is for tls:// and radsec:// servers"},
		{"TLS over radius+tcp", Config{Peers: []PeerSpec{{URL: "radius+tcp://127.0.0.1:1812", TLS: tc, Secret: []byte("s")}}},
			"peer radius+tcp://127.0.0.1:1812: a TLS configuration is for tls:// and radsec:// servers"},
		{"Throttle without the Client's", Config{Peers: []PeerSpec{{URL: "tcp://127.0.0.1:3868", Throttle: lim}}},
			"peer tcp://127.0.0.1:3868: Throttle limits need Config.Throttle"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if err == nil {
				c.Close(context.Background())
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// The default request deadline lets failover detection run for the
// longest Tw of the peers, their own or the template's.
func TestRequestTimeoutFollowsLongestTw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		for _, tt := range []struct {
			name       string
			template   time.Duration
			twA, twB   time.Duration
			detectedAt time.Duration
		}{
			{"a peer's longer than the template's", 30 * time.Second, 60 * time.Second, 0, 60 * time.Second},
			{"the default template's longer than a peer's", 0, 10 * time.Second, 0, 30 * time.Second},
			{"every peer its own", 30 * time.Second, 10 * time.Second, 12 * time.Second, 12 * time.Second},
		} {
			cfg := clientConfig(n, Balance, "tcp://a:1", "tcp://b:1")
			cfg.RequestTimeout = 0
			cfg.Peer.Watchdog.Twinit = tt.template
			cfg.Peers[0].Tw, cfg.Peers[1].Tw = tt.twA, tt.twB
			c, err := New(cfg)
			require.NoError(t, err)
			assert.Equal(t, FailoverDetection(tt.detectedAt)+peer.DefaultRequestTimeout, c.cfg.RequestTimeout, tt.name)
			c.Close(context.Background())
			<-c.Done()
		}
	})
}

// A radsec:// server's PeerSpec.TLS is used for it only, the client
// certificate too: each server wants a certificate of its own CA (RFC
// 6614 mutual TLS), a gets the template's, b its own.
func TestPerPeerTLSRadSec(t *testing.T) {
	pa, pb := testhelp.NewPKI(t), testhelp.NewPKI(t)
	start := func(p testhelp.PKI) string {
		tc, err := transport.ServerTLSConfig(p.ServerCert, p.ServerKey, p.CAFile)
		require.NoError(t, err)
		ln, err := radpeer.Listen("radsec://127.0.0.1:0", transport.Options{TLS: tc})
		require.NoError(t, err)
		s, err := radpeer.NewServer(ln, radpeer.SchemeRadSec, radpeer.ServerConfig{Secret: []byte("radsec"), Logger: quiet})
		require.NoError(t, err)
		go s.Serve()
		t.Cleanup(func() { s.Close(context.Background()) })
		return "radsec://" + ln.Addr().String()
	}
	ua, ub := start(pa), start(pb)
	ca, err := transport.ClientTLSConfig(pa.CAFile, pa.ClientCert, pa.ClientKey, "")
	require.NoError(t, err)
	cb, err := transport.ClientTLSConfig(pb.CAFile, pb.ClientCert, pb.ClientKey, "")
	require.NoError(t, err)
	c, err := New(Config{
		Peers:  []PeerSpec{{URL: ua, Name: "a"}, {URL: ub, Name: "b", TLS: cb}},
		RADIUS: radpeer.Config{Transport: transport.Options{TLS: ca, DialTimeout: 2 * time.Second}, MaxConns: 1, Logger: quiet},
	})
	require.NoError(t, err)
	defer func() {
		c.Close(context.Background())
		<-c.Done()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.WaitReady(ctx, 2), "both servers in service, each through its own CA and certificate")
}
