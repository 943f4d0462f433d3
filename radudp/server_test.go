package radudp

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

type testServer struct {
	*Server
	applied atomic.Int64
	gate    chan struct{} // when not nil, handlers wait for it
}

func startServer(t *testing.T, n *memNet, addr string, cfg ServerConfig) *testServer {
	t.Helper()
	ts := &testServer{}
	if cfg.Secret == nil {
		cfg.Secret = testSecret
	}
	cfg.Handler = func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		ts.applied.Add(1)
		if ts.gate != nil {
			<-ts.gate
		}
		if req.Code == lradius.CodeAccountingRequest {
			return lradius.CodeAccountingResponse, nil
		}
		var attrs lradius.Attributes
		attrs.Add(18, lradius.Attribute("welcome")) // Reply-Message
		return lradius.CodeAccessAccept, attrs
	}
	s, err := NewServer(n.ListenPacket(addr), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.Server = s
	done := make(chan struct{})
	go func() { s.Serve(); close(done) }()
	t.Cleanup(func() { s.Close(context.Background()); <-done })
	return ts
}

// rawClient sends packets from one source port and collects the replies.
type rawClient struct {
	c   net.Conn
	mu  sync.Mutex
	got [][]byte
	wg  sync.WaitGroup
}

func newRawClient(t *testing.T, n *memNet, addr string) *rawClient {
	c, _ := n.Dial(context.Background(), addr)
	rc := &rawClient{c: c}
	rc.wg.Add(1)
	go func() {
		defer rc.wg.Done()
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			rc.mu.Lock()
			rc.got = append(rc.got, append([]byte(nil), buf[:k]...))
			rc.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close(); rc.wg.Wait() })
	return rc
}

func (rc *rawClient) replies() [][]byte {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([][]byte(nil), rc.got...)
}

func encode(t *testing.T, r *radius.Request, id byte) ([]byte, [16]byte) {
	t.Helper()
	b, auth, err := radius.EncodeRequest(r, id, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return b, auth
}

// A copy of a request in progress is dropped; a copy of an answered one
// gets the cached answer, byte for byte, without being handled again; after
// the TTL the entry is gone.
func TestServerDuplicateCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		s := startServer(t, n, "srv:1812", ServerConfig{})
		s.gate = make(chan struct{})
		rc := newRawClient(t, n, "srv:1812")
		pkt, auth := encode(t, accessRequest("alice"), 7)
		rc.c.Write(pkt)
		synctest.Wait()
		rc.c.Write(pkt) // in progress: dropped
		synctest.Wait()
		if st := s.Stats(); st.InProgressDrops != 1 || st.Answered != 0 {
			t.Fatalf("stats %+v, want 1 in-progress drop", st)
		}
		close(s.gate)
		synctest.Wait()
		rc.c.Write(pkt) // answered: from the cache
		synctest.Wait()
		got := rc.replies()
		if len(got) != 2 || !bytes.Equal(got[0], got[1]) {
			t.Fatalf("%d replies, want 2 identical", len(got))
		}
		if err := radius.VerifyResponse(got[0], auth, testSecret, true); err != nil {
			t.Fatal(err)
		}
		if s.applied.Load() != 1 || s.Stats().CachedAnswers != 1 {
			t.Errorf("applied %d, stats %+v; want 1 application and 1 cached answer", s.applied.Load(), s.Stats())
		}
		// The same Identifier with another authenticator is a new request.
		pkt2, _ := encode(t, accessRequest("alice"), 7)
		rc.c.Write(pkt2)
		synctest.Wait()
		if s.applied.Load() != 2 {
			t.Errorf("a reused Identifier was not handled as a new request")
		}
		// After the TTL the entry is gone: the copy is handled again.
		time.Sleep(DefaultCacheTTL)
		rc.c.Write(pkt)
		synctest.Wait()
		if s.applied.Load() != 3 {
			t.Errorf("applied %d after the TTL, want 3", s.applied.Load())
		}
	})
}

// The cache holds at most CacheEntries requests, the oldest leaving first.
func TestServerCacheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		s := startServer(t, n, "srv:1812", ServerConfig{CacheEntries: 4})
		rc := newRawClient(t, n, "srv:1812")
		var first []byte
		for i := range 6 {
			pkt, _ := encode(t, accessRequest("u"), byte(i))
			if i == 0 {
				first = pkt
			}
			rc.c.Write(pkt)
			synctest.Wait()
		}
		if st := s.Stats(); st.CacheEntries != 4 || st.CacheEvicted != 2 {
			t.Fatalf("stats %+v, want 4 entries and 2 evicted", st)
		}
		rc.c.Write(first) // evicted: handled again
		synctest.Wait()
		if s.applied.Load() != 7 {
			t.Errorf("applied %d, want 7", s.applied.Load())
		}
	})
}

// Status-Server is answered with Access-Accept and never handled as a
// login; packets with a wrong secret are dropped.
func TestServerStatusServerAndBadSecret(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		s := startServer(t, n, "srv:1812", ServerConfig{})
		p := newTestPeer(t, n, "srv:1812", PeerConfig{})
		resp, err := p.Exchange(context.Background(), &radius.Request{Code: lradius.CodeStatusServer})
		if err != nil || resp.Packet.Code != lradius.CodeAccessAccept {
			t.Fatalf("Status-Server: %v %v", resp, err)
		}
		if s.applied.Load() != 0 || s.Stats().StatusServer != 1 {
			t.Errorf("Status-Server handled as a request: %+v", s.Stats())
		}
		bad := newTestPeer(t, n, "srv:1812", PeerConfig{Secret: []byte("wrong"), Retries: 1})
		if _, err := bad.Exchange(context.Background(), accountingStop("x")); err == nil {
			t.Fatal("a request with the wrong secret was answered")
		}
		if s.Stats().BadRequests != 1 {
			t.Errorf("stats %+v, want 1 bad request", s.Stats())
		}
	})
}

// An accounting record retried under a new Identifier to another server
// sharing the store is applied once; each copy gets an answer that
// verifies against its own request.
func TestServerAccountingAppliedOnceAcrossServers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newMemNet()
		store := dedup.NewMemory()
		defer store.Close()
		a := startServer(t, n, "a:1813", ServerConfig{Store: store})
		b := startServer(t, n, "b:1813", ServerConfig{Store: store})
		pa := newTestPeer(t, n, "a:1813", PeerConfig{})
		pb := newTestPeer(t, n, "b:1813", PeerConfig{Secret: testSecret})
		rec := accountingStop("sess-42")
		rec.Attributes.Add(radius.AttrEventTimestamp, lradius.Attribute([]byte{0x66, 1, 2, 3}))
		if _, err := pa.Exchange(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		delayed := withDelay(rec, 9*time.Second)
		if _, err := pb.Exchange(context.Background(), delayed); err != nil {
			t.Fatal(err)
		}
		if a.applied.Load()+b.applied.Load() != 1 || b.Stats().StoreDuplicates != 1 {
			t.Errorf("applied %d+%d, b %+v; want once, and b answering from the store", a.applied.Load(), b.applied.Load(), b.Stats())
		}
	})
}
