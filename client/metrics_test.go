package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/throttle"
	"github.com/aaatp/aaatp/transport"
)

// Answers are counted by the class of their Result-Code, or of the
// Experimental-Result-Code when there is none, for the server that
// answered; an error by its reason for the server the request was first
// sent to; every class and reason is there at zero before any traffic.
func TestAnswersCountedByClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		codes := map[string]uint32{"u1": 2001, "u2": 3004, "u3": 4001, "u4": 5012, "u5": 0}
		n := network{"tcp://a:3868": newFakeServer("a.example.net")}
		f := n["tcp://a:3868"]
		f.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			user, _ := message.StringOf(req, message.UserName, 0)
			b := message.NewAnswer(req).String(message.OriginHost, 0, true, f.host).String(message.OriginRealm, 0, true, "example.net")
			switch rc := codes[user]; {
			case user == "exp":
				b.Group(297, 0, true).Uint32(266, 0, true, 10415).Uint32(298, 0, true, 5030).End() // Experimental-Result{Vendor-Id, Experimental-Result-Code}
			case rc != 0:
				b.Uint32(message.ResultCode, 0, true, rc)
			}
			return b.Bytes()
		}
		defer n.close()
		cfg := clientConfig(n, PrimarySecondary, "tcp://a:3868")
		dial := make(chan struct{}) // no connection until the counters before traffic are read
		cfg.Peer.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			select {
			case <-dial:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return n.dialer(ctx, url)
		}
		c, err := New(cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())

		st := c.ServerStats()[0]
		for _, k := range DiameterClasses {
			v, ok := st.Answers[k]
			assert.True(t, ok && v == 0, "class %s before traffic: %d, present %v", k, v, ok)
		}
		for _, k := range ErrorReasons {
			v, ok := st.Errors[k]
			assert.True(t, ok && v == 0, "reason %s before traffic: %d, present %v", k, v, ok)
		}
		assert.Equal(t, "tcp://a:3868", st.URL)
		assert.Equal(t, ProtocolDiameter, st.Protocol)
		assert.Empty(t, st.OriginHost, "no Origin-Host before the CEA")

		close(dial)
		waitOkay(t, c)
		for i, u := range []string{"u1", "u2", "u3", "u4", "u5", "exp"} {
			_, err := c.Send(context.Background(), acr(i, u))
			require.NoError(t, err, u)
		}
		f.freeze()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = c.Send(ctx, acr(9, "u1"))
		cancel()
		require.Error(t, err)

		st = c.ServerStats()[0]
		assert.Equal(t, map[string]uint64{"1xxx": 0, "2xxx": 1, "3xxx": 1, "4xxx": 1, "5xxx": 2, "other": 1}, st.Answers)
		assert.Equal(t, uint64(1), st.Errors["timeout"], "errors: %v", st.Errors)
		assert.Equal(t, "a.example.net", st.OriginHost)
		lat := c.AnswerLatency([]time.Duration{time.Millisecond})
		assert.Equal(t, uint64(6), lat[0].Count, "the latency of every answer")
		f.unfreeze()
	})
}

// A RADIUS server's answers are counted by Code: accept, reject (a
// rejected user), accounting-response; its row has no Origin-Host.
func TestRADIUSAnswersCountedByCode(t *testing.T) {
	s := &radServer{secret: []byte("secret-a"), conns: make(chan transport.Conn), closed: make(chan struct{})}
	srv, err := radpeer.NewServer(s, radpeer.SchemeTCP, radpeer.ServerConfig{Secret: s.secret, Logger: quiet,
		Handler: func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
			if string(req.Get(radius.AttrUserName)) == "bad" {
				return lradius.CodeAccessReject, nil
			}
			return radpeer.AcceptAll(ctx, req, raw)
		}})
	require.NoError(t, err)
	s.srv = srv
	go srv.Serve()
	n := radNetwork{"radius+tcp://a:1812": s}
	defer n.close()
	c, err := New(radClientConfig(n, Balance, "radius+tcp://a:1812"))
	require.NoError(t, err)
	defer c.Close(context.Background())
	require.NoError(t, c.WaitReady(context.Background(), 1))

	for _, u := range []string{"good", "bad", "good"} {
		_, err := c.Exchange(context.Background(), accessRequest(u))
		require.NoError(t, err, u)
	}
	acct := &radius.Request{Code: lradius.CodeAccountingRequest}
	acct.Attributes.Add(radius.AttrUserName, lradius.Attribute("good"))
	acct.Attributes.Add(40, lradius.Attribute([]byte{0, 0, 0, 1})) // Acct-Status-Type Start
	_, err = c.Exchange(context.Background(), acct)
	require.NoError(t, err)

	st := c.ServerStats()[0]
	assert.Equal(t, map[string]uint64{"accept": 2, "reject": 1, "challenge": 0, "accounting-response": 1, "other": 0}, st.Answers)
	assert.Equal(t, ProtocolRADIUSTCP, st.Protocol)
	assert.Empty(t, st.OriginHost)
}

