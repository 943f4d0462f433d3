package radpeer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

func record(status uint32, ts time.Time, delay uint32, proxyState string) *lradius.Packet {
	p := &lradius.Packet{Code: lradius.CodeAccountingRequest}
	p.Add(radius.AttrNASIdentifier, []byte("nas1"))
	p.Add(radius.AttrAcctSessionID, []byte("sess-42"))
	p.Add(radius.AttrAcctStatusType, lradius.NewInteger(status))
	d, _ := lradius.NewDate(ts)
	p.Add(radius.AttrEventTimestamp, d)
	p.Add(radius.AttrAcctDelayTime, lradius.NewInteger(delay))
	if proxyState != "" {
		p.Add(radius.AttrProxyState, []byte(proxyState))
	}
	return p
}

func TestAccountingKey(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	start, _ := AccountingKey(record(1, now, 0, ""))
	replay, _ := AccountingKey(record(1, now, 5, "via-proxy"))
	stop, _ := AccountingKey(record(2, now, 0, ""))
	later, _ := AccountingKey(record(1, now.Add(time.Second), 0, ""))
	if start != replay {
		t.Fatal("Acct-Delay-Time or Proxy-State changed the key")
	}
	if start == stop || start == later {
		t.Fatal("a Start and a Stop (or another timestamp) share a key")
	}
	other := record(1, now, 0, "")
	other.Set(radius.AttrNASIdentifier, []byte("nas2"))
	if k, _ := AccountingKey(other); k == start {
		t.Fatal("two NASes share a key")
	}
	noTS := record(1, now, 0, "")
	noTS.Del(radius.AttrEventTimestamp)
	if _, ok := AccountingKey(noTS); ok {
		t.Fatal("a record without Event-Timestamp got a key")
	}
	if _, ok := AccountingKey(&lradius.Packet{Code: lradius.CodeAccessRequest}); ok {
		t.Fatal("an Access-Request got an accounting key")
	}
}

// Two servers sharing a store apply a record once: the replay on the
// second gets the first answer.
func TestDedupAppliesOnce(t *testing.T) {
	store := dedup.NewMemory()
	defer store.Close()
	runs := 0
	h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		runs++
		return lradius.CodeAccountingResponse, lradius.Attributes{{Type: 18, Attribute: []byte("applied")}}
	}
	var c1, c2 dedup.Counters
	s1, s2 := Dedup(store, h, &c1), Dedup(store, h, &c2)
	now := time.Unix(1_800_000_000, 0)
	code, _ := s1(context.Background(), record(1, now, 0, ""), nil)
	code2, attrs2 := s2(context.Background(), record(1, now, 3, "p"), nil)
	if runs != 1 || code != lradius.CodeAccountingResponse || code2 != code || string(attrs2[0].Attribute) != "applied" {
		t.Fatalf("runs %d, codes %v %v, attrs %v", runs, code, code2, attrs2)
	}
	s2(context.Background(), record(2, now, 0, ""), nil) // the Stop is a record of its own
	if runs != 2 || c1.Applied.Load() != 1 || c2.Applied.Load() != 1 || c2.Duplicates.Load() != 1 {
		t.Fatalf("runs %d, counters %d/%d applied, %d duplicates", runs, c1.Applied.Load(), c2.Applied.Load(), c2.Duplicates.Load())
	}
}

