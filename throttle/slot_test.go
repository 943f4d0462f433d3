package throttle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The slots allowed are those that divide one second; the error names them.
func TestCheckSlot(t *testing.T) {
	allowed := []time.Duration{0, 50 * ms, 62500 * time.Microsecond, 100 * ms, 125 * ms, 200 * ms, 250 * ms, 500 * ms, time.Second}
	for _, d := range allowed {
		assert.NoError(t, CheckSlot(d), "%v", d)
	}
	for _, d := range []time.Duration{-50 * ms, 49 * ms, 70 * ms, 80 * ms, 300 * ms, 333 * ms, 999 * ms, 2 * time.Second} {
		err := CheckSlot(d)
		require.ErrorIs(t, err, ErrConfig, "%v", d)
		_, nerr := New(Config[*item]{Servers: []Server{{}}, Slot: d})
		assert.Equal(t, err, nerr, "New refuses it with the same error")
	}
	assert.EqualError(t, CheckSlot(300*ms), "throttle: invalid configuration: slot 300ms: want one that divides one second: 50ms, 62.5ms, 100ms, 125ms, 200ms, 250ms, 500ms, 1s")
}

// Over any whole second of the clock, and any second that starts on a
// slot boundary, at most MaxRate go (exactly MaxRate with enough
// waiting); a second that starts inside a slot holds at most that slot's
// share more.
func TestWholeSecondAtMostMaxRate(t *testing.T) {
	for _, slot := range []time.Duration{50 * ms, 62500 * time.Microsecond, 100 * ms, 125 * ms, 200 * ms, 250 * ms, 500 * ms, time.Second} {
		for _, rate := range []int{1, 3, 7, 10, 30, 333, 1000, 12345} {
			s := newSched(t, Config[*item]{Slot: slot, Servers: []Server{{Auth: Limits{MaxRate: rate, MaxOutstanding: -1}}}})
			for i := range 4 * rate {
				s.Enqueue(&item{id: i}, Auth)
			}
			n := int(time.Second / slot)
			share := (rate + n - 1) / n // the ceiling of a slot's share
			base := time.Unix(1_500_000_000, 0)
			var perSlot []int
			for k := range 3 * n {
				perSlot = append(perSlot, len(s.Poll(base.Add(time.Duration(k)*slot), nil)))
			}
			for k := 0; k+n <= len(perSlot); k++ {
				sum := 0
				for _, c := range perSlot[k : k+n] {
					sum += c
				}
				assert.Equal(t, rate, sum, "slot %v rate %d: the second from slot %d (a whole second of the clock every %d)", slot, rate, k, n)
				if k+n < len(perSlot) {
					assert.LessOrEqual(t, sum+perSlot[k+n], rate+share, "slot %v rate %d: a second from inside slot %d", slot, rate, k)
				}
			}
		}
	}
}
