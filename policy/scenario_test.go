package policy

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The seed's timelines, in explicit virtual time. Defaults unless a test
// says otherwise: timeout 5 s x 3 attempts = down-timeout 15 s, hold-down
// 30 s, probe timeout 5 s.

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const s = time.Second

type rec struct {
	at       time.Duration
	server   string
	from, to State
	reason   string
}

func recs(evs ...Event) []rec {
	var out []rec
	for _, e := range evs {
		out = append(out, rec{e.Time.Sub(t0), e.Server, e.From, e.To, e.Reason})
	}
	return out
}

func newGroup(t *testing.T, cfg Config, names ...string) *Group {
	t.Helper()
	g, err := NewGroup(names, cfg)
	require.NoError(t, err)
	return g
}

// inService puts server i in service with a request and its reply at d.
func inService(t *testing.T, g *Group, i int, d time.Duration) {
	t.Helper()
	g.OnSent(i, at(d))
	o := g.OnReply(i, at(d))
	require.Equal(t, InService, o.State)
}

func TestSeedUnknownToInServiceOnFirstReply(t *testing.T) {
	tr, err := NewTracker("a", Config{})
	require.NoError(t, err)
	assert.Equal(t, Unknown, tr.State())
	assert.True(t, tr.Allow(at(0), false).Allow, "unknown servers get traffic")
	tr.OnSent(at(0))
	o := tr.OnReply(at(200 * time.Millisecond))
	assert.Equal(t, []rec{{200 * time.Millisecond, "a", Unknown, InService, ReasonFirstReply}}, recs(o.Events()...))
	_, ok := tr.NextWakeup()
	assert.False(t, ok, "the reply reset the down-timeout")
}

func TestSeedUnknownToOutOfServiceWhenFirstRequestUnanswered(t *testing.T) {
	tr, err := NewTracker("a", Config{})
	require.NoError(t, err)
	tr.OnSent(at(0))
	w, ok := tr.NextWakeup()
	require.True(t, ok)
	assert.Equal(t, at(15*s), w, "down-timeout = 5 s x 3")
	early := tr.Tick(at(15*s-1), false)
	assert.Empty(t, early.Events(), "one nanosecond early")
	o := tr.Tick(at(15*s), false)
	assert.Equal(t, []rec{{15 * s, "a", Unknown, OutOfService, ReasonNoFirstReply}}, recs(o.Events()...))
	assert.False(t, tr.Allow(at(20*s), false).Allow)
	w, _ = tr.NextWakeup()
	assert.Equal(t, at(45*s), w, "hold-down 30 s")
}

// "The RADIUS server may miss a message but stay in-service if the server
// responds to another access request from a different subscriber or from a
// retry of the same subscriber, within the down-timeout interval."
func TestSeedMissOneAnswerAnotherStaysInService(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replyAt time.Duration
		want    State
	}{
		{"other subscriber answered within the down-timeout", 14 * s, InService},
		{"answered one nanosecond before expiry", 16*s - 1, InService},
		{"answered too late", 16 * s, OutOfService},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroup(t, Config{}, "a")
			inService(t, g, 0, 0)
			g.OnSent(0, at(1*s)) // subscriber 1: never answered
			g.OnSent(0, at(2*s)) // subscriber 2
			o := g.OnReply(0, at(tc.replyAt))
			_, evs := g.Tick(at(60*s), nil, nil)
			assert.Equal(t, tc.want, o.State)
			if tc.want == InService {
				assert.Empty(t, evs)
				assert.Equal(t, InService, g.State(0))
			} else {
				assert.Equal(t, []rec{{16 * s, "a", InService, OutOfService, ReasonDownTimeout}}, recs(o.Events()...))
			}
		})
	}
}

// The down-timeout counts from the first request after the last reply, not
// from the last request: a steady stream of unanswered requests does not
// keep the server alive.
func TestDownTimeoutNotRestartedBySends(t *testing.T) {
	g := newGroup(t, Config{}, "a")
	inService(t, g, 0, 0)
	for d := 1 * s; d < 16*s; d += s {
		g.OnSent(0, at(d))
	}
	_, evs := g.Tick(at(16*s), nil, nil)
	assert.Equal(t, []rec{{16 * s, "a", InService, OutOfService, ReasonDownTimeout}}, recs(evs...))
}