// A client holding the secret cannot pre-empt another NAS's record by
// forging it first: the victim's record, from another address, is still
// applied. The old key held only the record's content.
func TestDedupRecordBoundToSender(t *testing.T) {
	store := dedup.NewMemory()
	defer store.Close()
	runs := 0
	h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		runs++
		return lradius.CodeAccountingResponse, nil
	}
	var c dedup.Counters
	d := Dedup(store, h, &c)
	now := time.Unix(1_800_000_000, 0)
	attacker := withSender(context.Background(), Sender{Addr: netip.MustParseAddr("127.0.0.2")})
	victim := withSender(context.Background(), Sender{Addr: netip.MustParseAddr("127.0.0.1")})
	d(attacker, record(1, now, 0, ""), nil)
	d(victim, record(1, now, 0, ""), nil)
	if runs != 2 || c.Duplicates.Load() != 0 {
		t.Fatalf("the victim's record: %d runs, %d duplicates; want it applied", runs, c.Duplicates.Load())
	}
	d(victim, record(1, now, 7, "p"), nil)
	if runs != 2 || c.Duplicates.Load() != 1 {
		t.Fatalf("the victim's own retransmission: %d runs, %d duplicates; want a duplicate", runs, c.Duplicates.Load())
	}
}

// Records through trusted proxies are keyed by their NAS identity alone:
// a NAS's record re-sent through a second proxy is a duplicate.
func TestDedupTrustedProxies(t *testing.T) {
	store := dedup.NewMemory()
	defer store.Close()
	runs := 0
	h := func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		runs++
		return lradius.CodeAccountingResponse, nil
	}
	d := Dedup(store, h, nil, TrustNASIdentityFrom(netip.MustParsePrefix("10.1.0.0/16")))
	now := time.Unix(1_800_000_000, 0)
	proxy1 := withSender(context.Background(), Sender{Addr: netip.MustParseAddr("10.1.0.1")})
	proxy2 := withSender(context.Background(), Sender{Addr: netip.MustParseAddr("10.1.0.2")})
	other := withSender(context.Background(), Sender{Addr: netip.MustParseAddr("10.2.0.1")})
	d(proxy1, record(1, now, 0, ""), nil)
	d(proxy2, record(1, now, 2, "x"), nil)
	if runs != 1 {
		t.Fatalf("%d runs: the same record through two trusted proxies applied twice", runs)
	}
	d(other, record(1, now, 0, ""), nil)
	if runs != 2 {
		t.Fatalf("%d runs: a client outside the proxies pre-empted by them", runs)
	}
}

// failingDedupStore fails every Begin.
type failingDedupStore struct{ err error }

func (f failingDedupStore) Begin(context.Context, ...dedup.Key) (*dedup.Outcome, error) {
	return nil, f.err
}
func (failingDedupStore) Close() error { return nil }

