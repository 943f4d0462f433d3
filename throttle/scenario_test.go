package throttle

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type item struct {
	id int
	dl time.Time
}

func (r *item) Deadline() time.Time { return r.dl }

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

const ms = time.Millisecond

func at(d time.Duration) time.Time { return t0.Add(d) }

func newSched(t testing.TB, cfg Config[*item]) *Scheduler[*item] {
	t.Helper()
	s, err := New(cfg)
	require.NoError(t, err)
	return s
}

func ids(ds []Dispatch[*item]) []int {
	var out []int
	for _, d := range ds {
		out = append(out, d.Item.id)
	}
	return out
}

// Q1: a burst of 10k requests against 100/s in 50 ms slots goes out at 5
// per slot, every slot, oldest first, none lost. The owner polls every
// 10 ms (not aligned on slots) and answers each request 30 ms after
// sending it.
func TestBurst10kAt100PerSecond(t *testing.T) {
	const n = 10_000
	s := newSched(t, Config[*item]{Servers: []Server{{Name: "a", Auth: Limits{MaxRate: 100}}}})
	for i := range n {
		s.Enqueue(&item{id: i, dl: at(time.Hour)}, Auth)
	}
	start := 7 * ms // not on a slot boundary
	perSlot := map[int64]int{}
	type pending struct {
		at  time.Duration
		srv int
	}
	var answers []pending
	next, sent := 0, 0
	var out []Dispatch[*item]
	for now := start; s.Len() > 0; now += 10 * ms {
		for len(answers) > 0 && answers[0].at <= now {
			s.Done(answers[0].srv, Auth)
			answers = answers[1:]
		}
		out = s.Poll(at(now), out[:0])
		for _, d := range out {
			require.NoError(t, d.Err)
			require.Equal(t, next, d.Item.id, "oldest first")
			next++
			sent++
			perSlot[at(now).UnixNano()/int64(50*ms)]++
			answers = append(answers, pending{now + 30*ms, d.Server})
		}
		require.Less(t, now, time.Hour)
	}
	assert.Equal(t, n, sent, "none lost")
	assert.Len(t, perSlot, n/5, "2000 slots: evenly")
	for slot, c := range perSlot {
		require.Equal(t, 5, c, "slot %d", slot)
	}
	assert.Equal(t, 0, s.Depth(0))
	assert.Equal(t, uint64(0), s.Expired())
}

// Q1 with shares that are not integers: each slot gets the floor or the
// ceiling of its share, and any run of slots gets its total share within
// one message.
func TestRateShares(t *testing.T) {
	for _, tc := range []struct {
		rate int
		slot time.Duration
	}{
		{100, 50 * ms}, {30, 50 * ms}, {5, 50 * ms}, {1, 50 * ms}, {333, 62500 * time.Microsecond}, {1000, 100 * ms}, {7, time.Second}, {25, 125 * ms},
	} {
		s := newSched(t, Config[*item]{Slot: tc.slot, Servers: []Server{{Auth: Limits{MaxRate: tc.rate, MaxOutstanding: -1}}}})
		share := float64(tc.rate) * tc.slot.Seconds()
		const slots = 400
		for i := range int(share*slots) + 10 {
			s.Enqueue(&item{id: i}, Auth)
		}
		total := 0
		for k := range slots {
			// Poll twice per slot: the second finds the quota spent.
			c := len(s.Poll(at(time.Duration(k)*tc.slot), nil))
			c += len(s.Poll(at(time.Duration(k)*tc.slot+tc.slot/2), nil))
			total += c
			assert.GreaterOrEqual(t, float64(c), float64(int(share)), "rate %d slot %v k %d", tc.rate, tc.slot, k)
			assert.LessOrEqual(t, float64(c), float64(int(share))+1, "rate %d slot %v k %d", tc.rate, tc.slot, k)
			want := share * float64(k+1)
			assert.InDelta(t, want, float64(total), 1.0001, "rate %d slot %v after %d slots", tc.rate, tc.slot, k+1)
		}
	}
}

