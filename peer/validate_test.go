package peer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// The checks read a request's AVPs in one walk, yet refuse in a fixed
// order: a malformed AVP anywhere (even after an AVP the contents check
// refuses), then the application, then the contents.
func TestRefusalPrecedence(t *testing.T) {
	const remote = "client.example.net"
	cfg, err := Config{OriginHost: "server.example.net", OriginRealm: "example.net", AcctApps: []uint32{message.AppAccounting}, Logger: quiet}.validate()
	require.NoError(t, err)
	host := rawAVP(message.OriginHost, 0x40, 8+len(remote), []byte(remote))
	realm := rawAVP(message.OriginRealm, 0x40, 8+11, []byte("example.net"))
	sid := rawAVP(message.SessionID, 0x40, 8+8, []byte("s;1;2;34"))
	truncated := rawAVP(message.UserName, 0x40, 0xFFF, []byte("x"))
	badHost := rawAVP(message.OriginHost, 0x40, 8+4, []byte("a b!"))
	destHost := rawAVP(message.DestinationHost, 0x40, 8+17, []byte("other.example.net"))
	destRealm := rawAVP(message.DestinationRealm, 0x40, 8+11, []byte("example.com"))
	authApp := func(avps ...[]byte) []byte {
		return withAVPs(message.NewRequest(272, 4, wire.FlagProxiable).Bytes(), avps...)
	}
	for _, tc := range []struct {
		name string
		req  []byte
		rc   uint32
	}{
		{"well formed", withAVPs(bareACR(wire.FlagRequest), sid, host, realm), 0},
		{"duplicate Origin-Host, then a malformed AVP", withAVPs(bareACR(wire.FlagRequest), sid, host, host, realm, truncated), message.InvalidAVPLength},
		{"bad identity, then a malformed AVP", withAVPs(bareACR(wire.FlagRequest), sid, badHost, realm, truncated), message.InvalidAVPLength},
		{"malformed AVP only", withAVPs(bareACR(wire.FlagRequest), sid, host, realm, truncated), message.InvalidAVPLength},
		{"unadvertised application with a duplicate AVP", authApp(sid, host, host, realm), message.ApplicationNoSupport},
		{"unadvertised application, malformed AVP", authApp(sid, host, realm, truncated), message.InvalidAVPLength},
		{"duplicate Origin-Host", withAVPs(bareACR(wire.FlagRequest), sid, host, host, realm), message.AVPOccursTooManyTimes},
		{"bad identity", withAVPs(bareACR(wire.FlagRequest), sid, badHost, realm), message.InvalidAVPValue},
		{"no Origin-Realm", withAVPs(bareACR(wire.FlagRequest), sid, host), message.MissingAVP},
		{"another peer's Origin-Host", withAVPs(bareACR(wire.FlagRequest), sid, rawAVP(message.OriginHost, 0x40, 8+5, []byte("other")), realm), message.InvalidAVPValue},
		{"Destination-Host twice", withAVPs(bareACR(wire.FlagRequest), sid, host, realm, destHost, destHost), message.AVPOccursTooManyTimes},
		{"another realm", withAVPs(bareACR(wire.FlagRequest), sid, host, realm, destRealm), message.RealmNotServed},
		{"another realm, from another peer's Origin-Host", withAVPs(bareACR(wire.FlagRequest), sid, rawAVP(message.OriginHost, 0x40, 8+5, []byte("other")), realm, destRealm), message.InvalidAVPValue},
		{"another realm, unadvertised application", authApp(sid, host, realm, destRealm), message.ApplicationNoSupport},
		{"another realm, no Origin-Realm", withAVPs(bareACR(wire.FlagRequest), sid, host, destRealm), message.MissingAVP},
		{"another host", withAVPs(bareACR(wire.FlagRequest), sid, host, realm, destHost), message.UnableToDeliver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cfg.checkRequest(tc.req, remote)
			if tc.rc == 0 {
				assert.Nil(t, r)
				return
			}
			require.NotNil(t, r)
			assert.Equal(t, tc.rc, r.rc, r.why)
		})
	}
}

