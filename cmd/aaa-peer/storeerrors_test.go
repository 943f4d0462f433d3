package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
)

// downStore is a --dedup store whose every Begin fails.
type downStore struct{}

func (downStore) Begin(context.Context, ...dedup.Key) (*dedup.Outcome, error) {
	return nil, errors.New("dial tcp 10.9.8.7:6379: connect: connection refused")
}
func (downStore) Close() error { return nil }

// When the --dedup store fails, the server refuses the request with
// DIAMETER_TOO_BUSY, telling the peer only that the store is unavailable,
// and logs the cause for the operator, once per interval however many
// requests meet it.
func TestServerLogsDedupStoreErrors(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	s := &server{o: serverOptions{originHost: "s.example.net", originRealm: "example.net"}, log: log,
		storeErrs: dedup.NewErrorLog(log, 0)}
	cfg := s.peerConfig(downStore{}, func(context.Context, *peer.Peer, []byte) []byte {
		t.Fatal("applied without the store")
		return nil
	}, nil)
	for i := range 5 {
		ans := cfg.Handler(context.Background(), nil, acr(uint32(i+1), uint32(i+1)))
		if rc, _ := message.ResultCodeOf(ans); rc != message.TooBusy {
			t.Fatalf("answer %d, want %d", rc, message.TooBusy)
		}
		if msg, _ := message.StringOf(ans, message.ErrorMessage, 0); strings.Contains(msg, "10.9.8.7") {
			t.Errorf("the peer was told the store's address: %q", msg)
		}
	}
	if n := strings.Count(buf.String(), "10.9.8.7:6379"); n != 1 {
		t.Errorf("the cause logged %d times for 5 refusals within one interval, want once:\n%s", n, buf.String())
	}
}
