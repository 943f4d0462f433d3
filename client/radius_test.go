package client

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/internal/fault"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
)

// radServer is a RADIUS/TCP server (radpeer.Server) reached over
// net.Pipe, whose process can be frozen like fakeServer's.
type radServer struct {
	secret []byte
	srv    *radpeer.Server
	conns  chan transport.Conn
	closed chan struct{}
	faults fault.Switch

	mu       sync.Mutex
	users    []string // User-Name of each request handled, in the order its Handler ran
	arrived  []string // User-Name of each request read, in the order of the wire
	badPass  int      // passwords that did not decrypt with this server's secret
	answered atomic.Int32
	silent   atomic.Bool // requests other than Status-Server are held unanswered
}

func newRADServer(t *testing.T, secret string) *radServer { return newRADServerWith(t, secret, nil) }

// newRADServerWith is newRADServer with its handler behind store's
// duplicate detection (the accounting content key), when store is set.
func newRADServerWith(t *testing.T, secret string, store dedup.Store) *radServer {
	s := &radServer{secret: []byte(secret), conns: make(chan transport.Conn), closed: make(chan struct{})}
	h := radpeer.Handler(s.handle)
	if store != nil {
		h = radpeer.Dedup(store, h, nil)
	}
	srv, err := radpeer.NewServer(s, radpeer.SchemeTCP, radpeer.ServerConfig{Secret: s.secret, Handler: h, Logger: quiet})
	require.NoError(t, err)
	s.srv = srv
	go srv.Serve()
	return s
}

func (s *radServer) handle(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
	if req.Code == lradius.CodeStatusServer {
		return lradius.CodeAccessAccept, nil
	}
	if s.silent.Load() {
		<-ctx.Done() // the connection's end
		return 0, nil
	}
	user := string(req.Get(radius.AttrUserName))
	s.mu.Lock()
	s.users = append(s.users, user)
	if a := req.Get(radius.AttrUserPassword); a != nil {
		if pw, err := lradius.UserPassword(a, s.secret, req.Authenticator[:]); err != nil || string(pw) != "pw-"+user {
			s.badPass++
		}
	}
	s.mu.Unlock()
	s.answered.Add(1)
	return radpeer.AcceptAll(ctx, req, raw)
}

// arrivals returns the User-Names of the requests s read, in the order
// they came on the wire. Handlers run on several workers, so the order in
// which they ran (handled) may differ from it.
func (s *radServer) arrivals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.arrived...)
}

// wireLog records the User-Name of each request s reads from the wire.
type wireLog struct {
	transport.Conn
	s *radServer
}

func (w wireLog) ReadMessage() ([]byte, error) {
	b, err := w.Conn.ReadMessage()
	if err == nil {
		if pkt, perr := lradius.Parse(b, w.s.secret); perr == nil && pkt.Code != lradius.CodeStatusServer {
			w.s.mu.Lock()
			w.s.arrived = append(w.s.arrived, string(pkt.Get(radius.AttrUserName)))
			w.s.mu.Unlock()
		}
	}
	return b, err
}

func (s *radServer) handled() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.users...)
}

// Accept, Close and Addr make s the server's transport.Listener.
func (s *radServer) Accept() (transport.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.closed:
		return nil, net.ErrClosed
	}
}
func (s *radServer) Close() error   { return nil }
func (s *radServer) Addr() net.Addr { return &net.TCPAddr{} }

func (s *radServer) dial(ctx context.Context) (transport.Conn, error) {
	a, b := net.Pipe()
	framed := func(c net.Conn) transport.Conn {
		return transport.NewStreamConn(c, "tcp", transport.Options{ReadFrame: radius.ReadFrame})
	}
	select {
	case s.conns <- s.faults.Wrap(wireLog{framed(b), s}, nil):
		return framed(a), nil
	case <-ctx.Done():
		a.Close()
		b.Close()
		return nil, ctx.Err()
	}
}

func (s *radServer) close() {
	s.faults.Thaw()
	close(s.closed)
	s.srv.Close(context.Background())
	s.faults.Reset()
	s.faults.Wait()
}

