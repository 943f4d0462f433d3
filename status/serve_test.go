package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestListenAndServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := ListenAndServe(ctx, "127.0.0.1:0", Handler(newFake()))
	if err != nil {
		t.Fatal(err)
	}
	if port := srv.Addr().(*net.TCPAddr).Port; port == 0 {
		t.Fatal("no port bound")
	}
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") || !strings.HasSuffix(srv.URL(), "/") {
		t.Errorf("URL %q", srv.URL())
	}
	cl := &http.Client{Timeout: 5 * time.Second}
	r, err := cl.Get(srv.URL() + "status.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || !strings.Contains(string(b), `"c1.example.net"`) {
		t.Errorf("%d %s", r.StatusCode, b)
	}
	cl.CloseIdleConnections()

	cancel()
	select {
	case <-srv.Done():
	case <-time.After(ShutdownTimeout + time.Second):
		t.Fatal("the server did not stop when its context was done")
	}
	if err := srv.Wait(); err != nil {
		t.Errorf("Wait after a normal shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", srv.Addr().String(), time.Second); err == nil {
		t.Error("still accepting after shutdown")
	}
}

func TestListenAndServeErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := ListenAndServe(context.Background(), ln.Addr().String(), Handler(newFake())); err == nil {
		t.Error("listening on a busy port did not fail")
	}
}

func TestURLUnspecifiedHost(t *testing.T) {
	for addr, want := range map[string]string{"0.0.0.0:8080": "http://127.0.0.1:8080/", "[::]:8080": "http://[::1]:8080/",
		"192.0.2.1:80": "http://192.0.2.1:80/"} {
		a, _ := net.ResolveTCPAddr("tcp", addr)
		if got := (&Server{addr: a}).URL(); got != want {
			t.Errorf("URL of %s = %q, want %q", addr, got, want)
		}
	}
}

// startLimited serves h with the given bounds until the test ends.
func startLimited(t *testing.T, h http.Handler, writeTimeout time.Duration, maxConns int) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := serveLimited(ctx, ln, h, writeTimeout, maxConns)
	t.Cleanup(func() { cancel(); srv.Wait() })
	return srv
}

// A client that asks for answers and never reads them holds its
// connection only until WriteTimeout: its write fails, the connection is
// closed, and its place is free for the next.
func TestWriteTimeoutFreesNonReaders(t *testing.T) {
	// /endless writes until a write fails, so that its connection never
	// becomes idle however much the socket buffers take: only the write
	// timeout can free it (a fixed-size answer may fit in the buffers of
	// loopback, and its connection then makes room as an idle one).
	chunk := strings.Repeat("x", 64<<10)
	var endless atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/endless" {
			io.WriteString(w, "ok")
			return
		}
		endless.Add(1)
		for {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	})
	srv := startLimited(t, h, 300*time.Millisecond, 2)
	for range 2 {
		nc, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := io.WriteString(nc, "GET /endless HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	// Both in their handler (a connection not read from yet has sent no
	// request as far as the server knows, and makes room as a silent one).
	for deadline := time.Now().Add(5 * time.Second); endless.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 non-readers in the handler", endless.Load())
		}
	}
	// Both places are taken by clients that do not read: a reader is
	// turned away until the write timeout has closed one of them, then
	// answered.
	cl := &http.Client{Timeout: 5 * time.Second}
	defer cl.CloseIdleConnections()
	start := time.Now()
	var r *http.Response
	var err error
	for time.Since(start) < 5*time.Second {
		if r, err = cl.Get(srv.URL()); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no answer within 5 s while two clients did not read theirs: %v", err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(b) != "ok" {
		t.Errorf("answer %q, want ok", b)
	}
	t.Logf("answered after %v", time.Since(start).Round(time.Millisecond))
}

// At most maxConns connections are open at once. Past it, a new
// connection takes the place of the one idle the longest (keep-alive
// clients cannot lock others out), or, when every connection is busy, is
// closed at once.
func TestMaxConnsBoundsConnections(t *testing.T) {
	release := make(chan struct{})
	var in atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.Add(1)
		<-release
		io.WriteString(w, "ok")
	})
	srv := startLimited(t, h, 5*time.Second, 2)
	get := func(cl *http.Client) error {
		r, err := cl.Get(srv.URL())
		if err != nil {
			return err
		}
		defer r.Body.Close()
		if b, _ := io.ReadAll(r.Body); string(b) != "ok" {
			return fmt.Errorf("answer %q", b)
		}
		return nil
	}
	client := func() *http.Client { // a pool of its own: connections of its own
		return &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	}
	busy := []*http.Client{client(), client()}
	errs := make(chan error, 2)
	for _, cl := range busy {
		defer cl.CloseIdleConnections()
		go func() { errs <- get(cl) }()
	}
	deadline := time.Now().Add(5 * time.Second)
	for in.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := in.Load(); n != 2 {
		t.Fatalf("%d requests in the handler, want 2", n)
	}

	// Both connections busy: a third is closed at once.
	nc, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	io.WriteString(nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection past the bound with every place busy: read %v, want it closed at once", err)
	}
	if n := in.Load(); n != 2 {
		t.Fatalf("%d requests in the handler, want 2", n)
	}

	// Both answered, their connections kept alive and idle: a new
	// client takes the place of one of them.
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	other := client()
	defer other.CloseIdleConnections()
	// The server marks a connection idle just after its answer is out:
	// the first try may come before that.
	err = get(other)
	for try := 0; err != nil && try < 20; try++ {
		time.Sleep(10 * time.Millisecond)
		err = get(other)
	}
	if err != nil {
		t.Fatalf("a client with two idle keep-alive connections open: %v", err)
	}
	for _, cl := range busy {
		if err := get(cl); err != nil {
			t.Errorf("a client whose idle connection was closed to make room: %v", err)
		}
	}
}

// Connections that send nothing hold no place from a client with a
// request: at the bound, a new connection takes the place of the oldest
// of them.
func TestSilentConnectionsMakeRoom(t *testing.T) {
	srv := startLimited(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), 5*time.Second, 2)
	var silent []net.Conn
	for range 2 {
		nc, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		io.WriteString(nc, "GET / HTTP/1.1\r\nHo") // a request begun and never ended
		silent = append(silent, nc)
		time.Sleep(10 * time.Millisecond) // distinct ages
	}
	cl := &http.Client{Transport: &http.Transport{}, Timeout: 3 * time.Second}
	defer cl.CloseIdleConnections()
	r, err := cl.Get(srv.URL())
	if err != nil {
		t.Fatalf("two connections that sent no whole request held both places: %v", err)
	}
	r.Body.Close()
	silent[0].SetReadDeadline(time.Now().Add(time.Second))
	if _, err := silent[0].Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the oldest silent connection: read %v, want it closed to make room", err)
	}
}
