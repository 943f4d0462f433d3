package radinterop

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/loadbalance"
	"github.com/aaatp/aaatp/policy"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	lradius "layeh.com/radius"
)

// FreeRADIUS over UDP needs one listener per type. The test user is
// accepted, "baduser" rejected, everyone else accepted.
const radiusdUDPConf = `prefix = /usr
localstatedir = {{DIR}}
logdir = {{DIR}}
run_dir = {{DIR}}
raddbdir = {{DIR}}
libdir = /usr/lib/freeradius
pidfile = {{DIR}}/radiusd.pid
max_request_time = 30
log {
	destination = stderr
}
security {
	status_server = yes
	allow_vulnerable_openssl = yes
}
modules {
	always ok {
		rcode = ok
	}
}
client local {
	ipaddr = 127.0.0.1
	proto = *
	secret = {{SECRET}}
}
server default {
	listen {
		type = auth
		ipaddr = 127.0.0.1
		port = {{AUTHPORT}}
		proto = udp
	}
	listen {
		type = acct
		ipaddr = 127.0.0.1
		port = {{ACCTPORT}}
		proto = udp
	}
	authorize {
		Autz-Type Status-Server {
			ok
		}
		if (&User-Name == "baduser") {
			update control {
				&Auth-Type := Reject
			}
		}
		else {
			update control {
				&Auth-Type := Accept
			}
		}
	}
	authenticate {
	}
	preacct {
		ok
	}
	accounting {
		ok
	}
	post-auth {
		ok
	}
}
`

func freeUDPPort(t *testing.T) int {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// policyLog records one server's policy transitions.
type policyLog struct {
	mu  sync.Mutex
	seq []string
}

func (l *policyLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seq...)
}

