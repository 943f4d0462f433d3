package watchdog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sim drives a Machine against a simulated peer in virtual time. It carries
// out the machine's actions the way package peer does: one timer, DWRs
// answered after rtt while the peer is alive, connection attempts that
// succeed while the peer is alive.
type sim struct {
	t  *testing.T
	m  *Machine
	at time.Duration // virtual now

	alive        func(at time.Duration) bool // is the peer answering at this time?
	trafficEvery time.Duration               // answers to our requests arrive this often while alive and OKAY; 0: none
	rtt          time.Duration

	timerAt   time.Duration // -1: unarmed
	dwaAt     time.Duration // -1: none in flight
	trafficAt time.Duration // -1: none
	connected bool

	transitions []timedTransition
	dwrs        []time.Duration
	opens       []time.Duration
	failovers   []time.Duration
}

type timedTransition struct {
	at time.Duration
	Transition
}

func newSim(t *testing.T, cfg Config) *sim {
	t.Helper()
	if cfg.Twinit == 0 {
		cfg.Twinit = twinit
	}
	m, err := New(cfg)
	require.NoError(t, err)
	return &sim{t: t, m: m, timerAt: -1, dwaAt: -1, trafficAt: -1, rtt: 10 * time.Millisecond,
		alive: func(time.Duration) bool { return true }}
}

func (s *sim) apply(o Output) {
	if o.Changed {
		s.transitions = append(s.transitions, timedTransition{s.at, o.Transition})
	}
	for _, a := range o.Actions() {
		switch a.Kind {
		case ActionSetTimer:
			s.timerAt = s.at + a.After
		case ActionSendDWR:
			s.dwrs = append(s.dwrs, s.at)
			if s.alive(s.at) {
				s.dwaAt = s.at + s.rtt
			}
		case ActionFailover:
			s.failovers = append(s.failovers, s.at)
		case ActionCloseConnection:
			s.connected = false
			s.dwaAt, s.trafficAt = -1, -1
		case ActionAttemptOpen:
			s.opens = append(s.opens, s.at)
			if s.alive(s.at) {
				s.connected = true
				s.connect()
			}
		}
	}
	if s.connected && s.m.State() == Okay && s.trafficEvery > 0 && s.trafficAt < 0 {
		s.trafficAt = s.at + s.trafficEvery
	}
}

// connect brings the first connection up, as a client's first dial does.
func (s *sim) connect() {
	s.connected = true
	s.apply(s.m.Step(ConnectionUp))
}

// run advances virtual time until end, delivering the earliest event first.
func (s *sim) run(end time.Duration) {
	for {
		next, which := end, ""
		for _, c := range []struct {
			at   time.Duration
			name string
		}{{s.timerAt, "timer"}, {s.dwaAt, "dwa"}, {s.trafficAt, "traffic"}} {
			if c.at >= 0 && c.at < next {
				next, which = c.at, c.name
			}
		}
		if which == "" {
			s.at = end
			return
		}
		s.at = next
		switch which {
		case "timer":
			s.timerAt = -1
			s.apply(s.m.Step(TimerExpired))
		case "dwa":
			s.dwaAt = -1
			s.apply(s.m.Step(ReceiveDWA))
		case "traffic":
			s.trafficAt = -1
			if s.alive(s.at) && s.connected {
				s.apply(s.m.Step(ReceiveOther))
			}
			if s.connected && s.trafficEvery > 0 && s.trafficAt < 0 {
				s.trafficAt = s.at + s.trafficEvery
			}
		}
	}
}

// first returns the time of the first transition to state `to` after `after`.
func (s *sim) first(to State, after time.Duration) (time.Duration, bool) {
	for _, tr := range s.transitions {
		if tr.To == to && tr.at >= after {
			return tr.at, true
		}
	}
	return 0, false
}

func deadAfter(d time.Duration) func(time.Duration) bool {
	return func(at time.Duration) bool { return at < d }
}

