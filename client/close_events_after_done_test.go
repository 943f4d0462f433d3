package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/loadbalance"
)

// Done is closed once every event has been delivered: nothing the
// Client does after (an Exchange after Close included) delivers another.
// radius:// servers have no watchdog to tell the view that they closed,
// so an Exchange after Close still picked a closed server, and the
// policy's admission (its down-timeout passed meanwhile) published a
// policy event and balancer rebuilds after Done.
func TestNoEventAfterDoneUDP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		startMemServer(t, n, addrA, nil, nil)
		startMemServer(t, n, addrB, nil, nil)
		c := memClient(t, n, memSpecs("a", "b"), func(cfg *Config) { cfg.Algorithm = loadbalance.Direct })
		var mu sync.Mutex
		var late []string
		c.Events().Subscribe(func(_ context.Context, e Event) {
			select {
			case <-c.Done():
				mu.Lock()
				late = append(late, e.Server+": "+e.Reason)
				mu.Unlock()
			default:
			}
		})
		synctest.Wait()
		n.setHung(addrA, true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c.Exchange(ctx, udpAcctStop("s1")) // sent to a, unanswered: a's down-timeout runs
		cancel()
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-c.Done()
		time.Sleep(10 * time.Second) // past a's down-timeout (9 s)
		if _, err := c.Exchange(context.Background(), udpAcctStop("s2")); !errors.Is(err, ErrClosed) {
			t.Errorf("Exchange after Close: %v, want ErrClosed", err)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(late) > 0 {
			t.Errorf("%d events delivered after Done: %q", len(late), late)
		}
	})
}

// An event the Client notes after Close delivered its last (a request
// that raced Close, its policy's admission) is dropped and counted, never
// delivered after Done.
func TestEventAfterDoneDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		startMemServer(t, n, addrA, nil, nil)
		c := memClient(t, n, memSpecs("a"), nil)
		var mu sync.Mutex
		var late []string
		c.Events().Subscribe(func(_ context.Context, e Event) {
			select {
			case <-c.Done():
				mu.Lock()
				late = append(late, e.Server+": "+e.Reason)
				mu.Unlock()
			default:
			}
		})
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-c.Done()
		before := c.EventsDropped()
		c.note(Event{Time: time.Now(), Server: "a", Kind: EventPolicy, Reason: "after Done"})
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(late) > 0 {
			t.Errorf("%d events delivered after Done: %q", len(late), late)
		}
		if got := c.EventsDropped() - before; got != 1 {
			t.Errorf("EventsDropped grew by %d, want 1", got)
		}
	})
}
