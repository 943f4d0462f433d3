package benchcmp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
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
// them). Every client also sets its Accounting-Record-Number, the last
// AVP, to the request's End-to-End id (setRecordNumber), so that each
// request is a record of its own, as from a real client: a server with a
// duplicate store applies every one, not one and then answers of the
// store.
var acrBytes = message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
	String(message.SessionID, 0, true, sessionID).
	String(message.OriginHost, 0, true, clientHost).
	String(message.OriginRealm, 0, true, realm).
	String(message.DestinationRealm, 0, true, realm).
	String(message.UserName, 0, true, userName).
	Uint32(message.AccountingRecordType, 0, true, recordType).
	Uint32(message.AccountingRecordNumber, 0, true, recordNum).
	Bytes()

// setRecordNumber sets the Accounting-Record-Number of a copy of acrBytes.
func setRecordNumber(req []byte, n uint32) {
	binary.BigEndian.PutUint32(req[len(req)-4:], n)
}

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

// Result is what a caller learned from one round trip.
type Result struct {
	RC              uint32 // Result-Code of the answer
	SentHBH, GotHBH uint32
	SentE2E, GotE2E uint32
}

// Check returns an error unless the answer is a 2001 carrying the ids of
// its request.
func (r Result) Check() error {
	switch {
	case r.RC != successCode:
		return fmt.Errorf("Result-Code %d, want %d", r.RC, successCode)
	case r.SentHBH != r.GotHBH:
		return fmt.Errorf("Hop-by-Hop %#x answered by %#x", r.SentHBH, r.GotHBH)
	case r.SentE2E != r.GotE2E:
		return fmt.Errorf("End-to-End %#x answered by %#x", r.SentE2E, r.GotE2E)
	}
	return nil
}

// Env is one running client+server pair of an implementation.
type Env interface {
	// Caller returns a round-trip function for one caller goroutine (it
	// may hold per-caller state such as a reply channel).
	Caller() func() (Result, error)
	// Close stops the client and the server and waits for their
	// goroutines.
	Close() error
}

// Impl names an implementation, the caller counts the Go benchmarks run it
// with, and its constructor.
type Impl struct {
	Name    string
	Callers []int // caller counts benchmarked by BenchmarkRoundTrip
	Start   func() (Env, error)
}

// Impls are the implementations compared. "rawpingpong" supports one
// caller only.
var Impls = []Impl{
	{"raw", []int{1, 256}, StartRaw},
	{"rawperrequest", []int{1, 256}, StartRawPerRequest},
	{"rawpingpong", []int{1}, StartPingPong},
	{"godiameter", []int{1, 256}, StartGoDiameter},
	{"aaatp", []int{1, 256}, StartAaatp},
}

// ACR returns a copy of the request every implementation sends (ids zero).
func ACR() []byte { return append([]byte(nil), acrBytes...) }

// ACA returns a copy of the raw server's answer (ids zero).
func ACA() []byte { return append([]byte(nil), acaBytes...) }

// Run performs exactly n round trips from `callers` goroutines sharing n
// through an atomic counter, storing each one's latency in lat[i] when lat
// is not nil. It returns the wall time and the first failure.
func Run(e Env, callers, n int, lat []time.Duration) (time.Duration, error) {
	fns := make([]func() (Result, error), callers)
	for i := range fns {
		fns[i] = e.Caller()
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
					err = r.Check()
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

// RunFor runs round trips from `callers` goroutines until d has passed
// (each caller finishes the request it is in) and returns every request's
// latency, in no particular order, the wall time and the first failure.
// Each caller records into its own slice of capacity perCallerCap (grown
// as needed), so that a good estimate keeps the recording free of
// allocations.
func RunFor(e Env, callers int, d time.Duration, perCallerCap int) ([]time.Duration, time.Duration, error) {
	fns := make([]func() (Result, error), callers)
	lats := make([][]time.Duration, callers)
	for i := range fns {
		fns[i] = e.Caller()
		lats[i] = make([]time.Duration, 0, perCallerCap)
	}
	var (
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
	deadline := start.Add(d)
	for k, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := lats[k]
			defer func() { lats[k] = lat }()
			for !failed.Load() {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				r, err := fn()
				lat = append(lat, time.Since(t0))
				if err == nil {
					err = r.Check()
				}
				if err != nil {
					fail(fmt.Errorf("caller %d, request %d: %w", k, len(lat), err))
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	return all, elapsed, first
}

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
