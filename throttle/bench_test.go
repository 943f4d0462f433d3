package throttle

import (
	"testing"
	"time"
)

type benchItem struct {
	id int
	dl time.Time
}

func (r benchItem) Deadline() time.Time { return r.dl }

// BenchmarkNoLimit is the cost the throttle adds per request when no limit
// is reached: Enqueue, Poll (which dispatches it) and Done, with a rate
// limit and an outstanding limit configured but far from reached, and
// three servers picked by the caller's balancer.
func BenchmarkNoLimit(b *testing.B) {
	s, err := New(Config[benchItem]{
		Servers: []Server{
			{Name: "a", Auth: Limits{MaxRate: MaxRate}, Accounting: Limits{MaxRate: MaxRate}},
			{Name: "b", Auth: Limits{MaxRate: MaxRate}},
			{Name: "c"},
		},
		AlarmHigh: 100, AlarmLow: 10,
		Pick: func(r benchItem, _ Class) (int, bool) { return r.id % 3, false },
	})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	it := benchItem{dl: now.Add(time.Hour)}
	out := make([]Dispatch[benchItem], 0, 4)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		it.id = i
		s.Enqueue(it, Auth)
		out = s.Poll(now, out[:0])
		if len(out) != 1 || out[0].Err != nil {
			b.Fatal("not dispatched")
		}
		s.Done(out[0].Server, Auth)
		if i&1023 == 0 {
			now = now.Add(time.Millisecond)
		}
	}
}
