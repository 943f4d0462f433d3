//go:build unix

package status

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/internal/testhelp"
)

// browserBudget bounds one Chromium run (wall clock).
const browserBudget = 25 * time.Second

// TestPageInChromium loads the status page in headless Chromium and checks
// that the peer rows are there and that a state change made in the Source
// after the page was served reaches the DOM through the page's polling
// script (not a reload: the page is requested once).
//
// --virtual-time-budget lets the page's timers run (in virtual time, which
// Chromium holds still while a fetch is in flight) before --dump-dom prints
// the DOM, so the test waits for no wall-clock second and needs no
// DevTools client.
func TestPageInChromium(t *testing.T) {
	bin := testhelp.Chromium(t)

	src := newFake()
	now := time.Now()
	src.snap.Time = time.Time{} // the handler stamps each snapshot
	for i := range src.snap.Peers {
		src.snap.Peers[i].Since = now.Add(-time.Duration(i+1) * time.Minute)
		src.snap.Peers[i].LastDWA = now.Add(-time.Second)
	}
	h := Handler(src, WithPollInterval(500*time.Millisecond))

	var (
		mu       sync.Mutex
		served   []string // the pages served
		jsonHits int
	)
	wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/":
			served = append(served, rec.Body.String())
			// The state changes once the page is out: only the
			// script's polling can show it.
			src.setState("s1.example.net", "SUSPECT")
		case "/status.json":
			jsonHits++
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := ListenAndServe(ctx, "127.0.0.1:0", wrapped)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := srv.Wait(); err != nil {
			t.Error(err)
		}
	}()

	dom, stderr, err := testhelp.DumpDOM(bin, t.TempDir(), srv.URL(), 4*time.Second, browserBudget)
	if err != nil {
		t.Fatalf("chromium: %v\nstderr:\n%s", err, testhelp.Tail(stderr, 3000))
	}

	mu.Lock()
	pages, hits := served, jsonHits
	mu.Unlock()
	if len(pages) != 1 {
		t.Fatalf("page served %d times, want 1 (no reload)", len(pages))
	}
	if !strings.Contains(pages[0], `<td class="state s-OKAY">OKAY</td>`) || strings.Count(pages[0], `<td class="state s-SUSPECT">`) != 1 {
		t.Fatalf("the page as served should show s1 OKAY and only s2 SUSPECT:\n%s", pages[0])
	}
	if hits == 0 {
		t.Fatalf("the script never fetched status.json\nDOM:\n%s\nstderr:\n%s", dom, testhelp.Tail(stderr, 3000))
	}

	rows := map[string]string{}
	for _, m := range regexp.MustCompile(`(?s)<tr[^>]*data-peer="([^"]+)"[^>]*>(.*?)</tr>`).FindAllStringSubmatch(dom, -1) {
		rows[m[1]] = m[2]
	}
	if len(rows) != 2 {
		t.Fatalf("want 2 peer rows in the DOM, got %d\nDOM:\n%s", len(rows), dom)
	}
	if r := rows["s1.example.net"]; !strings.Contains(r, `s-SUSPECT">SUSPECT<`) {
		t.Errorf("s1's row does not show the new state SUSPECT: %s", r)
	}
	if r := rows["s2.example.net"]; !strings.Contains(r, `s-SUSPECT">SUSPECT<`) || !strings.Contains(r, "suspended") {
		t.Errorf("s2's row: %s", r)
	}
	if !strings.Contains(dom, `live, as of `) {
		t.Errorf("the script did not mark the page live\nDOM:\n%s", dom)
	}
	if !strings.Contains(dom, "(2 kept of 7)") || !strings.Contains(dom, "ALARM") {
		t.Errorf("failover or queue tables missing from the DOM\nDOM:\n%s", dom)
	}
}
