package dedup_test

import (
	"context"
	"fmt"

	"github.com/aaatp/aaatp/dedup"
)

// header builds a 20-byte Diameter header with the given identifiers.
func header(hopByHop, endToEnd uint32) []byte {
	m := make([]byte, dedup.HeaderLen)
	m[0] = 1 // version
	_ = dedup.SetHopByHop(m, hopByHop)
	m[16], m[17], m[18], m[19] = byte(endToEnd>>24), byte(endToEnd>>16), byte(endToEnd>>8), byte(endToEnd)
	return m
}

// serve is a server's request path: look the request up, run the handler
// only for the First copy, replay the stored answer for duplicates.
func serve(ctx context.Context, store dedup.Store, originHost string, request []byte,
	handle func([]byte) []byte) ([]byte, error) {
	e2e, err := dedup.EndToEnd(request)
	if err != nil {
		return nil, err
	}
	o, err := store.Begin(ctx, dedup.RequestKey(originHost, e2e))
	if err != nil {
		return nil, err // ctx ended while a copy was in flight, or the store failed
	}
	defer o.Abandon() // drops the mark if the handler panics; no-op after Complete

	if o.Duplicate() {
		answer := o.Answer() // our own copy
		hbh, _ := dedup.HopByHop(request)
		_ = dedup.SetHopByHop(answer, hbh) // answer on the duplicate's hop
		return answer, nil
	}
	answer := handle(request)
	if err := o.Complete(answer); err != nil {
		// Not fatal: the answer is still sent; it was just not remembered.
		fmt.Println("dedup:", err)
	}
	return answer, nil
}

// Example shows a request, its retransmission over another connection (new
// Hop-by-Hop Identifier, same End-to-End Identifier), and the handler
// running once.
func Example() {
	store := dedup.NewMemory()
	defer store.Close()
	ctx := context.Background()

	runs := 0
	handle := func(req []byte) []byte {
		runs++
		hbh, _ := dedup.HopByHop(req)
		e2e, _ := dedup.EndToEnd(req)
		return header(hbh, e2e) // the answer carries the request's ids
	}

	first, _ := serve(ctx, store, "client.example.net", header(0x100, 0xabc), handle)
	again, _ := serve(ctx, store, "client.example.net", header(0x200, 0xabc), handle)

	h1, _ := dedup.HopByHop(first)
	h2, _ := dedup.HopByHop(again)
	e2, _ := dedup.EndToEnd(again)
	fmt.Printf("handler runs: %d\n", runs)
	fmt.Printf("first answer hop-by-hop %#x, duplicate's %#x, end-to-end %#x\n", h1, h2, e2)
	// Output:
	// handler runs: 1
	// first answer hop-by-hop 0x100, duplicate's 0x200, end-to-end 0xabc
}

// ExampleAccountingKey: an accounting record is keyed twice, so a client
// re-sending it under a new End-to-End Identifier is still caught.
func ExampleAccountingKey() {
	store := dedup.NewMemory()
	ctx := context.Background()
	eventTimestamp := []byte{0xe9, 0x3a, 0x1b, 0x00} // Event-Timestamp AVP data
	acct := dedup.AccountingKey("nas1.example.net;1;42", eventTimestamp, "nas1.example.net", "nas1")

	o, _ := store.Begin(ctx, dedup.RequestKey("nas1.example.net", 7), acct)
	fmt.Println(o.Kind())
	_ = o.Complete(header(1, 7)) // the ACA

	o, _ = store.Begin(ctx, dedup.RequestKey("nas1.example.net", 8), acct) // new End-to-End id
	fmt.Println(o.Kind())
	// Output:
	// First
	// Duplicate
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
