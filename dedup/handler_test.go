package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// acrFor returns a STOP record numbered ts, stamped ts.
func acrFor(e2e uint32, ts uint32) []byte {
	req := message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "nas1;1;7").
		String(message.OriginHost, 0, true, "nas1.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 4).
		Uint32(message.AccountingRecordNumber, 0, true, ts).
		Uint32(message.EventTimestamp, 0, true, ts).
		String(message.NASIdentifier, 0, true, "nas1").Bytes()
	wire.SetEndToEnd(req, e2e)
	wire.SetHopByHop(req, e2e+1)
	return req
}

func TestWrapRunsHandlerOncePerKey(t *testing.T) {
	var runs atomic.Int32
	h := func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		n := runs.Add(1)
		return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, message.Success).
			Uint32(message.AccountingRecordNumber, 0, true, uint32(n)).Bytes()
	}
	var c Counters
	w := Wrap(NewMemory(), h, &c)
	ctx := context.Background()

	first := w(ctx, nil, acrFor(100, 1))
	// Same (Origin-Host, End-to-End), T flag, new Hop-by-Hop: a failover replay.
	replay := acrFor(100, 1)
	wire.SetRetransmit(replay)
	wire.SetHopByHop(replay, 999)
	again := w(ctx, nil, replay)
	// Same accounting record under a new End-to-End id (D2).
	rekeyed := w(ctx, nil, acrFor(200, 1))
	// A different record is applied.
	other := w(ctx, nil, acrFor(300, 2))

	if got := runs.Load(); got != 2 {
		t.Fatalf("handler ran %d times, want 2", got)
	}
	if !bytes.Equal(first, again) || !bytes.Equal(first, rekeyed) {
		t.Fatalf("duplicates must get the first answer")
	}
	if bytes.Equal(first, other) {
		t.Fatalf("a different record got the stored answer")
	}
	if c.Received.Load() != 4 || c.Applied.Load() != 2 || c.Duplicates.Load() != 2 {
		t.Fatalf("counters: received %d applied %d duplicates %d", c.Received.Load(), c.Applied.Load(), c.Duplicates.Load())
	}
}

type brokenStore struct{}

func (brokenStore) Begin(context.Context, ...Key) (*Outcome, error) {
	return nil, errors.New("connection refused")
}
func (brokenStore) Close() error { return nil }

func TestWrapStoreFailureIsTooBusy(t *testing.T) {
	var c Counters
	w := Wrap(brokenStore{}, func(context.Context, *peer.Peer, []byte) []byte {
		t.Fatal("handler must not run without the store")
		return nil
	}, &c)
	ans := w(context.Background(), nil, acrFor(1, 1))
	rc, _ := message.ResultCodeOf(ans)
	if rc != message.TooBusy || wire.Flags(ans)&wire.FlagError == 0 {
		t.Fatalf("want 3004 with the E bit, got %d flags %#x", rc, wire.Flags(ans))
	}
	if c.StoreErrs.Load() != 1 {
		t.Fatal("store error not counted")
	}
}

func TestKeysOf(t *testing.T) {
	if n := len(KeysOf(acrFor(1, 1))); n != 2 {
		t.Fatalf("accounting with Event-Timestamp: %d keys, want 2", n)
	}
	req := message.NewRequest(message.CmdTest, message.AppTest, 0).String(message.OriginHost, 0, true, "h").Bytes()
	if n := len(KeysOf(req)); n != 1 {
		t.Fatalf("non-accounting: %d keys, want 1", n)
	}
	keys := KeysOf(acrFor(1, 1))
	if keys[0] != RequestKey("nas1.example.net", 1) {
		t.Fatal("first key is (Origin-Host, End-to-End)")
	}
	want := AccountingRecord{SessionID: "nas1;1;7", RecordType: 4, RecordNumber: 1,
		EventTimestamp: []byte{0, 0, 0, 1}, OriginHost: "nas1.example.net", NASIdentity: "nas1"}.Key()
	if keys[1] != want {
		t.Fatal("second key is the AccountingRecord's")
	}
	acr := func(drop uint32) []byte {
		b := message.NewRequest(message.CmdAccounting, message.AppAccounting, 0)
		for _, a := range []struct{ code, v uint32 }{
			{message.AccountingRecordType, 2}, {message.AccountingRecordNumber, 0}, {message.EventTimestamp, 5},
		} {
			if a.code != drop {
				b.Uint32(a.code, 0, true, a.v)
			}
		}
		if drop != message.SessionID {
			b.String(message.SessionID, 0, true, "s")
		}
		return b.String(message.OriginHost, 0, true, "h").String(message.NASIPAddress, 0, true, "\xc0\x00\x02\x01").Bytes()
	}
	for drop, n := range map[uint32]int{
		message.SessionID: 1, message.AccountingRecordType: 1, message.AccountingRecordNumber: 1,
		message.EventTimestamp: 2, // Session-Id and the record number are unique without it
	} {
		if got := len(KeysOf(acr(drop))); got != n {
			t.Errorf("accounting request without AVP %d: %d keys, want %d", drop, got, n)
		}
	}
	nasIP := AccountingRecord{SessionID: "s", RecordType: 2, EventTimestamp: []byte{0, 0, 0, 5},
		OriginHost: "h", NASIdentity: "\xc0\x00\x02\x01"}.Key()
	if got := KeysOf(acr(0)); got[1] != nasIP {
		t.Error("without NAS-Identifier, NAS-IP-Address is the NAS identity")
	}
}

