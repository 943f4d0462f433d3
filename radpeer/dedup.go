package radpeer

import (
	"context"
	"errors"
	"net/netip"
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
	return accountingKey(req, "")
}

// accountingKey is AccountingKey with the sender's address bound in (none
// when from is empty).
func accountingKey(req *lradius.Packet, from string) (k dedup.Key, ok bool) {
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
	// The sender, when bound, joins the NAS identity after a NUL, which
	// neither NAS-Identifier text nor a 4-byte NAS-IP-Address confuses
	// with another sender's.
	nasID := string(nas)
	if from != "" {
		nasID += "\x00from " + from
	}
	return dedup.AccountingKey(string(sid), ts, "RADIUS Acct-Status-Type "+strconv.FormatUint(uint64(status), 10), nasID), true
}

// DedupOption changes what Dedup does.
type DedupOption func(*dedupOptions)

type dedupOptions struct {
	proxies []netip.Prefix
	errLog  *dedup.ErrorLog
}

// LogStoreErrors makes Dedup log why the store failed, through log, for
// each record it drops for that reason; log bounds the rate (see
// dedup.ErrorLog).
func LogStoreErrors(log *dedup.ErrorLog) DedupOption {
	return func(o *dedupOptions) { o.errLog = log }
}

// TrustNASIdentityFrom names the clients that are proxies (agents)
// relaying the records of many NASes: their records are keyed by the NAS
// identity they carry alone, so that a NAS's record re-sent through
// another of them is still recognised. From every other client a record's
// key also holds the client's address, so that a client holding the
// shared secret cannot forge another NAS's record ahead of it and have
// the real one answered as a duplicate and never applied.
func TrustNASIdentityFrom(prefixes ...netip.Prefix) DedupOption {
	return func(o *dedupOptions) { o.proxies = append(o.proxies, prefixes...) }
}

// keyFrom returns the address a record from ctx's sender is bound to, or
// "" for a trusted proxy.
func (o *dedupOptions) keyFrom(ctx context.Context) string {
	s, ok := SenderOf(ctx)
	if !ok {
		return "" // not from a Server: a caller's own use
	}
	for _, p := range o.proxies {
		if p.Contains(s.Addr) {
			return ""
		}
	}
	return s.Addr.String()
}

// Dedup returns a Handler that runs h at most once per accounting record
// across every connection and, with a shared store, every server: a
// record seen before from the same client (same AccountingKey and client
// address, see TrustNASIdentityFrom) gets the first answer's code
// and attributes again, re-signed for the new request. Other requests go
// straight to h. If the store fails, the request gets no answer, so that
// the client tries another server rather than risking a second
// application; why it failed is logged if LogStoreErrors is given.
// counters may be nil; counters.UnseenRetransmits stays 0:
// RADIUS has no T flag, so a record re-sent to another server after a
// failover cannot be told from a first send, and only a store shared by
// the servers keeps it from being applied twice.
func Dedup(store dedup.Store, h Handler, counters *dedup.Counters, opts ...DedupOption) Handler {
	if counters == nil {
		counters = &dedup.Counters{}
	}
	var opt dedupOptions
	for _, f := range opts {
		f(&opt)
	}
	return func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		counters.Received.Add(1)
		key, ok := accountingKey(req, opt.keyFrom(ctx))
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
				opt.errLog.Log("dedup: duplicate store failed; RADIUS record dropped", err)
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
			opt.errLog.Log("dedup: duplicate store failed; RADIUS record dropped", err)
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
