package throttle_test

import (
	"fmt"
	"time"

	"github.com/aaatp/aaatp/throttle"
)

// req is the owner's request type: anything with a deadline.
type req struct {
	id int
	dl time.Time
}

func (r *req) Deadline() time.Time { return r.dl }

// One server limited to 40 auth requests per second in 50 ms slots (two per
// slot) and three outstanding. Seven requests arrive at once; the owner
// polls every slot and answers everything 60 ms after sending it.
func Example() {
	s, err := throttle.New(throttle.Config[*req]{
		Servers: []throttle.Server{{Name: "aaa1", Auth: throttle.Limits{MaxRate: 40, MaxOutstanding: 3}}},
	})
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 7 {
		s.Enqueue(&req{id: i, dl: t0.Add(10 * time.Second)}, throttle.ClassOf(1, 265)) // NASREQ AAR: auth
	}
	var out []throttle.Dispatch[*req]
	answerAt := map[time.Duration][]int{}
	for now := time.Duration(0); s.Len() > 0; now += 50 * time.Millisecond {
		for _, srv := range answerAt[now] {
			s.Done(srv, throttle.Auth)
		}
		out = s.Poll(t0.Add(now), out[:0])
		for _, d := range out {
			fmt.Printf("%3dms send %d to %d\n", now.Milliseconds(), d.Item.id, d.Server)
			answerAt[now+100*time.Millisecond] = append(answerAt[now+100*time.Millisecond], d.Server)
		}
	}
	// Output:
	//   0ms send 0 to 0
	//   0ms send 1 to 0
	//  50ms send 2 to 0
	// 100ms send 3 to 0
	// 100ms send 4 to 0
	// 150ms send 5 to 0
	// 200ms send 6 to 0
}

func ExampleClassOf() {
	fmt.Println(throttle.ClassOf(3, 271), throttle.ClassOf(4, 271), throttle.ClassOf(1, 265), throttle.ClassOf(4, 272))
	// Output: accounting accounting auth auth
}

// An expired request comes back from Poll as a failure.
func ExampleScheduler_Poll_expired() {
	s, _ := throttle.New(throttle.Config[*req]{
		Servers: []throttle.Server{{Name: "aaa1", Auth: throttle.Limits{MaxRate: 20}}}, // one per slot
	})
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Enqueue(&req{id: 1, dl: t0.Add(time.Second)}, throttle.Auth)
	s.Enqueue(&req{id: 2, dl: t0.Add(30 * time.Millisecond)}, throttle.Auth)
	for _, now := range []time.Duration{0, 50 * time.Millisecond} {
		for _, d := range s.Poll(t0.Add(now), nil) {
			fmt.Println(now, d.Item.id, d.Err)
		}
	}
	// Output:
	// 0s 1 <nil>
	// 50ms 2 throttle: deadline passed while queued in the auth queue of server "aaa1" (found 20ms after the deadline)
}

// A failover's replays go ahead of the new requests; a batch the owner
// could not send after all (its server refused it as it was placed) goes
// back where it stood, with the ages Poll gave it.
func ExampleScheduler_Requeue() {
	s, _ := throttle.New(throttle.Config[*req]{
		Servers: []throttle.Server{{Name: "aaa1", Auth: throttle.Limits{MaxOutstanding: -1}}},
	})
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Enqueue(&req{id: 10}, throttle.Auth)
	s.EnqueueReplay(&req{id: 1}, throttle.Auth) // came back from a failed server
	s.EnqueueReplay(&req{id: 2}, throttle.Auth)
	batch := s.Poll(t0, nil)
	for _, d := range batch {
		fmt.Println("send", d.Item.id)
	}
	s.Enqueue(&req{id: 11}, throttle.Auth)
	for _, d := range batch[:2] { // 1 and 2 refused as they were placed
		s.Done(d.Server, d.Class)
		s.Requeue(d.Item, d.Class, d.Age)
	}
	for _, d := range s.Poll(t0, nil) {
		fmt.Println("send", d.Item.id)
	}
	// Output:
	// send 1
	// send 2
	// send 10
	// send 1
	// send 2
	// send 11
}