// The checks of a well-formed request allocate nothing.
func TestCheckRequestAllocatesNothing(t *testing.T) {
	cfg, err := Config{OriginHost: "server.example.net", OriginRealm: "example.net", AcctApps: []uint32{message.AppAccounting}, Logger: quiet}.validate()
	require.NoError(t, err)
	for _, req := range [][]byte{acr(), destinationCase{host: "SERVER.example.net", realm: "Example.NET"}.request(1)} {
		require.Nil(t, cfg.checkRequest(req, "client.example.net"))
		assert.Zero(t, testing.AllocsPerRun(100, func() { cfg.checkRequest(req, "client.example.net") }))
	}
}

// destinationCase is a request with Destination-Host host and
// Destination-Realm realm (each left out when empty), and the Result-Code
// it gets: 0 when the Handler answers it.
type destinationCase struct {
	name, host, realm string
	rc                uint32
}

var destinationCases = []destinationCase{
	{"another host", "other.example.net", "example.net", message.UnableToDeliver},
	{"another host, no Destination-Realm", "other.example.net", "", message.UnableToDeliver},
	{"another realm", "", "example.com", message.RealmNotServed},
	{"another host in another realm", "other.example.com", "example.com", message.RealmNotServed},
	{"our host and realm in other letter case", "SERVER.Example.NET", "EXAMPLE.net", 0},
	{"our host, another realm", "server.example.net", "example.com", 0},
	{"no Destination-Host, our realm", "", "example.net", 0},
	{"no Destination-Host, a served realm in other letter case", "", "served.EXAMPLE.org", 0},
	{"no Destination-Host, no Destination-Realm", "", "", 0},
}

func (d destinationCase) request(hbh uint32) []byte {
	b := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "client;1;1").
		String(message.OriginHost, 0, true, "client.example.net").
		String(message.OriginRealm, 0, true, "example.net")
	if d.realm != "" {
		b.String(message.DestinationRealm, 0, true, d.realm)
	}
	if d.host != "" {
		b.String(message.DestinationHost, 0, true, d.host)
	}
	m := b.Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, 0).Bytes()
	wire.SetHopByHop(m, hbh)
	return m
}

// serveDestinations sends every destinationCase, one at a time, from
// client.example.net to a server Peer (server.example.net in example.net,
// serving served.example.org too, mutated by mutate) over a net.Pipe, and
// calls check with each case, its request, the answer and whether the
// Handler ran for it. It returns the server Peer's Stats.
func serveDestinations(t *testing.T, mutate func(*Config), check func(t *testing.T, d destinationCase, req, ans []byte, handled bool)) Stats {
	var handled atomic.Int64
	cfg := clientConfig("server.example.net")
	cfg.ServedRealms = []string{"Served.Example.ORG"}
	cfg.Handler = func(ctx context.Context, p *Peer, req []byte) []byte {
		handled.Add(1)
		return acctHandler(ctx, p, req)
	}
	if mutate != nil {
		mutate(&cfg)
	}
	p, far, rc := acceptCER(t, cfg, "client.example.net")
	defer func() {
		far.Close()
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Error("the server Peer did not end once its connection closed")
		}
	}()
	require.Equal(t, uint32(message.Success), rc)
	for i, d := range destinationCases {
		t.Run(d.name, func(t *testing.T) {
			req := d.request(uint32(100 + i))
			before := handled.Load()
			require.NoError(t, far.WriteMessages(req))
			ans, err := far.ReadMessage()
			require.NoError(t, err, "the connection stays up")
			require.Equal(t, wire.HopByHop(req), wire.HopByHop(ans))
			check(t, d, req, ans, handled.Load() > before)
		})
	}
	return p.Stats()
}

