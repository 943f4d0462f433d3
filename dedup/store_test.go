package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/wire"
)

// storeMaker builds a fresh, empty store for one test.
type storeMaker func(t *testing.T, opts ...Option) Store

func memoryMaker(t *testing.T, opts ...Option) Store {
	s := NewMemory(opts...)
	t.Cleanup(func() { s.Close() })
	return s
}

func redisMaker(t *testing.T, opts ...Option) Store { return newRedisStore(t, "", opts...) }

func TestMemoryStore(t *testing.T) { testStore(t, memoryMaker) }
func TestRedisStore(t *testing.T) {
	needRedis(t) // skip (or fail under CI=true) once, not per subtest
	testStore(t, redisMaker)
}

// testStore is the behaviour every Store must have.
func testStore(t *testing.T, mk storeMaker) {
	t.Run("FirstThenDuplicate", func(t *testing.T) { testFirstThenDuplicate(t, mk) })
	t.Run("Abandon", func(t *testing.T) { testAbandon(t, mk) })
	t.Run("InFlightWaitComplete", func(t *testing.T) { testInFlightWait(t, mk, true) })
	t.Run("InFlightWaitAbandon", func(t *testing.T) { testInFlightWait(t, mk, false) })
	t.Run("InFlightMarkExpiry", func(t *testing.T) { testMarkExpiry(t, mk) })
	t.Run("PartialTakeover", func(t *testing.T) { testPartialTakeover(t, mk) })
	t.Run("WaitRespectsContext", func(t *testing.T) { testWaitContext(t, mk) })
	t.Run("BothKeys", func(t *testing.T) { testBothKeys(t, mk) })
	t.Run("AgeExpiryRealTime", func(t *testing.T) { testAgeExpiryRealTime(t, mk) })
	t.Run("Misuse", func(t *testing.T) { testMisuse(t, mk) })
	t.Run("ExactlyOneFirst", func(t *testing.T) { testExactlyOneFirst(t, mk) })
	t.Run("AnswerSizeLimit", func(t *testing.T) { testAnswerSizeLimit(t, mk) })
	t.Run("TakenOverSameAnswer", func(t *testing.T) { testTakenOverSameAnswer(t, mk) })
}

// testTakenOverSameAnswer: a request's owner stalls past its mark TTL and
// another request takes the key over and commits. The stalled owner's late
// Complete reports ErrMarkLost even when what it would store is what the
// new owner stored: byte-identical answers, or two answers too large to
// keep (both recorded by the same kind of marker). Otherwise the request
// would be committed twice, and WrapCommit's hook run twice.
func testTakenOverSameAnswer(t *testing.T, mk storeMaker) {
	const ttl = 100 * time.Millisecond
	big1 := msg(1, 30, string(bytes.Repeat([]byte("x"), 200)))
	big2 := msg(1, 30, string(bytes.Repeat([]byte("y"), 300)))
	for i, tc := range []struct {
		name         string
		stalled, new []byte
		newErr       error
	}{
		{"identical", msg(1, 30, "same"), msg(1, 30, "same"), nil},
		{"both too large", big1, big2, ErrAnswerTooLarge},
		{"identical too large", big1, big1, ErrAnswerTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mk(t, WithMarkTTL(ttl), WithMaxAnswerSize(100))
			k := RequestKey("c", 30+uint32(i))
			stalled := begin(t, s, k)
			wantKind(t, stalled, First)
			time.Sleep(ttl + 30*time.Millisecond)
			taker := begin(t, s, k)
			wantKind(t, taker, First)
			if err := taker.Complete(tc.new); !errors.Is(err, tc.newErr) {
				t.Fatalf("new owner's Complete: %v, want %v", err, tc.newErr)
			}
			if err := stalled.Complete(tc.stalled); !errors.Is(err, ErrMarkLost) {
				t.Fatalf("stalled owner's late Complete: %v, want ErrMarkLost", err)
			}
		})
	}
}

