package radpeer

import (
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
// its source address and port, Identifier and Request Authenticator.
type dupKey struct {
	addr  netip.AddrPort // the source, when it is a UDP address
	other string         // the source otherwise (its String)
	id    byte
	auth  [radius.AuthenticatorLen]byte
}

// dupKeyOf returns the key of request b (a validated packet) from src.
// A UDP source is kept as a netip.AddrPort: no string to build for each
// packet.
func dupKeyOf(src net.Addr, b []byte) dupKey {
	k := dupKey{id: radius.Identifier(b), auth: radius.Authenticator(b)}
	if u, ok := src.(*net.UDPAddr); ok {
		k.addr = u.AddrPort()
	} else {
		k.other = src.String()
	}
	return k
}

// dupEntry is one remembered request, linked in arrival order.
type dupEntry struct {
	key        dupKey
	at         time.Time
	resp       []byte // nil while the request is being handled
	prev, next *dupEntry
}

func (e *dupEntry) bytes() int64 {
	return dupEntryBytes + int64(len(e.key.other)+len(e.resp))
}

// dupCache remembers the requests seen in the last ttl, and their answers
// once sent. The entries are linked in arrival order, oldest first, which
// is also the order in which they expire: expiry and the bounds take from
// the front only what must go, and forgetting an entry anywhere (a request
// that got no answer) unlinks it, so that every operation costs O(1)
// whatever the cache holds. It has no lock: its owner guards it.
type dupCache struct {
	ttl        time.Duration
	maxEntries int
	maxBytes   int64

	index       map[dupKey]*dupEntry
	first, last *dupEntry // oldest, newest
	size        int64     // bytes of every entry, as bytes counts them

	// examined counts the entries expiry looked at, removed or kept: the
	// cost of keeping the bounds, which the tests check stays flat.
	examined uint64
}

func newDupCache(ttl time.Duration, maxEntries int, maxBytes int64) *dupCache {
	return &dupCache{ttl: ttl, maxEntries: maxEntries, maxBytes: maxBytes, index: make(map[dupKey]*dupEntry)}
}

// seen looks k up at time now. A request seen in the last ttl returns
// seen true and its answer, nil while it is being handled. Otherwise k is
// remembered as being handled from now on, by the entry returned (which
// answer and forget take), and seen is false.
func (c *dupCache) seen(k dupKey, now time.Time) (e *dupEntry, resp []byte, seen bool) {
	c.expire(now)
	if e, ok := c.index[k]; ok {
		return nil, e.resp, true
	}
	e = &dupEntry{key: k, at: now, prev: c.last}
	if c.last != nil {
		c.last.next = e
	} else {
		c.first = e
	}
	c.last = e
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

// bound removes the oldest entries while the cache is over either bound.
func (c *dupCache) bound() {
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
	delete(c.index, e.key)
	c.size -= e.bytes()
}

// len returns the number of entries.
func (c *dupCache) len() int { return len(c.index) }
