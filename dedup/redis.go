package dedup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a Store kept in Redis, so that several servers behind one realm
// see each other's entries. Each Key is one Redis string, named by the key
// prefix and hex(Key) (see WithKeyPrefix for the hash tag), holding
// "m" + owner token while in flight (SET NX with PX = mark TTL), then
// "a" + answer bytes (PX = what remains of the max age), or "t" alone for
// a request whose answer was over the per-entry limit (see
// WithMaxAnswerSize). Complete also names the owner that stored the answer
// under the key's name + ":o" for three mark TTLs, so that a Complete tried
// again (its reply lost, or not acknowledged by the replicas) can tell its
// own earlier write from another owner's same bytes. When none of a
// Complete's tries got a reply, a check settles whether one stored the
// answer, and if none did, writes "f" + owner token into the owner names
// (for max age), which refuses any try still on its way (see
// Outcome.Complete). Multi-key steps run
// as Lua scripts, so they are atomic. Every key of a store shares one hash
// tag, so on Redis Cluster they all live in one hash slot, where the
// scripts can run (no CROSSSLOT): the store then gets the cluster's
// failover, not its sharding (one master holds it all). A duplicate
// waiting for an in-flight request polls with exponential backoff, bounded
// by ctx and the mark's remaining TTL. Max entries and the memory budget
// do not apply: entries leave Redis when their TTL ends.
//
// The store notices when Redis loses its entries all at once (a restart
// without persistence, a FLUSHALL or FLUSHDB, a failover to a replica
// that had not seen them): it keeps an epoch key, written when missing and
// checked by every Begin in the same script, at no extra round trip. When
// the epoch changes, duplicates of requests answered before may be
// applied again; the store logs a warning, counts the loss (see
// StateLost) and calls the WithStateLost function. Entries lost by a
// failover to a lagging replica while the epoch key survives are not
// noticed: see WithReplicaAcks.
//
// Nor are entries lost one by one to eviction when Redis reaches its
// maxmemory: the epoch key has no TTL, so the volatile-* policies never
// evict it, and every Begin reads it, so allkeys-lru and allkeys-lfu evict
// it last; only allkeys-random may take it along with entries, and then
// only some losses are noticed. An evicted answer or mark lets a duplicate
// be applied again, unnoticed. Give the store's Redis maxmemory-policy
// noeviction (Redis' default) and room for max age's worth of requests: a
// full Redis then refuses the store's writes, Begin fails, and Wrap
// answers DIAMETER_TOO_BUSY, so that the client tries another server.
type Redis struct {
	cfg    config
	client redis.UniversalClient
	owned  bool // Close closes client
	id     string
	seq    atomic.Uint64
	prefix string // the key prefix, with its hash tag
	epochK string // the epoch key

	epoch atomic.Pointer[string] // the epoch this store last saw; nil before the first Begin
	lost  atomic.Uint64          // losses noticed
	short atomic.Uint64          // writes not acknowledged by enough replicas
	// degraded: the last write was not acknowledged after its tries (see
	// maxAckTries).
	degraded atomic.Bool
	probed   atomic.Int64 // when a degraded store last waited for its replicas (UnixNano)
	// releasing holds a token per release under way (see releaseLater);
	// releases counts those started.
	releasing chan struct{}
	releases  atomic.Uint64
	released  sync.WaitGroup // the releases under way, which Close waits for
	unknown   atomic.Uint64  // Completes whose outcome stayed unknown
}

var _ Store = (*Redis)(nil)

// NewRedis returns a Store using client. Close does not close client. It
// honours WithMaxAge, WithMarkTTL, WithMaxAnswerSize, WithKeyPrefix and
// WithPoll. Build client with ContextTimeoutEnabled, as Open does: else a
// command sent to a Redis that does not answer outlasts its context's
// deadline (Begin's ctx, the mark TTL of Complete and Abandon) until the
// client's socket read timeout.
func NewRedis(client redis.UniversalClient, opts ...Option) *Redis {
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	cfg := newConfig(opts)
	prefix := hashTagged(cfg.prefix)
	return &Redis{cfg: cfg, client: client, id: hex.EncodeToString(id[:]), prefix: prefix, epochK: prefix + "epoch",
		releasing: make(chan struct{}, maxReleases)}
}