// RFC 3539 3.4.1 [3]: under heavy traffic a failure is detected within 2Tw:
// Tw for the silence to be noticed and a DWR sent, Tw more to fail over.
func TestScenarioHeavyTrafficDetectsWithin2Tw(t *testing.T) {
	for seed := range uint64(20) {
		s := newSim(t, Config{Rand: NewSeededRand(seed)})
		s.trafficEvery = 50 * time.Millisecond
		const failAt = 300 * time.Second
		s.alive = deadAfter(failAt)
		s.connect()
		s.run(failAt + 3*twinit)

		// Steady traffic keeps resetting Tw: not one DWR before the failure.
		for _, d := range s.dwrs {
			assert.GreaterOrEqual(t, d, failAt, "DWR sent while traffic flowed")
		}
		suspect, ok := s.first(Suspect, failAt)
		require.True(t, ok, "failure never detected")
		detect := suspect - failAt
		assert.LessOrEqual(t, detect, 2*(twinit+MaxJitter), "seed %d", seed)
		assert.GreaterOrEqual(t, detect, 2*(twinit-MaxJitter)-s.trafficEvery, "seed %d: too early: premature failover (2.10)", seed)
		require.Len(t, s.failovers, 1)
		assert.Equal(t, suspect, s.failovers[0], "Failover() on entering SUSPECT")
	}
}

// RFC 3539 3.4.1 [3]: on a lightly loaded link a DWR is usually already
// outstanding when the peer fails, so failover comes after a single Tw.
func TestScenarioLightTrafficDetectsWithinTw(t *testing.T) {
	for seed := range uint64(20) {
		s := newSim(t, Config{Rand: NewSeededRand(seed)})
		s.connect()
		s.run(200 * time.Second) // idle link, DWRs answered
		require.NotEmpty(t, s.dwrs)
		// The peer dies just after the last DWR was answered... then the
		// next DWR goes out unanswered: the failure is detected one Tw
		// after that DWR.
		lastDWR := s.dwrs[len(s.dwrs)-1]
		failAt := lastDWR + s.rtt + time.Millisecond
		s.alive = deadAfter(failAt)
		s.run(failAt + 3*twinit)
		suspect, ok := s.first(Suspect, failAt)
		require.True(t, ok)
		unanswered := s.dwrs[len(s.dwrs)-1]
		assert.LessOrEqual(t, suspect-unanswered, twinit+MaxJitter, "seed %d", seed)
		assert.GreaterOrEqual(t, suspect-unanswered, twinit-MaxJitter, "seed %d", seed)
	}
}

// The exact timeline of a peer that stops answering on an idle link, and
// comes back: DWR at Tw, SUSPECT at 2Tw, DOWN at 3Tw, reopen attempts once
// per Tw, REOPEN, OKAY only after the third DWA.
func TestScenarioFullTimeline(t *testing.T) {
	s := newSim(t, Config{Rand: noJitter})
	const comeBack = 200 * time.Second
	s.alive = func(at time.Duration) bool { return at < time.Second || at >= comeBack }
	s.connect()
	s.run(400 * time.Second)

	var got []string
	for _, tr := range s.transitions {
		got = append(got, tr.at.String()+" "+tr.From.String()+"->"+tr.To.String())
	}
	assert.Equal(t, []string{
		"0s INITIAL->OKAY",
		"1m0s OKAY->SUSPECT",    // DWR at 30s unanswered
		"1m30s SUSPECT->DOWN",   // second expiry: close
		"3m30s DOWN->REOPEN",    // attempts at 2m0s, 2m30s, 3m0s fail; 3m30s succeeds
		"4m30.01s REOPEN->OKAY", // DWRs at 3m30s, 4m0s, 4m30s; third DWA 10ms later
	}, got)
	assert.Equal(t, []time.Duration{30 * time.Second, 210 * time.Second, 240 * time.Second, 270 * time.Second, 300 * time.Second}, s.dwrs[:5])
	assert.Equal(t, []time.Duration{120 * time.Second, 150 * time.Second, 180 * time.Second, 210 * time.Second}, s.opens)
}