// A request told sent only after a reply recorded since its mark (its own
// reply, told on another goroutine first) starts no down-timeout: the
// reply came after it was sent. One told with the current mark does.
func TestOnSentSinceAReply(t *testing.T) {
	g := newGroup(t, Config{}, "a")
	inService(t, g, 0, 0)
	mark := g.ReplyMark(0)
	g.OnReply(0, at(1*s)) // the request's reply, told first
	g.OnSentSince(0, at(1*s), mark)
	_, ok := g.t[0].NextWakeup()
	assert.False(t, ok, "a reply since the mark: no down-timeout")
	_, evs := g.Tick(at(30*s), nil, nil)
	assert.Empty(t, evs)
	assert.Equal(t, InService, g.State(0))

	mark = g.ReplyMark(0)
	g.OnSentSince(0, at(31*s), mark) // no reply since: never answered
	_, evs = g.Tick(at(46*s), nil, nil)
	assert.Equal(t, []rec{{46 * s, "a", InService, OutOfService, ReasonDownTimeout}}, recs(evs...))
}

func TestSeedHoldDownThenSingleProbe(t *testing.T) {
	g := newGroup(t, Config{}, "a", "b")
	inService(t, g, 1, 0)
	g.OnSent(0, at(0))
	_, evs := g.Tick(at(15*s), nil, nil)
	require.Equal(t, []rec{{15 * s, "a", Unknown, OutOfService, ReasonNoFirstReply}}, recs(evs...))
	assert.Equal(t, []int{1}, g.Eligible(nil))

	// Nothing during the hold-down.
	for d := 15 * s; d < 45*s; d += 5 * s {
		assert.False(t, g.Allow(0, at(d)).Allow, "at %v", d)
	}
	w, _ := g.NextWakeup()
	assert.Equal(t, at(45*s), w)

	_, evs = g.Tick(at(45*s), nil, nil)
	require.Equal(t, []rec{{45 * s, "a", OutOfService, Probing, ReasonHoldDownOver}}, recs(evs...))
	i, ok := g.ProbeWanted()
	require.True(t, ok)
	assert.Equal(t, 0, i)

	o := g.Allow(0, at(46*s))
	assert.True(t, o.Allow)
	assert.True(t, o.Probe, "the one real request is the probe")
	_, ok = g.ProbeWanted()
	assert.False(t, ok)
	for d := 46 * s; d < 51*s; d += s / 2 {
		assert.False(t, g.Allow(0, at(d)).Allow, "exactly one message while probing; at %v", d)
	}
	o = g.OnReply(0, at(48*s))
	assert.Equal(t, []rec{{48 * s, "a", Probing, InService, ReasonProbeAnswered}}, recs(o.Events()...))
	o = g.Allow(0, at(49*s))
	assert.True(t, o.Allow)
	assert.False(t, o.Probe)
	assert.Equal(t, []int{0, 1}, g.Eligible(nil))
}

func TestSeedProbeTimeoutRestartsHoldDown(t *testing.T) {
	g := newGroup(t, Config{}, "a", "b")
	inService(t, g, 1, 0)
	g.OnSent(0, at(0))
	g.Tick(at(15*s), nil, nil)
	g.Tick(at(45*s), nil, nil)
	o := g.Allow(0, at(45*s))
	require.True(t, o.Probe)
	w, _ := g.NextWakeup()
	assert.Equal(t, at(50*s), w, "the probe waits one timeout, no retry")
	_, evs := g.Tick(at(50*s), nil, nil)
	assert.Equal(t, []rec{{50 * s, "a", Probing, OutOfService, ReasonProbeTimeout}}, recs(evs...))
	assert.False(t, g.Allow(0, at(79*s)).Allow, "hold-down restarted at 50 s")
	_, evs = g.Tick(at(80*s), nil, nil)
	assert.Equal(t, []rec{{80 * s, "a", OutOfService, Probing, ReasonHoldDownOver}}, recs(evs...))
}

