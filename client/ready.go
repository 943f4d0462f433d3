package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/aaatp/aaatp/loadbalance"
)

// readiness wakes WaitReady callers once a watchdog change has been
// applied everywhere (balancer, slots, policy, throttle).
type readiness struct {
	mu sync.Mutex
	ch chan struct{} // closed and replaced at each change
}

func (r *readiness) wait() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
}

func (r *readiness) changed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch != nil {
		close(r.ch)
	}
	r.ch = make(chan struct{})
}

// inService counts the servers that take new requests now: their watchdog
// is OKAY and, in Balance mode, the balancer has them in its table.
func (c *Client) inService() int {
	var inTable map[string]bool
	if c.bal != nil {
		inTable = make(map[string]bool)
		for _, st := range c.bal.Snapshot().Servers {
			inTable[st.Name] = st.State == loadbalance.InService
		}
	}
	n := 0
	for _, m := range c.members {
		if m.okay() && (inTable == nil || inTable[m.spec.Name]) {
			n++
		}
	}
	return n
}

// WaitReady waits until at least n servers are in service (their watchdog
// OKAY and, in Balance mode, in the balancer's table), or ctx is done; it
// returns at once when they already are. Send does not need it (a request
// waits for a server in service within its deadline); it is for starting
// traffic only once the servers wanted are up. n larger than the servers
// configured is an error, n <= 0 returns nil.
func (c *Client) WaitReady(ctx context.Context, n int) error {
	if n > len(c.members) {
		return fmt.Errorf("client: WaitReady(%d) with %d servers configured", n, len(c.members))
	}
	for {
		wake := c.ready.wait() // before counting: a change after the count wakes us
		got := c.inService()
		if got >= n {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("client: %d of the %d servers wanted in service: %w", got, n, context.Cause(ctx))
		}
	}
}