// Q2: the outstanding limit is never exceeded, counted at the server side:
// requests it has received and not answered. Answers come after random
// delays; one request in ten is never answered and the owner reports its
// timeout after 200 ms.
func TestOutstandingNeverExceeded(t *testing.T) {
	const limit, n = 8, 3000
	rng := rand.New(rand.NewPCG(1, 2))
	s := newSched(t, Config[*item]{Servers: []Server{{Name: "a", Auth: Limits{MaxOutstanding: limit}}, {Name: "b", Auth: Limits{MaxOutstanding: limit}}}})
	for i := range n {
		s.Enqueue(&item{id: i, dl: at(time.Hour)}, Auth)
	}
	type ev struct {
		at  time.Duration
		srv int
	}
	var pend []ev
	atServer := [2]int{}
	peak := [2]int{}
	done := 0
	for now := time.Duration(0); done < n; now += ms {
		keep := pend[:0]
		for _, p := range pend {
			if p.at <= now {
				atServer[p.srv]-- // answered, or given up by the owner
				s.Done(p.srv, Auth)
				done++
			} else {
				keep = append(keep, p)
			}
		}
		pend = keep
		for _, d := range s.Poll(at(now), nil) {
			require.NoError(t, d.Err)
			atServer[d.Server]++
			peak[d.Server] = max(peak[d.Server], atServer[d.Server])
			require.LessOrEqual(t, atServer[d.Server], limit)
			require.LessOrEqual(t, s.Outstanding(d.Server, Auth), limit)
			lat := time.Duration(1+rng.IntN(20)) * ms
			if rng.IntN(10) == 0 {
				lat = 200 * ms // timeout
			}
			pend = append(pend, ev{now + lat, d.Server})
		}
		require.Less(t, now, time.Hour)
	}
	assert.Equal(t, [2]int{limit, limit}, peak, "the limit is reached, not exceeded")
	st := s.Stats(0)
	assert.Equal(t, uint64(n), s.Stats(0).Sent[Auth]+s.Stats(1).Sent[Auth])
	assert.Positive(t, st.MaxDepth)
}

// Q3: a request leaving a server queue goes to the head of the instance
// queue: it is sent before newer requests.
func TestServerQueueBeforeNewer(t *testing.T) {
	s := newSched(t, Config[*item]{
		Servers: []Server{{Name: "slow", Auth: Limits{MaxRate: 20}}, {Name: "fast"}}, // slow: one per slot
		Pick:    func(r *item, _ Class) (int, bool) { return r.id % 2, false },       // even -> slow, odd -> fast
	})
	for i := range 6 {
		s.Enqueue(&item{id: i}, Auth)
	}
	assert.Equal(t, []int{0, 1, 3, 5}, ids(s.Poll(at(0), nil)))
	assert.Equal(t, 2, s.Depth(0))
	for i := 6; i < 10; i++ {
		s.Enqueue(&item{id: i}, Auth)
	}
	assert.Equal(t, []int{2, 7, 9}, ids(s.Poll(at(50*ms), nil)), "2 came back from slow's queue ahead of 6..9")
	assert.Equal(t, []int{4}, ids(s.Poll(at(100*ms), nil)))
	assert.Equal(t, []int{6}, ids(s.Poll(at(150*ms), nil)))
	assert.Equal(t, []int{8}, ids(s.Poll(at(200*ms), nil)))
	assert.Equal(t, 0, s.Len())
}

// Returning requests from several server queues keep their global order.
func TestReturnsFromSeveralQueuesInAgeOrder(t *testing.T) {
	s := newSched(t, Config[*item]{
		Servers: []Server{{Auth: Limits{MaxOutstanding: 1}}, {Auth: Limits{MaxOutstanding: 1}}},
		Pick:    func(r *item, _ Class) (int, bool) { return r.id % 2, false },
	})
	for i := range 6 {
		s.Enqueue(&item{id: i}, Auth)
	}
	assert.Equal(t, []int{0, 1}, ids(s.Poll(at(0), nil)))
	s.Done(1, Auth)
	s.Done(0, Auth)
	s.Enqueue(&item{id: 6}, Auth)
	assert.Equal(t, []int{2, 3}, ids(s.Poll(at(ms), nil)))
}

