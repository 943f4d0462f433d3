package policy

import (
	"encoding/json"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  bool
		down time.Duration
	}{
		{"defaults", Config{}, false, 15 * time.Second},
		{"timeout x retries", Config{RequestTimeout: 2 * time.Second, Retries: 4}, false, 8 * time.Second},
		{"explicit down-timeout", Config{DownTimeout: time.Second}, false, time.Second},
		{"negative", Config{HoldDown: -1}, true, 0},
		{"keep-alive without test user", Config{KeepAlive: time.Second}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := NewTracker("a", tc.cfg)
			if tc.err {
				assert.True(t, errors.Is(err, ErrConfig), "%v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.down, tr.Config().DownTimeout)
		})
	}
	_, err := NewGroup(nil, Config{})
	assert.ErrorIs(t, err, ErrConfig)
}

func TestStateNames(t *testing.T) {
	for st := range numStates {
		p, err := ParseState(State(st).String())
		require.NoError(t, err)
		assert.Equal(t, State(st), p)
	}
	_, err := ParseState("up")
	assert.Error(t, err)
	b, err := json.Marshal(Event{Server: "a", From: Unknown, To: InService, Reason: ReasonFirstReply})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"from":"unknown","to":"in-service"`)
	var e Event
	require.NoError(t, json.Unmarshal(b, &e))
	assert.Equal(t, InService, e.To)
}

// One call from each state, with the down-timeout running where the state
// allows it. Times are seconds after the state was reached (at 100 s).
func TestTable(t *testing.T) {
	const base = 100 * time.Second
	// reach builds a tracker in state st at base; for Unknown and
	// InService a request is outstanding since base (down-timeout 15 s);
	// OutOfService holds down until base+30 s; Probing has its probe out
	// until base+5 s when probe is true.
	reach := func(t *testing.T, st State, probe bool) *Tracker {
		tr, err := NewTracker("a", Config{})
		require.NoError(t, err)
		switch st {
		case InService:
			tr.OnReply(at(base))
		case OutOfService:
			tr.OnSent(at(base - 15*time.Second))
			tr.Tick(at(base), false)
		case Probing:
			tr.OnSent(at(base - 45*time.Second))
			tr.Tick(at(base), true)
			if probe {
				require.True(t, tr.Allow(at(base), true).Probe)
			}
		}
		if st.Takes() {
			tr.OnSent(at(base))
		}
		require.Equal(t, st, tr.State())
		return tr
	}
	type call func(tr *Tracker, d time.Duration) Output
	sent := func(tr *Tracker, d time.Duration) Output { return tr.OnSent(at(base + d)) }
	reply := func(tr *Tracker, d time.Duration) Output { return tr.OnReply(at(base + d)) }
	tick := func(ok bool) call {
		return func(tr *Tracker, d time.Duration) Output { return tr.Tick(at(base+d), ok) }
	}
	allow := func(ok bool) call {
		return func(tr *Tracker, d time.Duration) Output { return tr.Allow(at(base+d), ok) }
	}
	for _, tc := range []struct {
		name   string
		from   State
		probe  bool
		call   call
		d      time.Duration
		to     State
		reason string // "" means no event
		allow  bool
		isProb bool
	}{
		{"unknown reply", Unknown, false, reply, time.Second, InService, ReasonFirstReply, false, false},
		{"unknown sent", Unknown, false, sent, time.Second, Unknown, "", false, false},
		{"unknown tick early", Unknown, false, tick(true), 14 * time.Second, Unknown, "", false, false},
		{"unknown tick expiry", Unknown, false, tick(true), 15 * time.Second, OutOfService, ReasonNoFirstReply, false, false},
		{"unknown allow", Unknown, false, allow(true), time.Second, Unknown, "", true, false},
		{"in-service reply", InService, false, reply, time.Second, InService, "", false, false},
		{"in-service tick expiry", InService, false, tick(true), 15 * time.Second, OutOfService, ReasonDownTimeout, false, false},
		{"in-service allow", InService, false, allow(false), time.Second, InService, "", true, false},
		{"in-service allow after expiry", InService, false, allow(false), 15 * time.Second, OutOfService, ReasonDownTimeout, false, false},
		{"out reply", OutOfService, false, reply, time.Second, OutOfService, "", false, false},
		{"out sent", OutOfService, false, sent, time.Second, OutOfService, "", false, false},
		{"out allow", OutOfService, false, allow(true), 29 * time.Second, OutOfService, "", false, false},
		{"out hold-down over, probe ok", OutOfService, false, tick(true), 30 * time.Second, Probing, ReasonHoldDownOver, false, false},
		{"out hold-down over, no probe", OutOfService, false, tick(false), 30 * time.Second, Unknown, ReasonNoProbe, false, false},
		{"out hold-down over, allow", OutOfService, false, allow(true), 30 * time.Second, Probing, ReasonHoldDownOver, true, true},
		{"probing allow", Probing, false, allow(true), time.Second, Probing, "", true, true},
		{"probing allow, probe out", Probing, true, allow(true), time.Second, Probing, "", false, false},
		{"probing reply", Probing, true, reply, time.Second, InService, ReasonProbeAnswered, false, false},
		{"probing tick early", Probing, true, tick(true), 5*time.Second - 1, Probing, "", false, false},
		{"probing probe timeout", Probing, true, tick(true), 5 * time.Second, OutOfService, ReasonProbeTimeout, false, false},
		{"probing sent", Probing, true, sent, time.Second, Probing, "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := reach(t, tc.from, tc.probe)
			o := tc.call(tr, tc.d)
			assert.Equal(t, tc.to, o.State)
			assert.Equal(t, tc.allow, o.Allow)
			assert.Equal(t, tc.isProb, o.Probe)
			if tc.reason == "" {
				assert.Empty(t, o.Events())
			} else {
				require.NotEmpty(t, o.Events())
				last := o.Events()[len(o.Events())-1]
				assert.Equal(t, tc.reason, last.Reason)
				assert.Equal(t, tc.to, last.To)
			}
		})
	}
}

// The owner's loop in a synctest bubble: a timer armed at NextWakeup, Tick
// when it fires. The seed's single-server timeline, in (fake) real time.
func TestOwnerLoopSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroup(t, Config{RequestTimeout: time.Second, Retries: 2, HoldDown: 10 * time.Second}, "a")
		start := time.Now()
		var got []rec
		g.OnSent(0, time.Now())
		for range 3 {
			w, ok := g.NextWakeup()
			require.True(t, ok)
			time.Sleep(time.Until(w))
			_, evs := g.Tick(time.Now(), nil, nil)
			for _, e := range evs {
				got = append(got, rec{e.Time.Sub(start), e.Server, e.From, e.To, e.Reason})
			}
			if g.State(0) == Unknown {
				g.OnSent(0, time.Now())
			}
		}
		assert.Equal(t, []rec{
			{2 * time.Second, "a", Unknown, OutOfService, ReasonNoFirstReply},
			{12 * time.Second, "a", OutOfService, Unknown, ReasonNoProbe},
			{14 * time.Second, "a", Unknown, OutOfService, ReasonNoFirstReply},
		}, got)
	})
}
