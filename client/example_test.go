package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/radius"
	"github.com/aaatp/aaatp/radpeer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
	lradius "layeh.com/radius"
)

var quiet = slog.New(slog.DiscardHandler)

// server starts an accounting server on loopback that answers every
// request with DIAMETER_SUCCESS.
func server(host string) *peer.Server {
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost: host, OriginRealm: "example.net",
		AcctApps: []uint32{message.AppAccounting},
		Handler: func(_ context.Context, p *peer.Peer, req []byte) []byte {
			id := p.LocalIdentity()
			return message.NewAnswer(req).ResultCode(message.Success).
				String(message.OriginHost, 0, true, id.Host).String(message.OriginRealm, 0, true, id.Realm).Bytes()
		},
		Logger: quiet,
	})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve()
	return srv
}

// acr builds an Accounting-Request for user.
func acr(user string, n uint32) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "c1.example.net;1;"+user).
		String(message.OriginHost, 0, true, "c1.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, n).
		String(message.UserName, 0, true, user).Bytes()
}

func peerConfig() peer.Config {
	return peer.Config{OriginHost: "c1.example.net", OriginRealm: "example.net",
		AcctApps: []uint32{message.AppAccounting}, Logger: quiet}
}

// answeredBy returns the Origin-Host of an answer.
func answeredBy(ans []byte) string {
	h, _ := message.StringOf(ans, message.OriginHost, 0)
	return h
}

