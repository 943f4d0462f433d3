package watchdog_test

import (
	"fmt"
	"time"

	"github.com/aaatp/aaatp/watchdog"
)

// A connection object owns one Machine and carries out what Step returns.
// Here a peer stops answering: the DWR sent at the first expiry stays
// unanswered, the connection turns SUSPECT (fail over) and then DOWN.
func Example() {
	m, err := watchdog.New(watchdog.Config{
		Twinit: 30 * time.Second,
		Rand:   watchdog.NewSeededRand(1), // omit in production: randomly seeded
	})
	if err != nil {
		panic(err)
	}
	for _, ev := range []watchdog.Event{
		watchdog.ConnectionUp, // capabilities exchanged
		watchdog.TimerExpired, // idle for Tw: send a DWR
		watchdog.TimerExpired, // no DWA for Tw: suspect, fail over
		watchdog.TimerExpired, // still nothing: close
	} {
		o := m.Step(ev)
		fmt.Printf("%-14s -> %-8s", ev, o.State)
		for _, a := range o.Actions() {
			fmt.Printf(" %s", a.Kind) // a.After holds the jittered Tw for SetWatchdog
		}
		if o.Changed {
			fmt.Printf("  (%s)", o.Transition.Reason)
		}
		fmt.Println()
	}
	// Output:
	// connection up  -> OKAY     SetWatchdog  (connection up)
	// timer expired  -> OKAY     SendWatchdog SetWatchdog
	// timer expired  -> SUSPECT  Failover SetWatchdog  (no DWA within Tw)
	// timer expired  -> DOWN     CloseConnection SetWatchdog  (no DWA after a second Tw; closing)
}

// Twinit below the RFC's 6 seconds is refused, never clamped.
func ExampleNew_invalid() {
	_, err := watchdog.New(watchdog.Config{Twinit: 5 * time.Second})
	fmt.Println(err)
	// Output:
	// watchdog: invalid configuration: Twinit 5s is below the RFC 3539 minimum of 6s
}

// Every SetWatchdog draws a fresh Tw within two seconds of Twinit.
func ExampleJitter() {
	r := watchdog.NewSeededRand(42)
	for range 3 {
		tw := watchdog.Jitter(30*time.Second, r)
		fmt.Println(tw >= 28*time.Second && tw <= 32*time.Second)
	}
	// Output:
	// true
	// true
	// true
}