// TestKeysOfShortInput: input shorter than a Diameter header has no keys;
// KeysOf does not panic on it.
func TestKeysOfShortInput(t *testing.T) {
	acr := acrFor(1, 1)
	for n := 0; n < wire.HeaderLen; n++ {
		short := append([]byte(nil), acr[:n]...) // no capacity beyond n
		if keys := KeysOf(short); len(keys) != 0 {
			t.Fatalf("%d bytes: %d keys, want none", n, len(keys))
		}
	}
	if keys := KeysOf(acr[:wire.HeaderLen]); len(keys) != 1 {
		t.Fatalf("a bare header: %d keys, want its request key", len(keys))
	}
}

// TestKeyFieldsWalkEndsOnceAllSeen: the walk over an accounting request's
// AVPs ends at the last AVP the keys read, once each has been met.
func TestKeyFieldsWalkEndsOnceAllSeen(t *testing.T) {
	four := []byte{0, 0, 0, 1}
	avps := []wire.AVP{
		{Code: message.OriginHost, Data: []byte("h")}, {Code: message.SessionID, Data: []byte("s")},
		{Code: message.AccountingRecordType, Data: four}, {Code: message.AccountingRecordNumber, Data: four},
		{Code: message.EventTimestamp, Data: four}, {Code: message.NASIdentifier, Data: []byte("n")},
		{Code: message.NASIPAddress, Data: four},
	}
	var f keyFields
	for i, a := range avps {
		if more := f.see(a, true); more != (i < len(avps)-1) {
			t.Fatalf("after AVP %d of %d the walk goes on: %v", i+1, len(avps), more)
		}
	}
}

// A server that stalls past the mark's TTL while its handler runs: another
// server takes the request over and commits first. The stalled server's
// result is discarded and it answers with the committed answer: the
// request is applied once (found by test/failover's frozen-server case).
func TestWrapStalledHandlerIsSuperseded(t *testing.T) {
	store := NewMemory(WithMarkTTL(50 * time.Millisecond))
	defer store.Close()
	var c1, c2 Counters
	release := make(chan struct{})
	entered := make(chan struct{})
	stalled := Wrap(store, func(context.Context, *peer.Peer, []byte) []byte {
		close(entered)
		<-release // frozen past the mark's TTL
		return message.NewAnswer(acrFor(1, 1)).ResultCode(message.Success).String(message.OriginHost, 0, true, "stalled").Bytes()
	}, &c1)
	other := Wrap(store, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		return message.NewAnswer(req).ResultCode(message.Success).String(message.OriginHost, 0, true, "other").Bytes()
	}, &c2)

	got := make(chan []byte, 1)
	go func() { got <- stalled(context.Background(), nil, acrFor(1, 1)) }()
	<-entered
	time.Sleep(100 * time.Millisecond) // the mark expires
	replay := acrFor(1, 1)
	wire.SetRetransmit(replay)
	ans2 := other(context.Background(), nil, replay)
	close(release)
	ans1 := <-got

	h1, _ := message.StringOf(ans1, message.OriginHost, 0)
	h2, _ := message.StringOf(ans2, message.OriginHost, 0)
	if h1 != "other" || h2 != "other" {
		t.Fatalf("answers from %q and %q, want both from the committed owner", h1, h2)
	}
	if a := c1.Applied.Load() + c2.Applied.Load(); a != 1 {
		t.Fatalf("applied %d times, want 1", a)
	}
	if c1.Superseded.Load() != 1 {
		t.Fatalf("superseded %d, want 1", c1.Superseded.Load())
	}
}

