package peer

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestLimiterBurstThenSuppressedCount(t *testing.T) {
	var l limiter
	t0 := time.Unix(1000, 0)
	allowed := 0
	for i := 0; i < 1000; i++ {
		if ok, _ := l.allow(logBadFrame, t0.Add(time.Duration(i)*time.Millisecond)); ok {
			allowed++
		}
	}
	assert.Equal(t, logBurst, allowed, "a flood within one window writes logBurst lines")
	ok, n := l.allow(logBadFrame, t0.Add(logWindow+time.Second))
	assert.True(t, ok)
	assert.Equal(t, 1000-logBurst, n, "the next window's first line says how many were dropped")
	ok, _ = l.allow(logPaused, t0)
	assert.True(t, ok, "kinds are limited separately")
}

func TestLogLimitedBoundsOutput(t *testing.T) {
	var buf bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&buf, nil))
	for i := 0; i < 10000; i++ {
		logLimited(lg, slog.LevelWarn, logWriteTimeout, "closing", "i", i)
	}
	assert.LessOrEqual(t, strings.Count(buf.String(), "\n"), logBurst)
}