// radNetwork routes the client's dials to RADIUS servers by URL.
type radNetwork map[string]*radServer

func (n radNetwork) close() {
	for _, s := range n {
		s.close()
	}
}

func radClientConfig(n radNetwork, mode Mode, urls ...string) Config {
	cfg := Config{
		Mode: mode,
		RADIUS: radpeer.Config{
			Watchdog: watchdog.Config{Twinit: 6 * time.Second, Rand: noJitter{}},
			Dialer: func(ctx context.Context, url string) (transport.Conn, error) {
				return n[url].dial(ctx)
			},
			Logger: quiet,
		},
		RequestTimeout: time.Hour,
	}
	for _, u := range urls {
		cfg.Peers = append(cfg.Peers, PeerSpec{URL: u, Secret: n[u].secret})
	}
	return cfg
}

// radPair starts servers a and b (behind store, when set) and a
// primary/secondary Client over them, edited by with, once both are in
// service. stop ends them all.
func radPair(t *testing.T, store dedup.Store, with func(*Config)) (a, b *radServer, c *Client, stop func()) {
	a, b = newRADServerWith(t, "secret-a", store), newRADServerWith(t, "secret-b", store)
	n := radNetwork{"radius+tcp://a:1812": a, "radius+tcp://b:1812": b}
	cfg := radClientConfig(n, PrimarySecondary, "radius+tcp://a:1812", "radius+tcp://b:1812")
	if with != nil {
		with(&cfg)
	}
	c, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, c.WaitReady(context.Background(), 2))
	return a, b, c, func() {
		c.Close(context.Background())
		n.close()
	}
}

// radOne starts server a and a Client over it, once a is in service.
func radOne(t *testing.T) (a *radServer, c *Client, stop func()) {
	a = newRADServer(t, "secret-a")
	n := radNetwork{"radius+tcp://a:1812": a}
	c, err := New(radClientConfig(n, Balance, "radius+tcp://a:1812"))
	require.NoError(t, err)
	require.NoError(t, c.WaitReady(context.Background(), 1))
	return a, c, func() {
		c.Close(context.Background())
		n.close()
	}
}

func accessRequest(user string) *radius.Request {
	r := &radius.Request{Code: lradius.CodeAccessRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute(user))
	r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("pw-"+user))
	return r
}

// A RADIUS server that hangs: its pending requests are replayed, in
// order, to the other server, each re-signed with that server's secret
// (its password decrypts there) on a new Identifier; every caller gets
// one answer, from the second server; the first server's late answers,
// once it thaws, are dropped as late; the failover is recorded and the
// requests counted for the server they were first sent to.
func TestRADIUSFailoverResigned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c, stop := radPair(t, nil, nil)
		defer stop()
		a.faults.Freeze()
		const k = 5
		var wg sync.WaitGroup
		answers := make([]*radpeer.Response, k)
		for i := range k {
			wg.Go(func() {
				resp, err := c.Exchange(context.Background(), accessRequest(fmt.Sprint("u", i)))
				if assert.NoError(t, err) {
					answers[i] = resp
				}
			})
			synctest.Wait() // in send order
		}
		wg.Wait()
		synctest.Wait() // the record follows the replays' hand-off (see FailoverLog)
		pb := c.RADIUSPeers()[1]
		for i, r := range answers {
			require.NotNil(t, r, "call %d", i)
			assert.Same(t, pb, r.Peer, "call %d answered by the alternate", i)
			assert.Equal(t, lradius.CodeAccessAccept, r.Packet.Code)
		}
		assert.Equal(t, []string{"u0", "u1", "u2", "u3", "u4"}, b.arrivals(), "replayed in send order")
		assert.Zero(t, b.badPass, "every replay re-signed with b's secret")

		recs, _ := c.FailoverLog()
		var moved int
		for _, r := range recs {
			if r.Outcome == Moved && r.From == "radius+tcp://a:1812" && r.To == "radius+tcp://b:1812" {
				moved += r.Moved
			}
		}
		assert.Equal(t, k, moved, "failover records: %+v", recs)
		st := c.ServerStats()
		assert.Equal(t, uint64(k), st[0].Sent)
		assert.Equal(t, uint64(k), st[0].Answered, "counted for the server first sent to")
		assert.Equal(t, uint64(k), st[0].FailedOver)
		assert.Zero(t, st[1].Sent, "replays are not first sends")

		a.faults.Thaw() // a answers the requests it held: too late
		synctest.Wait()
		assert.Equal(t, int32(k), a.answered.Load())
		assert.Equal(t, uint64(k), c.RADIUSPeers()[0].Stats().Late, "one answer per caller")
	})
}

