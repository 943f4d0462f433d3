package hostile

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// The attacks on the RADIUS/UDP listener, radius://.

// floodCap bounds the rate of TestRADIUSUDPFloodKeepsGoodClientAnswered.
const floodCap = 30000

// udpFlood sends Access-Requests with a Message-Authenticator, each with
// a new Request Authenticator (a new request, never a retransmission),
// from one goroutine for d, at rate a second (0: as fast as it can), and
// counts the answers on its socket. attrs are added to each request.
type udpFlood struct {
	sent, answered atomic.Int64
	elapsed        time.Duration
	done           chan struct{}
}

func floodUDP(t *testing.T, s *server, local string, d time.Duration, rate float64, attrs []attr) *udpFlood {
	t.Helper()
	rc, err := s.dialRadius(schemeUDP, local, "")
	if err != nil {
		t.Fatal(err)
	}
	f := &udpFlood{done: make(chan struct{})}
	var sending atomic.Bool
	sending.Store(true)
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, radMaxLen+64)
		for {
			rc.c.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := rc.c.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() && sending.Load() {
					continue
				}
				return
			}
			f.answered.Add(1)
		}
	}()
	tmpl := radRequest(codeAccessRequest, 0, append([]attr{str(attrUserName, "flood@example.net")}, attrs...), radiusSecret, true)
	go func() {
		defer close(f.done)
		defer rc.Close()
		start := time.Now()
		var n int64
		for time.Since(start) < d {
			if rate > 0 {
				// Paced in steps of 1 ms, so that the socket buffers see
				// no bursts.
				if due := int64(time.Since(start).Seconds() * rate); n >= due {
					time.Sleep(time.Millisecond)
					continue
				}
			}
			b := append([]byte(nil), tmpl...)
			b[1] = byte(n)
			rand.Read(b[4:radHeaderLen])
			binary.BigEndian.PutUint64(b[4:], uint64(n)) // distinct whatever rand gives
			signRequest(b, radiusSecret)
			if _, err := rc.c.Write(b); err != nil {
				time.Sleep(time.Millisecond) // ENOBUFS, ECONNREFUSED: go on
			}
			n++
			f.sent.Store(n)
		}
		f.elapsed = time.Since(start)
		time.Sleep(500 * time.Millisecond) // the last answers
		sending.Store(false)
		<-read
	}()
	return f
}

// wait waits for the flood's end.
func (f *udpFlood) wait() *udpFlood {
	<-f.done
	return f
}

// waitSent waits until n requests are sent or the flood ends.
func (f *udpFlood) waitSent(n int64) {
	for f.sent.Load() < n {
		select {
		case <-f.done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (f *udpFlood) String() string {
	return fmt.Sprintf("%d sent in %v (%.0f/s), %d answered (%.0f/s)", f.sent.Load(), f.elapsed.Round(time.Millisecond),
		float64(f.sent.Load())/f.elapsed.Seconds(), f.answered.Load(), float64(f.answered.Load())/f.elapsed.Seconds())
}

// Before the change: the duplicate cache of the UDP listener cost O(n) per
// packet once full (65,536 entries: every packet moved the whole
// insertion order). A flood of valid Access-Requests, each new, from one
// goroutine made a good client at 50 requests/s fall to about 15 answers/s
// with 40% failed. It must keep at least 90%.
//
// The flood goes as fast as one goroutine of the test sends, about
// 24,000 a second under -race on 2 cores, capped at floodCap: without
// -race the same goroutine sends 76,000 a second, more than the fixed
// server reads (34,000), and the good client's datagrams are then lost
// with the flood's, whatever the cache costs.
func TestRADIUSUDPFloodKeepsGoodClientAnswered(t *testing.T) {
	const entries = 1 << 16 // the old cache's bound
	s := startRADIUS(t, 0)
	g := radiusGood(s, schemeUDP, 50)
	g.run(t)
	time.Sleep(2 * time.Second)
	m0 := g.mark()
	pk := s.sample()
	f := floodUDP(t, s, "127.0.0.1", 12*time.Second, floodCap, nil)
	f.waitSent(entries + 10000)
	mFull := g.mark()
	f.wait()
	m1 := g.mark()
	g.halt()
	s.alive()
	rss, gs := pk.end()
	within(t, "udp-flood", rss, gs)
	t.Logf("FIGURES udp-flood: flood of new Access-Requests from one goroutine (at most %d/s): %v; more than %d sent after %v",
		floodCap, f, entries, mFull.at.Sub(m0.at).Round(time.Millisecond))
	g.window(g.startMark(), m0).log(t, "udp-flood before")
	g.window(m0, m1).require(t, "udp-flood during", 0.9)
	g.window(mFull, m1).require(t, "udp-flood past 65,536 requests", 0.9)
}

// Before the change: the UDP duplicate cache was bounded by its entries
// (65,536), not their size: Access-Requests with about 4 KB of
// Proxy-State, whose answers echo it, at 8,000 a second pushed the RSS to
// 567 MB. A bound in bytes keeps it under 150 MB.
func TestRADIUSUDPCacheBoundedInBytes(t *testing.T) {
	const bound = 150 << 20
	s := startRADIUS(t, 0)
	g := radiusGood(s, schemeUDP, 50)
	g.run(t)
	time.Sleep(time.Second)
	m0 := g.mark()
	pk := s.sample()
	var ps []attr
	for range 15 {
		ps = append(ps, attr{attrProxyState, make([]byte, 253)})
	}
	f := floodUDP(t, s, "127.0.0.1", 10*time.Second, 8000, ps).wait()
	m1 := g.mark()
	g.halt()
	s.alive()
	rss, gs := pk.end()
	within(t, "udp-cache-bytes", rss, gs)
	t.Logf("FIGURES udp-cache-bytes: Access-Requests with 3.8 KB of Proxy-State: %v; peak RSS %.1f MB", f, float64(rss)/(1<<20))
	if rss > bound {
		t.Errorf("peak RSS %d MB, over %d MB: the duplicate cache is not bounded in bytes", rss>>20, bound>>20)
	}
	g.window(g.startMark(), m0).log(t, "udp-cache-bytes before")
	g.window(m0, m1).require(t, "udp-cache-bytes", 0.9)
}

// Before the change (RADIUS): a datagram longer than its Length field was
// dropped; RFC 2865 3 says the octets past Length are padding, to be
// ignored. It is answered.
func TestRADIUSUDPTrailingBytesIgnored(t *testing.T) {
	s := startRADIUS(t, 0)
	rc := s.mustDial(t, schemeUDP, "127.0.0.1")
	req := accessRequest(3, "padded@example.net", radiusSecret)
	padded := append(append([]byte(nil), req...), make([]byte, 16)...)
	if err := rc.write(padded); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.read(radiusReadTimeout)
	if err == nil {
		err = checkResponse(req, resp, radiusSecret)
	}
	t.Logf("FIGURES udp-trailing-bytes: an Access-Request with 16 bytes past its Length: answered %v (%v)", err == nil, err)
	if err != nil {
		t.Errorf("an Access-Request with 16 bytes of padding past its Length got no valid answer: %v", err)
	}
	s.alive()
}