// Q4: the alarm is raised when the depth reaches High and cleared when it
// falls to Low, once each (hysteresis).
func TestAlarmHysteresis(t *testing.T) {
	var got []Alarm
	s := newSched(t, Config[*item]{
		Servers:   []Server{{Name: "a", Auth: Limits{MaxRate: 20}}}, // one per slot
		AlarmHigh: 5, AlarmLow: 2,
		OnAlarm: func(a Alarm) { got = append(got, a) },
	})
	for i := range 10 {
		s.Enqueue(&item{id: i}, Auth)
	}
	s.Poll(at(0), nil) // 1 sent, 9 queued
	require.Len(t, got, 1)
	assert.Equal(t, Alarm{Time: at(0), Server: "a", Index: 0, Raised: true, Depth: 5}, got[0])
	assert.True(t, s.Stats(0).Alarmed)
	for k := 1; k <= 6; k++ { // depth 8, 7, 6, 5, 4, 3: still raised
		s.Poll(at(time.Duration(k)*50*ms), nil)
	}
	require.Len(t, got, 1, "no flapping between the thresholds")
	s.Poll(at(350*ms), nil) // depth 2
	require.Len(t, got, 2)
	assert.Equal(t, Alarm{Time: at(350 * ms), Server: "a", Index: 0, Raised: false, Depth: 2}, got[1])
	for i := 10; i < 13; i++ { // depth 2 + 3 = 5 again
		s.Enqueue(&item{id: i}, Auth)
	}
	s.Poll(at(360*ms), nil)
	require.Len(t, got, 3)
	assert.True(t, got[2].Raised)
	st := s.Stats(0)
	assert.Equal(t, uint64(2), st.Alarms)
	assert.Equal(t, 9, st.MaxDepth)
}

// Queued requests keep their deadlines: expired ones come back as failures,
// each exactly once, none sent late, none lost.
func TestExpiredComeBackAsFailures(t *testing.T) {
	const n = 200
	s := newSched(t, Config[*item]{Servers: []Server{{Name: "a", Auth: Limits{MaxRate: 100}}}})
	for i := range n {
		s.Enqueue(&item{id: i, dl: at(time.Duration(50+i*5) * ms)}, Auth) // most cannot make it at 5 per slot
	}
	seen := map[int]bool{}
	sent, failed := 0, 0
	for now := time.Duration(0); s.Len() > 0; now += 10 * ms {
		for _, d := range s.Poll(at(now), nil) {
			require.False(t, seen[d.Item.id], "twice: %d", d.Item.id)
			seen[d.Item.id] = true
			if d.Err != nil {
				require.ErrorIs(t, d.Err, ErrExpired)
				var ee *ExpiredError
				require.ErrorAs(t, d.Err, &ee)
				assert.Equal(t, "a", ee.Server)
				assert.False(t, at(now).Before(d.Item.dl))
				assert.Less(t, now-d.Item.dl.Sub(t0), 60*ms, "found within about a slot")
				failed++
				continue
			}
			assert.True(t, at(now).Before(d.Item.dl), "sent before its deadline")
			sent++
		}
		w, ok := s.NextWakeup(at(now))
		if s.Len() > 0 {
			require.True(t, ok)
			assert.False(t, w.Before(at(now)))
		}
	}
	assert.Equal(t, n, sent+failed)
	assert.Positive(t, failed)
	assert.Positive(t, sent)
	assert.Equal(t, uint64(failed), s.Expired())
}

// With no server available, requests wait in the instance queue and fail
// there at their deadline.
func TestExpiredInInstanceQueue(t *testing.T) {
	s := newSched(t, Config[*item]{Servers: []Server{{Name: "a"}}})
	s.SetAvailable(0, false, at(0))
	s.Enqueue(&item{id: 1, dl: at(100 * ms)}, Accounting)
	s.Enqueue(&item{id: 2, dl: at(time.Second)}, Accounting)
	assert.Empty(t, s.Poll(at(0), nil))
	w, ok := s.NextWakeup(at(0))
	require.True(t, ok)
	assert.Equal(t, at(100*ms), w)
	out := s.Poll(at(100*ms), nil)
	require.Len(t, out, 1)
	assert.Equal(t, 1, out[0].Item.id)
	assert.EqualError(t, out[0].Err, "throttle: deadline passed while queued in the instance queue (found 0s after the deadline)")
	s.SetAvailable(0, true, at(200*ms))
	out = s.Poll(at(200*ms), nil)
	require.Len(t, out, 1)
	assert.NoError(t, out[0].Err)
	assert.Equal(t, 0, out[0].Server)
}

