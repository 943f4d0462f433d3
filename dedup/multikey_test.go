package dedup

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// Requests of one or two keys (an accounting request's request and record
// keys) over several shards, with a budget and entry bound that evict,
// out-of-order completion, abandons, answers not kept, expiry and marks
// taken over: every shard's arena and accounting stay consistent after
// each step, and a duplicate's answer is one completed for one of its
// keys, by a Complete that succeeded (one that lost a mark stores nothing).
func TestMemoryModelTwoKeysShards(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			const maxAnswer = 400
			clk := newFakeClock()
			s := NewMemory(WithShards(4), WithMaxEntries(64+rng.IntN(200)), WithMaxBytes(int64(4*16*(EntryOverhead+maxAnswer)+rng.IntN(40000))),
				WithMaxAnswerSize(maxAnswer), WithClock(clk.Now), WithMaxAge(time.Minute), WithMarkTTL(10*time.Second))
			defer s.Close()
			keyOf := func(i int) Key { return RequestKey("mk", uint32(i)) }
			answers := map[string]bool{} // every answer completed for a key: "key/answer"
			type open struct {
				o    *Outcome
				keys []Key
				born time.Time
			}
			var opens []open
			ctx := context.Background()
			for step := range 3000 {
				switch op := rng.IntN(10); {
				case op < 5:
					nk := 1 + rng.IntN(2)
					keys := []Key{keyOf(rng.IntN(300))}
					if nk == 2 {
						keys = append(keys, keyOf(300+rng.IntN(300)))
					}
					busy := false
					for _, o := range opens {
						if clk.Now().Sub(o.born) >= 10*time.Second {
							continue // its marks expired: a Begin takes them over
						}
						for _, a := range o.keys {
							for _, b := range keys {
								busy = busy || a == b
							}
						}
					}
					if busy {
						break // it would wait
					}
					o, err := s.Begin(ctx, keys...)
					if errors.Is(err, ErrAnswerNotKept) || errors.Is(err, ErrFull) {
						break
					}
					if err != nil {
						t.Fatalf("step %d: Begin: %v", step, err)
					}
					if o.Duplicate() {
						ok := false
						for _, k := range keys {
							ok = ok || answers[fmt.Sprint(k, "/", string(o.Answer()))]
						}
						if !ok {
							t.Fatalf("step %d: duplicate answer %q was never completed for its keys", step, o.Answer())
						}
						break
					}
					opens = append(opens, open{o, keys, clk.Now()})
				case op < 8:
					if len(opens) == 0 {
						break
					}
					i := rng.IntN(len(opens))
					o := opens[i]
					opens = append(opens[:i], opens[i+1:]...)
					n := 1 + rng.IntN(maxAnswer+maxAnswer/4)
					ans := bytes.Repeat([]byte{byte(step)}, max(n, 4))
					binary.BigEndian.PutUint32(ans, uint32(step))
					ans = ans[:n]
					err := o.o.Complete(ans)
					if err != nil && !errors.Is(err, ErrMarkLost) && !errors.Is(err, ErrAnswerTooLarge) {
						t.Fatalf("step %d: Complete: %v", step, err)
					}
					if n <= maxAnswer && !errors.Is(err, ErrMarkLost) {
						for _, k := range o.keys {
							answers[fmt.Sprint(k, "/", string(ans))] = true
						}
					}
				case op < 9:
					if len(opens) == 0 {
						break
					}
					i := rng.IntN(len(opens))
					_ = opens[i].o.Abandon()
					opens = append(opens[:i], opens[i+1:]...)
				default:
					clk.Advance(time.Duration(rng.IntN(8)) * time.Second)
				}
				for i := range s.shards {
					sh := &s.shards[i]
					sh.mu.Lock()
					checkArena(t, sh)
					sh.mu.Unlock()
				}
			}
		})
	}
}
