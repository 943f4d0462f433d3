package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Store remembers requests and their answers. Implementations are safe for
// concurrent use. Use [NewMemory], [NewRedis] or [Open].
type Store interface {
	// Begin looks the request's keys up: pass the RequestKey, and for
	// accounting also the AccountingKey. If any key holds a stored answer,
	// the Outcome is a Duplicate carrying it. If a key is held by a request
	// still being handled (in flight), Begin waits until that request
	// completes (Duplicate), is abandoned or its mark expires (First), or
	// ctx ends (ctx's error). Otherwise Begin marks every key in flight and
	// the Outcome is First: the caller must then call Complete or Abandon.
	Begin(ctx context.Context, keys ...Key) (*Outcome, error)
	// Close releases the store's resources.
	Close() error
}

// ReusingStore is a Store that can fill an Outcome the caller owns, so that
// a caller handling many requests recycles its Outcomes instead of having
// one allocated per request ([Wrap] does). The in-memory store is one.
type ReusingStore interface {
	Store
	// BeginInto is Begin with the result in *o, which it resets first.
	// The caller must have completed or abandoned any First outcome o
	// held, and must not use an earlier result of o once it reuses it.
	BeginInto(ctx context.Context, o *Outcome, keys ...Key) error
}

// EntryOverhead is what the in-memory store counts per key against its
// memory budget besides the answer bytes: its ring slot, index entries and
// the header of its answer's record.
const EntryOverhead = 80

// Kind tells what Begin found.
type Kind uint8

const (
	// First: the caller owns the request; run the handler, then Complete
	// or Abandon.
	First Kind = iota + 1
	// Duplicate: reply with Outcome.Answer; do not run the handler.
	Duplicate
	// notKept: the stores' internal result for a request answered
	// without its answer kept; Begin returns ErrAnswerNotKept instead.
	notKept Kind = 255
	// noRoom: the in-memory store's internal result for a request it had
	// no room for; Begin returns ErrFull instead.
	noRoom Kind = 254
)