// Q5: authentication/authorization and accounting have separate limits,
// counters and queues.
func TestClassesSeparate(t *testing.T) {
	s := newSched(t, Config[*item]{Servers: []Server{{
		Name:       "a",
		Auth:       Limits{MaxRate: 20, MaxOutstanding: 1}, // 1 per slot, 1 outstanding
		Accounting: Limits{MaxRate: 60},                    // 3 per slot
	}}})
	for i := range 10 {
		s.Enqueue(&item{id: i}, Auth)
		s.Enqueue(&item{id: 100 + i}, Accounting)
	}
	out := s.Poll(at(0), nil)
	assert.Equal(t, []int{0, 100, 101, 102}, ids(out), "auth saturated does not hold accounting back")
	assert.Equal(t, 1, s.Outstanding(0, Auth))
	assert.Equal(t, 3, s.Outstanding(0, Accounting))
	out = s.Poll(at(50*ms), nil)
	assert.Equal(t, []int{103, 104, 105}, ids(out), "auth waits for its one outstanding place")
	assert.True(t, s.Done(0, Auth))
	out = s.Poll(at(60*ms), nil)
	assert.Equal(t, []int{1}, ids(out))
	assert.Equal(t, Auth, out[0].Class)
	st := s.Stats(0)
	assert.Equal(t, [2]uint64{2, 6}, st.Sent)
}

// Pick's choice is followed; -1 and unavailable servers fall back to the
// available ones round-robin; an unavailable server's queue goes back to
// the instance queue and on to the others, oldest first.
func TestPickFallbackAndRelease(t *testing.T) {
	pick := 0
	s := newSched(t, Config[*item]{
		Servers: []Server{{Name: "a", Auth: Limits{MaxOutstanding: 2}}, {Name: "b"}, {Name: "c"}},
		Pick:    func(*item, Class) (int, bool) { return pick, false },
	})
	for i := range 5 {
		s.Enqueue(&item{id: i}, Auth)
	}
	out := s.Poll(at(0), nil)
	assert.Equal(t, []int{0, 1}, ids(out))
	assert.Equal(t, 3, s.Depth(0))
	s.SetAvailable(0, false, at(ms))
	assert.Equal(t, 0, s.Depth(0))
	out = s.Poll(at(ms), nil)
	assert.Equal(t, []int{2, 3, 4}, ids(out))
	assert.Equal(t, []int{1, 2, 1}, []int{out[0].Server, out[1].Server, out[2].Server}, "round-robin over b and c")
	pick = -1
	s.Enqueue(&item{id: 5}, Auth)
	out = s.Poll(at(2*ms), nil)
	assert.Equal(t, 2, out[0].Server)
}

// A request Pick gives only one server (a Destination-Host) goes there or
// waits in its queue: not round-robin while the server is unavailable,
// not spilled while it has no room, and not ahead of the requests behind
// it, which go on; it leaves when its server is available again, and
// fails at its deadline if that does not come.
func TestPickOnly(t *testing.T) {
	s := newSched(t, Config[*item]{
		Servers: []Server{{Name: "a", Auth: Limits{MaxOutstanding: 1}}, {Name: "b"}},
		Pick: func(r *item, _ Class) (int, bool) {
			if r.id < 10 {
				return 0, true
			}
			return -1, false
		},
		Spill: true,
	})
	s.SetAvailable(0, false, at(0))
	s.Enqueue(&item{id: 0, dl: at(time.Second)}, Auth)
	s.Enqueue(&item{id: 10}, Auth)
	out := s.Poll(at(0), nil)
	assert.Equal(t, []int{10}, ids(out), "the pinned request waits, the next one goes")
	assert.Equal(t, 1, out[0].Server)
	assert.Equal(t, 1, s.Depth(0), "waiting in its server's queue")
	s.SetAvailable(0, true, at(ms))
	s.Enqueue(&item{id: 1, dl: at(time.Second)}, Auth)
	out = s.Poll(at(ms), nil)
	assert.Equal(t, []int{0}, ids(out), "its server is back; the next pinned one waits for room there, not spilled")
	assert.Equal(t, 0, out[0].Server)
	assert.Equal(t, 1, s.Depth(0))
	s.SetAvailable(0, false, at(2*ms))
	out = s.Poll(at(time.Second), nil)
	require.Len(t, out, 1)
	assert.Equal(t, 1, out[0].Item.id)
	assert.ErrorIs(t, out[0].Err, ErrExpired, "its server never came back")
}

