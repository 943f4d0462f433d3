package serve

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Log lines about what a remote party did (a refused connection, a bad
// frame, a failed authenticator, a paused reader, a limit hit) are
// rate-limited per kind, so that a flood of hostile connections or
// packets cannot fill the disk: at most logBurst lines of one kind per
// logWindow, then one line per window that says how many were suppressed.
// Every occurrence is counted, written or not (Counts).
const (
	logBurst  = 20
	logWindow = 10 * time.Second
)

// Kind is a kind of rate-limited log line.
type Kind uint8

// Kinds of rate-limited log lines.
const (
	KindRefused       Kind = iota // a connection closed at once: over a limit
	KindBadOpening                // refused before it was admitted: a bad CER, no valid first packet
	KindBadFrame                  // a frame that breaks the framing rules
	KindBadRequest                // a well-framed request refused before its handler
	KindBadAuth                   // a failed authenticator: a wrong shared secret, or forged
	KindPaused                    // a reader paused: the peer's requests are not answered yet
	KindWriteTimeout              // a write that did not finish in time
	KindUnmatched                 // an answer that matches no request
	KindConnDown                  // a connection lost
	KindAcceptFailed              // an accept that failed (out of descriptors)
	KindReadFailed                // a read of a datagram socket that failed
	KindTimeout                   // a connection idle or too slow, closed
	KindOverload                  // a request dropped: its handler budget and queue are full
	KindDropped                   // a request dropped for another reason
	KindUnseenReplay              // a request with the T flag that a duplicate store of this process alone had never seen
	KindUnknownClient             // a RADIUS datagram or connection from a source that is no configured client
	KindHandlerPanic              // a request whose handler panicked, answered for it
	numKinds
)

var kindNames = [numKinds]string{
	KindRefused: "refused", KindBadOpening: "bad_opening", KindBadFrame: "bad_frame",
	KindBadRequest: "bad_request", KindBadAuth: "bad_auth", KindPaused: "paused",
	KindWriteTimeout: "write_timeout", KindUnmatched: "unmatched", KindConnDown: "conn_down",
	KindAcceptFailed: "accept_failed", KindReadFailed: "read_failed", KindTimeout: "timeout", KindOverload: "overload",
	KindDropped: "dropped", KindUnseenReplay: "unseen_replay", KindUnknownClient: "unknown_client",
	KindHandlerPanic: "handler_panic",
}

// String returns the kind's name, as Counts keys it.
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "unknown"
}

// limiter is process-wide: every listener and peer shares it, whatever
// Logger each was given, so that the bound holds for the process.
var limiter rateLimiter

type rateLimiter struct {
	mu    sync.Mutex
	start [numKinds]time.Time
	n     [numKinds]int
	total [numKinds]atomic.Uint64
}

// allow reports whether a line of kind k may be written now, and how many
// of that kind were suppressed since the last one written. A time before
// the window's start (a clock set back, one without a monotonic reading;
// in tests, a synctest bubble's clock, which starts in 2000) starts a new
// window: it would otherwise count against the window's budget until the
// clock caught up again.
func (l *rateLimiter) allow(k Kind, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := now.Sub(l.start[k]); d >= logWindow || d < 0 {
		suppressed = max(l.n[k]-logBurst, 0)
		l.start[k], l.n[k] = now, 0
	}
	l.n[k]++
	return l.n[k] <= logBurst, suppressed
}

// Log counts one occurrence of kind k and writes msg at level unless that
// kind is over its rate. A line written after some were suppressed says
// how many ("suppressed").
func Log(lg *slog.Logger, level slog.Level, k Kind, msg string, args ...any) {
	if lg == nil || !lg.Enabled(context.Background(), level) {
		limiter.total[k].Add(1) // counted, and the rate's budget kept
		return
	}
	Limited(lg, level, k, msg, args...).Write(lg)
}

// Line is a log line decided now and written later: a peer decides its
// lines under its lock or on a connection's reader and writes them on its
// notice queue, so that a slow Logger holds neither.
type Line struct {
	level slog.Level
	msg   string
	args  []any
}

// NewLine returns the line msg at level, or nil without a Logger. It does
// not ask the Logger whether it writes that level (its handler's code
// does not run under the caller's lock): Write does.
func NewLine(lg *slog.Logger, level slog.Level, msg string, args ...any) *Line {
	if lg == nil {
		return nil
	}
	return &Line{level, msg, args}
}

// Limited counts one occurrence of kind k, as Log does, and returns the
// line to write, or nil without a Logger or when the kind is over its
// rate. Like NewLine, it leaves the Logger's level to Write.
func Limited(lg *slog.Logger, level slog.Level, k Kind, msg string, args ...any) *Line {
	limiter.total[k].Add(1)
	if lg == nil {
		return nil
	}
	ok, n := limiter.allow(k, time.Now())
	if !ok {
		return nil
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	return &Line{level, msg, args}
}

// Write writes l to lg; a nil Line writes nothing.
func (l *Line) Write(lg *slog.Logger) {
	if l != nil {
		lg.Log(context.Background(), l.level, l.msg, l.args...)
	}
}

// Counts returns how many times each kind was logged (or would have been,
// past the rate) since the process started, by Kind.String. It is safe
// for concurrent use.
func Counts() map[string]uint64 {
	m := make(map[string]uint64, numKinds)
	for k := range numKinds {
		m[k.String()] = limiter.total[k].Load()
	}
	return m
}

// Count returns how many times kind k was logged since the process
// started, written or suppressed.
func Count(k Kind) uint64 { return limiter.total[k].Load() }

// Kinds returns every Kind, in order.
func Kinds() []Kind {
	ks := make([]Kind, numKinds)
	for k := range numKinds {
		ks[k] = k
	}
	return ks
}
