package watchdog

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixedRand returns the same draw every time: Int64N(n) = v (v < n).
type fixedRand struct{ v int64 }

func (f fixedRand) Int64N(n int64) int64 { return f.v % n }

// noJitter makes every Tw exactly Twinit (the draw lands in the middle).
var noJitter = fixedRand{v: int64(MaxJitter)}

const twinit = 30 * time.Second

// machineAt returns a machine in the given state with the given variables,
// as if earlier events had brought it there.
func machineAt(t *testing.T, st State, pending bool, numDWA int) *Machine {
	t.Helper()
	m, err := New(Config{Twinit: twinit, Rand: noJitter})
	require.NoError(t, err)
	m.state, m.pending, m.numDWA = st, pending, numDWA
	return m
}

func kinds(o Output) []ActionKind {
	var ks []ActionKind
	for _, a := range o.Actions() {
		ks = append(ks, a.Kind)
	}
	return ks
}

type row struct {
	name        string // "STATE/event[, condition]" as in RFC 3539 Appendix A
	state       State
	pending     bool
	numDWA      int
	event       Event
	want        []ActionKind
	next        State
	wantPending bool
	wantNumDWA  int
	reason      string // expected transition reason when the state changes
}

// appendixA is RFC 3539 Appendix A, one case per row of the table in
// requirements.md. The DOWN "receive DWA / non-DWA" row is split in two
// because its DWA half also clears Pending.
var appendixA = []row{
	// INITIAL
	{"INITIAL/connection up", Initial, false, 0, ConnectionUp, []ActionKind{ActionSetTimer}, Okay, false, 0, ReasonConnectionUp},
	{"INITIAL/receive DWA", Initial, true, 0, ReceiveDWA, []ActionKind{ActionDiscard}, Initial, false, 0, ""},
	{"INITIAL/receive non-DWA", Initial, true, 0, ReceiveOther, []ActionKind{ActionDiscard}, Initial, true, 0, ""},
	{"INITIAL/timer expires", Initial, false, 0, TimerExpired, []ActionKind{ActionAttemptOpen, ActionSetTimer}, Initial, false, 0, ""},
	// OKAY
	{"OKAY/receive DWA", Okay, true, 0, ReceiveDWA, []ActionKind{ActionSetTimer}, Okay, false, 0, ""},
	{"OKAY/receive non-DWA", Okay, true, 0, ReceiveOther, []ActionKind{ActionSetTimer}, Okay, true, 0, ""},
	{"OKAY/timer expires, !Pending", Okay, false, 0, TimerExpired, []ActionKind{ActionSendDWR, ActionSetTimer}, Okay, true, 0, ""},
	{"OKAY/timer expires, Pending", Okay, true, 0, TimerExpired, []ActionKind{ActionFailover, ActionSetTimer}, Suspect, true, 0, ReasonDWATimeout},
	{"OKAY/connection down", Okay, false, 0, ConnectionDown, []ActionKind{ActionFailover, ActionSetTimer}, Down, false, 0, ReasonConnectionDown},
	// SUSPECT
	{"SUSPECT/receive DWA", Suspect, true, 0, ReceiveDWA, []ActionKind{ActionFailback, ActionSetTimer}, Okay, false, 0, ReasonDWAReceived},
	{"SUSPECT/receive non-DWA", Suspect, true, 0, ReceiveOther, []ActionKind{ActionFailback, ActionSetTimer}, Okay, true, 0, ReasonTraffic},
	{"SUSPECT/timer expires", Suspect, true, 0, TimerExpired, []ActionKind{ActionCloseConnection, ActionSetTimer}, Down, true, 0, ReasonSecondTimeout},
	{"SUSPECT/connection down", Suspect, true, 0, ConnectionDown, []ActionKind{ActionCloseConnection, ActionSetTimer}, Down, true, 0, ReasonConnectionDown},
	// DOWN
	{"DOWN/timer expires", Down, false, 0, TimerExpired, []ActionKind{ActionAttemptOpen, ActionSetTimer}, Down, false, 0, ""},
	{"DOWN/connection up", Down, false, 2, ConnectionUp, []ActionKind{ActionSendDWR, ActionSetTimer}, Reopen, true, 0, ReasonReopened},
	{"DOWN/receive DWA", Down, true, 0, ReceiveDWA, []ActionKind{ActionDiscard}, Down, false, 0, ""},
	{"DOWN/receive non-DWA", Down, true, 0, ReceiveOther, []ActionKind{ActionDiscard}, Down, true, 0, ""},
	// REOPEN
	{"REOPEN/receive DWA, NumDWA < 2", Reopen, true, 1, ReceiveDWA, nil, Reopen, false, 2, ""},
	{"REOPEN/receive DWA, NumDWA == 2", Reopen, true, 2, ReceiveDWA, []ActionKind{ActionFailback}, Okay, false, 3, ReasonReopenDone},
	{"REOPEN/receive non-DWA", Reopen, true, 1, ReceiveOther, []ActionKind{ActionDiscard}, Reopen, true, 1, ""},
	{"REOPEN/timer expires, !Pending", Reopen, false, 1, TimerExpired, []ActionKind{ActionSendDWR, ActionSetTimer}, Reopen, true, 1, ""},
	{"REOPEN/timer expires, Pending, NumDWA >= 0", Reopen, true, 0, TimerExpired, []ActionKind{ActionSetTimer}, Reopen, true, -1, ""},
	{"REOPEN/timer expires, Pending, NumDWA < 0", Reopen, true, -1, TimerExpired, []ActionKind{ActionCloseConnection, ActionSetTimer}, Down, true, -1, ReasonReopenTimeout},
	{"REOPEN/connection down", Reopen, true, 1, ConnectionDown, []ActionKind{ActionCloseConnection, ActionSetTimer}, Down, true, 1, ReasonConnectionDown},
}