// testAnswerSizeLimit: an answer at the per-entry limit is kept; one byte
// more is not (ErrAnswerTooLarge), but the request stays recorded as
// answered: a duplicate by either key gets ErrAnswerNotKept, never First,
// until the entry's max age.
func testAnswerSizeLimit(t *testing.T, mk storeMaker) {
	s := mk(t, WithMaxAnswerSize(100), WithMaxAge(300*time.Millisecond))
	ctx := context.Background()
	atLimit := msg(1, 1, string(make([]byte, 100-wire.HeaderLen)))
	over := msg(1, 2, string(make([]byte, 101-wire.HeaderLen)))

	k1 := RequestKey("c", 1)
	o := begin(t, s, k1)
	if err := o.Complete(atLimit); err != nil {
		t.Fatalf("Complete at the limit: %v", err)
	}
	if d := begin(t, s, k1); d.Kind() != Duplicate || !bytes.Equal(d.Answer(), atLimit) {
		t.Fatalf("at the limit: %v %d bytes", d.Kind(), len(d.Answer()))
	}

	k2, acct := RequestKey("c", 2), AccountingRecord{SessionID: "s", RecordType: 2}.Key()
	o = begin(t, s, k2, acct)
	if err := o.Complete(over); !errors.Is(err, ErrAnswerTooLarge) {
		t.Fatalf("Complete over the limit: %v, want ErrAnswerTooLarge", err)
	}
	for _, keys := range [][]Key{{k2}, {acct}, {RequestKey("c", 3), acct}} {
		if o, err := s.Begin(ctx, keys...); !errors.Is(err, ErrAnswerNotKept) {
			t.Fatalf("duplicate of an answer not kept: %v %v, want ErrAnswerNotKept", o, err)
		}
	}
	if rs, ok := s.(ReusingStore); ok {
		var o Outcome
		if err := rs.BeginInto(ctx, &o, k2); !errors.Is(err, ErrAnswerNotKept) || o.Kind() != 0 {
			t.Fatalf("BeginInto: %v kind %v, want ErrAnswerNotKept", err, o.Kind())
		}
	}
	// The marker lives as long as an answer would.
	time.Sleep(400 * time.Millisecond)
	o = begin(t, s, k2)
	wantKind(t, o, First)
	_ = o.Abandon()
}

func begin(t *testing.T, s Store, keys ...Key) *Outcome {
	t.Helper()
	o, err := s.Begin(context.Background(), keys...)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return o
}

func wantKind(t *testing.T, o *Outcome, k Kind) {
	t.Helper()
	if o.Kind() != k {
		t.Fatalf("got %v, want %v", o.Kind(), k)
	}
}

func testFirstThenDuplicate(t *testing.T, mk storeMaker) {
	s := mk(t)
	k := RequestKey("client.example.net", 0x1234)
	o := begin(t, s, k)
	wantKind(t, o, First)
	if !o.First() || o.Duplicate() || o.Answer() != nil {
		t.Fatalf("First outcome: First=%v Duplicate=%v Answer=%v", o.First(), o.Duplicate(), o.Answer())
	}
	ans := msg(7, 0x1234, "answer-1")
	if err := o.Complete(ans); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	ans[20] = 'X' // the store keeps its own copy

	d := begin(t, s, k)
	wantKind(t, d, Duplicate)
	if want := msg(7, 0x1234, "answer-1"); !bytes.Equal(d.Answer(), want) {
		t.Fatalf("answer %q, want %q", d.Answer(), want)
	}
	// The answer is the caller's copy: patching it does not change the store.
	wire.SetHopByHop(d.Answer(), 99)
	d2 := begin(t, s, k)
	if h := wire.HopByHop(d2.Answer()); h != 7 {
		t.Fatalf("stored Hop-by-Hop changed to %d", h)
	}
	// Another End-to-End id or Origin-Host is another request.
	wantKind(t, begin(t, s, RequestKey("client.example.net", 0x1235)), First)
	wantKind(t, begin(t, s, RequestKey("other.example.net", 0x1234)), First)
}

func testAbandon(t *testing.T, mk storeMaker) {
	s := mk(t)
	k := RequestKey("c", 1)
	o := begin(t, s, k)
	wantKind(t, o, First)
	if err := o.Abandon(); err != nil {
		t.Fatal(err)
	}
	o2 := begin(t, s, k)
	wantKind(t, o2, First)
	if err := o.Complete(msg(1, 1, "late")); !errors.Is(err, ErrFinished) {
		t.Fatalf("Complete after Abandon: %v, want ErrFinished", err)
	}
	// The stale Abandon did not drop o2's mark: o2 still owns the key.
	if err := o2.Complete(msg(1, 1, "two")); err != nil {
		t.Fatal(err)
	}
	d := begin(t, s, k)
	wantKind(t, d, Duplicate)
	if !bytes.HasSuffix(d.Answer(), []byte("two")) {
		t.Fatalf("answer %q", d.Answer())
	}
}

// testInFlightWait: a duplicate arriving while the first is handled waits,
// then gets the answer (complete) or becomes First (abandon).
func testInFlightWait(t *testing.T, mk storeMaker, complete bool) {
	s := mk(t, WithMarkTTL(10*time.Second))
	k := RequestKey("c", 2)
	o := begin(t, s, k)
	wantKind(t, o, First)

	type result struct {
		o   *Outcome
		err error
	}
	res := make(chan result, 1)
	go func() {
		o, err := s.Begin(context.Background(), k)
		res <- result{o, err}
	}()
	select {
	case r := <-res:
		t.Fatalf("duplicate did not wait: %v %v", r.o.Kind(), r.err)
	case <-time.After(50 * time.Millisecond):
	}
	start := time.Now()
	if complete {
		if err := o.Complete(msg(1, 2, "ok")); err != nil {
			t.Fatal(err)
		}
	} else if err := o.Abandon(); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("waiter woke after %v", time.Since(start))
	}
	if complete {
		wantKind(t, r.o, Duplicate)
		if !bytes.HasSuffix(r.o.Answer(), []byte("ok")) {
			t.Fatalf("answer %q", r.o.Answer())
		}
	} else {
		wantKind(t, r.o, First)
		_ = r.o.Abandon()
	}
}

