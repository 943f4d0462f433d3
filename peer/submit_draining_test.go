package peer

import (
	"errors"
	"testing"
	"time"
)

// A submit refused on a connection that is lost, shut or draining reads
// which (draining: the peer's DPR or our Close says ErrDisconnecting)
// under the connection's lock, as a DPR's startDrain writes it under
// that lock: nothing else orders the two. The race detector sees a read
// after the unlock: the submit runs first, with nothing between it and
// the drain that follows but time.
func TestSubmitReadsDrainingUnderTheLock(t *testing.T) {
	_, c, _ := dialTCP(t, nil)
	c.mu.Lock()
	c.lost = true // refused, whatever draining says
	c.mu.Unlock()
	d, err := newCall(acr(), false)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		err := c.submit(d)
		got <- err
	}()
	time.Sleep(20 * time.Millisecond) // no synchronization: the order is the point
	c.startDrain()
	if err := <-got; !errors.Is(err, ErrConnectionLost) && !errors.Is(err, ErrDisconnecting) {
		t.Fatalf("submit on a lost connection: %v", err)
	}
}
