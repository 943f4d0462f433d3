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

// Dedup returns a Handler that runs h once per accounting record across
// every connection and, with a shared store, every server: a record seen
// before from the same client (same AccountingKey and client address, see
// TrustNASIdentityFrom) gets the first answer's code and attributes
// again, re-signed for the new request. Other requests go straight to h.
//
// Once means: as long as h returns within the store's mark TTL
// (dedup.WithMarkTTL, 10 s by default). If h runs longer (a slow
// accounting database) and the NAS re-sends the record meanwhile, here or
// to a server sharing the store, the copy takes the record over and runs
// h again; only one of the two answers is committed, and both copies are
// answered with it (the other result is discarded and counted in
// counters.Superseded). Side effects that must happen once per record
// (billing) belong in DedupCommit's onCommit, not in h.
//
// If the store fails, the request gets no answer, so that the client
// tries another server rather than risking a second application: it is
// counted in counters.Dropped (not StoreErrs, which count answers), and
// why the store failed is logged if LogStoreErrors is given. Requests
// other than accounting records are counted in counters.PassedThrough
// when h answers them, not in Applied: nothing is committed for them. An answer over the store's
// per-entry limit (dedup.WithMaxAnswerSize) is sent but not kept (counted
// in counters.TooLarge); a copy of that record then gets a bare
// Accounting-Response (counted in counters.NotKept): it is applied
// already, and an accounting response carries nothing the NAS needs
// beyond the acknowledgement (RFC 2866). counters may be nil;
// counters.UnseenRetransmits stays 0: RADIUS has no T flag, so a record
// re-sent to another server after a failover cannot be told from a first
// send, and only a store shared by the servers keeps it from being
// applied twice.
func Dedup(store dedup.Store, h Handler, counters *dedup.Counters, opts ...DedupOption) Handler {
	return DedupCommit(store, h, nil, counters, opts...)
}

// DedupCommit is Dedup with a hook called once per accounting record,
// after its answer is committed to the store, with the record and the
// answer's code and attributes: the place for side effects that must not
// happen twice. onCommit is not called for other requests, for a record
// answered from the store, nor for a result discarded because another
// copy of the record took it over. It may be nil.
func DedupCommit(store dedup.Store, h Handler, onCommit func(req *lradius.Packet, code lradius.Code, attrs lradius.Attributes), counters *dedup.Counters, opts ...DedupOption) Handler {
	if counters == nil {
		counters = &dedup.Counters{}
	}
	var opt dedupOptions
	for _, f := range opts {
		f(&opt)
	}
	// refuse is the answer to a record whose Begin failed.
	refuse := func(ctx context.Context, err error) (lradius.Code, lradius.Attributes) {
		switch {
		case ctx.Err() != nil:
			counters.Cancelled.Add(1)
		case errors.Is(err, dedup.ErrAnswerNotKept):
			// Applied already, its answer too large to keep: acknowledge
			// it, never apply it again.
			counters.NotKept.Add(1)
			return lradius.CodeAccountingResponse, nil
		default:
			counters.Dropped.Add(1)
			opt.errLog.Log("dedup: duplicate store failed; RADIUS record dropped", err)
		}
		return 0, nil
	}
	return func(ctx context.Context, req *lradius.Packet, raw []byte) (lradius.Code, lradius.Attributes) {
		counters.Received.Add(1)
		key, ok := accountingKey(req, opt.keyFrom(ctx))
		if !ok {
			code, attrs := h(ctx, req, raw)
			if code != 0 {
				counters.PassedThrough.Add(1) // not deduplicated: not committed anywhere
			}
			return code, attrs
		}
		o, err := store.Begin(ctx, key)
		if err != nil {
			return refuse(ctx, err)
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
		for {
			switch err := o.Complete(tmpl); {
			case err == nil || errors.Is(err, dedup.ErrAnswerTooLarge):
				counters.Applied.Add(1)
				if err != nil {
					counters.TooLarge.Add(1) // sent, not kept
				}
				if onCommit != nil {
					onCommit(req, code, attrs)
				}
				return code, attrs
			case !errors.Is(err, dedup.ErrMarkLost):
				if errors.Is(err, dedup.ErrCommitUnknown) {
					counters.CommitUnknown.Add(1)
				}
				counters.Dropped.Add(1)
				opt.errLog.Log("dedup: duplicate store failed; RADIUS record dropped", err)
				return 0, nil
			}
			// Another copy of the record, here or at another server,
			// took it over (h outlived the mark TTL): nothing was
			// stored. The record is the new owner's: answer with its
			// answer (waiting for it if it is still running).
			o2, err := store.Begin(ctx, key)
			if err != nil {
				return refuse(ctx, err)
			}
			if o2.Duplicate() {
				counters.Superseded.Add(1)
				return stored(o2.Answer())
			}
			// The other owner gave up: ours becomes the answer after all.
			defer o2.Abandon()
			o = o2
		}
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