// A request that never reached a server (none came into service before
// its deadline) is counted as an unsent no_peer error, not a server's.
func TestUnsentErrorCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:3868": newFakeServer("a.example.net")}
		n["tcp://a:3868"].freeze() // the CER is never answered
		defer n.close()
		c, err := New(clientConfig(n, PrimarySecondary, "tcp://a:3868"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = c.Send(ctx, acr(1, "u1"))
		cancel()
		require.ErrorIs(t, err, ErrNoPeer)
		assert.Equal(t, uint64(1), c.UnsentErrors()["no_peer"], "unsent: %v", c.UnsentErrors())
		assert.Zero(t, c.ServerStats()[0].Errors["no_peer"])
		n["tcp://a:3868"].unfreeze()
	})
}

// Every answer has a class of its protocol's list, the unknown ones
// "other".
func TestClassOf(t *testing.T) {
	for _, c := range []struct {
		ans  []byte
		want string
	}{
		{message.NewAnswer(acr(1, "u")).Uint32(message.ResultCode, 0, true, 1001).Bytes(), "1xxx"},
		{message.NewAnswer(acr(1, "u")).Uint32(message.ResultCode, 0, true, 4010).Bytes(), "4xxx"},
		{message.NewAnswer(acr(1, "u")).Uint32(message.ResultCode, 0, true, 6000).Bytes(), "other"},
		{message.NewAnswer(acr(1, "u")).Bytes(), "other"},
		{[]byte{1, 2}, "other"},
	} {
		if got := DiameterClassOf(c.ans); got != c.want {
			t.Errorf("Diameter class %q, want %q", got, c.want)
		}
	}
	for code, want := range map[byte]string{2: "accept", 3: "reject", 11: "challenge", 5: "accounting-response", 44: "other"} {
		if got := RADIUSClassOf([]byte{code, 0, 0, 20}); got != want {
			t.Errorf("RADIUS code %d: class %q, want %q", code, got, want)
		}
	}
	if got := RADIUSClassOf(nil); got != ClassOther {
		t.Errorf("an empty RADIUS answer: class %q", got)
	}
}

// Each error a request can end with has its reason; a timeout of a
// request that found no server is no_peer, as Send says.
func TestReasonOf(t *testing.T) {
	for _, c := range []struct {
		err    error
		noPeer bool
		want   string
	}{
		{fmt.Errorf("x: %w", peer.ErrTimeout), false, "timeout"},
		{fmt.Errorf("x: %w", peer.ErrTimeout), true, "no_peer"},
		{context.DeadlineExceeded, false, "timeout"},
		{throttle.ErrExpired, false, "timeout"},
		{fmt.Errorf("%w: %w", peer.ErrTimeout, &throttle.ExpiredError{Server: "a"}), false, "timeout"},
		{context.Canceled, false, "canceled"},
		{fmt.Errorf("client closed: %w", peer.ErrClosed), false, "closed"},
		{peer.ErrConnectionLost, false, "connection_lost"},
		{radpeer.ErrNoReply, false, "no_reply"},
		{&radpeer.TimeoutError{Server: "a", Attempts: 3}, false, "no_reply"}, // as a radius:// server's silence ends a request
		{ErrUnableToDeliver, false, "unable_to_deliver"},
		{ErrQueueFull, false, "queue_full"},
		{radpeer.ErrBusy, false, "busy"},
		{errors.New("something else"), false, "other"},
	} {
		if got := ErrorReasons[reasonOf(c.err, c.noPeer)]; got != c.want {
			t.Errorf("%v (found no peer: %v): %s, want %s", c.err, c.noPeer, got, c.want)
		}
	}
	if len(ErrorReasons) != nReasons {
		t.Errorf("%d reasons, nReasons %d", len(ErrorReasons), nReasons)
	}
}

// A request every server refused too busy ends with the last refusal,
// counted as the answer of the server that sent it, by its Result-Code.
func TestConcludedRefusalCountedByClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net")}
		defer n.close()
		for _, f := range n {
			f.handle = func(ctx context.Context, p *peer.Peer, req []byte) []byte {
				// ResultCode sets the E bit of a 3xxx answer: a refusal.
				return message.NewAnswer(req).ResultCode(message.TooBusy).
					String(message.OriginHost, 0, true, f.host).
					String(message.OriginRealm, 0, true, "example.net").Bytes()
			}
		}
		c := started(t, clientConfig(n, PrimarySecondary, "tcp://a:1", "tcp://b:1"))
		waitOkay(t, c)
		ans, err := c.Send(context.Background(), acr(1, "u1"))
		require.NoError(t, err)
		rc, _ := message.ResultCodeOf(ans)
		require.Equal(t, uint32(message.TooBusy), rc, "the last refusal is the answer")
		got := map[string]uint64{}
		for _, st := range c.ServerStats() {
			for k, v := range st.Answers {
				got[k] += v
			}
		}
		assert.Equal(t, map[string]uint64{"1xxx": 0, "2xxx": 0, "3xxx": 1, "4xxx": 0, "5xxx": 0, "other": 0}, got)
	})
}