// A node that does not relay answers a request addressed to another host
// DIAMETER_UNABLE_TO_DELIVER and one for a realm it does not serve
// DIAMETER_REALM_NOT_SERVED, protocol errors with the E bit, an
// Error-Message and the AVP in a Failed-AVP; its Handler never sees them.
// Its own host and realms match whatever their letter case, and a request
// without Destination-Host, or without either, is its own.
func TestRequestsForOtherNodesRefused(t *testing.T) {
	refused := 0
	st := serveDestinations(t, nil, func(t *testing.T, d destinationCase, req, ans []byte, handled bool) {
		if d.rc == 0 {
			assert.True(t, handled, "the Handler answers it")
			rc, _ := message.ResultCodeOf(ans)
			assert.Equal(t, uint32(message.Success), rc)
			return
		}
		refused++
		assert.False(t, handled, "the Handler never sees it")
		checkErrorAnswer(t, req, ans, d.rc, "server.example.net")
		msg, ok := message.StringOf(ans, message.ErrorMessage, 0)
		assert.True(t, ok, "Error-Message")
		failed := uint32(message.DestinationHost)
		if d.rc == message.RealmNotServed {
			failed = message.DestinationRealm
		}
		f, ok := wire.FindAVP(ans, message.FailedAVP, 0)
		require.True(t, ok, "Failed-AVP")
		var inner wire.AVP
		require.NoError(t, wire.WalkGrouped(f, func(a wire.AVP) bool { inner = a; return false }))
		assert.Equal(t, failed, inner.Code)
		assert.Contains(t, msg, string(inner.Data), "the Error-Message names the destination")
	})
	assert.Equal(t, uint64(refused), st.Refused, "Stats.Refused counts them")
}

// HandleOtherDestinations, an agent's switch, hands every request to the
// Handler, addressed to this node or not.
func TestHandleOtherDestinations(t *testing.T) {
	st := serveDestinations(t, func(c *Config) { c.HandleOtherDestinations = true }, func(t *testing.T, d destinationCase, req, ans []byte, handled bool) {
		assert.True(t, handled, "the Handler answers it")
		rc, _ := message.ResultCodeOf(ans)
		assert.Equal(t, uint32(message.Success), rc)
	})
	assert.Zero(t, st.Refused)
}

// ServedRealms are DiameterIdentities: a pattern or a typo fails at once.
func TestServedRealmsChecked(t *testing.T) {
	for _, r := range []string{"*.example.net", "", "exa mple.net"} {
		_, err := Config{OriginHost: "h", OriginRealm: "r", ServedRealms: []string{r}}.validate()
		assert.ErrorIs(t, err, ErrConfig, r)
	}
	_, err := Config{OriginHost: "h", OriginRealm: "r", ServedRealms: []string{"Example.ORG"}}.validate()
	assert.NoError(t, err)
}

// AgentHosts match a connection's identity ignoring ASCII case, as
// AllowHosts do and as identities compare: an agent whose CER said
// AGENT1.Example.net forwards for other nodes under a pattern written in
// lower case, and the other way round. Before, the match was
// case-sensitive, and its forwarded requests were refused 5004.
func TestAgentHostsMatchIgnoringCase(t *testing.T) {
	for pattern, remote := range map[string]string{
		"agent*.example.net": "AGENT1.Example.net",
		"AGENT*.EXAMPLE.NET": "agent1.example.net",
	} {
		cfg, err := Config{OriginHost: "server.example.net", OriginRealm: "example.net", AgentHosts: []string{pattern}, Logger: quiet}.validate()
		require.NoError(t, err)
		assert.Nil(t, cfg.checkRequest(acrFrom("other.example.net"), remote), "pattern %s, agent %s", pattern, remote)
		assert.NotNil(t, cfg.checkRequest(acrFrom("other.example.net"), "notagent.example.net"))
	}
}