func TestSpill(t *testing.T) {
	s := newSched(t, Config[*item]{
		Servers: []Server{{Name: "a", Auth: Limits{MaxOutstanding: 1}}, {Name: "b"}},
		Pick:    func(*item, Class) (int, bool) { return 0, false },
		Spill:   true,
	})
	s.Enqueue(&item{id: 0}, Auth)
	s.Enqueue(&item{id: 1}, Auth)
	out := s.Poll(at(0), nil)
	assert.Equal(t, []int{0, 1}, ids(out))
	assert.Equal(t, []int{0, 1}, []int{out[0].Server, out[1].Server})
}

func TestNextWakeup(t *testing.T) {
	s := newSched(t, Config[*item]{Servers: []Server{{Auth: Limits{MaxRate: 20, MaxOutstanding: 2}}}})
	_, ok := s.NextWakeup(at(0))
	assert.False(t, ok, "nothing queued")
	for i := range 3 {
		s.Enqueue(&item{id: i}, Auth)
	}
	w, ok := s.NextWakeup(at(0))
	require.True(t, ok)
	assert.Equal(t, at(0), w, "the instance queue can move")
	s.Poll(at(10*ms), nil)
	w, _ = s.NextWakeup(at(10 * ms))
	assert.Equal(t, at(50*ms), w, "rate: the next slot")
	s.Poll(at(50*ms), nil)
	_, ok = s.NextWakeup(at(60 * ms))
	assert.False(t, ok, "waiting only for outstanding places: Done says when")
	assert.True(t, s.Done(0, Auth))
	w, _ = s.NextWakeup(at(70 * ms))
	assert.Equal(t, at(100*ms), w)
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]Config[*item]{
		"no server":      {},
		"slot too short": {Servers: []Server{{}}, Slot: 49 * ms},
		"slot too long":  {Servers: []Server{{}}, Slot: 2 * time.Second},
		"slot 300ms":     {Servers: []Server{{}}, Slot: 300 * ms},
		"slot 70ms":      {Servers: []Server{{}}, Slot: 70 * ms},
		"negative rate":  {Servers: []Server{{Accounting: Limits{MaxRate: -1}}}},
		"low >= high":    {Servers: []Server{{}}, AlarmHigh: 5, AlarmLow: 5},
	} {
		_, err := New(cfg)
		assert.ErrorIs(t, err, ErrConfig, name)
	}
}

// Random operations: every request enqueued comes out of Poll exactly once,
// outstanding never exceeds the limit, and the queues drain.
func TestConservationRandom(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := newSched(t, Config[*item]{
			Servers: []Server{
				{Name: "a", Auth: Limits{MaxRate: 1 + rng.IntN(200), MaxOutstanding: 1 + rng.IntN(10)}, Accounting: Limits{MaxRate: rng.IntN(100)}},
				{Name: "b", Auth: Limits{MaxOutstanding: 1 + rng.IntN(5)}, Accounting: Limits{MaxRate: 1 + rng.IntN(50), MaxOutstanding: 3}},
			},
			Pick:      func(r *item, _ Class) (int, bool) { return r.id%3 - 1, false },
			AlarmHigh: 20, AlarmLow: 5,
			Spill: seed%2 == 0,
		})
		type sentRec struct {
			srv int
			c   Class
			at  time.Duration
		}
		var inflight []sentRec
		seen := map[int]bool{}
		enq := 0
		for now := time.Duration(0); now < 20*time.Second; now += time.Duration(1+rng.IntN(30)) * ms {
			for range rng.IntN(20) {
				s.Enqueue(&item{id: enq, dl: at(now + time.Duration(rng.IntN(3000))*ms)}, Class(rng.IntN(2)))
				enq++
			}
			if rng.IntN(50) == 0 {
				srv := rng.IntN(2)
				s.SetAvailable(srv, rng.IntN(2) == 0, at(now))
			}
			keep := inflight[:0]
			for _, f := range inflight {
				if now-f.at > time.Duration(rng.IntN(100))*ms {
					s.Done(f.srv, f.c)
				} else {
					keep = append(keep, f)
				}
			}
			inflight = keep
			for _, d := range s.Poll(at(now), nil) {
				require.False(t, seen[d.Item.id])
				seen[d.Item.id] = true
				if d.Err == nil {
					inflight = append(inflight, sentRec{d.Server, d.Class, now})
					require.LessOrEqual(t, s.Outstanding(d.Server, d.Class), s.srv[d.Server].b[d.Class].maxOut)
				}
			}
			require.Equal(t, enq, len(seen)+s.Len(), "seed %d", seed)
		}
		s.SetAvailable(0, true, at(time.Minute))
		s.SetAvailable(1, true, at(time.Minute))
		for _, f := range inflight {
			s.Done(f.srv, f.c)
		}
		s.Poll(at(time.Hour), nil)
		require.Equal(t, 0, s.Len(), "seed %d", seed)
	}
}