func TestSeedProbeWithTestUser(t *testing.T) {
	g := newGroup(t, Config{TestUser: true}, "a", "b")
	inService(t, g, 1, 0)
	g.OnSent(0, at(0))
	g.Tick(at(15*s), nil, nil)
	sends, evs := g.Tick(at(45*s), nil, nil)
	assert.Equal(t, []rec{{45 * s, "a", OutOfService, Probing, ReasonHoldDownOver}}, recs(evs...))
	assert.Equal(t, []TestSend{{0, SendProbe}}, sends)
	assert.False(t, g.Allow(0, at(46*s)).Allow, "no real request probes when a test user exists")
	_, ok := g.ProbeWanted()
	assert.False(t, ok)
	sends, _ = g.Tick(at(47*s), nil, nil)
	assert.Empty(t, sends, "one probe only")
	g.OnReply(0, at(47*s))
	assert.Equal(t, InService, g.State(0))
}

func TestSeedNoProbingWithSingleServer(t *testing.T) {
	g := newGroup(t, Config{}, "a")
	g.OnSent(0, at(0))
	g.Tick(at(15*s), nil, nil)
	_, evs := g.Tick(at(45*s), nil, nil)
	assert.Equal(t, []rec{{45 * s, "a", OutOfService, Unknown, ReasonNoProbe}}, recs(evs...))
	o := g.Allow(0, at(46*s))
	assert.True(t, o.Allow)
	assert.False(t, o.Probe, "ordinary traffic, retries allowed")
	_, ok := g.ProbeWanted()
	assert.False(t, ok)
}

func TestNoProbingWithoutAHealthyServer(t *testing.T) {
	g := newGroup(t, Config{}, "a", "b", "c")
	inService(t, g, 2, 0)
	g.SetAvailable(2, false) // in service by policy, but its watchdog is not OKAY
	g.OnSent(0, at(0))
	g.OnSent(1, at(0))
	_, evs := g.Tick(at(15*s), nil, nil)
	assert.Len(t, evs, 2)
	_, evs = g.Tick(at(45*s), nil, nil)
	assert.Equal(t, []rec{
		{45 * s, "a", OutOfService, Unknown, ReasonNoProbe},
		{45 * s, "b", OutOfService, Unknown, ReasonNoProbe},
	}, recs(evs...))
	assert.Equal(t, []int{0, 1}, g.Eligible(nil), "c is unavailable")
	assert.False(t, g.Allow(2, at(46*s)).Allow)
}

// A server whose down-timeout expires in the same Tick does not count as
// healthy for another's probing decision.
func TestTickExpiresBeforeDecidingProbes(t *testing.T) {
	g := newGroup(t, Config{}, "a", "b")
	g.OnSent(0, at(0))
	g.Tick(at(15*s), nil, nil) // a out until 45 s
	inService(t, g, 1, 20*s)
	g.OnSent(1, at(30*s)) // b expires at 45 s
	_, evs := g.Tick(at(45*s), nil, nil)
	assert.Equal(t, []rec{
		{45 * s, "b", InService, OutOfService, ReasonDownTimeout},
		{45 * s, "a", OutOfService, Unknown, ReasonNoProbe},
	}, recs(evs...))
}

// A late call still stamps each change with the time its timer fired.
func TestLateTickChainsTransitions(t *testing.T) {
	tr, _ := NewTracker("a", Config{})
	tr.OnSent(at(0))
	o := tr.Tick(at(100*s), true)
	assert.Equal(t, []rec{
		{15 * s, "a", Unknown, OutOfService, ReasonNoFirstReply},
		{100 * s, "a", OutOfService, Probing, ReasonHoldDownOver},
	}, recs(o.Events()...))
}

func TestKeepAlive(t *testing.T) {
	g := newGroup(t, Config{TestUser: true, KeepAlive: 10 * s, RequestTimeout: 2 * s, Retries: 2}, "a", "b")
	sends, _ := g.Tick(at(0), nil, nil)
	assert.Equal(t, []TestSend{{0, SendKeepAlive}, {1, SendKeepAlive}}, sends)
	g.OnReply(1, at(100*time.Millisecond)) // b answers; a never does
	sends, evs := g.Tick(at(4*s), nil, nil)
	assert.Empty(t, sends)
	assert.Equal(t, []rec{{4 * s, "a", Unknown, OutOfService, ReasonNoFirstReply}}, recs(evs...))
	sends, _ = g.Tick(at(10*s), nil, nil)
	assert.Equal(t, []TestSend{{1, SendKeepAlive}}, sends, "no keep-alive to an out-of-service server")
	g.OnReply(1, at(10*s+100*time.Millisecond))
	w, _ := g.NextWakeup()
	assert.Equal(t, at(20*s), w, "b's next keep-alive")
}