func TestAppendixA(t *testing.T) {
	require.Len(t, appendixA, 24, "23 rows of the appendix, DOWN's receive row split in two")
	for _, r := range appendixA {
		t.Run(r.name, func(t *testing.T) {
			m := machineAt(t, r.state, r.pending, r.numDWA)
			o := m.Step(r.event)

			assert.Equal(t, r.want, kinds(o), "actions")
			assert.Equal(t, r.next, o.State, "next state in output")
			assert.Equal(t, r.next, m.State(), "next state in machine")
			assert.Equal(t, r.wantPending, m.Pending(), "Pending")
			assert.Equal(t, r.wantNumDWA, m.NumDWA(), "NumDWA")
			assert.False(t, o.Ignored, "a row of the table is never ignored")
			if d, ok := o.Timer(); ok {
				assert.Equal(t, twinit, d, "SetWatchdog arms Tw = Twinit + jitter (jitter 0 here)")
				assert.Equal(t, twinit, m.Tw())
			}
			if r.next != r.state {
				require.True(t, o.Changed, "state change must be reported")
				assert.Equal(t, Transition{From: r.state, To: r.next, Event: r.event, Reason: r.reason}, o.Transition)
				assert.Equal(t, uint64(1), m.Transitions())
				assert.Equal(t, uint64(1), m.TransitionCount(r.state, r.next))
			} else {
				assert.False(t, o.Changed, "no transition record without a state change")
				assert.Zero(t, m.Transitions())
			}
		})
	}
}

// A DWR is "non-DWA" for the table and is also answered wherever a
// connection can exist; in DOWN the connection is closed.
func TestReceiveDWRIsNonDWAAndAnswered(t *testing.T) {
	for _, r := range appendixA {
		if r.event != ReceiveOther {
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			m := machineAt(t, r.state, r.pending, r.numDWA)
			o := m.Step(ReceiveDWR)
			want := r.want
			if r.state != Down {
				want = append([]ActionKind{ActionAnswerDWR}, r.want...)
			}
			assert.Equal(t, want, kinds(o))
			assert.Equal(t, r.next, m.State())
		})
	}
}

