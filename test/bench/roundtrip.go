package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"github.com/aaatp/aaatp/test/benchcmp"
)

// The implementations measured, as named in the JSON; all from package
// benchcmp, so `go test -bench ./test/benchcmp` runs the same code. aaatp
// is peer.Listen + peer.Dial (one client Peer, default Config: Nagle on),
// not client.Client.
var rtImpls = []struct {
	name  string
	start func() (benchcmp.Env, error)
}{
	{"raw", benchcmp.StartRaw},
	{"go-diameter", benchcmp.StartGoDiameter},
	{"aaatp", benchcmp.StartAaatp},
}

func measureRoundTrips(o Options, w io.Writer) (cells []Cell, pingPong Cell, err error) {
	pp, err := benchcmp.StartPingPong()
	if err != nil {
		return nil, Cell{}, err
	}
	pingPong, err = measureCell(o, "raw ping-pong", pp, 1)
	if cerr := pp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, Cell{}, err
	}
	for _, im := range rtImpls {
		e, err := im.start()
		if err != nil {
			return nil, Cell{}, fmt.Errorf("%s: %w", im.name, err)
		}
		for _, n := range o.Callers {
			c, err := measureCell(o, im.name, e, n)
			if err != nil {
				e.Close()
				return nil, Cell{}, fmt.Errorf("%s, %d callers: %w", im.name, n, err)
			}
			cells = append(cells, c)
		}
		if err := e.Close(); err != nil {
			return nil, Cell{}, fmt.Errorf("%s close: %w", im.name, err)
		}
	}
	return cells, pingPong, nil
}

// measureCell warms up, then runs callers for o.RoundTrip seconds and
// computes the cell's numbers. CPU (getrusage) and mallocs (MemStats) are
// process-wide deltas over the measured run divided by its requests.
func measureCell(o Options, name string, e benchcmp.Env, callers int) (Cell, error) {
	warm, welapsed, err := benchcmp.RunFor(e, callers, secs(o.Warmup), 1024)
	if err != nil {
		return Cell{}, fmt.Errorf("warm-up: %w", err)
	}
	rate := float64(len(warm)) / welapsed.Seconds()
	perCaller := int(rate*o.RoundTrip*1.5)/callers + 64

	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0 := cpuTime()
	lat, elapsed, err := benchcmp.RunFor(e, callers, secs(o.RoundTrip), perCaller)
	c1 := cpuTime()
	runtime.ReadMemStats(&m1)
	if err != nil {
		return Cell{}, err
	}
	n := float64(len(lat))
	if n == 0 {
		return Cell{}, fmt.Errorf("no request completed")
	}
	slices.Sort(lat)
	return Cell{
		Impl:         name,
		Callers:      callers,
		AnswersPerS:  round(n/elapsed.Seconds(), 0),
		P50us:        round(us(lat[len(lat)*50/100]), 1),
		P99us:        round(us(lat[min(len(lat)-1, len(lat)*99/100)]), 1),
		CPUusPerReq:  round(us(c1-c0)/n, 2),
		AllocsPerReq: round(float64(m1.Mallocs-m0.Mallocs)/n, 2),
	}, nil
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func round(x float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(x*p+0.5)) / p
}