func TestDequeGrowAndWrap(t *testing.T) {
	var d deque[int]
	want := 0
	for i := range 40 {
		d.pushBack(i)
		if i%3 == 0 {
			assert.Equal(t, want, d.popFront(), "FIFO across growth and wrap")
			want++
		}
	}
	d.pushFront(-1)
	assert.Equal(t, -1, *d.front())
	d.filter(func(x *int) bool { return *x%2 == 0 })
	for i := 1; i < d.len(); i++ {
		assert.Less(t, *d.at(i - 1), *d.at(i))
	}
	assert.Equal(t, *d.at(d.len() - 1), *d.back())
}

// Release hands every queued request back, oldest first, from the
// instance queue and the server queues, and leaves the scheduler empty;
// a queue alarm it clears says when.
func TestReleaseEmptiesQueues(t *testing.T) {
	var alarms []Alarm
	s := newSched(t, Config[*item]{Servers: []Server{{Name: "a", Auth: Limits{MaxOutstanding: 1}}},
		AlarmHigh: 2, AlarmLow: 1, OnAlarm: func(a Alarm) { alarms = append(alarms, a) }})
	for i := range 4 {
		s.Enqueue(&item{id: i}, Auth)
	}
	out := s.Poll(at(0), nil)
	assert.Equal(t, []int{0}, ids(out))
	assert.Equal(t, 3, s.Depth(0))
	s.Enqueue(&item{id: 4}, Auth)
	rel := s.Release(at(2*ms), nil)
	got := make([]int, len(rel))
	for i, it := range rel {
		got[i] = it.id
	}
	assert.Equal(t, []int{1, 2, 3, 4}, got)
	assert.Equal(t, 0, s.Len())
	assert.Equal(t, 0, s.Depth(0))
	assert.Empty(t, s.Poll(at(3*ms), nil))
	require.Len(t, alarms, 2)
	assert.True(t, alarms[0].Raised)
	assert.Equal(t, Alarm{Time: at(2 * ms), Server: "a", Index: 0, Raised: false, Depth: 0}, alarms[1])
}

// A failover's replays go ahead of newer requests, in their order, and
// count as older than those when they wait in a server queue.
func TestEnqueueReplayBeforeNewer(t *testing.T) {
	s := newSched(t, Config[*item]{
		Servers: []Server{{Name: "only", Auth: Limits{MaxRate: 20}}}, // one per 50 ms slot
		Pick:    func(*item, Class) (int, bool) { return 0, false },
	})
	for i := 10; i < 13; i++ {
		s.Enqueue(&item{id: i}, Auth)
	}
	for i := range 3 { // a batch of replays 0, 1, 2
		s.EnqueueReplay(&item{id: i}, Auth)
	}
	var got []int
	for k := range 6 {
		got = append(got, ids(s.Poll(at(time.Duration(k)*50*ms), nil))...)
	}
	assert.Equal(t, []int{0, 1, 2, 10, 11, 12}, got)
}