// Every (state, event) pair, with every interesting value of the variables,
// is handled without panic and keeps the machine's invariants.
func TestEveryPairHandled(t *testing.T) {
	for st := State(0); st < numStates; st++ {
		for ev := Event(0); ev < numEvents; ev++ {
			for _, pending := range []bool{false, true} {
				for _, n := range []int{-1, 0, 1, 2} {
					m := machineAt(t, st, pending, n)
					var o Output
					require.NotPanics(t, func() { o = m.Step(ev) }, "%v / %v", st, ev)
					assert.Equal(t, m.State(), o.State)
					assert.Equal(t, o.Changed, st != o.State, "%v / %v", st, ev)
					assert.LessOrEqual(t, len(o.Actions()), maxActions)
					if o.Ignored {
						assert.Empty(t, o.Actions(), "ignored pairs do nothing")
						assert.Equal(t, st, m.State())
					}
					// W4: a DWR is never sent while one is outstanding on
					// the same connection. DOWN / connection up starts a new
					// connection: an old Pending belongs to the closed one.
					if pending && !(st == Down && ev == ConnectionUp) {
						assert.False(t, o.Has(ActionSendDWR), "%v / %v with Pending sent a second DWR", st, ev)
					}
					// W7: no DWR in DOWN.
					if st == Down && o.State == Down {
						assert.False(t, o.Has(ActionSendDWR))
					}
					// W6: leaving SUSPECT for DOWN only on the timer or the transport.
					if st == Okay && o.State == Down {
						assert.Equal(t, ConnectionDown, ev)
					}
				}
			}
		}
	}
}

// Pairs the appendix has no row for are ignored, and say so.
func TestPairsOutsideTheTableAreIgnored(t *testing.T) {
	for _, c := range []struct {
		st State
		ev Event
	}{
		{Initial, ConnectionDown}, {Okay, ConnectionUp}, {Suspect, ConnectionUp},
		{Down, ConnectionDown}, {Reopen, ConnectionUp},
	} {
		m := machineAt(t, c.st, false, 0)
		o := m.Step(c.ev)
		assert.True(t, o.Ignored, "%v / %v", c.st, c.ev)
		assert.Equal(t, c.st, m.State())
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero means RFC defaults", Config{}, true},
		{"RFC minimum 6s", Config{Twinit: 6 * time.Second}, true},
		{"below 6s is an error, not clamped", Config{Twinit: 6*time.Second - time.Nanosecond}, false},
		{"negative Twinit", Config{Twinit: -time.Second}, false},
		{"OkayDWAs 1", Config{OkayDWAs: 1}, true},
		{"OkayDWAs negative", Config{OkayDWAs: -1}, false},
		{"OkayDWAs too large", Config{OkayDWAs: 101}, false},
		{"SuspectTimeouts negative", Config{SuspectTimeouts: -3}, false},
		{"SuspectTimeouts too large", Config{SuspectTimeouts: 1000}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := New(c.cfg)
			if !c.ok {
				require.Error(t, err)
				assert.True(t, errors.Is(err, ErrConfig))
				assert.Nil(t, m)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, Initial, m.State())
		})
	}
	m, err := New(Config{})
	require.NoError(t, err)
	assert.Equal(t, DefaultTwinit, m.Config().Twinit)
	assert.Equal(t, 3, m.Config().OkayDWAs)
	assert.Equal(t, 1, m.Config().SuspectTimeouts)
	assert.NotNil(t, m.Config().Rand)

	_, err = New(Config{Twinit: 5 * time.Second})
	assert.ErrorContains(t, err, "below the RFC 3539 minimum of 6s")
}

