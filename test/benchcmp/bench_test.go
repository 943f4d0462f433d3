package benchcmp

import (
	"bytes"
	"fmt"
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
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			e, err := im.start()
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := e.close(); err != nil {
					b.Error(err)
				}
			}()
			for _, callers := range im.callers {
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
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			e, err := im.start()
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := e.close(); err != nil {
					t.Error(err)
				}
			}()
			for _, callers := range im.callers {
				lat := make([]time.Duration, 100)
				if _, err := run(e, callers, 100, lat); err != nil {
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