// TestWrapCommitOnceWhenTakenOverWithSameAnswer: a server stalls past the
// mark's TTL while its handler runs; a replay at another server takes the
// request over and commits an answer byte for byte the stalled one's (a
// deterministic handler), or, with both answers too large to keep, the
// same not-kept marker. The stalled server's commit must still fail, so
// that onCommit runs once.
func TestWrapCommitOnceWhenTakenOverWithSameAnswer(t *testing.T) {
	testWrapCommitOnceWhenTakenOver(t, memoryMaker)
}

func TestRedisWrapCommitOnceWhenTakenOverWithSameAnswer(t *testing.T) {
	needRedis(t)
	testWrapCommitOnceWhenTakenOver(t, redisMaker)
}

func testWrapCommitOnceWhenTakenOver(t *testing.T, mk storeMaker) {
	const ttl = 100 * time.Millisecond
	for _, size := range []int{0, 500} {
		t.Run(fmt.Sprintf("answer over limit %v", size > 0), func(t *testing.T) {
			s := mk(t, WithMarkTTL(ttl), WithMaxAnswerSize(300))
			var commits atomic.Int32
			onCommit := func([]byte, []byte) { commits.Add(1) }
			answer := func([]byte) []byte { // the same bytes for the request and its replay
				return message.NewAnswer(acrFor(1, 1)).ResultCode(message.Success).
					String(message.ErrorMessage, 0, false, strings.Repeat("x", size)).Bytes()
			}
			release, entered := make(chan struct{}), make(chan struct{})
			stalled := WrapCommit(s, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
				close(entered)
				<-release // frozen past the mark's TTL
				return answer(req)
			}, onCommit, nil)
			other := WrapCommit(s, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
				return answer(req)
			}, onCommit, nil)
			done := make(chan struct{})
			go func() { stalled(context.Background(), nil, acrFor(1, 1)); close(done) }()
			<-entered
			time.Sleep(ttl + 30*time.Millisecond)
			replay := acrFor(1, 1)
			wire.SetRetransmit(replay)
			other(context.Background(), nil, replay)
			close(release)
			<-done
			if n := commits.Load(); n != 1 {
				t.Fatalf("onCommit ran %d times, want 1", n)
			}
		})
	}
}

// A request's handler outlives the mark's TTL, and its accounting record,
// re-sent under a new End-to-End id, takes the record key over (not the
// first request's own key). Whether the second request's handler commits
// before the first ends, is still running then, or gives up, before or
// after, the record is committed once, with onCommit, and every answer
// sent is the one committed: never a success without onCommit.
func TestWrapCommitPartialTakeover(t *testing.T) { testWrapCommitPartialTakeover(t, memoryMaker) }

func TestRedisWrapCommitPartialTakeover(t *testing.T) {
	needRedis(t)
	testWrapCommitPartialTakeover(t, redisMaker)
}