// W2: every SetWatchdog draws Tw from [Twinit-2s, Twinit+2s], spread over it.
func TestJitterBoundsAndSpread(t *testing.T) {
	m, err := New(Config{Twinit: twinit}) // default: the process-wide generator
	require.NoError(t, err)
	const draws = 100_000
	const bins = 20
	var hist [bins]int
	lo, hi := twinit-MaxJitter, twinit+MaxJitter
	minSeen, maxSeen := hi, lo
	m.state = Okay
	for range draws {
		o := m.Step(ReceiveOther) // OKAY / non-DWA: one SetWatchdog per step
		d, ok := o.Timer()
		require.True(t, ok)
		require.GreaterOrEqual(t, d, lo)
		require.LessOrEqual(t, d, hi)
		minSeen, maxSeen = min(minSeen, d), max(maxSeen, d)
		b := int((d - lo) * bins / (hi - lo + 1))
		hist[b]++
	}
	for i, n := range hist {
		// Expected 5000 per bin; 4500..5500 is > 7 sigma wide.
		assert.InDelta(t, draws/bins, n, draws/bins/10, "bin %d of %d", i, bins)
	}
	assert.Less(t, minSeen, lo+100*time.Millisecond, "draws reach the low end")
	assert.Greater(t, maxSeen, hi-100*time.Millisecond, "draws reach the high end")
}

// Two machines seeded by default draw different sequences: jitter exists to
// de-synchronise peers (3.4.1 [1]).
func TestDefaultRandIsSeededPerMachine(t *testing.T) {
	a, b := NewRand(), NewRand()
	same := 0
	for range 8 {
		if a.Int64N(1<<62) == b.Int64N(1<<62) {
			same++
		}
	}
	assert.Less(t, same, 8)
}

func TestJitterEndpoints(t *testing.T) {
	assert.Equal(t, twinit-MaxJitter, Jitter(twinit, fixedRand{0}))
	assert.Equal(t, twinit+MaxJitter, Jitter(twinit, fixedRand{int64(2 * MaxJitter)}))
}

func TestStartOnlyInInitial(t *testing.T) {
	m := machineAt(t, Initial, false, 0)
	o := m.Start()
	assert.Equal(t, []ActionKind{ActionAttemptOpen, ActionSetTimer}, kinds(o))
	assert.Equal(t, Initial, m.State())
	m.state = Okay
	o = m.Start()
	assert.True(t, o.Ignored)
	assert.Empty(t, o.Actions())
}

func TestStringsAndParse(t *testing.T) {
	for st := State(0); st < numStates; st++ {
		p, err := ParseState(st.String())
		require.NoError(t, err)
		assert.Equal(t, st, p)
	}
	_, err := ParseState("okay")
	assert.Error(t, err, "states are capitals, as in the RFC")
	assert.Equal(t, "State(9)", State(9).String())
	assert.Equal(t, "SetWatchdog(30s)", Action{Kind: ActionSetTimer, After: twinit}.String())
	assert.Equal(t, "receive DWA", ReceiveDWA.String())
	assert.True(t, Okay.InService())
	for _, s := range []State{Initial, Suspect, Down, Reopen} {
		assert.False(t, s.InService(), s.String())
	}
}

// Step runs for every message received: it must not allocate.
func TestStepDoesNotAllocate(t *testing.T) {
	m := machineAt(t, Okay, false, 0)
	allocs := testing.AllocsPerRun(1000, func() { _ = m.Step(ReceiveOther) })
	assert.Zero(t, allocs)
}

func BenchmarkStepReceive(b *testing.B) {
	m, _ := New(Config{})
	m.state = Okay
	b.ReportAllocs()
	for b.Loop() {
		_ = m.Step(ReceiveOther)
	}
}

// The default jitter source is the process-wide generator: a Machine holds
// no generator of its own (New allocates the Machine only), and two
// machines do not draw the same jitters.
func TestDefaultRandIsSharedAndRandom(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() {
		if _, err := New(Config{}); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Fatalf("New(Config{}) made %v allocations, want 1 (the Machine)", n)
	}
	a, err := New(Config{Twinit: twinit})
	require.NoError(t, err)
	b, err := New(Config{Twinit: twinit})
	require.NoError(t, err)
	a.state, b.state = Okay, Okay
	same := 0
	for range 8 {
		oa, ob := a.Step(ReceiveOther), b.Step(ReceiveOther)
		da, _ := oa.Timer()
		db, _ := ob.Timer()
		if da == db {
			same++
		}
	}
	assert.Less(t, same, 8, "two machines drew the same 8 jitters")
}
