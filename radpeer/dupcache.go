package radpeer

import (
	"hash/maphash"
	"net"
	"net/netip"
	"time"

	"github.com/aaatp/aaatp/radius"
)

// dupEntryBytes is what one remembered request costs besides its answer:
// the entry (key, time, links) and its slot in the index, as measured at
// 65,536 entries. The byte bound counts it for every entry, so that a
// flood of requests with small answers is bounded by bytes too.
const dupEntryBytes = 320

// dupKey identifies a request for the duplicate cache (RFC 5080 2.2.2):
// its source address and port, Identifier and Request Authenticator, and
// on a wildcard socket the address it was sent to.
type dupKey struct {
	addr  netip.AddrPort // the source, when it is a UDP address
	other string         // the source otherwise (its String)
	dst   netip.Addr     // the destination, on a wildcard socket
	id    byte
	auth  [radius.AuthenticatorLen]byte
}

// dupKeyOf returns the key of request b (a validated packet) from src
// to dst (zero: not known). A UDP source is kept as a netip.AddrPort: no
// string to build for each packet.
func dupKeyOf(src net.Addr, dst netip.Addr, b []byte) dupKey {
	k := dupKey{dst: dst, id: radius.Identifier(b), auth: radius.Authenticator(b)}
	if u, ok := src.(*net.UDPAddr); ok {
		k.addr = u.AddrPort()
	} else {
		k.other = src.String()
	}
	return k
}

// dupEntry is one remembered request, linked in arrival order, and an
// unsigned one also in the arrival order of the unsigned.
type dupEntry struct {
	key          dupKey
	at           time.Time
	resp         []byte // nil while the request is being handled
	prev, next   *dupEntry
	signed       bool      // signed with the secret (see maPolicy.verify)
	sum          uint64    // the request's bytes, hashed (see identical)
	uprev, unext *dupEntry // unsigned: the unsigned list's links
}

func (e *dupEntry) bytes() int64 {
	return dupEntryBytes + int64(len(e.key.other)+len(e.resp))
}

// dupCache remembers the requests seen in the last ttl, and their answers
// once sent. The entries are linked in arrival order, oldest first, which
// is also the order in which they expire: expiry and the bounds take from
// the front only what must go, and forgetting an entry anywhere (a request
// that got no answer) unlinks it, so that every operation costs O(1)
// whatever the cache holds.
//
// Requests not signed with the secret (Access-Requests without
// Message-Authenticator) hold at most half of either bound: anyone can
// send those, from any source port, and past their half the oldest of
// them goes, never a signed request's entry, so a sender without the
// secret cannot flush the answers of the clients that hold it (an
// Accounting-Request's retransmission then handled twice). It has no
// lock: its owner guards it.
type dupCache struct {
	ttl        time.Duration
	maxEntries int
	maxBytes   int64
	seed       maphash.Seed // of sum; random, so that no sender can aim at a value

	index         map[dupKey]*dupEntry
	first, last   *dupEntry // oldest, newest
	size          int64     // bytes of every entry, as bytes counts them
	firstU, lastU *dupEntry // the unsigned entries, oldest and newest
	nU            int       // unsigned entries
	sizeU         int64     // their bytes

	// examined counts the entries expiry looked at, removed or kept: the
	// cost of keeping the bounds, which the tests check stays flat.
	examined uint64
}

func newDupCache(ttl time.Duration, maxEntries int, maxBytes int64) *dupCache {
	return &dupCache{ttl: ttl, maxEntries: maxEntries, maxBytes: maxBytes, seed: maphash.MakeSeed(), index: make(map[dupKey]*dupEntry)}
}

// sum hashes request b for identical and seen. It needs no lock.
func (c *dupCache) sum(b []byte) uint64 { return maphash.Bytes(c.seed, b) }

// identical looks up, at time now, a request of key k whose bytes hash
// to sum: a byte-for-byte retransmission of one seen in the last ttl
// (hit), with its answer, nil while it is being handled. Such a copy of
// a request that passed verification carries nothing new and goes to
// the same source, so its answer may be sent again before it is
// verified: after the secret changed (SetClients), the retransmission of
// a request answered on the old one still gets its answer.
func (c *dupCache) identical(k dupKey, sum uint64, now time.Time) (resp []byte, hit bool) {
	c.expire(now)
	if e, ok := c.index[k]; ok && e.sum == sum {
		return e.resp, true
	}
	return nil, false
}

// seen looks k up at time now. A request seen in the last ttl returns
// seen true and its answer, nil while it is being handled. Otherwise k is
// remembered as being handled from now on, by the entry returned (which
// answer and forget take), and seen is false.
func (c *dupCache) seen(k dupKey, now time.Time, signed bool) (e *dupEntry, resp []byte, seen bool) {
	c.expire(now)
	if e, ok := c.index[k]; ok {
		return nil, e.resp, true
	}
	e = &dupEntry{key: k, at: now, prev: c.last, signed: signed}
	if c.last != nil {
		c.last.next = e
	} else {
		c.first = e
	}
	c.last = e
	if !signed {
		e.uprev = c.lastU
		if c.lastU != nil {
			c.lastU.unext = e
		} else {
			c.firstU = e
		}
		c.lastU = e
		c.nU++
		c.sizeU += e.bytes()
	}
	c.index[k] = e
	c.size += e.bytes()
	c.bound()
	return e, nil, false
}

// has reports whether e is still in the cache: an entry that expired or
// went over a bound while its request was handled may have been replaced
// by a retransmission's, which is not e's to answer or forget.
func (c *dupCache) has(e *dupEntry) bool { return c.index[e.key] == e }

// answer remembers resp as the answer of e, if e is still remembered.
func (c *dupCache) answer(e *dupEntry, resp []byte) {
	if !c.has(e) || e.resp != nil {
		return
	}
	e.resp = resp
	c.size += int64(len(resp))
	if !e.signed {
		c.sizeU += int64(len(resp))
	}
	c.bound()
}

// forget removes e, if still remembered, so that a retransmission of its
// request is handled afresh.
func (c *dupCache) forget(e *dupEntry) {
	if c.has(e) {
		c.remove(e)
	}
}

// expire removes the entries older than ttl: all at the front.
func (c *dupCache) expire(now time.Time) {
	for c.first != nil {
		c.examined++
		if now.Sub(c.first.at) < c.ttl {
			return
		}
		c.remove(c.first)
	}
}

// bound removes the oldest unsigned entries while they hold more than
// their half of either bound, then the oldest entries while the cache is
// over either bound.
func (c *dupCache) bound() {
	for c.firstU != nil && (c.nU > max(c.maxEntries/2, 1) || c.sizeU > c.maxBytes/2) {
		c.examined++
		c.remove(c.firstU)
	}
	for c.first != nil && (len(c.index) > c.maxEntries || c.size > c.maxBytes) {
		c.examined++
		c.remove(c.first)
	}
}

func (c *dupCache) remove(e *dupEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.first = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.last = e.prev
	}
	e.prev, e.next = nil, nil
	if !e.signed {
		if e.uprev != nil {
			e.uprev.unext = e.unext
		} else {
			c.firstU = e.unext
		}
		if e.unext != nil {
			e.unext.uprev = e.uprev
		} else {
			c.lastU = e.uprev
		}
		e.uprev, e.unext = nil, nil
		c.nU--
		c.sizeU -= e.bytes()
	}
	delete(c.index, e.key)
	c.size -= e.bytes()
}

// len returns the number of entries.
func (c *dupCache) len() int { return len(c.index) }