// RFC 3539 3.4.1 [5]: a reopened connection needs three DWR/DWA exchanges
// before it carries traffic; InService is false until the third DWA.
func TestScenarioReopenNeedsThreeDWAs(t *testing.T) {
	m := machineAt(t, Down, false, 0)
	o := m.Step(ConnectionUp)
	require.Equal(t, Reopen, o.State)
	require.True(t, o.Has(ActionSendDWR))
	for i := 1; i <= 3; i++ {
		assert.False(t, m.State().InService(), "in service after %d DWAs", i-1)
		if i > 1 {
			o = m.Step(TimerExpired)
			require.True(t, o.Has(ActionSendDWR), "DWR %d", i)
		}
		o = m.Step(ReceiveDWA)
	}
	assert.Equal(t, Okay, m.State())
	assert.True(t, o.Has(ActionFailback))
	assert.Equal(t, 3, m.NumDWA())
}

// RFC 3539 3.4.1 [5]: a first connection is in service at once.
func TestScenarioFirstConnectionInServiceAtOnce(t *testing.T) {
	m := machineAt(t, Initial, false, 0)
	o := m.Step(ConnectionUp)
	assert.True(t, o.State.InService())
	assert.False(t, o.Has(ActionSendDWR), "no validation DWRs on a first connection")
}

// W4: no DWR is ever retransmitted. Against a dead peer, over many Tw, each
// connection sees at most one DWR while one is outstanding.
func TestScenarioNoDWRRetransmitted(t *testing.T) {
	s := newSim(t, Config{Rand: NewSeededRand(7)})
	s.alive = deadAfter(time.Second)
	s.connect()
	s.run(20 * twinit)
	assert.Len(t, s.dwrs, 1, "one DWR, never sent again while unanswered; no DWR in DOWN")
	assert.Equal(t, Down, s.m.State())
	// W7: one attempt to reopen per Tw, not more.
	for i := 1; i < len(s.opens); i++ {
		assert.GreaterOrEqual(t, s.opens[i]-s.opens[i-1], twinit-MaxJitter)
	}
	assert.Greater(t, len(s.opens), 10)
}

// Erlang's watchdog_config knobs: {okay, N} and {suspect, N}.
func TestKnobOkayDWAs(t *testing.T) {
	for _, n := range []int{1, 2, 5} {
		m, err := New(Config{Twinit: twinit, OkayDWAs: n, Rand: noJitter})
		require.NoError(t, err)
		m.state = Down
		m.Step(ConnectionUp)
		for i := 1; i < n; i++ {
			m.Step(ReceiveDWA)
			require.Equal(t, Reopen, m.State(), "okay=%d after %d DWAs", n, i)
			m.Step(TimerExpired)
		}
		o := m.Step(ReceiveDWA)
		assert.Equal(t, Okay, m.State(), "okay=%d", n)
		assert.True(t, o.Has(ActionFailback))
	}
}

func TestKnobSuspectTimeouts(t *testing.T) {
	m, err := New(Config{Twinit: twinit, SuspectTimeouts: 3, Rand: noJitter})
	require.NoError(t, err)
	m.Step(ConnectionUp)
	o := m.Step(TimerExpired)
	require.True(t, o.Has(ActionSendDWR))
	for i := 1; i < 3; i++ {
		o = m.Step(TimerExpired)
		assert.Equal(t, Okay, m.State(), "expiry %d of 3", i)
		assert.Equal(t, []ActionKind{ActionSetTimer}, kinds(o), "no second DWR while waiting")
	}
	o = m.Step(TimerExpired)
	assert.Equal(t, Suspect, m.State())
	assert.True(t, o.Has(ActionFailover))

	// Traffic in between restarts the count: the peer is alive.
	m, _ = New(Config{Twinit: twinit, SuspectTimeouts: 2, Rand: noJitter})
	m.Step(ConnectionUp)
	m.Step(TimerExpired) // DWR
	m.Step(TimerExpired) // 1 of 2
	m.Step(ReceiveOther) // alive
	m.Step(TimerExpired) // 1 of 2 again
	assert.Equal(t, Okay, m.State())
	m.Step(TimerExpired)
	assert.Equal(t, Suspect, m.State())
}