// New dials the servers and returns at once; Send waits for a server in
// service, bounded by the context's deadline.
func ExampleNew() {
	s1 := server("s1.example.net")
	defer s1.Close(context.Background())

	c, err := client.New(client.Config{
		Peers: []client.PeerSpec{{URL: "tcp://" + s1.Addr().String(), Name: "s1"}},
		Peer:  peerConfig(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // generous: a loaded machine
	defer cancel()
	ans, err := c.Send(ctx, acr("alice@example.net", 0))
	if err != nil {
		log.Fatal(err) // the deadline passed, or no server took it
	}
	rc, _ := message.ResultCodeOf(ans)
	fmt.Println(rc, answeredBy(ans))
	// Output: 2001 s1.example.net
}

// Balance mode spreads requests over the servers in service by a hash of
// the User-Name (RFC 3074's Pearson by default): a user's requests all go
// to the same server.
func ExampleNew_balance() {
	s1, s2 := server("s1.example.net"), server("s2.example.net")
	defer s1.Close(context.Background())
	defer s2.Close(context.Background())

	c, err := client.New(client.Config{
		Mode: client.Balance,
		Peers: []client.PeerSpec{
			{URL: "tcp://" + s1.Addr().String(), Name: "s1"},
			{URL: "tcp://" + s2.Addr().String(), Name: "s2"},
		},
		Peer: peerConfig(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // generous: a loaded machine
	defer cancel()
	if err := c.WaitReady(ctx, 2); err != nil { // both in the table before the first request
		log.Fatal(err)
	}
	for _, user := range []string{"alice@example.net", "bob@example.net", "carol@example.net", "alice@example.net"} {
		ans, err := c.Send(ctx, acr(user, 0))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(user, "->", answeredBy(ans))
	}
	// Output:
	// alice@example.net -> s1.example.net
	// bob@example.net -> s2.example.net
	// carol@example.net -> s1.example.net
	// alice@example.net -> s1.example.net
}

// PrimarySecondary sends to the first server in service, in configured
// order; when it leaves service the next one takes the traffic (and the
// requests it had pending), and the failover table and per-server
// statistics say what happened.
func ExampleNew_primarySecondary() {
	primary, secondary := server("primary.example.net"), server("secondary.example.net")
	defer secondary.Close(context.Background())

	c, err := client.New(client.Config{
		Mode: client.PrimarySecondary,
		Peers: []client.PeerSpec{
			{URL: "tcp://" + primary.Addr().String(), Name: "primary"},
			{URL: "tcp://" + secondary.Addr().String(), Name: "secondary"},
		},
		Peer: peerConfig(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // generous: a loaded machine
	defer cancel()
	if err := c.WaitReady(ctx, 2); err != nil {
		log.Fatal(err)
	}
	ans, err := c.Send(ctx, acr("alice@example.net", 0))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("before:", answeredBy(ans))

	primary.Close(context.Background()) // DPR: the client's primary peer goes DOWN
	if err := c.Peers()[0].WaitState(ctx, watchdog.Down); err != nil {
		log.Fatal(err)
	}
	ans, err = c.Send(ctx, acr("alice@example.net", 1))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after:", answeredBy(ans))

	// The record is written when the primary's hand-over has run, a
	// moment after its DOWN.
	records, total := c.FailoverLog()
	for ; total == 0 && ctx.Err() == nil; records, total = c.FailoverLog() {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("failovers:", total)
	for _, r := range records {
		fmt.Printf("  from %s: %s (%d requests moved)\n", r.From, r.Outcome, r.Moved)
	}
	for _, s := range c.ServerStats() {
		fmt.Printf("  %s %s: sent %d, answered %d\n", s.Server, s.State, s.Sent, s.Answered)
	}
	// Output:
	// before: primary.example.net
	// after: secondary.example.net
	// failovers: 1
	//   from primary: nothing_pending (0 requests moved)
	//   primary DOWN: sent 1, answered 1
	//   secondary OKAY: sent 1, answered 1
}

// Subscribe to a Client's events before New to see everything: each kind
// says what happened and sets its own fields.
func ExampleClient_Events() {
	s1 := server("s1.example.net")
	defer s1.Close(context.Background())

	bus := client.NewBus()
	up := make(chan string, 1)
	cancel := bus.Subscribe(func(_ context.Context, e client.Event) {
		// Runs on the publishing goroutine: be quick, never block.
		switch e.Kind {
		case client.EventPeer:
			if e.Peer.Kind == peer.EventWatchdog && e.Peer.To == watchdog.Okay {
				select {
				case up <- fmt.Sprintf("%s: %s -> %s", e.Server, e.Peer.From, e.Peer.To):
				default:
				}
			}
		case client.EventFailover:
			fmt.Println("failover from", e.Failover.From, "outcome", e.Failover.Outcome)
		}
	})
	defer cancel()

	c, err := client.New(client.Config{
		Peers:  []client.PeerSpec{{URL: "tcp://" + s1.Addr().String(), Name: "s1"}},
		Peer:   peerConfig(),
		Events: bus,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	fmt.Println(<-up)
	// Output: s1: INITIAL -> OKAY
}

// A Client over RADIUS/TCP servers: Exchange takes a RADIUS request
// through the same dispatch path as Send, each server with the
// Status-Server watchdog on its connections.
func ExampleClient_Exchange() {
	secret := []byte("example-secret")
	ln, err := radpeer.Listen("radius+tcp://127.0.0.1:0", transport.Options{})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := radpeer.NewServer(ln, radpeer.SchemeTCP, radpeer.ServerConfig{Secret: secret, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())

	c, err := client.New(client.Config{
		Peers:  []client.PeerSpec{{URL: "radius+tcp://" + ln.Addr().String(), Name: "r1", Secret: secret}},
		RADIUS: radpeer.Config{Logger: quiet},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())

	r := &radius.Request{Code: lradius.CodeAccessRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute("alice@example.net"))
	r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("alice's password"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Exchange(ctx, r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Packet.Code, c.ServerStats()[0].Answered)
	// Output: Access-Accept 1
}

// A Client over RADIUS/UDP servers, each with its own secret and
// accounting address: requests are retransmitted byte for byte, and one
// a server never replies to goes to the next server, each at most once.
func ExampleClient_Exchange_udp() {
	secret := []byte("example-secret")
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := radpeer.NewUDPServer(pc, radpeer.ServerConfig{Secret: secret, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())
	url := "radius://" + srv.Addr().String()

	c, err := client.New(client.Config{
		Peers:  []client.PeerSpec{{URL: url, Name: "r1", Secret: secret, AccountingURL: url}},
		RADIUS: radpeer.Config{Logger: quiet},
		UDP:    radpeer.UDPConfig{Timeout: time.Second, Retries: 3},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())

	r := &radius.Request{Code: lradius.CodeAccessRequest}
	r.Attributes.Add(radius.AttrUserName, lradius.Attribute("alice@example.net"))
	r.Attributes.Add(radius.AttrUserPassword, lradius.Attribute("alice's password"))
	resp, err := c.Exchange(context.Background(), r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Packet.Code, resp.Attempts, c.UDPPeers()[0].Stats().Answered)
	// Output: Access-Accept 1 1
}

// A reload of the configuration: SetPeers gives the Client its new peers
// while requests flow. Here a second server is added and the first
// removed: the removed one answers what it had in flight, then closes;
// the next requests go to the new one.
func ExampleClient_SetPeers() {
	first, second := server("first.example.net"), server("second.example.net")
	defer first.Close(context.Background())
	defer second.Close(context.Background())
	c, err := client.New(client.Config{
		Peers: []client.PeerSpec{{URL: "tcp://" + first.Addr().String(), Name: "first"}},
		Peer:  peerConfig(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // generous: a loaded machine
	defer cancel()
	if err := c.WaitReady(ctx, 1); err != nil {
		log.Fatal(err)
	}

	change, err := c.SetPeers(ctx, []client.PeerSpec{{URL: "tcp://" + second.Addr().String(), Name: "second"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("added:", change.Added, "removed:", change.Removed)
	ans, err := c.Send(ctx, acr("alice@example.net", 0)) // waits for second to be in service
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("answered by:", answeredBy(ans))
	for _, s := range c.ServerStats() {
		fmt.Printf("  %s %s: sent %d\n", s.Server, s.State, s.Sent)
	}
	// Output:
	// added: [second] removed: [first]
	// answered by: second.example.net
	//   second OKAY: sent 1
}

// A subscriber may close the Client, here once its only server has left
// service: given the context the subscriber got, Close starts the
// shutdown and returns at once (waiting there would hold the events of
// the shutdown), and Done says when it has ended.
func ExampleClient_Close_fromASubscriber() {
	s1 := server("s1.example.net")
	bus := client.NewBus()
	ready := make(chan *client.Client)
	var c *client.Client
	cancel := bus.Subscribe(func(ctx context.Context, e client.Event) {
		if e.Kind == client.EventPeer && e.Peer.Kind == peer.EventWatchdog && e.Peer.To == watchdog.Down && c == nil {
			c = <-ready
			fmt.Println(e.Server, "went", e.Peer.To, "- closing")
			c.Close(ctx)
		}
	})
	defer cancel()
	cl, err := client.New(client.Config{
		Peers:  []client.PeerSpec{{URL: "tcp://" + s1.Addr().String(), Name: "s1"}},
		Peer:   peerConfig(),
		Events: bus,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := cl.WaitReady(ctx, 1); err != nil {
		log.Fatal(err)
	}
	s1.Close(ctx) // the server goes away
	ready <- cl
	<-cl.Done()
	_, err = cl.Send(ctx, acr("alice@example.net", 1))
	fmt.Println("closed:", errors.Is(err, peer.ErrClosed))
	// Output:
	// s1 went DOWN - closing
	// closed: true
}