func (k Kind) String() string {
	switch k {
	case First:
		return "First"
	case Duplicate:
		return "Duplicate"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Errors.
var (
	// ErrNoKeys: Begin was called without keys.
	ErrNoKeys = errors.New("dedup: Begin needs at least one key")
	// ErrZeroKey: a zero Key was passed; build keys with RequestKey or
	// AccountingKey.
	ErrZeroKey = errors.New("dedup: zero Key")
	// ErrEmptyAnswer: Complete was called with an empty answer.
	ErrEmptyAnswer = errors.New("dedup: empty answer")
	// ErrNotFirst: Complete or Abandon was called on a Duplicate outcome.
	ErrNotFirst = errors.New("dedup: Complete on a Duplicate outcome")
	// ErrFinished: Complete was called after Complete or Abandon.
	ErrFinished = errors.New("dedup: outcome already completed or abandoned")
	// ErrAnswerTooLarge: Complete was given an answer longer than the
	// store's per-entry limit (see WithMaxAnswerSize). The request is
	// recorded as answered, so that it is never applied again, but its
	// answer is not kept: send the answer anyway. A duplicate of it then
	// gets ErrAnswerNotKept from Begin.
	ErrAnswerTooLarge = errors.New("dedup: answer over the size limit; recorded as answered, answer not kept")
	// ErrAnswerNotKept: Begin found the request already answered, but its
	// answer was too large to keep (see ErrAnswerTooLarge): it must not be
	// applied again and its answer cannot be replayed, so refuse it.
	ErrAnswerNotKept = errors.New("dedup: request already answered; its answer was too large to keep")
	// ErrMarkLost: the in-flight mark of one of the request's keys expired
	// and another request took that key over before Complete: the other
	// request owns it now. The answer was stored under none of the keys,
	// and the outcome's other marks were dropped, as Abandon drops them:
	// the result is not committed. The request's answer is now the new
	// owner's: Begin the same keys again to get it (Begin waits while the
	// owner runs, and is First if the owner abandoned it), as Wrap does.
	// It means that the mark TTL was too short for this handler.
	ErrMarkLost = errors.New("dedup: in-flight mark expired and was taken over; answer not stored")
	// ErrCommitUnknown: Complete could not learn whether the answer was
	// stored: Redis answered none of its tries nor the check that
	// follows them (see Outcome.Complete). The request may be committed
	// (a duplicate then gets its answer) or not (its marks expire). The
	// Redis store logs it and counts it (Redis.CommitsUnknown); Wrap
	// answers DIAMETER_TOO_BUSY, counting it in Counters.CommitUnknown.
	ErrCommitUnknown = errors.New("dedup: commit outcome unknown: the store did not answer")
	// ErrFull: the in-memory store had no room for the request: every
	// entry of its shard (see WithMaxEntries and WithShards) is the mark
	// of a request still running, which the store does not evict, as the
	// request's duplicates would then run it again; marks are evicted
	// once their mark TTL is past. Begin returns it without marking the
	// request; Wrap answers it as a store failure (DIAMETER_TOO_BUSY).
	// Keep WithMaxEntries well above the requests handled at once.
	ErrFull = errors.New("dedup: no room: the store is full of requests in flight")
)

// finisher is the store-specific owner of a First outcome's in-flight mark.
type finisher interface {
	complete(o *Outcome, answer []byte) error
	abandon(o *Outcome) error
}

// Outcome is the result of Begin. An Outcome is meant for the goroutine that
// called Begin; its Complete and Abandon are nevertheless safe to call more
// than once (only the first call acts).
type Outcome struct {
	kind   Kind
	done   atomic.Bool
	keyBuf [2]Key // keys live here for up to 2 keys (request + accounting)
	keys   []Key
	answer []byte
	fin    finisher // First only
	// The in-memory store's marks of a First outcome: the sequence
	// numbers of its keys' slots, aligned with keys.
	seq    []uint32
	seqBuf [2]uint32
	born   int64 // when the marks were set, which finds them once moved
}

// Kind returns First or Duplicate.
func (o *Outcome) Kind() Kind { return o.kind }

// First reports whether the caller owns the request and must run the
// handler and then Complete or Abandon.
func (o *Outcome) First() bool { return o.kind == First }

// Duplicate reports whether the request is a duplicate; Answer holds the
// answer to replay.
func (o *Outcome) Duplicate() bool { return o.kind == Duplicate }

// Answer returns, for a Duplicate, the stored answer bytes: a copy owned by
// the caller. It carries the first request's identifiers: before sending
// it, write the duplicate request's Hop-by-Hop and End-to-End Identifiers
// into it (wire.SetHopByHop, wire.SetEndToEnd; a duplicate recognised by
// its accounting record may carry a new End-to-End Identifier) and clear
// its T flag (wire.ClearRetransmit). Wrap leaves this to the peer, which
// does it for every answer. It returns nil for First.
func (o *Outcome) Answer() []byte { return o.answer }

// Complete stores answer (copied; the caller may reuse the slice) as the
// answer to the request's keys, for at most the store's max age, and wakes
// duplicates waiting for it. It stores it under all of the keys or none:
// if another request has taken any of them over, it stores nothing, drops
// the outcome's marks and returns ErrMarkLost. Call it after the handler,
// before or after sending the answer. A failed Complete with
// ErrEmptyAnswer leaves the outcome open (Abandon still works).
//
// A nil error (or ErrAnswerTooLarge) means that the request is committed;
// any other error that it is not, except ErrCommitUnknown. The Redis
// store tries the commit again while Redis' reply is late or lost (its
// script is safe to repeat), for at most the mark TTL; if none of its
// tries got a reply, it then checks, for at most another mark TTL,
// whether one of them stored the answer, and fences off any still on its
// way, so that its result is final. Only if Redis answers none of that
// does Complete return ErrCommitUnknown. After a store error the mark is
// left to expire. The Redis store bounds Abandon by the mark TTL, and
// Complete by twice it (with a go-redis client that honours context
// deadlines, as those Open builds do; see NewRedis). The in-memory store
// never fails so.
func (o *Outcome) Complete(answer []byte) error {
	if o.kind != First {
		return ErrNotFirst
	}
	if len(answer) == 0 {
		return ErrEmptyAnswer
	}
	if !o.done.CompareAndSwap(false, true) {
		return ErrFinished
	}
	return o.fin.complete(o, answer)
}

// Abandon drops the in-flight mark without storing an answer, e.g. when the
// handler failed without answering; a waiting or later duplicate becomes
// First. It is a no-op returning nil on a Duplicate and after Complete or
// Abandon, so "defer o.Abandon()" right after Begin is safe.
func (o *Outcome) Abandon() error {
	if o.kind != First || !o.done.CompareAndSwap(false, true) {
		return nil
	}
	return o.fin.abandon(o)
}

// Option configures a store. Options that do not apply to a store are
// ignored by it.
type Option func(*config)

type config struct {
	maxEntries int
	maxBytes   int64
	maxAnswer  int
	maxAge     time.Duration
	markTTL    time.Duration
	now        func() time.Time
	clockSet   bool // now was set by WithClock
	shards     int
	prefix     string
	pollMin    time.Duration
	pollMax    time.Duration
	log        *slog.Logger
	onLost     func()
	acks       int
	acksWait   time.Duration
}

func (c *config) logger() *slog.Logger {
	if c.log != nil {
		return c.log
	}
	return slog.Default()
}

// Defaults.
const (
	DefaultMaxEntries = 1 << 20
	// DefaultMaxBytes is the in-memory store's default memory budget:
	// 1M entries (DefaultMaxEntries) of answers averaging about 430 bytes.
	DefaultMaxBytes = 512 << 20
	// DefaultMaxAnswerSize is the default per-entry limit: answers longer
	// than 16 KiB are not kept. Ordinary Diameter answers are well under
	// 1 KiB; a long answer is mostly a peer echoing a huge Session-Id.
	DefaultMaxAnswerSize = 16 << 10
	DefaultMaxAge        = 4 * time.Minute
	DefaultMarkTTL       = 10 * time.Second
	DefaultShards        = 64
	DefaultKeyPrefix     = "aaatp:dedup:"
)

func newConfig(opts []Option) config {
	c := config{
		maxEntries: DefaultMaxEntries,
		maxBytes:   DefaultMaxBytes,
		maxAnswer:  DefaultMaxAnswerSize,
		maxAge:     DefaultMaxAge,
		markTTL:    DefaultMarkTTL,
		now:        time.Now,
		shards:     DefaultShards,
		prefix:     DefaultKeyPrefix,
		pollMin:    2 * time.Millisecond,
		pollMax:    100 * time.Millisecond,
	}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithMaxEntries bounds the number of entries of the in-memory store
// (default 1<<20); when full, the oldest entry is evicted, except the
// in-flight marks of requests still running, which are kept (see
// ErrFull). Values < 1 are ignored. Redis entries go by their TTL alone
// (see Redis for its maxmemory policy).
func WithMaxEntries(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxEntries = n
		}
	}
}

// WithMaxBytes sets the memory budget of the in-memory store (default
// DefaultMaxBytes, 512 MiB): the bytes of the stored answers plus
// EntryOverhead per key. Over the budget, the oldest entries are evicted
// first, as when the store holds max entries, except the in-flight marks
// of requests still running: the budget bounds the answers kept (with
// their EntryOverhead), and those marks come on top of it by their
// EntryOverhead (they are bounded by max entries), pushing no answer out.
// The budget is split evenly
// between the shards (keys are spread uniformly), and each shard may
// exceed its share by the one entry it has just stored. The store keeps
// at most 16 entries' worth of per-entry limit per shard: with a small
// budget it uses fewer shards (see WithShards). Values < 1 are ignored.
// Redis entries go by their TTL alone (see Redis for its maxmemory
// policy).
func WithMaxBytes(n int64) Option {
	return func(c *config) {
		if n > 0 {
			c.maxBytes = n
		}
	}
}

// WithMaxAnswerSize sets the per-entry limit of both stores (default
// DefaultMaxAnswerSize, 16 KiB): an answer longer than n bytes is not
// kept. Its Complete stores a small marker instead and returns
// ErrAnswerTooLarge, so that the request is still never applied twice;
// a duplicate of it gets ErrAnswerNotKept from Begin (Wrap refuses it
// with the store-error answer and counts it in Counters.NotKept). Values
// < 1 are ignored.
func WithMaxAnswerSize(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxAnswer = n
		}
	}
}

