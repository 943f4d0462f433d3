package dedup

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultErrorLogInterval is the interval of an ErrorLog built with none.
const DefaultErrorLogInterval = 10 * time.Second

// ErrorLog logs the failures of a duplicate store at a bounded rate: the
// first at once, then at most one line per interval, which says how many
// failures went unlogged since the line before ("unlogged"). While the
// store is down every request fails, and a line each would flood the log.
// Give one to Wrap and WrapCommit with LogStoreErrors (radpeer.Dedup takes
// one too); wrappers sharing one share its rate. A nil *ErrorLog logs
// nothing. It is safe for concurrent use.
type ErrorLog struct {
	log      *slog.Logger
	interval time.Duration
	mu       sync.Mutex
	next     time.Time // when a line may be written again
	unlogged int       // failures not logged since the last line
}

// NewErrorLog returns an ErrorLog writing to l at warn level at most once
// per interval (DefaultErrorLogInterval if interval <= 0). A nil l logs
// nothing.
func NewErrorLog(l *slog.Logger, interval time.Duration) *ErrorLog {
	if interval <= 0 {
		interval = DefaultErrorLogInterval
	}
	return &ErrorLog{log: l, interval: interval}
}

// Log records a store failure, err, of a request the caller then refused
// or dropped as msg says, and logs it unless a line was written less than
// the interval ago.
func (e *ErrorLog) Log(msg string, err error) {
	if e == nil || e.log == nil {
		return
	}
	now := time.Now()
	e.mu.Lock()
	if now.Before(e.next) {
		e.unlogged++
		e.mu.Unlock()
		return
	}
	n := e.unlogged
	e.next, e.unlogged = now.Add(e.interval), 0
	e.mu.Unlock()
	e.log.Log(context.Background(), slog.LevelWarn, msg, "err", err, "unlogged", n)
}

// WrapOption changes what Wrap and WrapCommit do.
type WrapOption func(*wrapConfig)

type wrapConfig struct {
	errLog *ErrorLog
}

// LogStoreErrors makes the wrapper log why the store failed, through log,
// for each request it refuses with DIAMETER_TOO_BUSY for that reason (the
// answer's Error-Message only says that the store is unavailable).
func LogStoreErrors(log *ErrorLog) WrapOption {
	return func(c *wrapConfig) { c.errLog = log }
}
