// Package dedupcount counts what a shared duplicate store in Redis
// remembers, for the suites (test/failover, test/faults) that check that no
// request was applied twice or lost: the requests the servers applied must
// add up to the requests whose answers the store holds.
//
// A request is remembered under every key of it (an accounting request
// under its request key and its record key, see package dedup), each key
// holding the same answer, so keys are not requests. The load generator
// (aaa-peer client) gives every request a Session-Id of its own, which the
// answer carries: the store's requests are the distinct Session-Ids among
// its answers. Keys of one Session-Id holding different answers mean that
// the request was applied more than once.
package dedupcount

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// KeyPrefix is the prefix of the Redis keys of a store with the default
// key prefix, its hash tag included; an entry's key is KeyPrefix +
// hex(dedup.Key), the store's epoch key KeyPrefix + "epoch".
const KeyPrefix = "{" + dedup.DefaultKeyPrefix + "}"

// Counts is what one count found.
type Counts struct {
	// Requests: distinct Session-Ids (with the wanted prefix) among the
	// stored answers, the requests applied and remembered.
	Requests int `json:"requests"`
	// ByHost: Requests by the answer's Origin-Host (the server that
	// applied the request).
	ByHost map[string]int `json:"by_host"`
	// Keys: the entries holding those answers.
	Keys int `json:"keys"`
	// Marks: in-flight marks (a request being applied, or abandoned by a
	// server that died); not attributable to a Session-Id.
	Marks int `json:"marks"`
	// Other: answers without a Session-Id or with another prefix.
	Other int `json:"other"`
	// Conflicts: Session-Ids whose entries hold different answers (the
	// request was applied more than once).
	Conflicts int `json:"conflicts"`
}

// Counter counts entries one at a time; Scan feeds it from Redis. The zero
// value is not usable: use NewCounter.
type Counter struct {
	prefix  []byte
	answers map[string][]byte // Session-Id -> the first answer seen for it
	bad     map[string]bool   // Session-Ids already counted as conflicts
	c       Counts
}

// NewCounter returns a Counter of the answers whose Session-Id starts with
// sessionPrefix ("" counts every Session-Id).
func NewCounter(sessionPrefix string) *Counter {
	return &Counter{
		prefix:  []byte(sessionPrefix),
		answers: make(map[string][]byte),
		bad:     make(map[string]bool),
		c:       Counts{ByHost: make(map[string]int)},
	}
}

// Add counts the entry named key holding value. Keys that are not entries
// of the store (another prefix, the epoch key) are ignored.
func (c *Counter) Add(key string, value []byte) {
	id, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok || len(id) != 2*len(dedup.Key{}) {
		return
	}
	if _, err := hex.DecodeString(id); err != nil {
		return // the epoch key, or someone else's
	}
	if len(value) == 0 {
		return
	}
	switch value[0] {
	case 'm':
		c.c.Marks++
		return
	case 'a':
	default:
		return // "t": answered, the answer too large to keep; none here
	}
	ans := value[1:]
	sid, ok := wire.FindAVP(ans, message.SessionID, 0)
	if !ok || !bytes.HasPrefix(sid, c.prefix) {
		c.c.Other++
		return
	}
	c.c.Keys++
	first, seen := c.answers[string(sid)]
	if !seen {
		c.answers[string(sid)] = bytes.Clone(ans)
		oh, _ := wire.FindAVP(ans, message.OriginHost, 0)
		c.c.Requests++
		c.c.ByHost[string(oh)]++
		return
	}
	if !bytes.Equal(first, ans) && !c.bad[string(sid)] {
		c.bad[string(sid)] = true
		c.c.Conflicts++
	}
}

// Counts returns what has been counted so far.
func (c *Counter) Counts() Counts { return c.c }

// Scan counts the store's entries in Redis (see NewCounter for
// sessionPrefix). Entries that expire during the scan are not counted.
func Scan(ctx context.Context, rc redis.UniversalClient, sessionPrefix string) (Counts, error) {
	c := NewCounter(sessionPrefix)
	iter := rc.Scan(ctx, 0, KeyPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		v, err := rc.Get(ctx, k).Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return Counts{}, fmt.Errorf("redis GET %s: %w", k, err)
		}
		c.Add(k, v)
	}
	if err := iter.Err(); err != nil {
		return Counts{}, fmt.Errorf("redis SCAN: %w", err)
	}
	return c.Counts(), nil
}