// WithMaxAge sets how long an entry is remembered after the request first
// arrived (default 4 minutes). Values <= 0 are ignored.
func WithMaxAge(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.maxAge = d
		}
	}
}

// WithMarkTTL sets how long an in-flight mark holds before a duplicate may
// take the request over (default 10 s). Set it above the handler's longest
// normal run time. Values <= 0 are ignored.
func WithMarkTTL(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.markTTL = d
		}
	}
}

// WithClock sets the clock of the in-memory store (for tests). Waiting
// duplicates still sleep in real time, re-reading the clock when they wake.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now, c.clockSet = now, true
		}
	}
}

// WithShards sets the number of shards of the in-memory store, rounded up
// to a power of two (default 64). Values < 1 are ignored.
func WithShards(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.shards = n
		}
	}
}

// WithKeyPrefix sets the prefix of Redis keys (default "aaatp:dedup:").
// Servers that must see each other's entries use the same prefix. Every
// key of the store shares the prefix's Redis Cluster hash tag: a prefix
// holding none (a non-empty "{...}") is made one, so "aaatp:dedup:"
// names keys "{aaatp:dedup:}" + hex(Key) and the epoch key
// "{aaatp:dedup:}epoch".
func WithKeyPrefix(p string) Option {
	return func(c *config) { c.prefix = p }
}