// hashTagged returns prefix if it holds a Redis Cluster hash tag (a
// non-empty "{...}"), else prefix with its whole text made the tag:
// "{aaatp:dedup:}"; the empty prefix becomes "{dedup}".
func hashTagged(prefix string) string {
	if i := strings.IndexByte(prefix, '{'); i >= 0 {
		if j := strings.IndexByte(prefix[i+1:], '}'); j > 0 {
			return prefix
		}
	}
	if prefix == "" {
		return "{dedup}" // "{}" is no hash tag
	}
	return "{" + prefix + "}"
}

// run runs script, followed on the same connection, with WithReplicaAcks,
// by a WAIT for the replicas to acknowledge its writes; acked reports
// whether they did (always true without WithReplicaAcks).
func (r *Redis) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (cmd *redis.Cmd, acked bool) {
	if r.cfg.acks <= 0 {
		return script.Run(ctx, r.client, keys, args...), true
	}
	if r.degraded.Load() {
		// Wait for the replicas only once per ackProbe, to see whether
		// they are back (a WAIT's timeout runs in steps of the server's
		// 100 ms cron, so a short one would still cost that).
		now := time.Now().UnixNano()
		last := r.probed.Load()
		if now-last < int64(ackProbe) || !r.probed.CompareAndSwap(last, now) {
			return script.Run(ctx, r.client, keys, args...), false
		}
	}
	pipe := r.client.Pipeline()
	cmd = script.Eval(ctx, pipe, keys, args...) // not EvalSha: a new master may not have the script
	wait := pipe.Do(ctx, "WAIT", r.cfg.acks, ms(r.cfg.acksWait))
	_, _ = pipe.Exec(ctx) // the errors are in cmd and wait
	n, err := wait.Int64()
	acked = err == nil && n >= int64(r.cfg.acks)
	if acked && r.degraded.Load() {
		r.degraded.Store(false)
		r.cfg.logger().Info("dedup: Redis replicas acknowledge writes again", "replicas", n)
	}
	return cmd, acked
}

// maxAckTries bounds the tries of a write that the replicas did not
// acknowledge (WithReplicaAcks): enough to outlast a failover. After a
// shortfall the store is degraded: it tries each write once and waits for
// the replicas only once per ackProbe, until they acknowledge a write
// again, so that a replica away does not slow every request.
const maxAckTries = 4

// ackProbe is how often a degraded store checks whether its replicas are
// back.
const ackProbe = time.Second

// ackTries is how many times a write is tried while its replicas do not
// acknowledge it.
func (r *Redis) ackTries() int {
	if r.degraded.Load() {
		return 1
	}
	return maxAckTries
}

// shortfall counts and logs (the 1st, 2nd, 4th, 8th... time) a write the
// replicas did not acknowledge after maxAckTries: it is kept on the master
// and the request goes on, since refusing every request while a replica is
// away would turn a replica's outage into the service's.
func (r *Redis) shortfall(what string) {
	r.degraded.Store(true)
	if k := r.short.Add(1); k&(k-1) == 0 {
		r.cfg.logger().Warn("dedup: Redis replicas did not acknowledge a write in time: a failover now could lose it, and a duplicate of the request be applied again",
			"write", what, "replicas", r.cfg.acks, "timeout", r.cfg.acksWait, "shortfalls", k)
	}
}

// ReplicaShortfalls returns how many writes the replicas did not
// acknowledge within the WithReplicaAcks timeout.
func (r *Redis) ReplicaShortfalls() uint64 { return r.short.Load() }

// StateLost returns how many times this store has found that Redis lost
// its entries (see Redis).
func (r *Redis) StateLost() uint64 { return r.lost.Load() }

// noticeEpoch records the epoch a claim saw, reporting a loss when the
// script found one.
// seen is what r.epoch held when the claim was sent: of several Begins
// that find the same loss, only the one that moves r.epoch on reports it.
func (r *Redis) noticeEpoch(seen *string, epoch string, lost bool) {
	if seen != nil && *seen == epoch {
		return
	}
	if !r.epoch.CompareAndSwap(seen, &epoch) || !lost {
		return
	}
	r.lost.Add(1)
	r.cfg.logger().Warn("dedup: the Redis store lost its entries (restarted empty, flushed, failed over, or its epoch key evicted): duplicates of requests answered before may be applied again",
		"epoch", epoch)
	if r.cfg.onLost != nil {
		r.cfg.onLost()
	}
}

