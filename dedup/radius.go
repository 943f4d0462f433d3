package dedup

import (
	"github.com/aaatp/aaatp/radius"
)

const kindRADIUSAccounting = 'r'

// RADIUS attributes of the accounting content key.
const (
	attrNASIPv6Address = 95
	acctInterimUpdate  = 3
)

// RADIUSAccountingKey returns the content key of a RADIUS
// Accounting-Request b (a validated packet), the same whatever the
// transport: the NAS identity (NAS-Identifier, else NAS-IP-Address, else
// NAS-IPv6-Address), Acct-Session-Id, Acct-Status-Type and Event-Timestamp.
// Acct-Delay-Time, Proxy-State, the Identifier and the authenticators are
// left out, so that a record retried under a new Identifier, to another
// server or after a failover, has the same key and is applied once.
//
// ok is false when b is not an Accounting-Request, has no Acct-Session-Id
// or Acct-Status-Type, or is an Interim-Update without Event-Timestamp
// (nothing would tell two interim records of a session apart).
func RADIUSAccountingKey(b []byte) (k Key, ok bool) {
	if len(b) < radius.HeaderLen || radius.Code(b) != 4 { // Accounting-Request
		return Key{}, false
	}
	sid, okSID := radius.Attr(b, radius.AttrAcctSessionID)
	st, okST := radius.Attr(b, radius.AttrAcctStatusType)
	if !okSID || !okST {
		return Key{}, false
	}
	ts, okTS := radius.Attr(b, radius.AttrEventTimestamp)
	if !okTS && len(st) == 4 && st[0]|st[1]|st[2] == 0 && st[3] == acctInterimUpdate {
		return Key{}, false
	}
	nas, found := radius.Attr(b, radius.AttrNASIdentifier)
	if !found {
		if nas, found = radius.Attr(b, radius.AttrNASIPAddress); !found {
			nas, _ = radius.Attr(b, attrNASIPv6Address)
		}
	}
	var buf [256]byte
	kb := append(buf[:0], kindRADIUSAccounting)
	kb = appendField(kb, string(nas))
	kb = appendField(kb, string(sid))
	kb = appendField(kb, string(st))
	kb = appendField(kb, string(ts))
	return sum(kb), true
}
