package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRadiusClientNamesSecretMismatch: aaa-peer client over radius+tcp://
// with a shared secret the aaa-peer server does not have. The server
// closes each connection at its first request; the client's requests
// fail, and instead of a bare timeout it says why they probably did, with
// the server's address: in its log, and in the report's stream counters
// of that server (secret_mismatch, secret_mismatch_reason).
func TestRadiusClientNamesSecretMismatch(t *testing.T) {
	t.Parallel()
	_, url := startRADIUSServer(t)
	addr := strings.TrimPrefix(url, "radius+tcp://")
	wrong := filepath.Join(t.TempDir(), "wrong-secret")
	if err := os.WriteFile(wrong, []byte("not-"+testRadiusSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The requests wait for the server to come back into service until
	// their --request-timeout, and fail: exit 3.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr syncBuffer
	code := run(ctx, []string{"client", "--peer", url, "--secret-file", wrong, "--app", "auth",
		"--requests", "2", "--concurrency", "2", "--request-timeout", "3s", "--log-level", "warn"}, &stdout, &stderr)
	if code != 3 {
		t.Fatalf("exit %d with the wrong secret, want 3\n%s", code, stderr.String())
	}
	var rep clientReport
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if rep.Failed != 2 || len(rep.Servers) != 1 || len(rep.Stream) != 1 {
		t.Fatalf("report %s", stdout.String())
	}
	// A request sent on the connection is named by what became of it,
	// also when it fails later, at its deadline; one that came while
	// the server was out of service was never sent.
	if named := rep.FailedBy["no reply that verifies: shared secret mismatch?"]; named < 1 || named+rep.FailedBy["not in service"] != 2 {
		t.Errorf("failed_by %v: want those sent named a secret mismatch, the others not in service", rep.FailedBy)
	}
	st := rep.Stream[0]
	if st.SecretMismatch < 1 || !strings.Contains(st.SecretMismatchReason, "shared secret mismatch?") || !strings.Contains(st.SecretMismatchReason, addr) {
		t.Errorf("report: secret_mismatch %d, secret_mismatch_reason %q; want counted, naming %s", st.SecretMismatch, st.SecretMismatchReason, addr)
	}
	if out := stderr.String(); !strings.Contains(out, "shared secret mismatch?") || !strings.Contains(out, addr) {
		t.Errorf("the log does not name the mismatch with %s:\n%s", addr, out)
	}
}
