package throttle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SetAvailable acts only on a change: told again that a server is
// unavailable, the requests that may go to it alone stay in its queue,
// and its queue alarm is neither cleared nor raised again.
func TestSetAvailableActsOnlyOnAChange(t *testing.T) {
	var alarms []Alarm
	picks := 0
	s := newSched(t, Config[*item]{
		Servers:   []Server{{Name: "a"}, {Name: "b"}},
		Pick:      func(*item, Class) (int, bool) { picks++; return 0, true },
		AlarmHigh: 3, AlarmLow: 1,
		OnAlarm: func(a Alarm) { alarms = append(alarms, a) },
	})
	s.SetAvailable(0, false, at(0))
	for i := range 5 {
		s.Enqueue(&item{id: i, dl: at(time.Minute)}, Auth)
	}
	assert.Empty(t, s.Poll(at(0), nil))
	require.Equal(t, 5, s.Depth(0))
	require.Len(t, alarms, 1, "raised")
	require.Equal(t, 5, picks)
	for k := 1; k <= 3; k++ { // told again, as at every change of the owner's view
		now := at(time.Duration(k) * ms)
		s.SetAvailable(0, false, now)
		s.SetAvailable(1, true, now)
		assert.Empty(t, s.Poll(now, nil))
	}
	assert.Equal(t, 5, s.Depth(0))
	assert.Len(t, alarms, 1, "neither cleared nor raised again")
	assert.Equal(t, uint64(1), s.Stats(0).Alarms)
	assert.Equal(t, 5, picks, "not picked again")

	s.SetAvailable(0, true, at(10*ms))
	out := s.Poll(at(10*ms), nil)
	assert.Equal(t, []int{0, 1, 2, 3, 4}, ids(out), "its server is back")
	require.Len(t, alarms, 2)
	assert.False(t, alarms[1].Raised)
}

// Repick sends a server's queue back to be picked again, its server
// unavailable all along: requests that may go to it alone go where Pick
// names now.
func TestRepickSendsTheQueueWherePickNamesNow(t *testing.T) {
	var alarms []Alarm
	pin := 0
	s := newSched(t, Config[*item]{
		Servers:   []Server{{Name: "a"}, {Name: "b"}},
		Pick:      func(*item, Class) (int, bool) { return pin, true },
		AlarmHigh: 3, AlarmLow: 1,
		OnAlarm: func(a Alarm) { alarms = append(alarms, a) },
	})
	s.SetAvailable(0, false, at(0))
	for i := range 4 {
		s.Enqueue(&item{id: i, dl: at(time.Minute)}, Auth)
	}
	assert.Empty(t, s.Poll(at(0), nil))
	require.Equal(t, 4, s.Depth(0))
	pin = 1 // a is replaced by b
	s.SetAvailable(0, false, at(ms))
	assert.Empty(t, s.Poll(at(ms), nil), "no change: they stay")
	s.Repick(0, at(2*ms))
	assert.Equal(t, 0, s.Depth(0))
	require.Len(t, alarms, 2)
	assert.Equal(t, Alarm{Time: at(2 * ms), Server: "a", Index: 0, Raised: false, Depth: 0}, alarms[1])
	out := s.Poll(at(2*ms), nil)
	assert.Equal(t, []int{0, 1, 2, 3}, ids(out), "in their order")
	for _, d := range out {
		assert.Equal(t, 1, d.Server)
	}
	s.Repick(0, at(3*ms)) // nothing queued: nothing to do
	assert.Len(t, alarms, 2)
}

// A request Pick says may go nowhere (Nowhere) is handed back to the
// owner (ErrNowhere, with its age), not queued for a server chosen
// round-robin, which it must avoid; the requests behind it go on. Put
// back (Requeue) it goes where it stood, ahead of newer requests. While
// no server is available it waits in the instance queue, as any request.
func TestPickNowhereHandsTheRequestBack(t *testing.T) {
	nowhere := map[int]bool{1: true}
	s := newSched(t, Config[*item]{
		Servers: []Server{{Name: "a", Auth: Limits{MaxOutstanding: 1}}, {Name: "b", Auth: Limits{MaxOutstanding: 1}}},
		Pick: func(it *item, _ Class) (int, bool) {
			if nowhere[it.id] {
				return Nowhere, false
			}
			return 1, false
		},
	})
	s.Enqueue(&item{id: 0, dl: at(time.Minute)}, Auth) // takes b's place
	assert.Equal(t, []int{0}, ids(s.Poll(at(0), nil)))
	r := &item{id: 1, dl: at(time.Minute)}
	s.Requeue(r, Auth, s.ReplayAge()) // a replay
	s.Enqueue(&item{id: 2, dl: at(time.Minute)}, Auth)
	out := s.Poll(at(ms), nil)
	require.Len(t, out, 1)
	back := out[0]
	assert.Equal(t, Dispatch[*item]{Item: r, Server: -1, Class: Auth, Err: ErrNowhere, Age: back.Age}, back, "handed back")
	assert.Equal(t, 1, s.Depth(1), "the request behind it waits for b")
	assert.Equal(t, 0, s.Depth(0), "not queued for a")
	assert.Equal(t, 1, s.Len())

	// Back with its age once it may go somewhere: ahead of 2.
	delete(nowhere, 1)
	s.Requeue(r, Auth, back.Age)
	s.Done(1, Auth)
	assert.Equal(t, []int{1}, ids(s.Poll(at(2*ms), nil)), "where it stood")
	s.Done(1, Auth)
	assert.Equal(t, []int{2}, ids(s.Poll(at(3*ms), nil)))

	// No server available: it waits, as any request.
	nowhere[3] = true
	s.SetAvailable(0, false, at(4*ms))
	s.SetAvailable(1, false, at(4*ms))
	s.Enqueue(&item{id: 3, dl: at(time.Minute)}, Auth)
	assert.Empty(t, s.Poll(at(4*ms), nil))
	assert.Equal(t, 1, s.Len())
	s.SetAvailable(0, true, at(5*ms))
	out = s.Poll(at(5*ms), nil)
	require.Len(t, out, 1)
	assert.ErrorIs(t, out[0].Err, ErrNowhere)
	assert.Zero(t, s.Len())
	assert.Zero(t, s.Expired(), "handed back, not failed")
}