// testMarkExpiry: the first hangs; its mark expires and the waiting
// duplicate becomes First; the hung one's late Complete reports ErrMarkLost
// and does not overwrite.
func testMarkExpiry(t *testing.T, mk storeMaker) {
	const ttl = 150 * time.Millisecond
	s := mk(t, WithMarkTTL(ttl))
	k := RequestKey("c", 3)
	// From before the mark is set: read after it, a busy machine's delay
	// between the two Begins made the mark look early (113 ms of 150 in
	// a CI run).
	start := time.Now()
	hung := begin(t, s, k)
	wantKind(t, hung, First)
	o := begin(t, s, k) // waits for the mark to expire
	wantKind(t, o, First)
	if el := time.Since(start); el < ttl-20*time.Millisecond || el > ttl+2*time.Second {
		t.Fatalf("took over after %v, mark TTL %v", el, ttl)
	}
	if err := hung.Complete(msg(1, 3, "hung")); !errors.Is(err, ErrMarkLost) {
		t.Fatalf("late Complete: %v, want ErrMarkLost", err)
	}
	if err := o.Complete(msg(1, 3, "taker")); err != nil {
		t.Fatal(err)
	}
	d := begin(t, s, k)
	wantKind(t, d, Duplicate)
	if !bytes.HasSuffix(d.Answer(), []byte("taker")) {
		t.Fatalf("answer %q", d.Answer())
	}
}

// testPartialTakeover: a request's marks expire, and its accounting record,
// re-sent under a new End-to-End id, takes the record key over. The first
// request's late Complete then stores nothing, under neither key, and
// drops its mark on its request key (ErrMarkLost): a Begin of that key is
// First, not a duplicate answered with a result never committed, and the
// record's answer, by every key, is the new owner's.
func testPartialTakeover(t *testing.T, mk storeMaker) {
	const ttl = 150 * time.Millisecond
	s := mk(t, WithMarkTTL(ttl))
	a, b := RequestKey("c", 10), RequestKey("c", 11)
	rec := AccountingRecord{SessionID: "c;10", RecordType: 2, RecordNumber: 1}.Key()
	first := begin(t, s, a, rec)
	wantKind(t, first, First)
	time.Sleep(ttl + 50*time.Millisecond)
	second := begin(t, s, b, rec) // the record re-sent: takes rec over
	wantKind(t, second, First)
	if err := first.Complete(msg(1, 10, "first")); !errors.Is(err, ErrMarkLost) {
		t.Fatalf("late Complete: %v, want ErrMarkLost", err)
	}
	o := begin(t, s, a)
	if o.Duplicate() {
		t.Fatalf("the first request's key holds %q: an answer never committed", o.Answer())
	}
	_ = o.Abandon()
	if err := second.Complete(msg(1, 11, "second")); err != nil {
		t.Fatal(err)
	}
	for _, keys := range [][]Key{{a, rec}, {rec}, {b}} {
		d := begin(t, s, keys...)
		wantKind(t, d, Duplicate)
		if !bytes.HasSuffix(d.Answer(), []byte("second")) {
			t.Fatalf("answer %q, want the second's", d.Answer())
		}
	}
}

func testWaitContext(t *testing.T, mk storeMaker) {
	s := mk(t, WithMarkTTL(10*time.Second))
	k := RequestKey("c", 4)
	o := begin(t, s, k)
	defer o.Abandon()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Begin(ctx, k)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Begin: %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("returned after %v", el)
	}
	// A canceled context fails at once.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := s.Begin(ctx2, RequestKey("c", 5)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Begin with canceled ctx: %v", err)
	}
}

