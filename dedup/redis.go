package dedup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a Store kept in Redis, so that several servers behind one realm
// see each other's entries. Each Key is one Redis string, prefix + hex(Key):
// "m" + owner token while in flight (SET NX with PX = mark TTL), then
// "a" + answer bytes (PX = what remains of the max age), or "t" alone for
// a request whose answer was over the per-entry limit (see
// WithMaxAnswerSize). Multi-key steps run
// as Lua scripts, so they are atomic; the keys of one request may map to
// different hash slots, so Redis Cluster is not supported (a single server,
// or a primary behind Sentinel, is). A duplicate waiting for an in-flight
// request polls with exponential backoff, bounded by ctx and the mark's
// remaining TTL. Max entries does not apply: bound Redis memory with the
// TTLs and Redis' maxmemory policy.
type Redis struct {
	cfg    config
	client redis.UniversalClient
	owned  bool // Close closes client
	id     string
	seq    atomic.Uint64
}

var _ Store = (*Redis)(nil)

// NewRedis returns a Store using client. Close does not close client. It
// honours WithMaxAge, WithMarkTTL, WithMaxAnswerSize, WithKeyPrefix and
// WithPoll.
func NewRedis(client redis.UniversalClient, opts ...Option) *Redis {
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	return &Redis{cfg: newConfig(opts), client: client, id: hex.EncodeToString(id[:])}
}

// claimScript: KEYS are the request's keys; ARGV[1] the owner token, ARGV[2]
// the mark TTL in ms. Returns {1, answer} if a key holds an answer, {3}
// if it holds the marker of an answer not kept, {2, pttl} if a key is in
// flight (pttl of that mark), else marks every key and returns {0}.
var claimScript = redis.NewScript(`
local busy = nil
for _, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if v then
    local kind = string.sub(v, 1, 1)
    if kind == 'a' then
      return {1, string.sub(v, 2)}
    end
    if kind == 't' then
      return {3}
    end
    if not busy then busy = k end
  end
end
if busy then
  return {2, redis.call('PTTL', busy)}
end
for _, k in ipairs(KEYS) do
  redis.call('SET', k, 'm' .. ARGV[1], 'NX', 'PX', ARGV[2])
end
return {0}
`)

// completeScript: ARGV[1] token, ARGV[2] the value to store ("a" +
// answer, or "t"), ARGV[3] TTL in ms. Stores the value where the key holds
// our mark or nothing; returns how many keys were held by someone else.
var completeScript = redis.NewScript(`
local lost = 0
local mine = 'm' .. ARGV[1]
for _, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if v == false or v == mine then
    redis.call('SET', k, ARGV[2], 'PX', ARGV[3])
  else
    lost = lost + 1
  end
end
return lost
`)

// abandonScript: deletes the keys holding our mark (ARGV[1] token).
var abandonScript = redis.NewScript(`
local mine = 'm' .. ARGV[1]
for _, k in ipairs(KEYS) do
  if redis.call('GET', k) == mine then
    redis.call('DEL', k)
  end
end
return 0
`)

// redisMark is the owner token of a First outcome.
type redisMark struct {
	r     *Redis
	keys  []string
	owner string
	begun time.Time // for the age of the answer
}

func (r *Redis) redisKeys(keys []Key) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = r.cfg.prefix + k.String()
	}
	return out
}

func ms(d time.Duration) int64 { return max(int64(d/time.Millisecond), 1) }

// Begin implements Store.
func (r *Redis) Begin(ctx context.Context, keys ...Key) (*Outcome, error) {
	begun := time.Now()
	o := &Outcome{}
	if err := o.setKeys(keys); err != nil {
		return nil, err
	}
	rkeys := r.redisKeys(o.keys)
	token := r.id + "-" + strconv.FormatUint(r.seq.Add(1), 36)
	backoff := r.cfg.pollMin
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		res, err := claimScript.Run(ctx, r.client, rkeys, token, ms(r.cfg.markTTL)).Slice()
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			return nil, fmt.Errorf("dedup: redis claim: %w", err)
		}
		if len(res) == 0 {
			return nil, errors.New("dedup: redis claim: empty reply")
		}
		switch res[0] {
		case int64(0):
			o.kind, o.fin = First, &redisMark{r: r, keys: rkeys, owner: token, begun: begun}
			return o, nil
		case int64(1):
			s, _ := res[1].(string)
			o.kind, o.answer = Duplicate, []byte(s)
			return o, nil
		case int64(3):
			return nil, ErrAnswerNotKept
		}
		// In flight: sleep the backoff, but not past the mark's expiry.
		wait := backoff
		if pttl, ok := res[1].(int64); ok && pttl >= 0 {
			wait = min(wait, time.Duration(pttl+1)*time.Millisecond)
		}
		backoff = min(2*backoff, r.cfg.pollMax)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// finishContext bounds Complete and Abandon by the mark TTL: past it, the
// mark they act on may be gone anyway.
func (r *Redis) finishContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.cfg.markTTL)
}

func (mk *redisMark) complete(_ *Outcome, answer []byte) error {
	r := mk.r
	ttl := r.cfg.maxAge - time.Since(mk.begun)
	ctx, cancel := r.finishContext()
	defer cancel()
	tooLarge := len(answer) > r.cfg.maxAnswer
	value := []byte("t")
	if !tooLarge {
		value = append(append(make([]byte, 0, 1+len(answer)), 'a'), answer...)
	}
	lost, err := completeScript.Run(ctx, r.client, mk.keys,
		mk.owner, value, ms(ttl)).Int()
	switch {
	case err != nil:
		return fmt.Errorf("dedup: redis complete: %w", err)
	case lost > 0:
		return ErrMarkLost
	case tooLarge:
		return ErrAnswerTooLarge
	}
	return nil
}

func (mk *redisMark) abandon(*Outcome) error {
	r := mk.r
	ctx, cancel := r.finishContext()
	defer cancel()
	err := abandonScript.Run(ctx, r.client, mk.keys, mk.owner).Err()
	if err != nil {
		return fmt.Errorf("dedup: redis abandon: %w", err)
	}
	return nil
}

// Close implements Store. It closes the client only if Open created it.
func (r *Redis) Close() error {
	if r.owned {
		return r.client.Close()
	}
	return nil
}
