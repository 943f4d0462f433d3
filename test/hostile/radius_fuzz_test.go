package hostile

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// randomAttrs returns up to 12 attributes of random types and contents,
// with the ones the server looks at (User-Name, User-Password,
// Proxy-State, the accounting ones, Vendor-Specific) more likely.
func randomAttrs(r *rand.Rand) []attr {
	types := []byte{attrUserName, attrUserPassword, attrNASIPAddress, attrNASIdentifier, attrProxyState,
		attrAcctStatusType, attrAcctSessionID, attrEventTimestamp, 26, 79, 18, 25}
	var as []attr
	for range r.IntN(12) {
		t := byte(r.IntN(256))
		if r.IntN(2) == 0 {
			t = types[r.IntN(len(types))]
		}
		v := make([]byte, []int{0, 1, 4, 16, r.IntN(254)}[r.IntN(5)])
		for i := range v {
			v[i] = byte(r.Uint32())
		}
		if r.IntN(6) == 0 {
			v = append(v, 0x87, 0, 0xc0, '\n') // invalid UTF-8, NUL
			v = v[:min(len(v), 253)]
		}
		as = append(as, attr{t, v})
	}
	return as
}

// radiusFrame returns a random RADIUS frame: mostly a request of a code
// the server handles, with random attributes, a Message-Authenticator or
// not, mutated, and signed with the secret after the mutation half of the
// time (so that it gets past the authenticator checks to the decoding
// and the handlers), else before it; sometimes a response code, an
// unknown code, or random bytes.
func radiusFrame(r *rand.Rand, secret string) []byte {
	if r.IntN(16) == 0 {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	codes := []byte{codeAccessRequest, codeAcctRequest, codeStatusServer, 40, 43, codeAccessAccept, 3, 11, 0, 255}
	code := codes[r.IntN(len(codes))]
	b := radRequest(code, byte(r.Uint32()), randomAttrs(r), secret, r.IntN(3) != 0)
	signAfter := r.IntN(2) == 0
	if !signAfter {
		signRequest(b, secret)
	}
	for range r.IntN(4) {
		switch r.IntN(7) {
		case 0:
			b[r.IntN(len(b))] ^= byte(1 << r.IntN(8))
		case 1:
			b[r.IntN(len(b))] = []byte{0, 0xff, 0x80, 0x7f}[r.IntN(4)]
		case 2: // cut the tail, Length kept or fixed below
			if len(b) > radHeaderLen+2 {
				b = b[:radHeaderLen+r.IntN(len(b)-radHeaderLen)]
			}
		case 3: // extend
			for range 1 + r.IntN(64) {
				b = append(b, byte(r.Uint32()))
			}
		case 4: // an attribute length somewhere
			if len(b) > radHeaderLen+2 {
				off := radHeaderLen + r.IntN(len(b)-radHeaderLen-1)
				b[off+1] = []byte{0, 1, 2, 255, byte(r.Uint32())}[r.IntN(5)]
			}
		case 5: // the header's Length
			l := []int{0, 19, 20, 4096, 4097, 0xffff, len(b) - 1, len(b) + 1}[r.IntN(8)]
			binary.BigEndian.PutUint16(b[2:4], uint16(l))
		case 6: // the code
			b[0] = byte(r.Uint32())
		}
	}
	if r.IntN(4) != 0 && len(b) >= radHeaderLen && len(b) <= radMaxLen { // mostly well framed
		binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	}
	if signAfter {
		signRequest(b, secret)
	}
	return b
}

// The random-frame fuzzer against each RADIUS listener: random and
// mutated frames on many connections (many datagrams over UDP), some
// after a valid request has admitted the connection. The server must stay
// up, keep /metrics scrapable, stay bounded, and answer a good client on
// another connection throughout: a bad frame closes only its own
// connection. And its log stays bounded.
func TestRandomRADIUSFrames(t *testing.T) {
	d := fuzzTime(t) / 2
	for _, scheme := range []string{schemeUDP, schemeTCP, schemeRadSec} {
		t.Run(scheme, func(t *testing.T) {
			s := startRADIUS(t, 0, "--dedup-max-bytes", fmt.Sprint(32<<20))
			g := radiusGood(s, scheme, 100)
			g.run(t)
			time.Sleep(500 * time.Millisecond)
			m0 := g.mark()
			pk := s.sample()
			lines0 := s.stderrLines()
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d, %v", seed, d)
			secret := secretOf(scheme)
			deadline := time.Now().Add(d)
			var frames, conns, closedByServer atomic.Int64
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(seed, uint64(w)))
					if scheme == schemeUDP {
						rc, err := s.dialRadius(scheme, "127.0.0.1", "")
						if err != nil {
							t.Error(err)
							return
						}
						defer rc.Close()
						conns.Add(1)
						start := time.Now()
						for n := 0; time.Now().Before(deadline); n++ {
							// 1,000 a second per worker: the fuzzer is
							// about the frames, not a flood.
							if ahead := time.Duration(n)*time.Millisecond - time.Since(start); ahead > 0 {
								time.Sleep(ahead)
							}
							if rc.write(radiusFrame(r, secret)) == nil {
								frames.Add(1)
							}
							rc.c.SetReadDeadline(time.Now()) // drop the answers
							buf := make([]byte, 64)
							for {
								if _, err := rc.c.Read(buf); err != nil {
									break
								}
							}
						}
						return
					}
					for time.Now().Before(deadline) {
						rc, err := s.dialRadius(scheme, "127.0.0.1", "nas1.example.net")
						if err != nil {
							time.Sleep(10 * time.Millisecond)
							continue
						}
						conns.Add(1)
						drained := make(chan bool)
						go func() { // drain the answers; note who closed
							c, _ := closedWithin(rc, time.Minute)
							drained <- c
						}()
						if r.IntN(2) == 0 { // admitted first
							rc.write(accessRequest(0, "fuzz@example.net", secret))
						}
						for range 1 + r.IntN(20) {
							if rc.write(radiusFrame(r, secret)) != nil {
								break
							}
							frames.Add(1)
						}
						time.Sleep(time.Duration(r.IntN(5)) * time.Millisecond)
						rc.Close()
						if <-drained {
							closedByServer.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			m1 := g.mark()
			g.halt()
			s.alive()
			if _, err := s.scrape(); err != nil {
				t.Errorf("/metrics after fuzzing: %v", err)
			}
			rss, gs := pk.end()
			within(t, "random-radius-frames "+scheme, rss, gs)
			lines := s.stderrLines() - lines0
			t.Logf("FIGURES random-radius-frames %s: %d frames on %d connections (%d closed by the server); the server's log grew by %d lines",
				scheme, frames.Load(), conns.Load(), closedByServer.Load(), lines)
			// The log lines about what remote parties did are rate-limited
			// (as before the change): a flood of bad frames writes a
			// bounded log.
			if lines > 200 {
				t.Errorf("the server wrote %d log lines while the fuzzer ran %v: not rate-limited", lines, d)
			}
			g.window(g.startMark(), m0).log(t, "random-radius-frames "+scheme+" before")
			w := g.window(m0, m1)
			w.require(t, "random-radius-frames "+scheme, 0.99)
			if w.errs > 0 {
				t.Errorf("the good client failed %d times while the fuzzer ran (last: %v)", w.errs, w.lastError)
			}
		})
	}
}