func testWrapCommitPartialTakeover(t *testing.T, mk storeMaker) {
	const ttl = 200 * time.Millisecond
	for _, second := range []string{"commits", "runs", "gives up", "runs, gives up"} {
		t.Run(second, func(t *testing.T) {
			s := mk(t, WithMarkTTL(ttl))
			var mu sync.Mutex
			var committed []uint32 // the End-to-End ids of the requests committed
			onCommit := func(req, _ []byte) {
				mu.Lock()
				committed = append(committed, wire.EndToEnd(req))
				mu.Unlock()
			}
			entered, release := make(chan struct{}), make(chan struct{})
			entered2, release2 := make(chan struct{}), make(chan struct{})
			var c Counters
			w := WrapCommit(s, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
				from := "first"
				if wire.EndToEnd(req) == 1 {
					close(entered)
					<-release // frozen past the mark's TTL
				} else {
					from = "second"
					if strings.HasPrefix(second, "runs") {
						close(entered2)
						<-release2
					}
					if strings.HasSuffix(second, "gives up") {
						return nil
					}
				}
				return message.NewAnswer(req).ResultCode(message.Success).String(message.OriginHost, 0, true, from).Bytes()
			}, onCommit, &c)

			got1, got2 := make(chan []byte, 1), make(chan []byte, 1)
			go func() { got1 <- w(context.Background(), nil, acrFor(1, 1)) }()
			<-entered
			time.Sleep(ttl + 50*time.Millisecond) // the marks expire
			// The same record under a new End-to-End id.
			go func() { got2 <- w(context.Background(), nil, acrFor(2, 1)) }()
			var ans2 []byte
			if strings.HasPrefix(second, "runs") {
				<-entered2
			} else {
				ans2 = <-got2
			}
			close(release)
			if strings.HasPrefix(second, "runs") {
				time.Sleep(30 * time.Millisecond) // the first waits for the second
				close(release2)
				ans2 = <-got2
			}
			ans1 := <-got1

			from := func(ans []byte) string {
				h, _ := message.StringOf(ans, message.OriginHost, 0)
				return h
			}
			mu.Lock()
			defer mu.Unlock()
			if len(committed) != 1 {
				t.Fatalf("committed %v, want one request", committed)
			}
			want := map[uint32]string{1: "first", 2: "second"}[committed[0]]
			if from(ans1) != want || ans2 != nil && from(ans2) != want {
				t.Fatalf("answers from %q and %q; committed: the %s's", from(ans1), from(ans2), want)
			}
			if gaveUp := strings.HasSuffix(second, "gives up"); gaveUp && (want != "first" || ans2 != nil) || !gaveUp && want != "second" {
				t.Fatalf("committed the %s's, second answered %q", want, from(ans2))
			}
			if a := c.Applied.Load(); a != 1 {
				t.Fatalf("applied %d times, want 1", a)
			}
			var wantSup uint64 // results discarded: the first's, if the second's was committed
			if want == "second" {
				wantSup = 1
			}
			if sup := c.Superseded.Load(); sup != wantSup {
				t.Fatalf("superseded %d, want %d", sup, wantSup)
			}
		})
	}
}

type ctxStore struct{}

func (ctxStore) Begin(ctx context.Context, _ ...Key) (*Outcome, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (ctxStore) Close() error { return nil }

// A request whose connection closed while the store was consulted is not
// a store failure and gets no answer.
func TestWrapCancelledIsNotAStoreError(t *testing.T) {
	var c Counters
	w := Wrap(ctxStore{}, func(context.Context, *peer.Peer, []byte) []byte { return nil }, &c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ans := w(ctx, nil, acrFor(1, 1)); ans != nil {
		t.Fatal("answered on a closed connection")
	}
	if c.StoreErrs.Load() != 0 || c.Cancelled.Load() != 1 {
		t.Fatalf("store errors %d cancelled %d", c.StoreErrs.Load(), c.Cancelled.Load())
	}
}

// TestWrapAnswerTooLarge: an answer over the per-entry limit is sent and
// the request counted applied, but not kept; its replay is refused with a
// final DIAMETER_UNABLE_TO_COMPLY and the handler never runs again.
func TestWrapAnswerTooLarge(t *testing.T) {
	var runs atomic.Int32
	var committed atomic.Int32
	big := string(make([]byte, 2000))
	h := func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		runs.Add(1)
		return message.NewAnswer(req).ResultCode(message.Success).String(message.ErrorMessage, 0, false, big).Bytes()
	}
	var c Counters
	store := NewMemory(WithMaxAnswerSize(1000))
	defer store.Close()
	w := WrapCommit(store, h, func([]byte, []byte) { committed.Add(1) }, &c)
	ctx := context.Background()
	first := w(ctx, nil, acrFor(1, 1))
	if rc, _ := message.ResultCodeOf(first); rc != message.Success || len(first) < 2000 {
		t.Fatalf("first answer: code %d, %d bytes", rc, len(first))
	}
	replay := acrFor(1, 1)
	wire.SetRetransmit(replay)
	again := w(ctx, nil, replay)
	if rc, _ := message.ResultCodeOf(again); rc != message.UnableToComply {
		t.Fatalf("replay answered %d, want 5012", rc)
	}
	if sid, _ := message.StringOf(again, message.SessionID, 0); sid != "nas1;1;7" {
		t.Fatalf("refusal without the request's Session-Id: %q", sid)
	}
	if runs.Load() != 1 || committed.Load() != 1 {
		t.Fatalf("handler ran %d times, committed %d", runs.Load(), committed.Load())
	}
	if c.Applied.Load() != 1 || c.TooLarge.Load() != 1 || c.NotKept.Load() != 1 || c.StoreErrs.Load() != 0 || c.Duplicates.Load() != 0 {
		t.Fatalf("counters: applied %d too large %d not kept %d store errors %d duplicates %d",
			c.Applied.Load(), c.TooLarge.Load(), c.NotKept.Load(), c.StoreErrs.Load(), c.Duplicates.Load())
	}
}

// TestWrapCountsUnseenRetransmits: a request with the T flag that the
// store has no entry for is counted (its first copy went to a server not
// sharing the store, or nowhere); a T-flagged duplicate of a request seen
// here, and a first copy without the T flag, are not.
func TestWrapCountsUnseenRetransmits(t *testing.T) {
	var runs atomic.Int32
	h := func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		runs.Add(1)
		return message.NewAnswer(req).Uint32(message.ResultCode, 0, true, message.Success).Bytes()
	}
	var c Counters
	w := Wrap(NewMemory(), h, &c)
	ctx := context.Background()
	retransmit := func(e2e, ts uint32) []byte {
		r := acrFor(e2e, ts)
		wire.SetRetransmit(r)
		return r
	}
	w(ctx, nil, acrFor(1, 1))     // first copy, here
	w(ctx, nil, retransmit(1, 1)) // its replay: a duplicate
	w(ctx, nil, retransmit(2, 2)) // a replay of a request never seen here
	w(ctx, nil, retransmit(2, 2)) // and its own duplicate
	w(ctx, nil, retransmit(3, 3)) // another
	if got := c.UnseenRetransmits.Load(); got != 2 {
		t.Errorf("UnseenRetransmits %d, want 2", got)
	}
	if runs.Load() != 3 || c.Duplicates.Load() != 2 {
		t.Errorf("handler ran %d times with %d duplicates, want 3 and 2", runs.Load(), c.Duplicates.Load())
	}
}

