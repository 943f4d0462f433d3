package radpeer

import (
	"math"
	"testing"
)

// Every call gets a request number as its Ref: non-zero, a new one for
// each call, and 0 skipped when the counter wraps.
func TestNewCallNumbersRequests(t *testing.T) {
	a, b := NewCall(accessReq("a")), NewCall(accessReq("b"))
	if a.Ref == 0 || b.Ref == 0 || a.Ref == b.Ref {
		t.Fatalf("Refs %d and %d: want two distinct non-zero request numbers", a.Ref, b.Ref)
	}
	requestNumbers.Store(math.MaxUint32)
	if c := NewCall(accessReq("c")); c.Ref == 0 {
		t.Errorf("Ref 0 after the counter wrapped")
	}
}