// Replays queued while newer requests already wait in the server's queue
// go ahead of all of them there too, in their order.
func TestEnqueueReplayAheadOfServerQueue(t *testing.T) {
	s := newSched(t, Config[*item]{
		Servers: []Server{{Name: "only", Auth: Limits{MaxRate: 20}}}, // one per 50 ms slot
		Pick:    func(*item, Class) (int, bool) { return 0, false },
	})
	for i := 10; i < 13; i++ {
		s.Enqueue(&item{id: i}, Auth)
	}
	got := ids(s.Poll(at(0), nil)) // 10 goes; 11 and 12 wait in the server queue
	for i := range 3 {
		s.EnqueueReplay(&item{id: i}, Auth)
	}
	for k := range 6 {
		got = append(got, ids(s.Poll(at(time.Duration(k)*50*ms), nil))...)
	}
	assert.Equal(t, []int{10, 0, 1, 2, 11, 12}, got)
}

// The replays of a second failover, coming back while the first one's
// still wait, go behind them: replays leave in the order they came back,
// in the instance queue and in the server queue alike.
func TestReplaysLeaveInTheOrderTheyCameBack(t *testing.T) {
	s := newSched(t, Config[*item]{
		Servers: []Server{{Name: "only", Auth: Limits{MaxRate: 20}}}, // one per 50 ms slot
		Pick:    func(*item, Class) (int, bool) { return 0, false },
	})
	s.Enqueue(&item{id: 10}, Auth)
	for i := range 3 { // the first failover's
		s.EnqueueReplay(&item{id: i}, Auth)
	}
	got := ids(s.Poll(at(0), nil)) // 0 goes; 1, 2 and 10 wait in the server queue
	for i := 3; i < 5; i++ {       // the second's, while they wait
		s.EnqueueReplay(&item{id: i}, Auth)
	}
	s.EnqueueReplay(&item{id: 5}, Auth) // a third's, before the next poll
	for k := 1; k < 8; k++ {
		got = append(got, ids(s.Poll(at(time.Duration(k)*50*ms), nil))...)
	}
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 10}, got)
}

// A batch the owner could not send after all goes back where it stood
// (Requeue with the Dispatch's Age), in whatever order it is put back:
// ahead of the requests enqueued since, in its own order.
func TestRequeueKeepsItsPlace(t *testing.T) {
	s := newSched(t, Config[*item]{Servers: []Server{{Name: "only", Auth: Limits{MaxOutstanding: 3}}}})
	for i := range 3 {
		s.Enqueue(&item{id: i}, Auth)
	}
	batch := s.Poll(at(0), nil)
	require.Equal(t, []int{0, 1, 2}, ids(batch))
	for i := 3; i < 5; i++ {
		s.Enqueue(&item{id: i}, Auth)
	}
	assert.Empty(t, s.Poll(at(0), nil), "no free place")
	for _, k := range []int{1, 2, 0} { // refused, put back out of order
		d := batch[k]
		s.Done(d.Server, d.Class)
		s.Requeue(d.Item, d.Class, d.Age)
	}
	got := ids(s.Poll(at(ms), nil))
	for range 2 {
		s.Done(0, Auth)
		s.Done(0, Auth)
		s.Done(0, Auth)
		got = append(got, ids(s.Poll(at(ms), nil))...)
	}
	assert.Equal(t, []int{0, 1, 2, 3, 4}, got)
}

// A request put back (Requeue) is older than the newer ones waiting in a
// server queue: when that server has room again, Poll sends the older
// one first rather than put the server-queued ones at the head.
func TestRequeueAheadOfTheServerQueue(t *testing.T) {
	s := newSched(t, Config[*item]{
		Servers: []Server{{Name: "only", Auth: Limits{MaxRate: 20, MaxOutstanding: -1}}}, // one per 50 ms slot
		Pick:    func(*item, Class) (int, bool) { return 0, false },
	})
	for i := range 3 {
		s.Enqueue(&item{id: i}, Auth)
	}
	first := s.Poll(at(0), nil) // 0 goes; 1 and 2 wait in the server queue
	require.Equal(t, []int{0}, ids(first))
	s.Requeue(first[0].Item, first[0].Class, first[0].Age) // refused after all
	var got []int
	for k := 1; k < 5; k++ {
		got = append(got, ids(s.Poll(at(time.Duration(k)*50*ms), nil))...)
	}
	assert.Equal(t, []int{0, 1, 2}, got)
}

