package dedup_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"

	"github.com/aaatp/aaatp/dedup"
)

// Example wraps a server's handler: a request, then its failover replay
// over another connection (new Hop-by-Hop id, T flag, same End-to-End id),
// and the handler runs once; the replay gets the first answer.
func Example() {
	store := dedup.NewMemory()
	defer store.Close()
	runs := 0
	handler := dedup.Wrap(store, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		runs++
		return message.NewAnswer(req).ResultCode(message.Success).Bytes()
	}, nil)

	req := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.OriginHost, 0, true, "client.example.net").Bytes()
	wire.SetEndToEnd(req, 0xabc)
	wire.SetHopByHop(req, 0x100)
	replay := append([]byte(nil), req...)
	wire.SetHopByHop(replay, 0x200)
	wire.SetRetransmit(replay)

	first := handler(context.Background(), nil, req)
	again := handler(context.Background(), nil, replay)
	fmt.Printf("handler runs: %d, same answer: %v\n", runs, bytes.Equal(first, again))
	// Output:
	// handler runs: 1, same answer: true
}

// ExampleAccountingRecord_Key: an accounting record is keyed twice, so a
// client re-sending it under a new End-to-End Identifier is still caught,
// while the STOP of the same session in the same second is another record.
func ExampleAccountingRecord_Key() {
	store := dedup.NewMemory()
	ctx := context.Background()
	start := dedup.AccountingRecord{
		SessionID:      "nas1.example.net;1;42",
		RecordType:     2, // START
		RecordNumber:   0,
		EventTimestamp: []byte{0xe9, 0x3a, 0x1b, 0x00}, // Event-Timestamp AVP data
		OriginHost:     "nas1.example.net",
		NASIdentity:    "nas1",
	}
	stop := start
	stop.RecordType, stop.RecordNumber = 4, 1 // STOP, same second

	o, _ := store.Begin(ctx, dedup.RequestKey("nas1.example.net", 7), start.Key())
	fmt.Println("START:", o.Kind())
	_ = o.Complete(message.NewRequest(message.CmdAccounting, message.AppAccounting, 0).Bytes()) // stands for the ACA

	o, _ = store.Begin(ctx, dedup.RequestKey("nas1.example.net", 8), start.Key()) // new End-to-End id
	fmt.Println("START again:", o.Kind())

	o, _ = store.Begin(ctx, dedup.RequestKey("nas1.example.net", 9), stop.Key())
	fmt.Println("STOP:", o.Kind())
	_ = o.Abandon()
	// Output:
	// START: First
	// START again: Duplicate
	// STOP: First
}

// ExampleKeyBuilder keys the requests of another protocol, here RADIUS
// accounting, whose duplicates are (NAS address, Acct-Session-Id,
// Acct-Status-Type, Event-Timestamp), in a namespace of their own.
func ExampleKeyBuilder() {
	store := dedup.NewMemory()
	ctx := context.Background()
	radiusKey := func(nas []byte, acctSessionID string, statusType, eventTimestamp uint32) dedup.Key {
		var kb dedup.KeyBuilder
		kb.Reset("radius-acct").Bytes(nas).String(acctSessionID).Uint32(statusType).Uint32(eventTimestamp)
		return kb.Key()
	}
	nas := []byte{192, 0, 2, 1}
	o, _ := store.Begin(ctx, radiusKey(nas, "0001", 1, 1700000000)) // Start
	fmt.Println("Start:", o.Kind())
	_ = o.Complete([]byte("Accounting-Response"))                  // the encoded response
	o, _ = store.Begin(ctx, radiusKey(nas, "0001", 1, 1700000000)) // retransmitted Start
	fmt.Println("Start again:", o.Kind(), string(o.Answer()))
	o, _ = store.Begin(ctx, radiusKey(nas, "0001", 2, 1700000000)) // Stop, same second
	fmt.Println("Stop:", o.Kind())
	_ = o.Abandon()
	// Output:
	// Start: First
	// Start again: Duplicate Accounting-Response
	// Stop: First
}

// ExampleOpen: the store is chosen by configuration. Servers behind one realm
// that must see each other's duplicates share a Redis URL and key prefix.
func ExampleOpen() {
	store, err := dedup.Open("memory", dedup.WithMaxEntries(100_000))
	// or: dedup.Open("redis://127.0.0.1:6379/0", dedup.WithKeyPrefix("realm.example:dedup:"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	fmt.Printf("%T\n", store)
	// Output: *dedup.Memory
}

// ExampleOutcome_Abandon: a handler that produced no answer abandons, so
// the next copy of the request is handled afresh.
func ExampleOutcome_Abandon() {
	store := dedup.NewMemory()
	ctx := context.Background()
	k := dedup.RequestKey("client.example.net", 9)

	o, _ := store.Begin(ctx, k)
	_ = o.Abandon() // e.g. the upstream timed out and no answer was sent

	o, _ = store.Begin(ctx, k)
	fmt.Println(o.Kind())
	// Output: First
}

// ExampleMemory_BeginInto serves requests with one recycled Outcome, as a
// server's request loop or dedup.Wrap's pool does: no Outcome is allocated
// per request.
func ExampleMemory_BeginInto() {
	store := dedup.NewMemory()
	defer store.Close()
	ctx := context.Background()
	var o dedup.Outcome
	for _, e2e := range []uint32{7, 8, 7} {
		key := dedup.RequestKey("client.example.net", e2e)
		if err := store.BeginInto(ctx, &o, key); err != nil {
			panic(err)
		}
		if o.First() { // run the application, then store its answer
			req := message.NewRequest(message.CmdAccounting, message.AppAccounting, 0).Bytes()
			_ = o.Complete(message.NewAnswer(req).ResultCode(message.Success).Bytes())
		}
		fmt.Printf("End-to-End %d: %v\n", e2e, o.Kind())
	}
	// Output:
	// End-to-End 7: First
	// End-to-End 8: First
	// End-to-End 7: Duplicate
}