// testBothKeys: an accounting record is a duplicate by End-to-End id, or by
// its accounting key when re-sent with a new End-to-End id.
func testBothKeys(t *testing.T, mk storeMaker) {
	s := mk(t)
	ts := []byte{0xe9, 0x00, 0x00, 0x01}
	acct := AccountingKey("nas1;1;42", ts, "nas1.example.net", "nas1")
	o := begin(t, s, RequestKey("nas1.example.net", 100), acct)
	wantKind(t, o, First)
	if err := o.Complete(msg(1, 100, "ACA")); err != nil {
		t.Fatal(err)
	}
	// Same record re-sent with a new End-to-End id.
	d := begin(t, s, RequestKey("nas1.example.net", 101), acct)
	wantKind(t, d, Duplicate)
	// Same End-to-End id (e.g. via another agent), accounting key anyhow.
	wantKind(t, begin(t, s, RequestKey("nas1.example.net", 100)), Duplicate)
	// Another interim record of the same session (other timestamp) is new.
	acct2 := AccountingKey("nas1;1;42", []byte{0xe9, 0, 0, 2}, "nas1.example.net", "nas1")
	o2 := begin(t, s, RequestKey("nas1.example.net", 102), acct2)
	wantKind(t, o2, First)
	// While o2 is in flight, a duplicate by either key waits; abandon
	// frees both keys.
	if err := o2.Abandon(); err != nil {
		t.Fatal(err)
	}
	wantKind(t, begin(t, s, acct2), First)
	wantKind(t, begin(t, s, RequestKey("nas1.example.net", 102)), First)
}

func testAgeExpiryRealTime(t *testing.T, mk storeMaker) {
	const age = 300 * time.Millisecond
	s := mk(t, WithMaxAge(age))
	k := RequestKey("c", 6)
	o := begin(t, s, k)
	if err := o.Complete(msg(1, 6, "a")); err != nil {
		t.Fatal(err)
	}
	wantKind(t, begin(t, s, k), Duplicate)
	time.Sleep(age + 100*time.Millisecond)
	wantKind(t, begin(t, s, k), First)
}

func testMisuse(t *testing.T, mk storeMaker) {
	s := mk(t)
	ctx := context.Background()
	if _, err := s.Begin(ctx); !errors.Is(err, ErrNoKeys) {
		t.Fatalf("no keys: %v", err)
	}
	if _, err := s.Begin(ctx, RequestKey("c", 7), Key{}); !errors.Is(err, ErrZeroKey) {
		t.Fatalf("zero key: %v", err)
	}
	k := RequestKey("c", 7)
	o := begin(t, s, k, k) // a repeated key counts once
	if err := o.Complete(nil); !errors.Is(err, ErrEmptyAnswer) {
		t.Fatalf("empty answer: %v", err)
	}
	if err := o.Complete(msg(1, 7, "x")); err != nil { // still open after ErrEmptyAnswer
		t.Fatal(err)
	}
	if err := o.Complete(msg(1, 7, "y")); !errors.Is(err, ErrFinished) {
		t.Fatalf("second Complete: %v", err)
	}
	if err := o.Abandon(); err != nil {
		t.Fatalf("Abandon after Complete: %v", err)
	}
	d := begin(t, s, k)
	wantKind(t, d, Duplicate)
	if !bytes.HasSuffix(d.Answer(), []byte("x")) {
		t.Fatalf("answer %q", d.Answer())
	}
	if err := d.Complete(msg(1, 7, "z")); !errors.Is(err, ErrNotFirst) {
		t.Fatalf("Complete on Duplicate: %v", err)
	}
	if err := d.Abandon(); err != nil {
		t.Fatalf("Abandon on Duplicate: %v", err)
	}
}

// testExactlyOneFirst: many goroutines hit the same keys, in both key orders
// and combinations; every key gets exactly one First, and every other call
// gets that First's answer.
func testExactlyOneFirst(t *testing.T, mk storeMaker) {
	s := mk(t, WithMarkTTL(10*time.Second))
	const nKeys, workers, rounds = 8, 32, 8
	req := make([]Key, nKeys)
	acct := make([]Key, nKeys)
	for i := range req {
		req[i] = RequestKey("c", uint32(1000+i))
		acct[i] = AccountingKey(fmt.Sprint("s", i), nil, "c", "")
	}
	var firsts [nKeys]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*nKeys)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for round := 0; round < rounds; round++ {
				for _, i := range r.Perm(nKeys) {
					var keys []Key
					switch r.IntN(3) {
					case 0:
						keys = []Key{req[i]}
					case 1:
						keys = []Key{acct[i], req[i]}
					default:
						keys = []Key{req[i], acct[i]}
					}
					o, err := s.Begin(context.Background(), keys...)
					if err != nil {
						errs <- err
						continue
					}
					want := fmt.Sprint("answer-", i)
					if o.First() {
						firsts[i].Add(1)
						time.Sleep(time.Millisecond) // keep it in flight a while
						if err := o.Complete(msg(1, 1, want)); err != nil {
							errs <- err
						}
					} else if !bytes.HasSuffix(o.Answer(), []byte(want)) {
						errs <- fmt.Errorf("key %d: answer %q", i, o.Answer())
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range firsts {
		if n := firsts[i].Load(); n != 1 {
			t.Errorf("key %d: %d Firsts, want exactly 1", i, n)
		}
	}
}