// TestWrapTransientAnswerNotKept: a handler's refusal for now (E bit,
// DIAMETER_TOO_BUSY or DIAMETER_UNABLE_TO_DELIVER) is sent but not
// committed: the retry at another server sharing the store runs the
// handler and is applied, instead of getting the refusal from the store.
func TestWrapTransientAnswerNotKept(t *testing.T) {
	for _, rc := range []uint32{message.TooBusy, message.UnableToDeliver} {
		s := NewMemory()
		var runs, commits atomic.Int32
		h := func(_ context.Context, _ *peer.Peer, req []byte) []byte {
			if runs.Add(1) == 1 { // this server's backend refuses it for now
				return message.ErrorAnswer(req, message.Identity{}, rc, "backend busy").Bytes()
			}
			return message.NewAnswer(req).ResultCode(message.Success).Bytes()
		}
		var c1, c2 Counters
		onCommit := func(req, ans []byte) { commits.Add(1) }
		a, b := WrapCommit(s, h, onCommit, &c1), WrapCommit(s, h, onCommit, &c2) // two servers sharing the store
		ans1 := a(context.Background(), nil, acrFor(3, 3))
		retry := acrFor(3, 3)
		wire.SetRetransmit(retry)
		ans2 := b(context.Background(), nil, retry)
		rc1, _ := message.Uint32Of(ans1, message.ResultCode, 0)
		rc2, _ := message.Uint32Of(ans2, message.ResultCode, 0)
		if rc1 != rc || rc2 != message.Success || runs.Load() != 2 {
			t.Fatalf("%d: first answer %d, retry %d after %d runs; want %d, then the retry applied", rc, rc1, rc2, runs.Load(), rc)
		}
		if c1.Transient.Load() != 1 || c1.Applied.Load() != 0 || c2.Applied.Load() != 1 || commits.Load() != 1 {
			t.Fatalf("%d: transient %d, applied %d+%d, onCommit %d; want 1, 0+1, 1", rc, c1.Transient.Load(), c1.Applied.Load(), c2.Applied.Load(), commits.Load())
		}
		// A final error (no E bit meaning "try elsewhere") is kept.
		final := Wrap(s, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
			return message.ErrorAnswer(req, message.Identity{}, message.UnableToComply, "no").Bytes()
		}, nil)
		final(context.Background(), nil, acrFor(4, 4))
		if o, err := s.Begin(context.Background(), KeysOf(acrFor(4, 4))...); err != nil || !o.Duplicate() {
			t.Fatalf("%d: a final error answer was not kept: %v %v", rc, o, err)
		}
		s.Close()
	}
	noE := message.ErrorAnswer(acrFor(1, 1), message.Identity{}, message.TooBusy, "busy").Bytes()
	wire.SetFlags(noE, wire.Flags(noE)&^wire.FlagError)
	if Transient(noE) || !Transient(message.ErrorAnswer(acrFor(1, 1), message.Identity{}, message.TooBusy, "busy").Bytes()) {
		t.Fatal("Transient reads the E bit wrong")
	}
}