func waitPolicy(t *testing.T, c *client.Client, i int, st policy.State, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for c.PolicyStates()[i] != st.String() {
		if time.Now().After(deadline) {
			t.Fatalf("server %d still %v after %v, want %v", i, c.PolicyStates()[i], within, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreeRADIUS 3.2 over UDP as the server of client.Client, with a second
// (in-process) server beside it so that probing is allowed: auth and
// accounting answered; SIGSTOP of freeradius drives in-service ->
// out-of-service (down-timeout) with the requests failing over; after the
// hold-down, one test-user probe, unanswered while stopped (out of service
// again); after SIGCONT the next probe is answered by FreeRADIUS: in
// service.
func TestFreeRADIUSUDPServerStates(t *testing.T) {
	fr := runFreeRADIUS(t, radiusdUDPConf, func() (map[string]string, string) {
		auth, acct := freeUDPPort(t), freeUDPPort(t)
		return map[string]string{"{{AUTHPORT}}": fmt.Sprint(auth), "{{ACCTPORT}}": fmt.Sprint(acct)}, fmt.Sprintf("127.0.0.1:%d", auth)
	})
	acctPort := fr.vars["{{ACCTPORT}}"]

	// The second server: aaa-peer's own UDP server, in process.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	local, err := radpeer.NewUDPServer(pc, radpeer.ServerConfig{Secret: []byte(secret)})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { local.Serve(); close(served) }()
	defer func() { local.Close(context.Background()); <-served }()

	bus := client.NewBus()
	log := &policyLog{}
	cancel := bus.Subscribe(func(_ context.Context, e client.Event) {
		if e.Kind == client.EventPolicy && e.Server == "freeradius" {
			log.mu.Lock()
			log.seq = append(log.seq, e.Policy.From.String()+">"+e.Policy.To.String())
			log.mu.Unlock()
		}
	})
	defer cancel()
	c, err := client.New(client.Config{
		Peers: []client.PeerSpec{
			{Name: "freeradius", URL: "radius://" + fr.addr, AccountingURL: "radius://127.0.0.1:" + acctPort},
			{Name: "local", URL: "radius://" + local.Addr().String()},
		},
		Algorithm: loadbalance.Direct,
		// FreeRADIUS 3.2.1 signs no Access-Accept: the default would drop
		// them (BlastRADIUS).
		RADIUS: radpeer.Config{Secret: []byte(secret), RequireMessageAuthenticator: radpeer.RequireMANever},
		UDP:    radpeer.UDPConfig{Timeout: 500 * time.Millisecond, Retries: 2},
		Policy: &policy.Config{RequestTimeout: 500 * time.Millisecond, Retries: 2, HoldDown: 2 * time.Second, TestUser: true},
		RADIUSTestRequest: func(string) *radius.Request {
			r := &radius.Request{Code: lradius.CodeAccessRequest}
			r.Attributes.Add(radius.AttrUserName, lradius.Attribute("probe-user"))
			r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("probe-pw"))
			return r
		},
		Events: bus,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()

	exchange := func(r *radius.Request) *radpeer.Response {
		t.Helper()
		resp, err := c.Exchange(ctx, r)
		if err != nil {
			t.Fatalf("%v: %v", r.Code, err)
		}
		return resp
	}
	auth := func(user string) *radius.Request {
		r := &radius.Request{Code: lradius.CodeAccessRequest}
		r.Attributes.Add(radius.AttrUserName, lradius.Attribute(user))
		r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("pw"))
		return r
	}
	if resp := exchange(auth("alice")); resp.Server != "radius://"+fr.addr || resp.Packet.Code != lradius.CodeAccessAccept {
		t.Fatalf("alice: %v from %s, want FreeRADIUS's Access-Accept", resp.Packet.Code, resp.Server)
	}
	if resp := exchange(auth("probe-user")); resp.Packet.Code != lradius.CodeAccessAccept {
		t.Fatalf("FreeRADIUS does not accept the test user: %v", resp.Packet.Code)
	}
	if resp := exchange(auth("baduser")); resp.Packet.Code != lradius.CodeAccessReject {
		t.Fatalf("baduser: %v, want Access-Reject (the test config checks users)", resp.Packet.Code)
	}
	acct := &radius.Request{Code: lradius.CodeAccountingRequest}
	acct.Attributes.Add(radius.AttrNASIdentifier, lradius.Attribute("nas1"))
	acct.Attributes.Add(radius.AttrAcctSessionID, lradius.Attribute("udp-1"))
	acct.Attributes.Add(radius.AttrAcctStatusType, lradius.Attribute([]byte{0, 0, 0, 1}))
	if resp := exchange(acct); resp.Packet.Code != lradius.CodeAccountingResponse || !strings.HasSuffix(resp.Server, ":"+acctPort) {
		t.Fatalf("accounting: %v from %s", resp.Packet.Code, resp.Server)
	}

	// Stopped: the request is retried (2 x 500 ms), then answered by the
	// local server; FreeRADIUS is out of service at the down-timeout.
	if err := fr.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if resp := exchange(auth("bob")); resp.Server != "radius://"+local.Addr().String() {
		t.Fatalf("bob answered by %s, want the local server", resp.Server)
	}
	if took := time.Since(began); took < time.Second || took > 3*time.Second {
		t.Errorf("failover after %v, want about 2 x 500 ms", took)
	}
	waitPolicy(t, c, 0, policy.OutOfService, 2*time.Second)
	waitPolicy(t, c, 0, policy.Probing, 4*time.Second)
	waitPolicy(t, c, 0, policy.OutOfService, 2*time.Second) // the probe got no reply
	if err := fr.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, c, 0, policy.InService, 5*time.Second)
	if resp := exchange(auth("carol")); resp.Server != "radius://"+fr.addr {
		t.Errorf("carol answered by %s, want FreeRADIUS back in service", resp.Server)
	}
	want := "unknown>in-service in-service>out-of-service out-of-service>probing probing>out-of-service out-of-service>probing probing>in-service"
	if got := strings.Join(log.get(), " "); got != want {
		t.Errorf("FreeRADIUS's states:\n got %s\nwant %s", got, want)
	}
	st, u := c.ServerStats()[0], c.UDPPeers()[0].Stats()
	t.Logf("freeradius peer: %+v (late and duplicate replies are FreeRADIUS answering the copies it queued while stopped)", u)
	if st.Probes != 2 || u.Retransmissions == 0 {
		t.Errorf("probes %d, retransmissions %d; want 2 probes and some retransmissions", st.Probes, u.Retransmissions)
	}
}