// claimScript: KEYS[1] is the epoch key, the others the request's keys;
// ARGV[1] the owner token, ARGV[2] the mark TTL in ms, ARGV[3] the epoch
// the caller last saw ("" if none), ARGV[4] a new epoch, written if the
// epoch key is missing. Returns {epoch, lost, ...}: lost is 1 if the
// caller had seen another epoch (Redis lost its state), and then come {1,
// answer} if a key holds an answer, {3} if it holds the marker of an
// answer not kept, {2, pttl} if a key is in flight (pttl of that mark),
// else {0} after marking every key.
var claimScript = redis.NewScript(claimLua)

const claimLua = `
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  epoch = ARGV[4]
  redis.call('SET', KEYS[1], epoch)
end
local lost = 0
if ARGV[3] ~= '' and ARGV[3] ~= epoch then lost = 1 end
local busy = nil
local mine = 'm' .. ARGV[1]
for i = 2, #KEYS do
  local k = KEYS[i]
  local v = redis.call('GET', k)
  if v and v ~= mine then
    local kind = string.sub(v, 1, 1)
    if kind == 'a' then
      return {epoch, lost, 1, string.sub(v, 2)}
    end
    if kind == 't' then
      return {epoch, lost, 3}
    end
    if not busy then busy = k end
  end
end
if busy then
  return {epoch, lost, 2, redis.call('PTTL', busy)}
end
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], mine, 'PX', ARGV[2]) -- each key is free or ours
end
return {epoch, lost, 0}
`

// completeScript: KEYS[1..n] are the request's keys, KEYS[n+1..2n] their
// owner names (key + ":o"), passed as keys as EVAL requires of every key
// a script touches (some Redis-compatible servers and proxies enforce
// it); ARGV[1] token, ARGV[2] the value to store ("a" + answer, or "t"),
// ARGV[3] TTL in ms, ARGV[4] the owner names' TTL in ms (ownerTTL: longer
// than Complete's tries and its settling, see complete). Stores the value
// under every key if each holds our mark, nothing, or the value stored by
// an earlier try of ours (its reply lost), which the key's owner name
// tells from another owner's same answer (byte-identical answers, or two
// not kept, would otherwise let a stalled owner commit a request taken
// over and committed by another). When some key is held by someone else
// (taken over), it stores nothing, deletes the keys holding our mark and
// returns how many keys were held by someone else. When an owner name
// holds our fence ("f" + token, written by settleScript), a try of ours
// that arrives after the settling stores nothing and returns -1.
var completeScript = redis.NewScript(completeLua)

const completeLua = `
local n = #KEYS / 2
local lost = 0
local mine = 'm' .. ARGV[1]
local fence = 'f' .. ARGV[1]
for i = 1, n do
  local o = redis.call('GET', KEYS[n + i])
  if o == fence then return -1 end
  local v = redis.call('GET', KEYS[i])
  if v and v ~= mine and not (v == ARGV[2] and o == ARGV[1]) then
    lost = lost + 1
  end
end
if lost > 0 then
  for i = 1, n do
    if redis.call('GET', KEYS[i]) == mine then
      redis.call('DEL', KEYS[i])
    end
  end
  return lost
end
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[2], 'PX', ARGV[3])
  redis.call('SET', KEYS[n + i], ARGV[1], 'PX', ARGV[4]) -- our retries end well within it
end
return 0
`

// settleScript decides for good whether a Complete whose tries all went
// unanswered stored its answer: KEYS as completeScript's, ARGV[1] token,
// ARGV[2] the fence's TTL in ms. Returns 1 if an owner name holds our
// token (a try of ours stored the answer). Else it returns 0 after
// deleting the keys holding our mark and writing our fence ("f" + token)
// into the owner names of the keys that hold no answer of another owner
// (nothing, a mark, or an answer whose owner name expired), so that a
// try of ours still on its way (queued on a busy Redis, or on a broken
// connection) stores nothing (see completeScript). An owner name holding
// another's token is left alone: its key holds that owner's answer,
// which a try of ours cannot overwrite, and the owner's own tries need
// its name.
var settleScript = redis.NewScript(settleLua)

const settleLua = `
local n = #KEYS / 2
for i = 1, n do
  if redis.call('GET', KEYS[n + i]) == ARGV[1] then return 1 end
end
local mine = 'm' .. ARGV[1]
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if v == mine then
    redis.call('DEL', KEYS[i])
    v = false
  end
  if not v or not redis.call('GET', KEYS[n + i]) or string.sub(v, 1, 1) == 'm' then
    redis.call('SET', KEYS[n + i], 'f' .. ARGV[1], 'PX', ARGV[2])
  end
end
return 0
`

// abandonScript: deletes the keys holding our mark (ARGV[1] token).
var abandonScript = redis.NewScript(abandonLua)

