package status

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
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
