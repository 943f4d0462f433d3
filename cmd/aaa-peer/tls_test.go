package main

import (
	"context"
	"testing"

	"github.com/aaatp/aaatp/internal/testhelp"
)

func TestTLS(t *testing.T) {
	t.Parallel()
	cert, key := testhelp.SelfSigned(t, t.TempDir(), "server1.example.net")
	srv := startServer(t, "--listen", "tls://127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
	// startServer's own --listen tcp:// comes first in the ready file.
	urls := readLines(t, srv)
	if len(urls) != 2 || urls[1][:6] != "tls://" {
		t.Fatalf("ready file %q", urls)
	}
	r := runTestClient(t, context.Background(), urls[1], "--requests", "20", "--tls-ca", cert)
	if r.code != 0 || r.report.Answered != 20 {
		t.Fatalf("client exit %d report %+v\n%s", r.code, r.report, r.stderr)
	}
	if code := srv.stop(t); code != 0 {
		t.Errorf("server exit %d", code)
	}
}