func TestLateReplyDuringHoldDownIgnored(t *testing.T) {
	tr, _ := NewTracker("a", Config{})
	tr.OnSent(at(0))
	tr.Tick(at(15*s), true)
	o := tr.OnReply(at(16 * s))
	assert.Equal(t, OutOfService, o.State)
	assert.False(t, o.Changed())
}

func TestCancelProbe(t *testing.T) {
	g := newGroup(t, Config{}, "a", "b")
	inService(t, g, 1, 0)
	g.OnSent(0, at(0))
	g.Tick(at(45*s), nil, nil)
	require.True(t, g.Allow(0, at(45*s)).Probe)
	g.CancelProbe(0)
	assert.True(t, g.Allow(0, at(46*s)).Probe, "the probe may be claimed again")
}

// Many goroutines on one Group: run under -race.
func TestGroupConcurrent(t *testing.T) {
	g := newGroup(t, Config{RequestTimeout: time.Millisecond, Retries: 1, HoldDown: time.Millisecond}, "a", "b", "c")
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 2000 {
				now := at(time.Duration(k) * 100 * time.Microsecond)
				i := (w + k) % 3
				if g.Allow(i, now).Allow {
					g.OnSent(i, now)
					if k%3 != 0 {
						g.OnReply(i, now)
					}
				}
				if k%50 == 0 {
					g.Tick(now, nil, nil)
					g.Eligible(nil)
				}
			}
		}()
	}
	wg.Wait()
	assert.Len(t, g.States(nil), 3)
}

// A server added to a group gets the group's configuration and takes part
// in its decisions; a removed one takes no traffic, is not advanced, and
// no longer counts as healthy for another's probe.
func TestGroupAddAndRemove(t *testing.T) {
	g := newGroup(t, Config{}, "a")
	i, err := g.Add("b")
	require.NoError(t, err)
	assert.Equal(t, 1, i)
	assert.Equal(t, "b", g.Name(1))
	// Unavailable until its owner says otherwise: no test-user request
	// for it, whatever a Tick on another goroutine meets.
	tg := newGroup(t, Config{TestUser: true, KeepAlive: 10 * s}, "a")
	j, err := tg.Add("new")
	require.NoError(t, err)
	sends, _ := tg.Tick(at(0), nil, nil)
	for _, x := range sends {
		assert.NotEqual(t, j, x.Index, "a test-user request for a server just added")
	}
	assert.False(t, tg.Allow(j, at(0)).Allow)
	g.SetAvailable(1, true)
	inService(t, g, 1, 0)
	g.OnSent(0, at(0))
	g.Tick(at(15*s), nil, nil) // a out until 45 s; b, healthy, lets it be probed
	sends, evs := g.Tick(at(45*s), nil, nil)
	assert.Equal(t, []rec{{45 * s, "a", OutOfService, Probing, ReasonHoldDownOver}}, recs(evs...))
	assert.Empty(t, sends)

	g.Remove(1)
	g.SetAvailable(1, true)
	assert.False(t, g.Allow(1, at(46*s)).Allow, "a removed server takes nothing")
	assert.Equal(t, []int(nil), g.Eligible(nil))
	g.OnSent(1, at(46*s)) // a request sent before the removal
	_, evs = g.Tick(at(100*s), nil, nil)
	for _, e := range recs(evs...) {
		assert.NotEqual(t, "b", e.server, "a removed server is not advanced")
	}
	_, ok := g.NextWakeup()
	assert.False(t, ok, "no wake-up for the removed server's unanswered request")
	// Its connection drains: a reply, a send or an Allow there past the
	// down-timeout neither advances it nor says it changed state (a
	// server of the same name may have replaced it).
	for _, o := range []Output{g.OnReply(1, at(101*s)), g.OnSentSince(1, at(102*s), g.ReplyMark(1)), g.OnSent(1, at(103*s)), g.Allow(1, at(104*s))} {
		assert.Empty(t, recs(o.Events()...), "a removed server changes no state")
		assert.False(t, o.Allow)
	}
}

