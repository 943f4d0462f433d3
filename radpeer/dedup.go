package radpeer

import (
	"context"
	"errors"
	"strconv"

	"github.com/aaatp/aaatp/dedup"
	"github.com/aaatp/aaatp/radius"
	lradius "layeh.com/radius"
)

// AccountingKey returns the content key of an Accounting-Request: its
// NAS identity (NAS-Identifier, else the raw NAS-IP-Address), its
// Acct-Session-Id, Acct-Status-Type and raw Event-Timestamp. What a client
// changes when it re-sends a record (Acct-Delay-Time, the Identifier, the
// authenticators, Proxy-State added by a proxy) is not part of it, so the
// same record re-sent to another server sharing the store has the same
// key, while a Start and a Stop of one session in the same second do not.
// ok is false for other requests, and for records without Acct-Session-Id
// or Event-Timestamp (nothing then tells their records apart).
func AccountingKey(req *lradius.Packet) (k dedup.Key, ok bool) {
	if req.Code != lradius.CodeAccountingRequest {
		return k, false
	}
	sid, ok1 := req.Lookup(radius.AttrAcctSessionID)
	ts, ok2 := req.Lookup(radius.AttrEventTimestamp)
	st, ok3 := req.Lookup(radius.AttrAcctStatusType)
	if !ok1 || !ok2 || !ok3 {
		return k, false
	}
	nas, found := req.Lookup(radius.AttrNASIdentifier)
	if !found {
		nas, _ = req.Lookup(radius.AttrNASIPAddress)
	}
	status, _ := lradius.Integer(st)
	// dedup.AccountingKey's Origin-Host field carries the record type with
	// a prefix that no DiameterIdentity can have (it holds a space), so a
	// RADIUS record never shares a key with a Diameter one.
	return dedup.AccountingKey(string(sid), ts, "RADIUS Acct-Status-Type "+strconv.FormatUint(uint64(status), 10), string(nas)), true
}

// Dedup returns a Handler that runs h at most once per accounting record
// across every connection and, with a shared store, every server: a
// record seen before (same AccountingKey) gets the first answer's code
// and attributes again, re-signed for the new request. Other requests go
// straight to h. If the store fails, the request gets no answer, so that
// the client tries another server rather than risking a second
// application. counters may be nil.
func Dedup(store dedup.Store, h Handler, counters *dedup.Counters) Handler {
	if counters == nil {
		counters = &dedup.Counters{}
	}
	return func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		counters.Received.Add(1)
		key, ok := AccountingKey(req)
		if !ok {
			code, attrs := h(ctx, req, raw)
			if code != 0 {
				counters.Applied.Add(1)
			}
			return code, attrs
		}
		o, err := store.Begin(ctx, key)
		if err != nil {
			if ctx.Err() != nil {
				counters.Cancelled.Add(1)
			} else {
				counters.StoreErrs.Add(1)
			}
			return 0, nil
		}
		if o.Duplicate() {
			counters.Duplicates.Add(1)
			return stored(o.Answer())
		}
		defer o.Abandon() // no-op after Complete
		code, attrs := h(ctx, req, raw)
		if code == 0 {
			return 0, nil
		}
		tmpl, err := (&lradius.Packet{Code: code, Attributes: attrs}).MarshalBinary()
		if err != nil {
			return code, attrs // EncodeResponse will report it
		}
		switch err := o.Complete(tmpl); {
		case err == nil:
			counters.Applied.Add(1)
		case errors.Is(err, dedup.ErrMarkLost):
			counters.Superseded.Add(1)
		default:
			counters.StoreErrs.Add(1)
			return 0, nil
		}
		return code, attrs
	}
}

// stored decodes an answer kept by Dedup.
func stored(b []byte) (lradius.Code, lradius.Attributes) {
	p, err := radius.Decode(b, nil)
	if err != nil {
		return 0, nil
	}
	return p.Code, p.Attributes
}
