package main

import (
	"context"
	"testing"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// The RADIUS listeners' requests are counted truly: a record dropped for
// a failed --dedup store is no answer (dropped, not answered, not a
// store error, which is a Diameter refusal); an Access-Request, which
// never touches the store, is answered and reported among the applied as
// passed through, not as committed.
func TestRADIUSDedupCounts(t *testing.T) {
	s := &server{o: serverOptions{dedup: "memory"}, storeErrs: dedup.NewErrorLog(nil, 0)}
	h := s.radiusDedup(downStore{})
	ts, _ := lradius.NewDate(time.Unix(1_800_000_000, 0))
	for i := range 3 {
		acct := &lradius.Packet{Code: lradius.CodeAccountingRequest}
		acct.Add(radius.AttrNASIdentifier, []byte("nas1"))
		acct.Add(radius.AttrAcctSessionID, []byte{'s', byte('0' + i)})
		acct.Add(radius.AttrAcctStatusType, lradius.NewInteger(1))
		acct.Add(radius.AttrEventTimestamp, ts)
		if code, _ := h(context.Background(), acct, nil); code != 0 {
			t.Fatalf("record %d answered %v with the store down", i, code)
		}
	}
	access := &lradius.Packet{Code: lradius.CodeAccessRequest}
	access.Add(radius.AttrUserName, []byte("u"))
	if code, _ := h(context.Background(), access, nil); code == 0 {
		t.Fatal("Access-Request not answered")
	}
	r := s.report(0)
	if r.Received != 4 || r.Answered != 1 || r.Dropped != 3 || r.StoreErrors != 0 || r.Applied != 1 || r.PassedThrough != 1 {
		t.Fatalf("report: received %d, answered %d, dropped %d, store errors %d, applied %d (passed through %d); want 4, 1, 3, 0, 1 (1)",
			r.Received, r.Answered, r.Dropped, r.StoreErrors, r.Applied, r.PassedThrough)
	}
	snap := s.snapshot(nil)
	if snap.Totals.Answered != 1 || snap.Identity.Info["dropped"] != "3" || snap.Identity.Info["applied"] != "1" {
		t.Fatalf("status: answered %d, info %v; want 1 answered, 3 dropped, 1 applied", snap.Totals.Answered, snap.Identity.Info)
	}
	if s.dd.Applied.Load() != 0 {
		t.Fatalf("dedup counters: applied %d for requests never committed", s.dd.Applied.Load())
	}
}
