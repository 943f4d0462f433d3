package benchcmp

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

func TestMain(m *testing.M) {
	// No goroutine is ignored: every implementation's client and server
	// end theirs on close (go-diameter's server connection goroutine ends
	// on EOF shortly after the client closes; goleak retries meanwhile).
	goleak.VerifyTestMain(m)
}

// BenchmarkRoundTrip measures one ACR/ACA round trip on loopback TCP per
// op, for 1 caller and for 256 concurrent callers on one connection.
// allocs/op counts the client AND the server (same process).
func BenchmarkRoundTrip(b *testing.B) {
	for _, im := range Impls {
		b.Run("impl="+im.Name, func(b *testing.B) {
			e, err := im.Start()
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := e.Close(); err != nil {
					b.Error(err)
				}
			}()
			for _, callers := range im.Callers {
				b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
					benchRoundTrip(b, e, callers)
				})
			}
		})
	}
}

// TestSanity runs every implementation for 100 requests with each caller
// count it is benchmarked with; run checks every answer: Result-Code 2001,
// Hop-by-Hop and End-to-End ids those of its request.
func TestSanity(t *testing.T) {
	for _, im := range Impls {
		t.Run(im.Name, func(t *testing.T) {
			e, err := im.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := e.Close(); err != nil {
					t.Error(err)
				}
			}()
			for _, callers := range im.Callers {
				lat := make([]time.Duration, 100)
				if _, err := Run(e, callers, 100, lat); err != nil {
					t.Fatalf("%d callers: %v", callers, err)
				}
				for i, d := range lat {
					if d == 0 {
						t.Fatalf("%d callers: request %d was not done", callers, i)
					}
				}
			}
		})
	}
}

// TestSameRequestBytes proves go-diameter's ACR encodes to exactly the bytes
// the raw and aaatp implementations send (ids apart).
func TestSameRequestBytes(t *testing.T) {
	got, err := gdRequest(0, 0, recordNum).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	want := acrBytes
	if !bytes.Equal(got, want) {
		t.Fatalf("go-diameter ACR differs:\n got %x\nwant %x", got, want)
	}
	if n := len(acrBytes); n < 180 || n > 220 {
		t.Fatalf("ACR is %d bytes, want about 200", n)
	}
	if wire.CommandCode(acrBytes) != 271 || wire.AppID(acrBytes) != 3 {
		t.Fatalf("not an ACR of application 3")
	}
	t.Logf("ACR: %d bytes, ACA: %d bytes", len(acrBytes), len(acaBytes))
}

func benchRoundTrip(b *testing.B, e Env, callers int) {
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	elapsed, err := Run(e, callers, b.N, lat)
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

// TestRunFor checks the duration-based runner the harness uses.
func TestRunFor(t *testing.T) {
	e, err := StartRaw()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	lat, elapsed, err := RunFor(e, 4, 50*time.Millisecond, 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) == 0 || elapsed < 50*time.Millisecond {
		t.Fatalf("%d requests in %v", len(lat), elapsed)
	}
}

// TestDialedClients runs the clients the cross-process harness dials on
// their own (CER/CEA first) against separately served servers, checking
// every answer as TestSanity does.
func TestDialedClients(t *testing.T) {
	cases := []struct {
		name    string
		serve   func(net.Listener) func()
		dial    func(string) (Env, error)
		callers int
	}{
		{"raw batched -> per-request raw", func(ln net.Listener) func() { return ServeRaw(ln, PerRequest).Close },
			func(a string) (Env, error) { return DialRaw(a, true) }, 64},
		{"raw -> inline raw", func(ln net.Listener) func() { return ServeRaw(ln, Inline).Close },
			func(a string) (Env, error) { return DialRaw(a, false) }, 8},
		{"ping-pong -> inline raw", func(ln net.Listener) func() { return ServeRaw(ln, Inline).Close }, DialPingPong, 1},
		{"go-diameter", func(ln net.Listener) func() { return ServeGoDiameter(ln).Close }, DialGoDiameter, 16},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			stop := tc.serve(ln)
			defer stop()
			e, err := tc.dial(ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			lat := make([]time.Duration, 500)
			if _, err := Run(e, tc.callers, len(lat), lat); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestRawServerAnswersBaseProtocol: the raw servers answer a DWR with a
// DWA 2001 carrying the DWR's ids, so that a real Diameter client can
// stay connected to them.
func TestRawServerAnswersBaseProtocol(t *testing.T) {
	for _, mode := range []RawServerMode{Inline, PerRequest} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := ServeRaw(ln, mode)
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		if err := handshake(c, r); err != nil {
			t.Fatalf("mode %d: CER: %v", mode, err)
		}
		dwr := message.NewRequest(cmdDWR, message.AppCommon, 0).
			String(message.OriginHost, 0, true, clientHost).
			String(message.OriginRealm, 0, true, realm).Bytes()
		wire.SetHopByHop(dwr, 77)
		wire.SetEndToEnd(dwr, 78)
		if _, err := c.Write(dwr); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 0, 512)
		a, err := readFrame(r, &buf)
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := message.ResultCodeOf(a)
		if wire.CommandCode(a) != cmdDWR || wire.Flags(a)&wire.FlagRequest != 0 || rc != successCode ||
			wire.HopByHop(a) != 77 || wire.EndToEnd(a) != 78 {
			t.Fatalf("mode %d: answer to DWR: command %d flags %#x rc %d ids %d/%d", mode,
				wire.CommandCode(a), wire.Flags(a), rc, wire.HopByHop(a), wire.EndToEnd(a))
		}
		c.Close()
		s.Close()
	}
}