// A RADIUS/TCP server that answers Status-Server, so that its watchdog
// stays OKAY, but none of the requests is taken out of service by the
// policy's down-timeout, and the request pending there goes to the other
// server then, long before its deadline; the connection stays.
func TestRADIUSPolicyDownTimeoutHandsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _, c, stop := radPair(t, nil, func(cfg *Config) {
			cfg.Policy = &policy.Config{RequestTimeout: time.Second, Retries: 2, HoldDown: 20 * time.Second}
		})
		defer stop()
		_, err := c.Exchange(context.Background(), accessRequest("u0")) // a in service
		require.NoError(t, err)
		a.silent.Store(true)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := c.Exchange(ctx, accessRequest("u1"))
		require.NoError(t, err)
		took := time.Since(start)
		assert.Same(t, c.RADIUSPeers()[1], resp.Peer, "answered by b")
		assert.GreaterOrEqual(t, took, 2*time.Second, "the down-timeout: 1 s x 2 retries")
		assert.Less(t, took, 2*time.Second+2*policyTick)
		synctest.Wait()
		assert.Equal(t, "out-of-service", c.PolicyStates()[0])
		recs, _ := c.FailoverLog()
		require.Len(t, recs, 1)
		assert.Equal(t, "out of service: "+policy.ReasonDownTimeout, recs[0].Reason)
		assert.Equal(t, 1, recs[0].Moved)
		st := c.RADIUSPeers()[0].Stats()
		assert.Equal(t, uint64(1), st.MovedOut)
		assert.Equal(t, "OKAY", st.State, "its watchdog still says OKAY: its connection stays")
	})
}

// The hand-over takes the requests waiting for an Identifier too: with
// one connection to a silent server and its 255 Identifiers held, the
// requests beyond them wait in its peer, and go to the other server with
// those in flight when the down-timeout expires.
func TestRADIUSPolicyDownTimeoutHandsOverWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _, c, stop := radPair(t, nil, func(cfg *Config) {
			cfg.Policy = &policy.Config{RequestTimeout: time.Second, Retries: 2, HoldDown: 20 * time.Second}
			cfg.RADIUS.MaxConns = 1
		})
		defer stop()
		_, err := c.Exchange(context.Background(), accessRequest("u0")) // a in service
		require.NoError(t, err)
		a.silent.Store(true)
		const n = 260
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var failed, byB atomic.Int32
		for i := range n {
			wg.Go(func() {
				resp, err := c.Exchange(ctx, accessRequest(fmt.Sprint("w", i)))
				switch {
				case err != nil:
					failed.Add(1)
				case resp.Peer == c.RADIUSPeers()[1]:
					byB.Add(1)
				}
			})
		}
		synctest.Wait()
		require.Positive(t, c.RADIUSPeers()[0].Stats().Waiting, "no request waits for an Identifier")
		wg.Wait()
		assert.Zero(t, failed.Load())
		assert.Equal(t, int32(n), byB.Load(), "answered by b")
		st := c.RADIUSPeers()[0].Stats()
		assert.Zero(t, st.Waiting)
		assert.Equal(t, uint64(n), st.MovedOut)
	})
}

