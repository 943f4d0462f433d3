package loadbalance

import (
	"fmt"
	"testing"
	"time"
)

const benchNAI = "subscriber-0123456@example.net" // 30 bytes

func benchBalancer(b *testing.B) *Balancer {
	b.Helper()
	if len(benchNAI) != 30 {
		b.Fatalf("NAI is %d bytes", len(benchNAI))
	}
	return mustNew(b, Pearson, servers(8), Options{})
}

// Known conversation, no transition in progress.
func BenchmarkPickKnownSession(b *testing.B) {
	lb := benchBalancer(b)
	r := Request{NAI: benchNAI, SessionID: "nas1.example.net;1234567890;42"}
	mustPick(b, lb, r)
	b.ReportAllocs()
	for b.Loop() {
		lb.Pick(r)
	}
}

// Request without a Session-Id: hash and table lookup only.
func BenchmarkPickNAIOnly(b *testing.B) {
	lb := benchBalancer(b)
	r := Request{NAI: benchNAI}
	b.ReportAllocs()
	for b.Loop() {
		lb.Pick(r)
	}
}

// Known conversation routed through the old table during a transition
// (its bucket moved to the server that joined).
func BenchmarkPickTransition(b *testing.B) {
	lb := benchBalancer(b)
	lb.SetState("s7", Down)
	var r Request
	for i := 0; ; i++ {
		nai := fmt.Sprintf("subscriber-%07d@example.net", i)
		r = Request{NAI: nai, SessionID: "nas1.example.net;1234567890;" + nai}
		before := mustPick(b, lb, r) // conversation starts with s7 down
		lb.SetState("s7", InService)
		if _, now, _ := lb.Route(nai); now != before {
			break // bucket moved: this conversation uses the old table
		}
		lb.SetState("s7", Down) // try the next NAI
	}
	if len(lb.Snapshot().OldGenerations) == 0 {
		b.Fatal("no transition in progress")
	}
	b.ReportAllocs()
	for b.Loop() {
		lb.Pick(r)
	}
}

// Known conversations picked from all Ps at once.
func BenchmarkPickKnownSessionParallel(b *testing.B) {
	lb := benchBalancer(b)
	r := Request{NAI: benchNAI, SessionID: "nas1.example.net;1234567890;42"}
	mustPick(b, lb, r)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			lb.Pick(r)
		}
	})
}

// First-seen conversations: every Pick remembers a new Session-Id (one
// entry allocated each, growth of the memory included). A fresh Balancer is
// made, off the clock, whenever the prepared ids run out.
func BenchmarkPickFirstSeen(b *testing.B) {
	ids := make([]string, 1<<20)
	for i := range ids {
		ids[i] = fmt.Sprintf("nas1.example.net;1234567890;%d", i)
	}
	lb := mustNew(b, Pearson, servers(8), Options{MaxSessions: len(ids)})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i & (len(ids) - 1)
		if j == 0 && i > 0 {
			b.StopTimer()
			lb = mustNew(b, Pearson, servers(8), Options{MaxSessions: len(ids)})
			b.StartTimer()
		}
		lb.Pick(Request{NAI: benchNAI, SessionID: ids[j]})
	}
}

// First-seen conversations with one of the 8 servers down: only those in
// the buckets its return would take are remembered.
func BenchmarkPickFirstSeenOneDown(b *testing.B) {
	ids := make([]string, 1<<20)
	nais := make([]string, 1<<10)
	for i := range ids {
		ids[i] = fmt.Sprintf("nas1.example.net;1234567890;%d", i)
	}
	for i := range nais {
		nais[i] = fmt.Sprintf("subscriber-%07d@example.net", i)
	}
	fresh := func() *Balancer {
		lb := mustNew(b, Pearson, servers(8), Options{MaxSessions: len(ids)})
		lb.SetState("s7", Down)
		return lb
	}
	lb := fresh()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i & (len(ids) - 1)
		if j == 0 && i > 0 {
			b.StopTimer()
			lb = fresh()
			b.StartTimer()
		}
		lb.Pick(Request{NAI: nais[i&(len(nais)-1)], SessionID: ids[j]})
	}
}

// Known conversation with one of the 8 servers down, in a bucket that the
// server's return would take (so it is remembered): a lookup in the
// conversation memory on every Pick.
func BenchmarkPickKnownSessionOneDown(b *testing.B) {
	lb := benchBalancer(b)
	lb.SetState("s7", Down)
	var r Request
	for i := 0; ; i++ {
		if i == 10_000 {
			b.Fatal("no NAI in a remembered bucket")
		}
		r = Request{NAI: fmt.Sprintf("subscriber-%07d@example.net", i), SessionID: fmt.Sprintf("nas1.example.net;1234567890;%d", i)}
		before := lb.Snapshot().Sessions
		mustPick(b, lb, r)
		if lb.Snapshot().Sessions > before {
			break
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		lb.Pick(r)
	}
}

// One server (a client with a single agent): every bucket names it, and
// Pick skips the hash.
func BenchmarkPickOneServer(b *testing.B) {
	lb := mustNew(b, Pearson, servers(1), Options{})
	r := Request{NAI: benchNAI, SessionID: "nas1.example.net;1234567890;" + benchNAI}
	mustPick(b, lb, r)
	b.ReportAllocs()
	for b.Loop() {
		lb.Pick(r)
	}
}

// allInServiceRequests are 1024 conversations with NAIs, none remembered.
func allInServiceRequests() []Request {
	rs := make([]Request, 1024)
	for i := range rs {
		nai := fmt.Sprintf("subscriber-%07d@example.net", i)
		rs[i] = Request{NAI: nai, SessionID: "nas1.example.net;1234567890;" + nai}
	}
	return rs
}

// Every server in service, nothing ever suspended: the memory is empty
// and not consulted.
func BenchmarkPickAllInService(b *testing.B) {
	lb := benchBalancer(b)
	rs := allInServiceRequests()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		lb.Pick(rs[i&1023])
		i++
	}
}

// Every server in service again after s1 was suspended for a moment: the
// conversations started meanwhile in its buckets (diverted) keep
// speaking, and Sweep has run. Requests of other conversations should
// cost what they cost in BenchmarkPickAllInService.
func BenchmarkPickAllInServiceAfterSuspension(b *testing.B) {
	clk := &fakeClock{}
	lb := mustNew(b, Pearson, servers(8), Options{Now: clk.Now})
	lb.SetState("s1", Suspended)
	div := make([]Request, 2000)
	for i := range div {
		nai := fmt.Sprintf("d%d@example.net", i)
		div[i] = Request{NAI: nai, SessionID: "div;" + nai}
		lb.Pick(div[i])
	}
	lb.SetState("s1", InService)
	clk.Advance(time.Minute)
	for _, r := range div {
		lb.Pick(r)
	}
	lb.Sweep()
	if lb.cur.Load().quiet || lb.Snapshot().Sessions == 0 {
		b.Fatal("no diverted conversation remembered")
	}
	rs := allInServiceRequests()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		lb.Pick(rs[i&1023])
		i++
	}
}