// WantsProbe says which probing server waits for a real request: until
// one is claimed (Allow), and again once it is given back; never for an
// unavailable server, nor with a test user (whose request probes).
func TestWantsProbe(t *testing.T) {
	g := newGroup(t, Config{}, "a", "b")
	inService(t, g, 1, 0)
	g.OnSent(0, at(0))
	g.Tick(at(15*s), nil, nil) // a out until 45 s
	assert.False(t, g.WantsProbe(0), "held down")
	g.Tick(at(45*s), nil, nil)
	require.Equal(t, Probing, g.State(0))
	assert.True(t, g.WantsProbe(0))
	assert.False(t, g.WantsProbe(1), "in service")
	g.SetAvailable(0, false)
	assert.False(t, g.WantsProbe(0), "unavailable")
	g.SetAvailable(0, true)
	o := g.Allow(0, at(46*s))
	require.True(t, o.Probe)
	assert.False(t, g.WantsProbe(0), "its probe is claimed")
	g.CancelProbe(0)
	assert.True(t, g.WantsProbe(0), "its probe given back")

	tu := newGroup(t, Config{TestUser: true}, "a", "b")
	inService(t, tu, 1, 0)
	tu.OnSent(0, at(0))
	tu.Tick(at(15*s), nil, nil)
	tu.Tick(at(45*s), nil, nil)
	require.Equal(t, Probing, tu.State(0))
	assert.False(t, tu.WantsProbe(0), "the test user's request probes")
}

// While a server's connection is unavailable the group sends it no test
// user's request, so its next wake-up must not be the probe or keep-alive
// it cannot send: an owner sleeping until NextWakeup would otherwise spin
// for the whole outage. Its down-timeout, probe deadline and hold-down
// end still count.
func TestUnavailableServerDoesNotWakeForTestRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"probe", Config{TestUser: true}},
		{"keep-alive", Config{TestUser: true, KeepAlive: 10 * s}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroup(t, tc.cfg, "a", "b")
			inService(t, g, 1, 0)
			g.OnSent(0, at(0))
			g.Tick(at(15*s), nil, nil) // a out of service until 45 s
			g.SetAvailable(0, false)
			wakes := 0
			for now := at(45 * s); now.Before(at(46 * s)); {
				g.Tick(now, nil, nil)
				w, ok := g.NextWakeup()
				if !ok {
					break
				}
				wakes++
				now = now.Add(max(w.Sub(now), time.Millisecond))
			}
			assert.LessOrEqual(t, wakes, 2, "wake-ups in one second of outage")

			// Back: its test request (the probe, or a keep-alive once
			// the hold-down gave up probing) is due at once.
			g.SetAvailable(0, true)
			w, ok := g.NextWakeup()
			require.True(t, ok)
			assert.False(t, w.After(at(46*s)), "due when the server is available again")
			sends, _ := g.Tick(at(46*s), nil, nil)
			var mine []TestSend
			for _, x := range sends {
				if x.Index == 0 {
					mine = append(mine, x)
				}
			}
			assert.Len(t, mine, 1, "a's test request on its return")
		})
	}
}

// An unavailable server's own timers still wake the owner: the
// down-timeout of a request sent before the connection went, and the
// hold-down's end.
func TestUnavailableServerKeepsItsTimers(t *testing.T) {
	g := newGroup(t, Config{TestUser: true, KeepAlive: 10 * s}, "a", "b")
	inService(t, g, 1, 0)
	g.Tick(at(0), nil, nil)
	g.OnReply(0, at(0))
	g.OnReply(1, at(0))
	g.OnSent(0, at(1*s))
	g.SetAvailable(0, false)
	g.SetAvailable(1, false)
	w, ok := g.NextWakeup()
	require.True(t, ok)
	assert.Equal(t, at(16*s), w, "a's down-timeout")
	_, evs := g.Tick(w, nil, nil)
	assert.Equal(t, []rec{{16 * s, "a", InService, OutOfService, ReasonDownTimeout}}, recs(evs...))
	w, ok = g.NextWakeup()
	require.True(t, ok)
	assert.Equal(t, at(46*s), w, "a's hold-down end")
}

// Len and Name may be called while another goroutine adds servers: run
// under -race.
func TestGroupLenAndNameWhileAdding(t *testing.T) {
	g := newGroup(t, Config{}, "a")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := range 200 {
			_, err := g.Add(fmt.Sprintf("n%d", k))
			assert.NoError(t, err)
		}
	}()
	for {
		n := g.Len()
		assert.Equal(t, "a", g.Name(0))
		assert.NotEmpty(t, g.Name(n-1))
		select {
		case <-done:
			assert.Equal(t, 201, g.Len())
			return
		default:
		}
	}
}
