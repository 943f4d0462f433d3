package peer

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Log lines a peer writes about what a remote peer did (a refused CER, a
// bad frame, a paused reader, a limit hit) are rate-limited per kind, so
// that a flood of hostile connections cannot fill the disk: at most
// logBurst lines of one kind per logWindow, then one line per window that
// says how many were suppressed.
const (
	logBurst  = 20
	logWindow = 10 * time.Second
)

// Kinds of rate-limited log lines.
const (
	logRefusedCER = iota
	logBadFrame
	logBadRequest
	logPaused
	logLimit
	logWriteTimeout
	logUnmatched
	logConnDown
	logKinds
)

// rateLog is process-wide: every Peer and Server shares it, whatever Logger
// each was given.
var rateLog limiter

type limiter struct {
	mu    sync.Mutex
	start [logKinds]time.Time
	n     [logKinds]int
}

// allow reports whether a line of kind k may be written now, and how many
// of that kind were suppressed since the last one written.
func (l *limiter) allow(k int, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start[k]) >= logWindow {
		suppressed = max(l.n[k]-logBurst, 0)
		l.start[k], l.n[k] = now, 0
	}
	l.n[k]++
	return l.n[k] <= logBurst, suppressed
}

// logLimited writes one line at level unless its kind is over the rate.
func logLimited(lg *slog.Logger, level slog.Level, k int, msg string, args ...any) {
	if !lg.Enabled(context.Background(), level) {
		return
	}
	ok, n := rateLog.allow(k, time.Now())
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	lg.Log(context.Background(), level, msg, args...)
}