const abandonLua = `
local mine = 'm' .. ARGV[1]
for _, k in ipairs(KEYS) do
  if redis.call('GET', k) == mine then
    redis.call('DEL', k)
  end
end
return 0
`

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
		out[i] = r.prefix + k.String()
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
	claimKeys := append([]string{r.epochK}, rkeys...)
	token := r.id + "-" + strconv.FormatUint(r.seq.Add(1), 36)
	backoff := r.cfg.pollMin
	tries := 0
	// marked: a claim has set our marks (replied First), which a claim
	// tried again for the replicas' sake keeps (the script takes our own
	// marks as ours). Every return that hands out no First outcome must
	// then release them: nobody else owns them, and the request's
	// retries would wait for them until the mark TTL.
	marked, first := false, false
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if marked && !first {
			r.releaseLater(rkeys, token)
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err // nothing sent since the last claim (released above if it marked)
		}
		seenP := r.epoch.Load()
		seen := ""
		if seenP != nil {
			seen = *seenP
		}
		cmd, acked := r.run(ctx, claimScript, claimKeys, token, ms(r.cfg.markTTL), seen, r.id+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		res, err := cmd.Slice()
		if err != nil {
			if claimMayHaveRun(err) && !marked {
				// The claim may have run on Redis all the same
				// (only its reply was lost): drop any mark it
				// set, which no one owns (the deferred release
				// does, if an earlier claim marked).
				r.releaseLater(rkeys, token)
			}
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			return nil, fmt.Errorf("dedup: redis claim: %w", err)
		}
		if len(res) < 3 {
			return nil, errors.New("dedup: redis claim: short reply")
		}
		epoch, _ := res[0].(string)
		r.noticeEpoch(seenP, epoch, res[1] == int64(1))
		res = res[2:]
		switch res[0] {
		case int64(0):
			marked = true
			if !acked {
				// The marks may be lost in a failover: mark again
				// (the script takes our own marks as ours) until a
				// replica has them, on whichever master is current.
				if tries++; tries < r.ackTries() {
					continue
				}
				r.shortfall("in-flight mark")
			}
			first = true
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
		if pttl, ok := res[len(res)-1].(int64); ok && pttl >= 0 {
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

// releaseTimeout bounds release.
const releaseTimeout = time.Second

// maxReleases bounds the releases under way at once (see releaseLater).
const maxReleases = 4

// claimMayHaveRun reports whether a claim that failed with err may have
// run on Redis all the same: it was sent, or may have been, and its reply
// did not come (a timeout, the context ending on the wire, a connection
// broken). Not after an error reply (Redis ran the script to an error
// before its marks, or not at all), nor when nothing was sent: a dial
// error, a pool timeout, a closed client.
func claimMayHaveRun(err error) bool {
	var reply redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &reply),
		errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrClosed),
		errors.As(err, &op) && op.Op == "dial":
		return false
	}
	return true
}

// releaseLater runs release in the background, unless maxReleases are
// under way: then the marks are left to expire by their TTL, which is all
// the release would spare. In an outage every request's claim fails: the
// releases, which hold a connection each for up to releaseTimeout, do not
// add up.
func (r *Redis) releaseLater(keys []string, token string) {
	select {
	case r.releasing <- struct{}{}:
	default:
		return
	}
	r.releases.Add(1)
	r.released.Add(1)
	go func() {
		defer r.released.Done()
		defer func() { <-r.releasing }()
		r.release(keys, token)
	}()
}

