package status

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/watchdog"
)

// A Diameter server's rows show, per client, the requests read and not
// answered yet: on the page, in the JSON and as a gauge; none once they
// are answered.
func TestUnansweredRequests(t *testing.T) {
	release := make(chan struct{})
	srv, err := peer.Listen("tcp://127.0.0.1:0", peer.Config{OriginHost: "srv.example.net", OriginRealm: "example.net",
		Handler: func(ctx context.Context, p *peer.Peer, req []byte) []byte {
			<-release
			return answer(ctx, p, req)
		}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := peer.Dial("tcp://"+srv.Addr().String(), peer.Config{OriginHost: "cli.example.net", OriginRealm: "example.net",
		Logger: quiet, Watchdog: watchdog.Config{Twinit: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.WaitState(ctx, watchdog.Okay); err != nil {
		t.Fatal(err)
	}
	const n = 3
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.Request(ctx, acr(i))
			errs <- err
		}()
	}
	src := SourceFunc(func() Snapshot {
		return Snapshot{Role: RoleServer, Identity: Identity{OriginHost: "srv.example.net"}, Peers: ServerPeers(srv.Peers(), nil)}
	})
	for len(srv.Peers()) == 0 || srv.Peers()[0].Stats().Unanswered < n {
		if ctx.Err() != nil {
			close(release)
			t.Fatal("the server never held the requests")
		}
		time.Sleep(5 * time.Millisecond)
	}
	check := func(want int) {
		t.Helper()
		s := src.Snapshot()
		if len(s.Peers) != 1 || s.Peers[0].Unanswered != want {
			t.Errorf("rows %+v, want %d unanswered", s.Peers, want)
		}
		var js struct {
			Peers []map[string]any `json:"peers"`
		}
		if err := json.Unmarshal([]byte(body(t, get(t, Handler(src), "/status.json"))), &js); err != nil {
			t.Fatal(err)
		}
		if v, ok := js.Peers[0]["unanswered"]; want == 0 && ok || want > 0 && v != float64(want) {
			t.Errorf("JSON unanswered = %v (%v), want %d", v, ok, want)
		}
		cell := `<td class="n"></td>` // pending, then unanswered
		if want > 0 {
			cell = `<td class="n">` + string(rune('0'+want)) + `</td>`
		}
		if page := body(t, get(t, Handler(src), "/")); !strings.Contains(page, `<th class="n">pending</th><th class="n">unanswered</th>`) ||
			!strings.Contains(page, `<td class="n">0</td>`+cell+`<td class="n">`) {
			t.Errorf("page lacks the unanswered column or the cell %s", cell)
		}
		fams, _ := families(t, src, NewMetrics())
		expect(t, fams, float64(want), MetricUnanswered, "peer", "cli.example.net")
	}
	check(n)
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for srv.Peers()[0].Stats().Unanswered != 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	check(0)
}
