package peer_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

var quiet = slog.New(slog.DiscardHandler)

func acr(user string) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "c1.example.net;1;"+user).
		String(message.OriginHost, 0, true, "c1.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, 0).
		String(message.UserName, 0, true, user).Bytes()
}

func dial(srv *peer.Server) *peer.Peer {
	p, err := peer.Dial("tcp://"+srv.Addr().String(), peer.Config{
		OriginHost: "c1.example.net", OriginRealm: "example.net",
		AcctApps: []uint32{message.AppAccounting}, Logger: quiet,
	})
	if err != nil {
		log.Fatal(err)
	}
	return p
}

// A server whose handler is wrapped in dedup: a request replayed after a
// failover (same End-to-End Identifier and Origin-Host, T flag) is
// answered from the store, and the handler applies it once.
func ExampleListen() {
	store := dedup.NewMemory()
	defer store.Close()
	var counters dedup.Counters
	applied := 0
	handler := func(_ context.Context, p *peer.Peer, req []byte) []byte {
		applied++ // write the record to the database, once
		id := p.LocalIdentity()
		return message.NewAnswer(req).ResultCode(message.Success).
			String(message.OriginHost, 0, true, id.Host).String(message.OriginRealm, 0, true, id.Realm).Bytes()
	}
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost: "s1.example.net", OriginRealm: "example.net",
		AcctApps: []uint32{message.AppAccounting},
		Handler:  dedup.Wrap(store, handler, &counters),
		Logger:   quiet,
	})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())

	p := dial(srv)
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		log.Fatal(err)
	}
	req := acr("alice@example.net")
	wire.SetEndToEnd(req, 42)
	if _, err := p.Request(ctx, req); err != nil {
		log.Fatal(err)
	}
	replay := append([]byte(nil), req...)
	wire.SetRetransmit(replay) // as a client's failover resends it
	ans, err := p.Request(ctx, replay)
	if err != nil {
		log.Fatal(err)
	}
	rc, _ := message.ResultCodeOf(ans)
	fmt.Println("answer:", rc, "applied:", applied, "duplicates:", counters.Duplicates.Load())
	// Output: answer: 2001 applied: 1 duplicates: 1
}

// A handler refuses what it cannot serve with message.ErrorAnswer, the
// one builder of error answers: Session-Id first, Result-Code, the
// server's Origin-Host and Origin-Realm, Error-Message.
func ExampleHandler_errorAnswer() {
	handler := func(_ context.Context, p *peer.Peer, req []byte) []byte {
		user, ok := message.StringOf(req, message.UserName, 0)
		if !ok || user != "alice@example.net" {
			return message.ErrorAnswer(req, p.LocalIdentity(), message.UnableToComply, "unknown user").Bytes()
		}
		id := p.LocalIdentity()
		return message.NewAnswer(req).ResultCode(message.Success).
			String(message.OriginHost, 0, true, id.Host).String(message.OriginRealm, 0, true, id.Realm).Bytes()
	}
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost: "s1.example.net", OriginRealm: "example.net",
		AcctApps: []uint32{message.AppAccounting}, Handler: handler, Logger: quiet,
	})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())

	p := dial(srv)
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitState(ctx, watchdog.Okay); err != nil {
		log.Fatal(err)
	}
	for _, user := range []string{"alice@example.net", "mallory@example.net"} {
		ans, err := p.Request(ctx, acr(user))
		if err != nil {
			log.Fatal(err)
		}
		rc, _ := message.ResultCodeOf(ans)
		text, _ := message.StringOf(ans, message.ErrorMessage, 0)
		fmt.Printf("%s %d %q\n", user, rc, text)
	}
	// Output:
	// alice@example.net 2001 ""
	// mallory@example.net 5012 "unknown user"
}

// Subscribe to a peer's events through Config.Events: each has a Kind
// and that kind's fields.
func ExampleBus_Subscribe() {
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{
		OriginHost: "s1.example.net", OriginRealm: "example.net",
		AcctApps: []uint32{message.AppAccounting}, Logger: quiet,
		Handler: func(context.Context, *peer.Peer, []byte) []byte { return nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())

	bus := peer.NewBus()
	lines := make(chan string, 16)
	say := func(s string) {
		select { // runs on the peer's goroutine: never block
		case lines <- s:
		default:
		}
	}
	defer bus.Subscribe(func(_ context.Context, e peer.Event) {
		switch e.Kind {
		case peer.EventConnUp:
			say(fmt.Sprintf("%s over %s", e.Kind, e.Network))
		case peer.EventWatchdog:
			say(fmt.Sprintf("%s %s -> %s", e.Peer, e.From, e.To))
		}
	})()
	p, err := peer.Dial("tcp://"+srv.Addr().String(), peer.Config{
		OriginHost: "c1.example.net", OriginRealm: "example.net",
		AcctApps: []uint32{message.AppAccounting}, Logger: quiet, Events: bus,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(context.Background())
	fmt.Println(<-lines)
	fmt.Println(<-lines)
	// Output:
	// connection_up over tcp
	// s1.example.net INITIAL -> OKAY
}
