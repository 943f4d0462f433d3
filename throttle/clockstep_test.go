package throttle

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A backward step of the clock neither stalls a rate-limited server for
// the length of the step nor gives it a second share at once: the slots
// start again from the reading after the step.
func TestClockSteppedBackKeepsTheRate(t *testing.T) {
	s := newSched(t, Config[*item]{Servers: []Server{{Name: "a", Auth: Limits{MaxRate: 100, MaxOutstanding: -1}}}})
	for i := range 1000 {
		s.Enqueue(&item{id: i}, Auth)
	}
	assert.Len(t, s.Poll(at(10*ms), nil), 5, "5 a slot")
	back := at(-time.Hour) // on a slot boundary
	assert.Empty(t, s.Poll(back.Add(20*ms), nil), "right after the step: the slot's share is spent")
	out := s.Poll(back.Add(-10*ms), nil) // read before the step's reading, within a slot
	assert.Empty(t, out, "a stale reading still counts in the current slot")
	sent := 0
	for k := 1; k <= 20; k++ {
		sent += len(s.Poll(back.Add(time.Duration(k)*50*ms), nil))
	}
	assert.Equal(t, 100, sent, "the second after the step, at 100/s")
	now := back.Add(1010 * ms)
	w, ok := s.NextWakeup(now)
	require.True(t, ok)
	assert.Equal(t, back.Add(1050*ms), w, "the next slot")
}

// After a backward step of the clock, a request whose deadline passes in
// a server queue still fails at its deadline.
func TestClockSteppedBackStillExpires(t *testing.T) {
	s := newSched(t, Config[*item]{Servers: []Server{{Name: "a", Auth: Limits{MaxOutstanding: 1}}}})
	s.Enqueue(&item{id: 0, dl: at(0)}, Auth)
	s.Enqueue(&item{id: 1}, Auth)
	out := s.Poll(at(0), nil)
	require.Len(t, out, 2)
	require.ErrorIs(t, out[0].Err, ErrExpired)
	require.NoError(t, out[1].Err, "holds a's one place")

	back := at(-time.Hour)
	s.Enqueue(&item{id: 2, dl: back.Add(time.Second)}, Auth)
	require.Empty(t, s.Poll(back, nil))
	require.Equal(t, 1, s.Depth(0), "waits for a place")
	w, ok := s.NextWakeup(back)
	require.True(t, ok)
	assert.Equal(t, back.Add(time.Second), w, "its deadline")
	out = s.Poll(back.Add(2*time.Second), nil)
	require.Len(t, out, 1)
	var exp *ExpiredError
	require.True(t, errors.As(out[0].Err, &exp))
	assert.Equal(t, "a", exp.Server)
	assert.Equal(t, time.Second, exp.Late)
}