// Accounting records applied by a server whose answers stop (it read
// them, then hung before answering) are replayed to the other server,
// which finds them in the shared store: every caller gets one answer,
// and each record is applied once in all.
func TestRADIUSFailoverAppliedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c, stop := radPair(t, dedup.NewMemory(), nil)
		defer stop()
		a.faults.Mute() // reads and applies, answers nothing
		const k = 20
		var wg sync.WaitGroup
		for i := range k {
			wg.Go(func() {
				r := &radius.Request{Code: lradius.CodeAccountingRequest}
				r.Attributes.Add(radius.AttrUserName, lradius.Attribute(fmt.Sprint("u", i)))
				r.Attributes.Add(radius.AttrNASIdentifier, lradius.Attribute("nas1"))
				r.Attributes.Add(radius.AttrAcctSessionID, lradius.Attribute(fmt.Sprint("s", i)))
				r.Attributes.Add(radius.AttrAcctStatusType, lradius.Attribute([]byte{0, 0, 0, 2}))
				r.Attributes.Add(radius.AttrEventTimestamp, lradius.Attribute([]byte{0x69, 0, 0, byte(i)}))
				resp, err := c.Exchange(context.Background(), r)
				if assert.NoError(t, err) {
					assert.Equal(t, lradius.CodeAccountingResponse, resp.Packet.Code)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int32(k), a.answered.Load(), "a applied every record before it hung")
		assert.Zero(t, b.answered.Load(), "b applied none again: answered from the shared store")
		assert.Len(t, b.handled(), 0)
		st := c.ServerStats()
		assert.Equal(t, uint64(k), st[0].FailedOver)
	})
}

// One RADIUS server whose connection goes SUSPECT: its request is not
// resent on that connection nor elsewhere; it waits, and goes out on the
// connection that replaces it, answered once.
func TestRADIUSNeverResentOnItsConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, c, stop := radOne(t)
		defer stop()
		a.faults.Freeze()
		res := make(chan error, 1)
		go func() {
			_, err := c.Exchange(context.Background(), accessRequest("u0"))
			res <- err
		}()
		time.Sleep(13 * time.Second) // two Tw: SUSPECT
		synctest.Wait()
		assert.Equal(t, watchdog.Suspect, c.RADIUSPeers()[0].State())
		assert.Empty(t, a.handled())
		recs, _ := c.FailoverLog()
		require.NotEmpty(t, recs)
		assert.Equal(t, Parked, recs[len(recs)-1].Outcome, "no alternate: it waits")
		a.faults.Reset() // the hung process dies: the connection closes, a new one opens
		a.faults.Thaw()
		require.NoError(t, <-res)
		assert.Equal(t, []string{"u0"}, a.handled(), "sent once more, on the new connection only")
	})
}

// A RADIUS server's throttle place is capped at its Identifiers (255 a
// connection), and a failover's replays go to the head of the throttle's
// queue, ahead of newer requests.
func TestRADIUSThrottleReplayAheadOfNewer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c, stop := radPair(t, nil, func(cfg *Config) { cfg.Throttle = &Throttle{Auth: throttle.Limits{MaxOutstanding: 1}} })
		defer stop()
		assert.Equal(t, radpeer.IDsPerConn, c.radiusLimits(c.ros.Load().all[0], throttle.Limits{MaxOutstanding: 1000}).MaxOutstanding)
		a.faults.Freeze()
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				_, err := c.Exchange(context.Background(), accessRequest(fmt.Sprint("u", i)))
				assert.NoError(t, err)
			})
			synctest.Wait()
		}
		wg.Wait()
		assert.Equal(t, []string{"u0", "u1", "u2", "u3"}, b.handled(), "u0, replayed, before the newer ones")
	})
}

// As TestThrottleReplayAheadOfASendDuringTheHandOver, over RADIUS/TCP:
// a request sent between the server's SUSPECT and its hand-over waits
// behind the replay and the requests sent before it.
func TestRADIUSThrottleReplayAheadOfASendDuringTheHandOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c, stop := radPair(t, nil, func(cfg *Config) { cfg.Throttle = &Throttle{Auth: throttle.Limits{MaxOutstanding: 1}} })
		defer stop()
		a.faults.Freeze()
		var wg sync.WaitGroup
		send := func(i int) {
			wg.Go(func() {
				_, err := c.Exchange(context.Background(), accessRequest(fmt.Sprint("u", i)))
				assert.NoError(t, err)
			})
		}
		var once sync.Once
		beforeFailover = func() {
			once.Do(func() {
				send(4)
				synctest.Wait() // the new request has been polled for
			})
		}
		defer func() { beforeFailover = nil }()
		for i := range 4 {
			send(i)
			synctest.Wait()
		}
		wg.Wait()
		assert.Equal(t, []string{"u0", "u1", "u2", "u3", "u4"}, b.handled(), "u0, replayed, before the newer ones, in send order")
	})
}

