package peer

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/watchdog"
)

// An event subscriber, and OnFailover, run without the peer's mutex and
// off its reader: one may Close the peer (here on the first failover
// hand-over and on the SUSPECT transition) and Close returns.
func TestCloseFromSubscriberAndOnFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.Events = NewBus()
		closed := make(chan error, 2)
		var p *Peer
		cfg.OnFailover = func(from *Peer, calls []*Call, reason string) {
			for _, cl := range calls {
				cl.Fail(errors.New("no alternate"))
			}
			closed <- from.Close(context.Background())
		}
		cancel := cfg.Events.Subscribe(func(e Event) {
			if e.Kind == EventWatchdog && e.To == watchdog.Suspect {
				closed <- p.Close(context.Background())
			}
		})
		defer cancel()
		var err error
		p, err = Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, watchdog.Okay, p.State())
		f.answerDWR.Store(false)
		f.answerReqs.Store(false)
		res := make(chan error, 1)
		go func() {
			_, err := p.Request(context.Background(), acr())
			res <- err
		}()
		time.Sleep(61 * time.Second) // SUSPECT: the failover, then the event
		synctest.Wait()
		assert.NoError(t, <-closed)
		assert.NoError(t, <-closed)
		assert.Error(t, <-res)
		<-p.Done()
	})
}

// The lifecycle's rules on one connection: a call is never queued twice
// on it, is parked only when not in flight, and a call moved off leaves
// the pending map at once while its late answer is still matched.
func TestCallLifecycleOnOneConnection(t *testing.T) {
	cn := newConn(nil, nil, "x")
	cl, err := NewCall(acr())
	require.NoError(t, err)
	assert.Equal(t, Queued, cl.State())
	cn.mu.Lock()
	_, id, prev, err := cl.board(cn)
	cn.pending[id] = cl
	cn.mu.Unlock()
	require.NoError(t, err)
	assert.Equal(t, Queued, prev)
	assert.Equal(t, InFlight, cl.State())
	assert.False(t, cl.Park(), "an in-flight call is not parked")

	moved := cn.moveOut()
	require.Equal(t, []*Call{cl}, moved)
	assert.Equal(t, Moved, cl.State())
	assert.Zero(t, cn.pendingLen(), "moved off: not pending here")
	_, _, _, err = cl.board(cn)
	assert.ErrorIs(t, err, ErrAlreadySent, "never twice on one connection")
	assert.True(t, cl.Park())
	assert.Equal(t, Parked, cl.State())

	got, late := cn.match(id)
	assert.Same(t, cl, got, "a late answer is still matched")
	assert.True(t, late)
	ok, _, _ := cl.finish([]byte("answer"), nil, nil, cn, nil)
	assert.True(t, ok)
	assert.Equal(t, Answered, cl.State())
	assert.False(t, cl.Fail(errors.New("too late")), "complete once")
	assert.Panics(t, func() { cl.mu.Lock(); defer cl.mu.Unlock(); cl.to(InFlight) }, "no way out of a final state")
}

// The calls moved off a connection stay matchable up to goneMax; past it
// the oldest is forgotten.
func TestMovedCallsBounded(t *testing.T) {
	cn := newConn(nil, nil, "x")
	cl, err := NewCall(acr())
	require.NoError(t, err)
	cn.mu.Lock()
	for id := range uint32(goneMax + 10) {
		cn.goLocked(id+1, cl)
	}
	cn.mu.Unlock()
	assert.Len(t, cn.gone, goneMax)
	_, late := cn.match(1)
	assert.False(t, late, "the oldest was forgotten")
	got, late := cn.match(goneMax + 10)
	assert.True(t, late)
	assert.Same(t, cl, got)
}

// The allow-list compares DiameterIdentities ignoring case.
func TestAllowHostsIgnoresCase(t *testing.T) {
	c := Config{AllowHosts: []string{"*.Example.NET", "exact.example.org"}}
	for host, want := range map[string]bool{
		"client.example.net": true, "CLIENT.EXAMPLE.NET": true, "Exact.Example.Org": true, "client.example.com": false,
	} {
		assert.Equal(t, want, c.allowed(host), host)
	}
}