// Dedup given an ErrorLog logs why the store failed, for a record it drops
// for that reason, once per interval however many it drops.
func TestDedupLogsStoreErrors(t *testing.T) {
	var buf bytes.Buffer
	log := dedup.NewErrorLog(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute)
	cause := errors.New("dial tcp 10.20.30.40:6379: connection refused")
	var c dedup.Counters
	d := Dedup(failingDedupStore{cause}, func(context.Context, *lradius.Packet, []byte) (lradius.Code, lradius.Attributes) {
		t.Fatal("handler ran without the store")
		return 0, nil
	}, &c, LogStoreErrors(log))
	now := time.Unix(1_800_000_000, 0)
	for i := range 3 {
		if code, _ := d(context.Background(), record(1, now.Add(time.Duration(i)*time.Second), 0, ""), nil); code != 0 {
			t.Fatalf("answered %v while the store is down", code)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "10.20.30.40:6379") || c.Dropped.Load() != 3 || c.StoreErrs.Load() != 0 {
		t.Fatalf("3 failures: %d dropped and %d store errors counted, logged as %q", c.Dropped.Load(), c.StoreErrs.Load(), lines)
	}
}

// An answer over the store's per-entry limit is sent but not kept; the
// record's re-sent copies get a bare Accounting-Response, never a second
// application, and the store is not taken for failed.
func TestDedupAnswerTooLarge(t *testing.T) {
	store := dedup.NewMemory(dedup.WithMaxAnswerSize(64))
	defer store.Close()
	runs := 0
	var c dedup.Counters
	d := Dedup(store, func(context.Context, *lradius.Packet, []byte) (lradius.Code, lradius.Attributes) {
		runs++
		return lradius.CodeAccountingResponse, lradius.Attributes{{Type: 18, Attribute: make([]byte, 100)}}
	}, &c)
	now := time.Unix(1_800_000_000, 0)
	code, attrs := d(context.Background(), record(1, now, 0, ""), nil)
	if code != lradius.CodeAccountingResponse || len(attrs) != 1 {
		t.Fatalf("the first send: %v %v, want the handler's answer", code, attrs)
	}
	for try := range 2 { // the NAS's retransmissions
		if code, attrs := d(context.Background(), record(1, now, uint32(try+1), ""), nil); code != lradius.CodeAccountingResponse || len(attrs) != 0 {
			t.Fatalf("retransmission %d: %v %v, want a bare Accounting-Response", try+1, code, attrs)
		}
	}
	if runs != 1 || c.Applied.Load() != 1 || c.TooLarge.Load() != 1 || c.NotKept.Load() != 2 || c.StoreErrs.Load() != 0 {
		t.Fatalf("runs %d; applied %d, too large %d, not kept %d, store errors %d; want 1; 1, 1, 2, 0",
			runs, c.Applied.Load(), c.TooLarge.Load(), c.NotKept.Load(), c.StoreErrs.Load())
	}
}

// A handler that outlives the mark TTL: the NAS's re-sent copy takes the
// record over and runs the handler again. The record's onCommit runs once,
// and both copies get the committed answer, the slow run's own discarded.
func TestDedupSlowHandlerCommittedOnce(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Unix(1_800_000_000, 0).UnixNano())
	store := dedup.NewMemory(dedup.WithMarkTTL(10*time.Second), dedup.WithClock(func() time.Time { return time.Unix(0, clock.Load()) }))
	defer store.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	h := func(context.Context, *lradius.Packet, []byte) (lradius.Code, lradius.Attributes) {
		if runs.Add(1) == 1 {
			close(entered)
			<-release // a slow accounting database
			return lradius.CodeAccountingResponse, lradius.Attributes{{Type: 18, Attribute: []byte("slow")}}
		}
		return lradius.CodeAccountingResponse, lradius.Attributes{{Type: 18, Attribute: []byte("copy")}}
	}
	var commits atomic.Int32
	onCommit := func(_ *lradius.Packet, _ lradius.Code, attrs lradius.Attributes) { commits.Add(1) }
	var c1, c2 dedup.Counters
	s1, s2 := DedupCommit(store, h, onCommit, &c1), DedupCommit(store, h, onCommit, &c2)
	now := time.Unix(1_800_000_000, 0)
	type answer struct {
		code  lradius.Code
		attrs lradius.Attributes
	}
	got := make(chan answer, 1)
	go func() {
		code, attrs := s1(context.Background(), record(1, now, 0, ""), nil)
		got <- answer{code, attrs}
	}()
	<-entered
	clock.Add(int64(11 * time.Second)) // the mark expires
	code2, attrs2 := s2(context.Background(), record(1, now, 11, ""), nil)
	close(release)
	a1 := <-got
	if a1.code != lradius.CodeAccountingResponse || code2 != a1.code || len(a1.attrs) != 1 || len(attrs2) != 1 ||
		string(a1.attrs[0].Attribute) != "copy" || string(attrs2[0].Attribute) != "copy" {
		t.Fatalf("answers %v %v and %v %v, want both the committed one (copy)", a1.code, a1.attrs, code2, attrs2)
	}
	if runs.Load() != 2 || commits.Load() != 1 || c1.Superseded.Load() != 1 || c1.Applied.Load()+c2.Applied.Load() != 1 {
		t.Fatalf("runs %d, onCommit %d, superseded %d, applied %d+%d; want 2, 1, 1, 1",
			runs.Load(), commits.Load(), c1.Superseded.Load(), c1.Applied.Load(), c2.Applied.Load())
	}
}