// Diameter and RADIUS members are not mixed, a RADIUS server needs a
// secret, and each protocol has its own call.
func TestRADIUSConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		peers []PeerSpec
		want  string
	}{
		{[]PeerSpec{{URL: "tcp://a:3868"}, {URL: "radius+tcp://b:1812"}}, "one Client per protocol"},
		{[]PeerSpec{{URL: "tcp://a:3868"}, {URL: "radius://b:1812"}}, "one Client per protocol"},
		{[]PeerSpec{{URL: "radius://a:1812"}}, "no shared secret"},
		{[]PeerSpec{{URL: "tcp://a:3868", Secret: []byte("x")}}, "a Secret is for RADIUS servers"},
	} {
		_, err := New(Config{Peers: tc.peers})
		assert.ErrorContains(t, err, tc.want, "%+v", tc.peers)
	}
	synctest.Test(t, func(t *testing.T) {
		_, c, stop := radOne(t)
		defer stop()
		_, err := c.Send(context.Background(), acr(1, "u"))
		assert.ErrorContains(t, err, "Exchange")
	})
}

// A RADIUS server that hangs with nothing pending is still a failover in
// the table (RFC 3539 3.4.2 [5]), "nothing pending", as a Diameter peer's
// is.
func TestRADIUSFailoverNothingPendingRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _, c, stop := radPair(t, nil, nil)
		defer stop()
		a.faults.Freeze()
		time.Sleep(2 * time.Minute) // SUSPECT within 2 Tw of silence
		synctest.Wait()
		recs, _ := c.FailoverLog()
		var found bool
		for _, r := range recs {
			found = found || (r.From == "radius+tcp://a:1812" && r.Outcome == NothingPending)
		}
		assert.True(t, found, "no nothing-pending failover of a: %+v", recs)
		a.faults.Thaw()
	})
}

// SetPeers refuses a RADIUS server that New would refuse (here, a secret
// neither it nor the Client's RADIUS configuration has), before anything
// changes: the server it would replace stays, and keeps answering.
func TestRADIUSSetPeersRefusesWhatNewRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c, stop := radOne(t)
		defer stop()
		_, err := c.SetPeers(context.Background(), []PeerSpec{{URL: "radius+tcp://a:1812"}})
		require.ErrorIs(t, err, ErrConfig)
		assert.ErrorContains(t, err, "secret")
		ps := c.RADIUSPeers()
		require.Len(t, ps, 1)
		require.NotNil(t, ps[0], "the server was replaced by one never dialed")
		resp, err := c.Exchange(context.Background(), accessRequest("u"))
		require.NoError(t, err)
		assert.Equal(t, lradius.CodeAccessAccept, resp.Packet.Code)
	})
}

// A RADIUS stream server that SetPeers replaces is dialed again at once
// while its old peer drains: the old peer's end (OKAY to DOWN) is not
// published under the name, which the new member, OKAY, has.
func TestRADIUSReplacedServersOldPeerDoesNotAnnounceTheName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, c, stop := radOne(t)
		defer stop()
		var mu sync.Mutex
		var last string
		defer c.Events().Subscribe(func(_ context.Context, e Event) {
			if e.Kind == EventPeer && e.Peer.Kind == peer.EventWatchdog {
				mu.Lock()
				last = e.Peer.To.String()
				mu.Unlock()
			}
		})()
		a.faults.Freeze()
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := c.Exchange(ctx, accessRequest("u"))
			done <- err
		}()
		synctest.Wait()
		a.faults.Thaw()
		old := c.RADIUSPeers()[0]
		spec := PeerSpec{URL: "radius+tcp://a:1812", Secret: a.secret, Tw: 7 * time.Second}
		ch, err := c.SetPeers(context.Background(), []PeerSpec{spec})
		require.NoError(t, err)
		require.Equal(t, []string{"radius+tcp://a:1812"}, ch.Replaced)
		<-done
		<-old.Done()
		synctest.Wait()
		require.Equal(t, "OKAY", c.ServerStats()[0].State)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, "OKAY", last, "the last watchdog state published for the name")
	})
}

