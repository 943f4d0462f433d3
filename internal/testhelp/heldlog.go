package testhelp

import (
	"context"
	"log/slog"
	"sync"
)

// HeldLog is a slog.Handler whose Enabled and Handle wait while the log is
// held: a Logger as slow as a full disk or a stalled collector. It is safe
// for concurrent use.
type HeldLog struct {
	mu      sync.Mutex
	held    chan struct{} // closed by Release; nil while not held
	waiting int           // records waiting in Handle
	msgs    []string      // the messages handled, in order
}

// Hold makes every record wait until Release.
func (h *HeldLog) Hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = make(chan struct{})
	}
}

// Release lets the records waiting go, and the later ones through.
func (h *HeldLog) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held != nil {
		close(h.held)
		h.held = nil
	}
}

// Waiting returns how many records are waiting in Handle.
func (h *HeldLog) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}

// Msgs returns the messages handled so far, in order.
func (h *HeldLog) Msgs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// Enabled waits while the log is held too: a handler's code, as slow as
// its Handle.
func (h *HeldLog) Enabled(context.Context, slog.Level) bool {
	h.wait()
	return true
}

func (h *HeldLog) Handle(_ context.Context, r slog.Record) error {
	h.wait()
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}

// wait waits while the log is held, counted in Waiting.
func (h *HeldLog) wait() {
	h.mu.Lock()
	held := h.held
	h.waiting++
	h.mu.Unlock()
	if held != nil {
		<-held
	}
	h.mu.Lock()
	h.waiting--
	h.mu.Unlock()
}

func (h *HeldLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *HeldLog) WithGroup(string) slog.Handler      { return h }