// release drops the marks that a claim which failed on the client, token's,
// may have set on Redis, best effort: without it, the request, tried again
// here or at another server, would wait for them until the mark TTL.
func (r *Redis) release(keys []string, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), min(releaseTimeout, r.cfg.markTTL))
	defer cancel()
	_ = abandonScript.Run(ctx, r.client, keys, token).Err()
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
	keys := mk.withOwners()
	var lost int
	var err error
	unsure := false // a try may have stored the answer, its reply lost
	ran := false    // a try's script ran and replied: its outcome (lost) stands
	backoff := r.cfg.pollMin
	acks := 0
	for {
		cmd, acked := r.run(ctx, completeScript, keys, mk.owner, value, ms(ttl), ms(r.ownerTTL()))
		n, e := cmd.Int()
		if e == nil {
			lost, err, ran = n, nil, true
			if !acked {
				if acks++; acks < r.ackTries() {
					continue // store it again, on whichever master is current, until a replica has it
				}
				r.shortfall("answer")
			}
			break
		}
		if ran {
			// An earlier try stored it (or found the mark lost); this one
			// only chased the replicas' acknowledgement: that outcome
			// stands, short of replicas.
			r.shortfall("answer")
			break
		}
		err = e
		unsure = unsure || claimMayHaveRun(err)
		// Try again (the script is safe to repeat: it knows its own
		// earlier write by the owner name) while the error may pass: a
		// reply late or lost, a broken connection, a failover under way
		// (the old master refuses writes, or is gone).
		if ctx.Err() != nil || !retryable(err) {
			break
		}
		if !sleepCtx(ctx, backoff) {
			break
		}
		backoff = min(2*backoff, max(r.cfg.pollMax, r.cfg.acksWait))
	}
	if err != nil && unsure {
		// No try got its reply, and one may have stored the answer all
		// the same: find out for good.
		var landed bool
		landed, err = mk.settle(keys)
		switch {
		case err != nil:
			r.commitUnknown(err)
			return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
		case landed:
			lost, err = 0, nil
		default:
			err = errors.New("not stored (its tries went unanswered; settled)")
		}
	}
	switch {
	case err != nil:
		return fmt.Errorf("dedup: redis complete: %w", err)
	case lost < 0:
		return errors.New("dedup: redis complete: refused after settling") // not reached: settle comes last
	case lost > 0:
		return ErrMarkLost
	case tooLarge:
		return ErrAnswerTooLarge
	}
	return nil
}

// withOwners returns the mark's keys, then their owner names (see
// completeScript): same hash tag, same slot.
func (mk *redisMark) withOwners() []string {
	keys := make([]string, 0, 2*len(mk.keys))
	keys = append(keys, mk.keys...)
	for _, k := range mk.keys {
		keys = append(keys, k+":o")
	}
	return keys
}

// settle runs settleScript for a Complete whose tries went unanswered,
// trying again while Redis does not answer, for at most a mark TTL:
// landed reports whether a try stored the answer; after it returns with
// no error, no try of this Complete can store it any more. An error means
// that Redis did not answer: the outcome is unknown.
func (mk *redisMark) settle(keys []string) (landed bool, err error) {
	r := mk.r
	ctx, cancel := r.finishContext()
	defer cancel()
	backoff := r.cfg.pollMin
	for {
		cmd, _ := r.run(ctx, settleScript, keys, mk.owner, ms(r.cfg.maxAge))
		n, err := cmd.Int()
		if err == nil {
			return n == 1, nil
		}
		if ctx.Err() != nil || !retryable(err) || !sleepCtx(ctx, backoff) {
			return false, err
		}
		backoff = min(2*backoff, max(r.cfg.pollMax, r.cfg.acksWait))
	}
}

// ownerTTL is how long Complete keeps the owner names: past its tries (a
// mark TTL) and its settling (another), with a mark TTL to spare.
func (r *Redis) ownerTTL() time.Duration { return 3 * r.cfg.markTTL }

// commitUnknown counts and logs (the 1st, 2nd, 4th, 8th... time) a
// Complete whose outcome stayed unknown.
func (r *Redis) commitUnknown(err error) {
	if k := r.unknown.Add(1); k&(k-1) == 0 {
		r.cfg.logger().Error("dedup: Redis did not answer a commit nor its check: the request may be committed while its caller was told it failed (WrapCommit then did not run onCommit for it)",
			"err", err, "unknown", k)
	}
}

// CommitsUnknown returns how many Completes ended with ErrCommitUnknown.
func (r *Redis) CommitsUnknown() uint64 { return r.unknown.Load() }

// retryable reports whether a command that failed with err may succeed if
// tried again: not once the client is closed, nor after an error reply
// other than those of a Redis busy, loading or failing over.
func retryable(err error) bool {
	if errors.Is(err, redis.ErrClosed) {
		return false
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		for _, p := range []string{"BUSY ", "LOADING ", "READONLY ", "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN ", "NOREPLICAS "} {
			if strings.HasPrefix(reply.Error(), p) {
				return true
			}
		}
		return false
	}
	return true
}

// sleepCtx sleeps d, or until ctx ends: it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
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

// Close implements Store. It waits for the releases of failed claims
// still under way (each at most a second), then closes the client if
// Open created it.
func (r *Redis) Close() error {
	r.released.Wait() // each bounded by releaseTimeout: none outlives the store
	if r.owned {
		return r.client.Close()
	}
	return nil
}