// A RADIUS server replaced by SetPeers is dialed at once while its old
// member drains: the requests the old member still has there count
// against the new member's MaxOutstanding, so that the server never
// carries more than its limit.
func TestRADIUSReplacedServerKeepsItsOutstandingLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newRADServer(t, "secret-a")
		n := radNetwork{"radius+tcp://a:1812": a}
		defer n.close()
		cfg := radClientConfig(n, Balance, "radius+tcp://a:1812")
		cfg.Throttle = &Throttle{Auth: throttle.Limits{MaxOutstanding: 2}}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		require.NoError(t, c.WaitReady(context.Background(), 1))
		a.faults.Freeze()
		done := make(chan error, 4)
		for i := range 4 {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := c.Exchange(ctx, accessRequest(fmt.Sprint("u", i)))
				done <- err
			}()
		}
		synctest.Wait()
		c.tmu.Lock()
		require.Equal(t, 2, c.sched.Outstanding(0, throttle.Auth), "two in flight")
		require.Equal(t, 2, c.sched.Len(), "two queued")
		c.unlockThrottle()

		ch, err := c.SetPeers(context.Background(), []PeerSpec{{URL: "radius+tcp://a:1812", Secret: a.secret, Tw: 7 * time.Second}})
		require.NoError(t, err)
		require.Equal(t, []string{"radius+tcp://a:1812"}, ch.Replaced)
		time.Sleep(time.Second) // the new member connects
		synctest.Wait()
		c.tmu.Lock()
		queued, atNew := c.sched.Len(), c.sched.Outstanding(1, throttle.Auth)
		c.unlockThrottle()
		assert.Equal(t, 2, queued, "the two queued wait: the server has its two already")
		assert.Equal(t, 2, atNew, "the old member's two count at the new one")

		a.faults.Thaw()
		for range 4 {
			assert.NoError(t, <-done)
		}
		synctest.Wait()
		c.tmu.Lock()
		defer c.unlockThrottle()
		assert.Equal(t, 0, c.sched.Outstanding(1, throttle.Auth), "every place given back")
	})
}

// radWaitingAfterSuspect starts a Client with one connection to one
// RADIUS stream server (configure, if set, changes its Config) and a request
// u0 whose answer the server holds: the connection goes SUSPECT and hands
// u0 back, then is OKAY again, and u0 waits, as it may not go on another
// connection of that server. res gets u0's Exchange's error. The server
// is silent (requests held unanswered) on return. Called in a bubble;
// the Client closes with the test.
func radWaitingAfterSuspect(t *testing.T, configure func(radNetwork, *Config)) (c *Client, a *radServer, res chan error) {
	t.Helper()
	a = newRADServer(t, "secret-a")
	n := radNetwork{"radius+tcp://a:1812": a}
	cfg := radClientConfig(n, Balance, "radius+tcp://a:1812")
	cfg.RADIUS.MaxConns = 1
	if configure != nil {
		configure(n, &cfg)
	}
	var err error
	c, err = New(cfg)
	require.NoError(t, err)
	require.NoError(t, c.WaitReady(context.Background(), 1))
	t.Cleanup(func() {
		c.Close(context.Background())
		n.close()
	})
	a.silent.Store(true) // requests held unanswered, Status-Server answered
	a.faults.Freeze()
	res = make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := c.Exchange(ctx, accessRequest("u0"))
		res <- err
	}()
	time.Sleep(13 * time.Second) // two Tw: SUSPECT, u0 handed back
	synctest.Wait()
	require.Equal(t, watchdog.Suspect, c.RADIUSPeers()[0].State())
	a.faults.Thaw()
	time.Sleep(7 * time.Second) // the watchdog's Status-Server: OKAY again
	synctest.Wait()
	require.Equal(t, watchdog.Okay, c.RADIUSPeers()[0].State())
	select {
	case err := <-res:
		t.Fatalf("u0 ended before the recycle: %v", err)
	default: // waiting: it may not go on another connection of a
	}
	return c, a, res
}

