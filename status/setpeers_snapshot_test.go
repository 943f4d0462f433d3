package status

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/radpeer"
)

// A snapshot taken while SetPeers reloads the Client's servers is one
// roster's: it neither panics nor gives a row one server's name and
// another's URL, carrier or counters, and its rows are one of the
// configured lists, in its order.
func TestClientSnapshotDuringSetPeers(t *testing.T) {
	urls := map[string]string{}
	for _, n := range []string{"a", "b", "c"} {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0") // reads nothing: no request is sent
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		urls[n] = "radius://" + pc.LocalAddr().String()
	}
	specs := func(names ...string) []client.PeerSpec {
		ps := make([]client.PeerSpec, len(names))
		for i, n := range names {
			ps[i] = client.PeerSpec{Name: n, URL: urls[n]}
		}
		return ps
	}
	lists := [][]string{{"a"}, {"a", "b"}, {"b", "c"}, {"c", "a", "b"}}
	valid := map[string]bool{}
	for _, l := range lists {
		valid[fmt.Sprint(l)] = true
	}
	c, err := client.New(client.Config{Mode: client.PrimarySecondary, Peers: specs(lists[len(lists)-1]...),
		RADIUS: radpeer.Config{Secret: []byte("s3cret"), Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())

	ctx := context.Background()
	stop := make(chan struct{})
	var reloads atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.SetPeers(ctx, specs(lists[i%len(lists)]...)); err != nil {
				t.Error(err)
				return
			}
			reloads.Add(1)
		}
	}()

	var snaps, panics, mixed, torn int
	var first string
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); snaps++ {
		func() {
			defer func() {
				if r := recover(); r != nil {
					if panics++; first == "" {
						first = fmt.Sprint(r)
					}
				}
			}()
			s := ClientSnapshot(c)
			names := make([]string, len(s.Peers))
			for i, r := range s.Peers {
				names[i] = r.Server
				if r.URL != urls[r.Server] || (r.Peer != "" && r.Peer != urls[r.Server]) ||
					r.Counters == nil || r.Counters.Latency == nil || r.Counters.Latency.Server != r.Server {
					if mixed++; first == "" {
						first = fmt.Sprintf("row %+v: server %s is at %s", r, r.Server, urls[r.Server])
					}
				}
			}
			if !valid[fmt.Sprint(names)] {
				if torn++; first == "" {
					first = fmt.Sprintf("rows of servers %v, no configured list", names)
				}
			}
		}()
	}
	close(stop)
	wg.Wait()
	t.Logf("%d snapshots during %d SetPeers", snaps, reloads.Load())
	if reloads.Load() < 50 {
		t.Errorf("only %d SetPeers: the snapshots raced few reloads", reloads.Load())
	}
	if panics+mixed+torn > 0 {
		t.Errorf("%d panicked, %d rows mixed two servers, %d snapshots of no configured list (first: %s)", panics, mixed, torn, first)
	}
}
