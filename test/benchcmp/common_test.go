package benchcmp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// Identities and AVP values shared by the three implementations, so that
// every one of them puts the same bytes on the wire.
const (
	clientHost  = "client.example.net"
	serverHost  = "server.example.net"
	realm       = "example.net"
	sessionID   = "client.example.net;1700000000;1;benchcmp-00000001"
	userName    = "user0001@example.net"
	recordType  = 1 // EVENT_RECORD
	recordNum   = 1
	successCode = message.Success
)

// acrBytes is the request every implementation sends: an ACR (application
// 3, command 271, P bit) of about 200 bytes, ids zero (each sender sets
// them).
var acrBytes = message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
	String(message.SessionID, 0, true, sessionID).
	String(message.OriginHost, 0, true, clientHost).
	String(message.OriginRealm, 0, true, realm).
	String(message.DestinationRealm, 0, true, realm).
	String(message.UserName, 0, true, userName).
	Uint32(message.AccountingRecordType, 0, true, recordType).
	Uint32(message.AccountingRecordNumber, 0, true, recordNum).
	Bytes()

// acaBytes is the raw server's fixed answer: the same AVPs the aaatp and
// go-diameter handlers add (Result-Code, Origin-Host, Origin-Realm).
var acaBytes = buildACA(acrBytes)

func buildACA(req []byte) []byte {
	return message.NewAnswer(req).
		Uint32(message.ResultCode, 0, true, successCode).
		String(message.OriginHost, 0, true, serverHost).
		String(message.OriginRealm, 0, true, realm).
		Bytes()
}

// result is what a caller learned from one round trip.
type result struct {
	rc              uint32 // Result-Code of the answer
	sentHBH, gotHBH uint32
	sentE2E, gotE2E uint32
}

func (r result) check() error {
	switch {
	case r.rc != successCode:
		return fmt.Errorf("Result-Code %d, want %d", r.rc, successCode)
	case r.sentHBH != r.gotHBH:
		return fmt.Errorf("Hop-by-Hop %#x answered by %#x", r.sentHBH, r.gotHBH)
	case r.sentE2E != r.gotE2E:
		return fmt.Errorf("End-to-End %#x answered by %#x", r.sentE2E, r.gotE2E)
	}
	return nil
}

// env is one running client+server pair of an implementation.
type env interface {
	// caller returns a round-trip function for one caller goroutine (it
	// may hold per-caller state such as a reply channel).
	caller() func() (result, error)
	close() error
}

type impl struct {
	name    string
	callers []int // caller counts benchmarked
	start   func() (env, error)
}

var impls = []impl{
	{"raw", []int{1, 256}, startRaw},
	{"rawpingpong", []int{1}, startPingPong},
	{"godiameter", []int{1, 256}, startGoDiameter},
	{"aaatp", []int{1, 256}, startAaatp},
}

// run performs exactly n round trips from `callers` goroutines sharing n
// through an atomic counter, storing each one's latency in lat[i] when lat
// is not nil. It returns the wall time and the first failure.
func run(e env, callers, n int, lat []time.Duration) (time.Duration, error) {
	fns := make([]func() (result, error), callers)
	for i := range fns {
		fns[i] = e.caller()
	}
	var (
		next    atomic.Int64
		failed  atomic.Bool
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { first = err })
		failed.Store(true)
	}
	start := time.Now()
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				r, err := fn()
				if lat != nil {
					lat[i] = time.Since(t0)
				}
				if err == nil {
					err = r.check()
				}
				if err != nil {
					fail(fmt.Errorf("request %d: %w", i, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), first
}

func benchRoundTrip(b *testing.B, e env, callers int) {
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	elapsed, err := run(e, callers, b.N, lat)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "answers/s")
	b.ReportMetric(us(lat[len(lat)*50/100]), "p50-us")
	b.ReportMetric(us(lat[min(len(lat)-1, len(lat)*99/100)]), "p99-us")
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// readFrame reads one Diameter message into buf (grown as needed) and
// returns it; the slice is valid until the next call with the same buf.
func readFrame(r *bufio.Reader, buf *[]byte) ([]byte, error) {
	b := (*buf)[:wire.HeaderLen]
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	n := int(wire.Length(b))
	if n < wire.HeaderLen || n > 1<<20 {
		return nil, errors.New("bad frame length")
	}
	if cap(b) < n {
		nb := make([]byte, n)
		copy(nb, b)
		b = nb
		*buf = nb[:0]
	}
	b = b[:n]
	if _, err := io.ReadFull(r, b[wire.HeaderLen:]); err != nil {
		return nil, err
	}
	return b, nil
}

// nextBuffered reports whether a whole next message is already buffered in
// r (so a writer may delay its flush).
func nextBuffered(r *bufio.Reader) bool {
	if r.Buffered() < wire.HeaderLen {
		return false
	}
	h, err := r.Peek(4)
	if err != nil {
		return false
	}
	return r.Buffered() >= int(wire.Length(h))
}
