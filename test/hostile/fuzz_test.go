package hostile

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// fuzzTime is how long TestRandomFrames attacks: AAATP_FUZZ_TIME (a Go
// duration), 10 s by default, so that CI runs it on every change and a
// longer run is one variable away.
func fuzzTime(t *testing.T) time.Duration {
	if v := os.Getenv("AAATP_FUZZ_TIME"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("AAATP_FUZZ_TIME=%q: %v", v, err)
		}
		return d
	}
	return 10 * time.Second
}

// mutate returns a copy of msg with a few random changes: bytes flipped
// or set to extremes, the tail cut or extended, an AVP length rewritten.
// The header's length is kept right most of the time, so that most
// frames get past the framing and exercise what is behind it.
func mutate(r *rand.Rand, msg []byte) []byte {
	m := append([]byte(nil), msg...)
	for range 1 + r.IntN(4) {
		switch r.IntN(7) {
		case 0:
			m[r.IntN(len(m))] ^= byte(1 << r.IntN(8))
		case 1:
			m[r.IntN(len(m))] = []byte{0, 0xff, 0x80, 0x7f}[r.IntN(4)]
		case 2:
			if len(m) > wire.HeaderLen+8 {
				m = m[:wire.HeaderLen+4*r.IntN((len(m)-wire.HeaderLen)/4)]
			}
		case 3:
			m = append(m, make([]byte, 4*r.IntN(16))...)
			for i := len(m) - 1; i > len(m)-8 && i > 0; i-- {
				m[i] = byte(r.Uint32())
			}
		case 4: // an AVP length somewhere
			if len(m) > wire.HeaderLen+8 {
				off := wire.HeaderLen + 4*r.IntN((len(m)-wire.HeaderLen-8)/4+1)
				l := []int{0, 7, 8, 9, 0xffffff, r.IntN(1 << 12)}[r.IntN(6)]
				m[off+5], m[off+6], m[off+7] = byte(l>>16), byte(l>>8), byte(l)
			}
		case 5: // header flags
			m[4] = byte(r.Uint32())
		case 6: // an invalid UTF-8 or NUL byte in a string
			if len(m) > wire.HeaderLen {
				m[wire.HeaderLen+r.IntN(len(m)-wire.HeaderLen)] = []byte{0x87, 0, 0xc0, '\n'}[r.IntN(4)]
			}
		}
	}
	if r.IntN(8) != 0 { // mostly well framed
		binary.BigEndian.PutUint32(m[0:4], uint32(len(m)))
		m[0] = wire.Version
		m[4] |= 0 // keep whatever flags
	}
	return m
}

// A random-frame fuzzer against a live server with --status: many
// connections, each sending a mutated CER or, after a good CER, mutated
// requests and base messages. The server must stay up, keep /metrics
// scrapable, stay bounded, and serve the good client without an error.
func TestRandomFrames(t *testing.T) {
	d := fuzzTime(t)
	// The good client's answers fill the dedup store (kept for minutes,
	// up to --dedup-max-bytes, 512 MiB by default): at 17,000 answers/s
	// that alone was 290 MB of RSS after 30 s, near the bound, and grows
	// with AAATP_FUZZ_TIME and the machine's speed, whatever the fuzzer
	// does. A 32 MiB budget bounds the legitimate part (93 MB peak after
	// 536,000 answers), so that the bound measures what the attack adds.
	s := startServer(t, 0, "--allow", "*.example.net", "--dedup-max-bytes", fmt.Sprint(32<<20))
	g := goodClient(t, s, nil)
	pk := s.sample()
	g.run()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %v", seed, d)
	deadline := time.Now().Add(d)
	var frames, conns atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for n := 0; time.Now().Before(deadline); n++ {
				host := fmt.Sprintf("fuzz%d-%d.example.net", w, n)
				tc := raw(t, s, "")
				conns.Add(1)
				c := cer(host)
				if r.IntN(3) == 0 {
					c = mutate(r, c)
				}
				if tc.WriteMessages(c) != nil {
					tc.Close()
					continue
				}
				frames.Add(1)
				cea, err := tc.ReadMessage()
				if err != nil || wire.IsRequest(cea) {
					tc.Close()
					continue
				}
				if rc, _ := message.ResultCodeOf(cea); rc != message.Success {
					tc.Close()
					continue
				}
				base := [][]byte{acr(host, uint32(n)), message.NewRequest(wire.CmdDeviceWatchdog, 0, 0).
					String(message.OriginHost, 0, true, host).String(message.OriginRealm, 0, true, realm).Bytes()}
				go func() { // drain answers so that writes do not block
					for {
						if _, err := tc.ReadMessage(); err != nil {
							return
						}
					}
				}()
				for range 1 + r.IntN(50) {
					m := base[r.IntN(len(base))]
					if r.IntN(4) != 0 {
						m = mutate(r, m)
					}
					if tc.WriteMessages(m) != nil {
						break
					}
					frames.Add(1)
				}
				tc.Close()
			}
		}()
	}
	wg.Wait()
	g.halt()
	s.alive()
	if _, err := s.scrape(); err != nil {
		t.Errorf("/metrics after fuzzing: %v", err)
	}
	rss, gs := pk.end()
	t.Logf("%d frames on %d connections", frames.Load(), conns.Load())
	within(t, "random-frames", rss, gs)
	g.check(t)
}
