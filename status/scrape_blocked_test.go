package status

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// blockingWriter is the ResponseWriter of a client that asked for
// /metrics and does not read: its first Write blocks until released.
type blockingWriter struct {
	header  http.Header
	writing chan struct{}
	release chan struct{}
}

func (w *blockingWriter) Header() http.Header { return w.header }
func (w *blockingWriter) WriteHeader(int)     {}
func (w *blockingWriter) Write(b []byte) (int, error) {
	select {
	case w.writing <- struct{}{}:
	default:
	}
	<-w.release
	return len(b), nil
}

// A scrape whose client does not read its answer (the write blocks, and
// the page has no write timeout) must not hold up the other scrapes:
// before, the handler held the Metrics lock while it wrote the answer,
// so one such client stopped every Prometheus scrape of the node for as
// long as it kept its connection open.
func TestScrapeNotHeldByAClientThatDoesNotRead(t *testing.T) {
	h := Handler(newFake(), WithMetrics(NewMetrics()))
	stuck := &blockingWriter{header: make(http.Header), writing: make(chan struct{}, 1), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(stuck, httptest.NewRequest("GET", "/metrics", nil))
	}()
	var once sync.Once
	unblock := func() { once.Do(func() { close(stuck.release) }) }
	defer func() { unblock(); <-done }()
	select {
	case <-stuck.writing:
	case <-time.After(5 * time.Second):
		t.Fatal("the first scrape did not start writing")
	}
	got := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		got <- rec.Code
	}()
	select {
	case code := <-got:
		if code != http.StatusOK {
			t.Errorf("second scrape: %d", code)
		}
	case <-time.After(3 * time.Second):
		t.Error("a second scrape waited 3 s behind a client that does not read its answer")
		unblock()
		<-got
	}
}
