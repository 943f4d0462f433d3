package peer

import (
	"log/slog"

	"github.com/aaatp/aaatp/internal/serve"
)

// The kinds of the rate-limited lines a peer writes about what a remote
// peer did; serve.Log bounds them process-wide and counts them.
const (
	logRefusedCER   = serve.KindBadOpening
	logBadFrame     = serve.KindBadFrame
	logBadRequest   = serve.KindBadRequest
	logPaused       = serve.KindPaused
	logWriteTimeout = serve.KindWriteTimeout
	logUnmatched    = serve.KindUnmatched
	logConnDown     = serve.KindConnDown
)

// logLimited writes one line at level unless its kind is over the rate.
func logLimited(lg *slog.Logger, level slog.Level, k serve.Kind, msg string, args ...any) {
	serve.Log(lg, level, k, msg, args...)
}
