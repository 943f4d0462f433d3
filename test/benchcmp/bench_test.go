package benchcmp

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

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
	got, err := gdRequest(0, 0).Serialize()
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
