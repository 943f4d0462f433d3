package policy_test

import (
	"fmt"
	"time"

	"github.com/aaatp/aaatp/policy"
)

// Two servers; "b" answers, "a" does not. "a" goes out of service when the
// down-timeout (1 s x 3 attempts) expires, is held down for 10 s, and is then
// probed with exactly one real request, which it answers.
func Example() {
	g, err := policy.NewGroup([]string{"a", "b"}, policy.Config{
		RequestTimeout: time.Second,
		Retries:        3,
		HoldDown:       10 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	show := func(o policy.Output) {
		for _, e := range o.Events() {
			fmt.Printf("%5.1fs %s: %s -> %s (%s)\n", e.Time.Sub(t0).Seconds(), e.Server, e.From, e.To, e.Reason)
		}
	}
	show(g.OnSent(1, at(0)))
	show(g.OnReply(1, at(0.1)))
	show(g.OnSent(0, at(0)))
	_, evs := g.Tick(at(3), nil, nil)
	for _, e := range evs {
		fmt.Printf("%5.1fs %s: %s -> %s (%s)\n", e.Time.Sub(t0).Seconds(), e.Server, e.From, e.To, e.Reason)
	}
	fmt.Println("a allowed during hold-down:", g.Allow(0, at(5)).Allow)
	o := g.Allow(0, at(13))
	show(o)
	fmt.Println("a allowed:", o.Allow, "probe:", o.Probe)
	fmt.Println("a allowed again before the probe's reply:", g.Allow(0, at(13.5)).Allow)
	show(g.OnReply(0, at(13.6)))
	// Output:
	//   0.1s b: unknown -> in-service (first reply received)
	//   3.0s a: unknown -> out-of-service (no reply to the first request within the down-timeout)
	// a allowed during hold-down: false
	//  13.0s a: out-of-service -> probing (hold-down over; probing)
	// a allowed: true probe: true
	// a allowed again before the probe's reply: false
	//  13.6s a: probing -> in-service (probe answered)
}

// With a test user and a keep-alive interval, Tick says when to send the
// test user's request.
func ExampleTracker_Tick() {
	t, _ := policy.NewTracker("a", policy.Config{TestUser: true, KeepAlive: 10 * time.Second})
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range []int{0, 5, 10} {
		o := t.Tick(t0.Add(time.Duration(s)*time.Second), false)
		fmt.Println(s, o.Send)
		t.OnReply(t0.Add(time.Duration(s)*time.Second + 10*time.Millisecond))
	}
	fmt.Println(t.State())
	// Output:
	// 0 keep-alive
	// 5 nothing
	// 10 keep-alive
	// in-service
}