// Callers read the clock before they take the scheduler's lock, so Poll
// may see a reading from the previous slot after one from the current
// slot: it counts in the current slot, and no slot sends more than its
// quota.
func TestStaleClockReadingGetsNoFreshQuota(t *testing.T) {
	s := newSched(t, Config[*item]{Servers: []Server{{Name: "a", Auth: Limits{MaxRate: 100, MaxOutstanding: -1}}}})
	for i := range 100 {
		s.Enqueue(&item{id: i, dl: at(time.Hour)}, Auth)
	}
	sent := 0
	var out []Dispatch[*item]
	for slot := range 4 {
		now := time.Duration(slot) * 50 * ms
		out = s.Poll(at(now+10*ms), out[:0])
		sent += len(out)
		out = s.Poll(at(now-5*ms), out[:0]) // read before the slot began
		sent += len(out)
		out = s.Poll(at(now+20*ms), out[:0])
		sent += len(out)
		assert.Equal(t, 5*(slot+1), sent, "slot %d: 5 a slot, stale readings or not", slot)
	}
}

// A server added to a running Scheduler takes requests with its own
// limits; a bad limit adds nothing.
func TestAddServer(t *testing.T) {
	s := newSched(t, Config[*item]{Servers: []Server{{Name: "a", Auth: Limits{MaxOutstanding: 1}}}})
	_, err := s.AddServer(Server{Name: "bad", Auth: Limits{MaxRate: -1}})
	require.ErrorIs(t, err, ErrConfig)
	i, err := s.AddServer(Server{Name: "b", Auth: Limits{MaxOutstanding: 2}})
	require.NoError(t, err)
	assert.Equal(t, 1, i, "the refused one took no index")
	for n := range 4 {
		s.Enqueue(&item{id: n, dl: at(time.Hour)}, Auth)
	}
	per := map[int]int{}
	for _, d := range s.Poll(at(0), nil) {
		require.NoError(t, d.Err)
		per[d.Server]++
	}
	assert.Equal(t, map[int]int{0: 1, 1: 2}, per, "each server up to its own MaxOutstanding")
	assert.Equal(t, 1, s.Len())
	s.SetAvailable(1, false, at(0))
	s.Done(0, Auth)
	out := s.Poll(at(0), nil)
	require.Len(t, out, 1)
	assert.Equal(t, 0, out[0].Server, "an unavailable server gets nothing")
}

// A request its owner gave up on while it waited is taken out wherever it
// waits (the instance queue, a server's queue, a replay): it leaves Len,
// never comes out of Poll, and takes no rate slot from those behind it.
func TestCancelTakesAQueuedRequestOut(t *testing.T) {
	s := newSched(t, Config[*item]{
		Servers:   []Server{{Name: "a", Auth: Limits{MaxRate: 20}}}, // one per 50 ms slot
		AlarmHigh: 3, AlarmLow: 2,
	})
	ages := make([]uint64, 5)
	for i := range ages {
		ages[i] = s.Enqueue(&item{id: i}, Auth)
	}
	assert.Equal(t, []int{0}, ids(s.Poll(at(0), nil)))
	assert.Equal(t, 4, s.Depth(0), "1 to 4 wait in a's queue")
	assert.True(t, s.Stats(0).Alarmed, "raised at depth 3")
	require.True(t, s.Cancel(Auth, ages[1], at(ms)), "the next in a's queue")
	require.True(t, s.Cancel(Auth, ages[3], at(ms)))
	assert.Equal(t, 2, s.Len())
	assert.False(t, s.Stats(0).Alarmed, "cleared at depth 2")
	assert.False(t, s.Cancel(Auth, ages[1], at(ms)), "no longer queued")
	assert.False(t, s.Cancel(Auth, ages[0], at(ms)), "released: Done frees its place")

	// In the instance queue, and a replay.
	late := s.Enqueue(&item{id: 5}, Auth)
	r := s.ReplayAge()
	s.Requeue(&item{id: 6}, Auth, r)
	assert.True(t, s.Cancel(Auth, late, at(ms)))
	assert.True(t, s.Cancel(Auth, r, at(ms)))
	assert.Equal(t, 2, s.Len())

	// The slot of the next 50 ms goes to 2, the one after to 4.
	assert.Equal(t, []int{2}, ids(s.Poll(at(50*ms), nil)))
	assert.Equal(t, []int{4}, ids(s.Poll(at(100*ms), nil)))
	assert.Empty(t, ids(s.Poll(at(150*ms), nil)))
	assert.Equal(t, 0, s.Len())
}
