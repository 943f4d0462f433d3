package dedup

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
)

// lines returns the lines written to b so far.
func linesOf(b *testhelp.SyncBuffer) []string {
	s := strings.TrimSpace(b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// failingStore fails every Begin with err.
type failingStore struct{ err error }

func (f failingStore) Begin(context.Context, ...Key) (*Outcome, error) { return nil, f.err }
func (failingStore) Close() error                                      { return nil }

// TestWrapStoreDownAnswerHidesCause: the 3004 a request gets while the
// store is down says so in a fixed Error-Message: the store's error, with
// its internal address, is for the server's log, not for the peer.
func TestWrapStoreDownAnswerHidesCause(t *testing.T) {
	cause := errors.New("dedup: redis claim: dial tcp 10.20.30.40:6379: connect: connection refused")
	w := Wrap(failingStore{cause}, func(context.Context, *peer.Peer, []byte) []byte {
		t.Fatal("handler ran without the store")
		return nil
	}, nil)
	ans := w(context.Background(), nil, acrFor(1, 1))
	if rc, _ := message.ResultCodeOf(ans); rc != message.TooBusy {
		t.Fatalf("answered %d, want 3004", rc)
	}
	if em, _ := message.StringOf(ans, message.ErrorMessage, 0); em != "duplicate store unavailable" {
		t.Fatalf("Error-Message %q, want the fixed text", em)
	}
}

// TestWrapLogsStoreErrorsOncePerInterval: a wrapper given an ErrorLog logs
// why the store failed, once per interval however many requests it
// refuses, the next line saying how many failures went unlogged; the
// store failing at Complete is logged the same way.
func TestWrapLogsStoreErrorsOncePerInterval(t *testing.T) {
	var buf testhelp.SyncBuffer
	const every = 200 * time.Millisecond
	log := NewErrorLog(slog.New(slog.NewTextHandler(&buf, nil)), every)
	cause := errors.New("dial tcp 10.20.30.40:6379: connection refused")
	w := Wrap(failingStore{cause}, func(context.Context, *peer.Peer, []byte) []byte { return nil }, nil, LogStoreErrors(log))
	start := time.Now()
	for i := range 5 {
		w(context.Background(), nil, acrFor(uint32(i), 1))
	}
	lines := linesOf(&buf)
	if time.Since(start) < every && len(lines) != 1 {
		t.Fatalf("%d lines for 5 failures within the interval, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[0], "10.20.30.40:6379") || !strings.Contains(lines[0], "level=WARN") {
		t.Fatalf("line without the cause: %s", lines[0])
	}
	time.Sleep(every + 50*time.Millisecond)
	w(context.Background(), nil, acrFor(9, 1))
	lines = linesOf(&buf)
	if len(lines) != 2 || !strings.Contains(lines[1], "unlogged=4") {
		t.Fatalf("after the interval: %d lines, want 2, the second with unlogged=4:\n%s", len(lines), strings.Join(lines, "\n"))
	}

	// The store failing at Complete.
	var buf2 testhelp.SyncBuffer
	log2 := NewErrorLog(slog.New(slog.NewTextHandler(&buf2, nil)), every)
	w2 := Wrap(completeFails{cause}, func(_ context.Context, _ *peer.Peer, req []byte) []byte {
		return message.NewAnswer(req).ResultCode(message.Success).Bytes()
	}, nil, LogStoreErrors(log2))
	ans := w2(context.Background(), nil, acrFor(1, 1))
	if rc, _ := message.ResultCodeOf(ans); rc != message.TooBusy {
		t.Fatalf("answered %d, want 3004", rc)
	}
	if em, _ := message.StringOf(ans, message.ErrorMessage, 0); em != "duplicate store unavailable" {
		t.Fatalf("Error-Message %q, want the fixed text", em)
	}
	if lines := linesOf(&buf2); len(lines) != 1 || !strings.Contains(lines[0], "10.20.30.40:6379") {
		t.Fatalf("Complete's failure logged as %q", lines)
	}
}

// completeFails is a store whose Begin is First and whose Complete fails.
type completeFails struct{ err error }

func (c completeFails) Begin(_ context.Context, keys ...Key) (*Outcome, error) {
	o := &Outcome{kind: First, fin: c}
	return o, o.setKeys(keys)
}
func (completeFails) Close() error                      { return nil }
func (c completeFails) complete(*Outcome, []byte) error { return c.err }
func (completeFails) abandon(*Outcome) error            { return nil }

// TestErrorLogNil: a nil ErrorLog, and one without a Logger, log nothing.
func TestErrorLogNil(t *testing.T) {
	var e *ErrorLog
	e.Log("x", errors.New("y"))
	NewErrorLog(nil, 0).Log("x", errors.New("y"))
}