// A request handed back by a RADIUS stream server's SUSPECT connection may
// not go on another connection of that server while the first is back
// OKAY (RFC 6613 2.6.1), so it waits. When that connection is recycled
// (most of its Identifiers held by requests that timed out), it may
// still not go on the replacement while the recycled connection is open
// for the requests still live on it: the server may yet answer it
// there. Once the last of those ends the recycled connection closes, and
// the request goes on the replacement at once, not at its deadline. The
// watchdog moved to the replacement, so no watchdog event says so: the
// close's EventConnDown must make a new view.
func TestRADIUSRecycledConnectionLetsWaitingRequestGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, a, res := radWaitingAfterSuspect(t, nil)
		// Fill the connection's other Identifiers with 200 requests that
		// time out and 54 that are still live when it is recycled.
		var stale, live sync.WaitGroup
		exchange := func(wg *sync.WaitGroup, d time.Duration) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				c.Exchange(ctx, accessRequest("drop"))
			}()
		}
		for range 200 {
			exchange(&stale, time.Second)
		}
		for range radpeer.IDsPerConn - 201 {
			exchange(&live, 20*time.Second)
		}
		stale.Wait()
		a.silent.Store(false)
		// The next request finds no Identifier free: the connection is
		// recycled, and this request is answered on its replacement.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.Exchange(ctx, accessRequest("u1"))
		require.NoError(t, err)
		require.Equal(t, uint64(1), c.RADIUSPeers()[0].Stats().RecycledConns)
		time.Sleep(5 * time.Second)
		select {
		case err := <-res:
			t.Fatalf("u0 ended while the recycled connection it was sent on is open: %v", err)
		default:
		}
		assert.NotContains(t, a.handled(), "u0", "u0 sent again while the recycled connection is open")
		live.Wait() // the last live requests end: the recycled connection closes
		start := time.Now()
		select {
		case err := <-res:
			require.NoError(t, err)
		case <-time.After(time.Second):
			t.Fatalf("u0 still waiting %v after the recycled connection closed", time.Since(start))
		}
		handled := 0
		for _, u := range a.handled() {
			if u == "u0" {
				handled++
			}
		}
		assert.Equal(t, 1, handled, "u0 handled once, on the replacement")
	})
}

// As TestRADIUSRecycledConnectionLetsWaitingRequestGo with nothing live
// on the connection when it is recycled: it closes at once, while its
// replacement is still being dialed, and the server then has no
// connection the request may go on; the replacement lifts that, and the
// request goes there at once, not at its deadline. The watchdog moves to
// the replacement, so no watchdog event says so: the replacement's
// EventConnUp must make a new view.
func TestRADIUSRecycledConnectionClosedAtOnceLetsWaitingRequestGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dials atomic.Int32
		c, a, res := radWaitingAfterSuspect(t, func(n radNetwork, cfg *Config) {
			cfg.RADIUS.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
				if dials.Add(1) > 1 {
					// The replacement comes up after the recycled
					// connection's close was seen (its EventConnDown).
					time.Sleep(100 * time.Millisecond)
				}
				return n[url].dial(ctx)
			}
		})
		// Fill the connection's Identifiers with requests that time out.
		var wg sync.WaitGroup
		for range radpeer.IDsPerConn {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				c.Exchange(ctx, accessRequest("drop"))
			}()
		}
		wg.Wait()
		a.silent.Store(false)
		start := time.Now()
		// The next request finds no Identifier free: the connection is
		// recycled, and this request is answered on its replacement.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.Exchange(ctx, accessRequest("u1"))
		require.NoError(t, err)
		require.Equal(t, uint64(1), c.RADIUSPeers()[0].Stats().RecycledConns)
		select {
		case err := <-res:
			require.NoError(t, err)
		case <-time.After(time.Second):
			t.Fatalf("u0 still waiting %v after the recycle", time.Since(start))
		}
		assert.Contains(t, a.handled(), "u0", "u0 handled by the server once it may go")
	})
}
