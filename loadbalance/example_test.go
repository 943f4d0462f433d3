package loadbalance_test

import (
	"fmt"
	"time"

	"github.com/aaatp/aaatp/loadbalance"
)

func ExamplePearsonHashString() {
	fmt.Println(loadbalance.PearsonHashString("user@example.net"))
	// Output: 170
}

func ExampleBalancer_Pick() {
	lb, err := loadbalance.New(loadbalance.Pearson, []loadbalance.Server{
		{Name: "aaa1", Weight: 1, Index: 1},
		{Name: "aaa2", Weight: 3, Index: 2},
	}, loadbalance.Options{})
	if err != nil {
		panic(err)
	}
	srv, err := lb.Pick(loadbalance.Request{NAI: "user@example.net", SessionID: "nas.example.net;1;1"})
	if err != nil {
		panic(err)
	}
	// The same user always lands on the same server while the set is unchanged.
	again, _ := lb.Pick(loadbalance.Request{NAI: "user@example.net", SessionID: "nas.example.net;1;2"})
	fmt.Println(srv.Name == again.Name)
	// Output: true
}

// The peer layer reports watchdog states; only a change in the in-service
// set rebuilds the table.
func ExampleBalancer_SetState() {
	lb, _ := loadbalance.New(loadbalance.Pearson, []loadbalance.Server{
		{Name: "aaa1", Index: 1}, {Name: "aaa2", Index: 2}, {Name: "aaa3", Index: 3},
	}, loadbalance.Options{})
	rebuilt, _ := lb.SetState("aaa2", loadbalance.Suspended) // watchdog SUSPECT
	fmt.Println("suspended:", rebuilt, lb.Generation())
	rebuilt, _ = lb.SetState("aaa2", loadbalance.InService) // back, same set
	fmt.Println("resumed:", rebuilt, lb.Generation())
	rebuilt, _ = lb.SetState("aaa2", loadbalance.Down) // connection closed
	fmt.Println("down:", rebuilt, lb.Generation())
	// Output:
	// suspended: false 1
	// resumed: false 1
	// down: true 2
}

// An operator asks where a user goes, and where it would go with a server
// suspended.
func ExampleBalancer_Route() {
	lb, _ := loadbalance.New(loadbalance.Pearson, []loadbalance.Server{
		{Name: "aaa1", Index: 1}, {Name: "aaa2", Index: 2},
	}, loadbalance.Options{})
	h, srv, _ := lb.Route("user@example.net")
	_, other, _ := lb.Route("user@example.net", srv)
	fmt.Println(h, srv != other)
	// Output: 170 true
}

// During a transition, a conversation keeps its server; a new one uses the
// new table; Sweep ends the transition once old conversations are idle.
// (bob's bucket belongs to aaa2 when both are in service: it is one that
// aaa2's return moves, so bob's conversation is remembered meanwhile.)
func ExampleBalancer_Sweep() {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	lb, _ := loadbalance.New(loadbalance.Pearson, []loadbalance.Server{
		{Name: "aaa1", Index: 1}, {Name: "aaa2", Index: 2},
	}, loadbalance.Options{Now: clock, IdleTimeout: 5 * time.Minute})
	lb.SetState("aaa2", loadbalance.Down)
	old, _ := lb.Pick(loadbalance.Request{NAI: "bob@example.net", SessionID: "s;1"})
	lb.SetState("aaa2", loadbalance.InService) // rebuild: transition begins
	kept, _ := lb.Pick(loadbalance.Request{NAI: "bob@example.net", SessionID: "s;1"})
	fresh, _ := lb.Pick(loadbalance.Request{NAI: "bob@example.net", SessionID: "s;2"})
	fmt.Println(old.Name, kept.Name, fresh.Name, lb.Snapshot().OldGenerations)

	now = now.Add(6 * time.Minute) // the conversation goes idle
	fmt.Println("purged:", lb.Sweep(), lb.Snapshot().OldGenerations)
	// Output:
	// aaa1 aaa1 aaa2 [2]
	// purged: 1 []
}

func ExampleParseAlgorithm() {
	for _, s := range []string{"pearson", "hash", "direct", "round-robin"} {
		a, _ := loadbalance.ParseAlgorithm(s)
		fmt.Print(a, " ")
	}
	fmt.Println()
	// Output: pearson hash direct round-robin
}