// WithReplicaAcks makes the Redis store wait, after each write, until n
// replicas have acknowledged it, at most timeout (Redis WAIT): a request's
// mark and answer then survive a failover to a replica (Sentinel) instead
// of being lost with the old master, which would let a duplicate be
// applied a second time. A write not acknowledged in time is written
// again, up to 4 times (a failover under way moves it to the new master);
// then it is kept on the master as it is, logged and counted (see
// Redis.ReplicaShortfalls), and the request goes on. Until the replicas
// acknowledge a write again, the store waits for them only once a second,
// so that a replica away does not slow every request.
// Each Begin and Complete costs one replication round trip more. Open
// sets n = 1 and timeout = 250 ms for Sentinel URLs; not for Cluster
// (WAIT cannot follow a script there). n <= 0 turns it off.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return func(c *config) { c.acks, c.acksWait = n, timeout }
}

// WithLogger sets where the Redis store logs a loss of its state (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.log = l }
}

// WithStateLost sets a function the Redis store calls each time it finds
// that Redis lost its entries (see Redis), after logging it: the place to
// raise a metric or an event. It runs on the goroutine of the Begin that
// noticed, so it must be quick.
func WithStateLost(fn func()) Option {
	return func(c *config) { c.onLost = fn }
}

// WithPoll sets the backoff of a Redis duplicate waiting for an in-flight
// request: the first poll after min, doubling up to max (defaults 2 ms and
// 100 ms). Values <= 0 are ignored.
func WithPoll(min, max time.Duration) Option {
	return func(c *config) {
		if min > 0 {
			c.pollMin = min
		}
		if max > 0 {
			c.pollMax = max
		}
		if c.pollMax < c.pollMin {
			c.pollMax = c.pollMin
		}
	}
}

// setKeys validates keys and stores them in o without repeats.
func (o *Outcome) setKeys(keys []Key) error {
	ks, err := uniqueKeys(keys, o.keyBuf[:0])
	if err != nil {
		return err
	}
	o.keys = ks
	return nil
}

// uniqueKeys validates keys and appends them without repeats to buf.
func uniqueKeys(keys, buf []Key) ([]Key, error) {
	if len(keys) == 0 {
		return nil, ErrNoKeys
	}
next:
	for _, k := range keys {
		if k.IsZero() {
			return nil, ErrZeroKey
		}
		for _, seen := range buf {
			if seen == k {
				continue next
			}
		}
		buf = append(buf, k)
	}
	return buf, nil
}
