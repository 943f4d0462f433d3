package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCPUProfile: --cpuprofile of the server and of the client each write
// a profile of the run, a gzipped pprof protobuf, closed at exit.
func TestCPUProfile(t *testing.T) {
	// One CPU profile at a time in a process: the server's run, then the
	// client's.
	for _, side := range []string{"server", "client"} {
		t.Run(side, func(t *testing.T) {
			prof := filepath.Join(t.TempDir(), side+".prof")
			var srvFlags, cliFlags []string
			if side == "server" {
				srvFlags = []string{"--cpuprofile", prof}
			} else {
				cliFlags = []string{"--cpuprofile", prof}
			}
			srv := startServer(t, srvFlags...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if r := runTestClient(t, ctx, srv.url, append([]string{"--requests", "200", "--concurrency", "4"}, cliFlags...)...); r.code != 0 {
				t.Fatalf("client exit %d: %s", r.code, r.stderr)
			}
			if code := srv.stop(t); code != 0 {
				t.Fatalf("server exit %d: %s", code, srv.stderr)
			}
			checkProfile(t, prof)
		})
	}
}

// The RADIUS client writes its profile as the Diameter client does, over a
// stream with Nagle off.
func TestCPUProfileRADIUSClient(t *testing.T) {
	sf := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(sf, []byte("s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, "--listen", "radius+tcp://127.0.0.1:0", "--secret-file", sf)
	var u string
	for _, l := range readLines(t, srv) {
		if strings.HasPrefix(l, "radius+tcp://") {
			u = l
		}
	}
	prof := filepath.Join(t.TempDir(), "radius-client.prof")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, rep, stderr := radiusRun(ctx, "--peer", u, "--secret-file", sf, "--app", "auth", "--requests", "200", "--rate", "2000",
		"--no-delay", "--cpuprofile", prof)
	if code != 0 || rep.Answered != 200 {
		t.Fatalf("client exit %d, %d answered: %s", code, rep.Answered, stderr)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("server exit %d: %s", code, srv.stderr)
	}
	checkProfile(t, prof)
}

// A Diameter client's --request-timeout is its --timeout, as the RADIUS
// client names the request's deadline.
func TestRequestTimeoutNamesTheDeadline(t *testing.T) {
	var o clientOptions
	fs := clientFlags(&o, io.Discard)
	if err := fs.Parse([]string{"--request-timeout", "42s"}); err != nil {
		t.Fatal(err)
	}
	if o.timeout != 42*time.Second {
		t.Fatalf("--request-timeout 42s gave a deadline of %v", o.timeout)
	}
}

// TestCPUProfileBadPath: an unwritable --cpuprofile fails the command
// before it does anything, naming the flag.
func TestCPUProfileBadPath(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "no", "such", "dir", "x.prof")
	var stderr syncBuffer
	code := runServer(context.Background(), []string{"--listen", "tcp://127.0.0.1:0", "--origin-host", "s.example.net",
		"--origin-realm", "example.net", "--cpuprofile", bad}, io.Discard, &stderr)
	if code != 1 || !bytes.Contains([]byte(stderr.String()), []byte("--cpuprofile")) {
		t.Fatalf("server: exit %d, stderr %q; want 1 naming --cpuprofile", code, stderr.String())
	}
	var cerr syncBuffer
	code = runClient(context.Background(), []string{"--peer", "tcp://127.0.0.1:9", "--origin-host", "c.example.net",
		"--origin-realm", "example.net", "--destination-realm", "example.net", "--cpuprofile", bad}, io.Discard, &cerr)
	if code != 1 || !bytes.Contains([]byte(cerr.String()), []byte("--cpuprofile")) {
		t.Fatalf("client: exit %d, stderr %q; want 1 naming --cpuprofile", code, cerr.String())
	}
}

// checkProfile: path holds a complete gzip stream with a protobuf inside
// (runtime/pprof's format), so the profile was stopped and flushed.
func checkProfile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: truncated profile: %v", path, err)
	}
	if len(b) < 16 || !bytes.Contains(b, []byte("samples")) {
		t.Fatalf("%s: %d bytes, no sample type: not a CPU profile", path, len(b))
	}
}
