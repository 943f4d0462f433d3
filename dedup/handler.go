package dedup

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// Counters count what a wrapped handler did. Safe for concurrent use.
type Counters struct {
	Received   atomic.Uint64 // requests that reached the wrapper
	Applied    atomic.Uint64 // answers committed to the store: the request's one application
	Duplicates atomic.Uint64 // requests answered from the store
	StoreErrs  atomic.Uint64 // requests refused (answered DIAMETER_TOO_BUSY) because the store failed
	// Dropped counts requests left unanswered because the store failed:
	// radpeer.Dedup's RADIUS records, RADIUS having no answer that says
	// "try another server". They are no answers, unlike StoreErrs.
	Dropped atomic.Uint64
	// PassedThrough counts requests answered by the handler without the
	// store, having no duplicate key: radpeer.Dedup's RADIUS requests
	// other than accounting records. They are not in Applied.
	PassedThrough atomic.Uint64
	Cancelled     atomic.Uint64 // requests dropped because their connection closed first
	// Superseded counts handler results discarded: another request,
	// here or at another server, took the request over meanwhile, and
	// its answer was sent instead.
	Superseded atomic.Uint64
	// TooLarge counts answers sent but not kept, being over the store's
	// per-entry limit (they are counted in Applied too).
	TooLarge atomic.Uint64
	// NotKept counts duplicates refused with DIAMETER_UNABLE_TO_COMPLY
	// because the first answer was too large to keep: it cannot be
	// replayed, and applying the request again would apply it twice.
	NotKept atomic.Uint64
	// CommitUnknown counts requests whose commit's outcome the store
	// could not tell (ErrCommitUnknown: Redis answered neither the commit
	// nor its check): refused DIAMETER_TOO_BUSY and counted in StoreErrs
	// too (radpeer.Dedup: dropped, counted in Dropped), although the
	// store may hold their answer, which their duplicates then get;
	// onCommit has not run for them.
	CommitUnknown atomic.Uint64
	// Transient counts answers of the handler that refused the request
	// for now (see Transient): sent, but not committed, so that the
	// client's retry can be applied, here or at another server.
	Transient atomic.Uint64
	// UnseenRetransmits counts requests with the T flag (possibly a
	// retransmission: a client's replay after a failover) that the store
	// had no entry for, so that the handler ran for them (they are
	// counted in Applied too once committed). Either the first copy never
	// arrived anywhere, or it went to a server that does not share this
	// store, which may have applied it already: with a store of this
	// process only (NewMemory), a replay from a client that failed over
	// from another server is applied a second time. Wrap counts it; RADIUS
	// has no T flag, so radpeer.Dedup never does.
	UnseenRetransmits atomic.Uint64
}

// KeysOf returns the duplicate keys of a Diameter request: its
// [RequestKey] (Origin-Host, End-to-End Identifier) always, and for a base
// accounting request (application 3, command 271) that carries Session-Id,
// Accounting-Record-Type and Accounting-Record-Number also the key of its
// [AccountingRecord], with Event-Timestamp if present and NAS-Identifier
// preferred to NAS-IP-Address as the NAS identity. An accounting request
// without those AVPs gets only the request key. Input shorter than a
// Diameter header (20 bytes) is no request: it gets no keys (an empty
// slice), which Begin refuses with ErrNoKeys.
func KeysOf(req []byte) []Key {
	return appendKeys(make([]Key, 0, 2), req)
}

// appendKeys appends the keys of KeysOf to dst. One walk over the AVPs
// finds what both keys need (the first AVP of each code, as wire.FindAVP
// would), and the keys hash the request's bytes in place.
func appendKeys(dst []Key, req []byte) []Key {
	if len(req) < wire.HeaderLen {
		return dst
	}
	var f keyFields
	acct := wire.AppID(req) == message.AppAccounting && wire.CommandCode(req) == message.CmdAccounting
	_ = wire.WalkAVPs(req, func(a wire.AVP) bool { // a malformed AVP ends the walk, as it ends FindAVP's
		return f.see(a, acct)
	})
	dst = append(dst, requestKey(f.originHost, wire.EndToEnd(req)))
	if acct && f.has&hasRecord == hasRecord {
		nas := f.nasID
		if f.has&hasNASID == 0 {
			nas = f.nasIP
		}
		dst = append(dst, recordKey(f.sessionID, f.recType, f.recNum, f.eventTS, f.originHost, nas))
	}
	return dst
}

// keyFields are the AVPs of a request that its keys read.
type keyFields struct {
	originHost, sessionID, eventTS, nasID, nasIP []byte
	recType, recNum                              uint32
	has, seen                                    uint8 // hasX bits: usable / met (the first of a code counts)
}

const (
	hasOriginHost = 1 << iota
	hasSessionID
	hasType // Accounting-Record-Type of 4 octets
	hasNumber
	hasTimestamp
	hasNASID
	hasNASIP
	hasRecord  = hasSessionID | hasType | hasNumber
	allKeyAVPs = hasOriginHost | hasRecord | hasTimestamp | hasNASID | hasNASIP // every bit above
)

// see takes AVP a into f if it is the first of its code that the keys
// read (Origin-Host only unless acct), and says whether any is left to find.
func (f *keyFields) see(a wire.AVP, acct bool) bool {
	if a.Vendor != 0 {
		return true
	}
	var bit uint8
	switch a.Code {
	case message.OriginHost:
		bit = hasOriginHost
	case message.SessionID:
		bit = hasSessionID
	case message.AccountingRecordType:
		bit = hasType
	case message.AccountingRecordNumber:
		bit = hasNumber
	case message.EventTimestamp:
		bit = hasTimestamp
	case message.NASIdentifier:
		bit = hasNASID
	case message.NASIPAddress:
		bit = hasNASIP
	default:
		return true
	}
	if f.seen&bit != 0 || (!acct && bit != hasOriginHost) {
		return true
	}
	f.seen |= bit
	ok := true
	switch bit {
	case hasOriginHost:
		f.originHost = a.Data
	case hasSessionID:
		f.sessionID = a.Data
	case hasType, hasNumber:
		if ok = len(a.Data) == 4; ok { // message.Uint32Of's rule
			if bit == hasType {
				f.recType = binary.BigEndian.Uint32(a.Data)
			} else {
				f.recNum = binary.BigEndian.Uint32(a.Data)
			}
		}
	case hasTimestamp:
		f.eventTS = a.Data
	case hasNASID:
		f.nasID = a.Data
	case hasNASIP:
		f.nasIP = a.Data
	}
	if ok {
		f.has |= bit
	}
	if !acct {
		return false // Origin-Host was all
	}
	return f.seen != allKeyAVPs
}

// Wrap returns a peer.Handler that runs h at most once per request key
// across every connection (and, with a shared Redis store, every server):
// a duplicate, with or without the T flag, gets the first answer again.
//
// A request is applied when its answer is committed to the store
// (Outcome.Complete succeeds). If this server stalled past the in-flight
// mark's TTL while h ran (a GC pause, a frozen VM) and another request
// took the request over meanwhile, here or at another server (a replay,
// or the same accounting record re-sent under a new End-to-End id), this
// server's result is discarded and the request is answered with the other
// one's answer, once it is committed; if the other gives up instead, this
// server's result is committed after all. h must therefore keep side
// effects that must happen once (billing records) until the answer is
// committed, or be idempotent; OnCommit is where to put them.
//
// An answer of h that refuses the request for now, telling the client to
// try another server (see Transient: DIAMETER_UNABLE_TO_DELIVER or
// DIAMETER_TOO_BUSY, E bit), is sent but not committed: the request's
// marks are dropped as by Abandon, so that its retry, here or at any
// server sharing the store, runs h again instead of being answered the
// refusal from the store for the store's max age. h must answer so only
// for a request it did not apply. Such answers are counted in
// Counters.Transient, not Applied, and onCommit is not called.
//
// If the store fails, the request is answered DIAMETER_TOO_BUSY (3004,
// E bit) so that the client tries another server, rather than risking a
// second application. An answer over the store's per-entry limit (see
// WithMaxAnswerSize) is sent but not kept; a duplicate of that request is
// refused with DIAMETER_UNABLE_TO_COMPLY (5012), a final answer: its
// answer cannot be replayed, and running h again, here or at another
// server, could apply it twice. The answer's Error-Message says only that
// the store is unavailable; the store's error is for the server's log (see
// LogStoreErrors). A request whose connection closed before the store
// answered gets no answer (there is nowhere to send one). counters may be
// nil.
func Wrap(s Store, h peer.Handler, counters *Counters, opts ...WrapOption) peer.Handler {
	return WrapCommit(s, h, nil, counters, opts...)
}

// WrapCommit is Wrap with a hook called once per request, after its answer
// is committed: the place for side effects that must not happen twice.
// onCommit runs when Complete says the answer is committed, which the
// Redis store settles even when Redis' replies were late or lost (see
// Outcome.Complete). Only when Redis answers neither the commit nor the
// check after it (ErrCommitUnknown) can a committed request miss its
// onCommit: WrapCommit then answers DIAMETER_TOO_BUSY, counts it in
// Counters.CommitUnknown and logs it (LogStoreErrors), and the Redis store
// logs it too.
func WrapCommit(s Store, h peer.Handler, onCommit func(req, ans []byte), counters *Counters, opts ...WrapOption) peer.Handler {
	if counters == nil {
		counters = &Counters{}
	}
	var cfg wrapConfig
	for _, o := range opts {
		o(&cfg)
	}
	// storeDown counts a request refused because the store failed, logs
	// why, and returns its answer.
	storeDown := func(p *peer.Peer, req []byte, err error) []byte {
		counters.StoreErrs.Add(1)
		cfg.errLog.Log("dedup: duplicate store failed; request answered DIAMETER_TOO_BUSY", err)
		return storeDownAnswer(p, req)
	}
	// With a ReusingStore, each request's Outcome comes from a pool and
	// goes back once the request is finished with it (its answer bytes,
	// returned to the peer, are a copy and stay the peer's).
	// Its keys too: a ReusingStore copies them into the Outcome.
	rs, reuse := s.(ReusingStore)
	outcomes := sync.Pool{New: func() any { return new(pooledOutcome) }}
	// begin returns the request's Outcome and keys, and po to put back
	// in the pool when done (nil without a ReusingStore).
	begin := func(ctx context.Context, req []byte) (o *Outcome, keys []Key, po *pooledOutcome, err error) {
		if !reuse {
			keys = KeysOf(req)
			o, err = s.Begin(ctx, keys...)
			return o, keys, nil, err
		}
		po = outcomes.Get().(*pooledOutcome)
		keys = appendKeys(po.keys[:0], req)
		if err := rs.BeginInto(ctx, &po.o, keys...); err != nil {
			outcomes.Put(po)
			return nil, nil, nil, err
		}
		return &po.o, keys, po, nil
	}
	// refuse is the answer to a request whose Begin failed.
	refuse := func(ctx context.Context, p *peer.Peer, req []byte, err error) []byte {
		if ctx.Err() != nil {
			counters.Cancelled.Add(1)
			return nil
		}
		if errors.Is(err, ErrAnswerNotKept) {
			counters.NotKept.Add(1)
			return notKeptAnswer(p, req)
		}
		return storeDown(p, req, err)
	}
	return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		counters.Received.Add(1)
		o, keys, po, err := begin(ctx, req)
		if err != nil {
			return refuse(ctx, p, req, err)
		}
		if po != nil {
			defer outcomes.Put(po) // after the Abandon below
		}
		if o.Duplicate() {
			counters.Duplicates.Add(1)
			return o.Answer() // the peer writes this request's ids into it
		}
		defer o.Abandon() // no-op after Complete
		if wire.Flags(req)&wire.FlagRetransmit != 0 {
			counters.UnseenRetransmits.Add(1)
		}
		ans := h(ctx, p, req)
		if ans == nil {
			return nil
		}
		if Transient(ans) {
			// Not applied, try elsewhere: keep nothing, so that the
			// client's retry, here or at a server sharing the store,
			// is applied (the deferred Abandon drops the marks).
			counters.Transient.Add(1)
			return ans
		}
		for {
			switch err := o.Complete(ans); {
			case err == nil || errors.Is(err, ErrAnswerTooLarge):
				counters.Applied.Add(1)
				if err != nil {
					counters.TooLarge.Add(1)
				}
				if onCommit != nil {
					onCommit(req, ans)
				}
				return ans
			case errors.Is(err, ErrCommitUnknown):
				// The store may hold the answer, or not: it does not
				// say. Refuse it, as for a store failure, but say so
				// apart: if it is committed, onCommit has not run.
				counters.CommitUnknown.Add(1)
				counters.StoreErrs.Add(1)
				cfg.errLog.Log("dedup: commit outcome unknown (the store answered neither the commit nor its check): request answered DIAMETER_TOO_BUSY; it may be committed all the same, without onCommit", err)
				return storeDownAnswer(p, req)
			case !errors.Is(err, ErrMarkLost):
				// The store failed at the commit: the result is not
				// recorded, so do not claim it; the client will try
				// elsewhere.
				return storeDown(p, req, err)
			}
			// Another request, here or at another server, took one of
			// the keys over (this request replayed, or its accounting
			// record re-sent under a new End-to-End id): nothing was
			// stored and our marks are gone. The request is the new
			// owner's: answer with its answer (waiting for it if it is
			// still running), never ours.
			o2, err := s.Begin(ctx, keys...)
			if err != nil {
				return refuse(ctx, p, req, err)
			}
			if o2.Duplicate() {
				counters.Superseded.Add(1)
				return o2.Answer()
			}
			// The other owner gave up: ours becomes the answer after all.
			defer o2.Abandon()
			o = o2
		}
	}
}

// Transient reports whether ans is an answer that refuses its request
// for now and asks the client to try another server, having not applied
// it: a protocol error (E bit) with Result-Code DIAMETER_UNABLE_TO_DELIVER
// (3002) or DIAMETER_TOO_BUSY (3004) (RFC 6733 7.1.3). Wrap does not
// commit such answers.
func Transient(ans []byte) bool {
	if len(ans) < wire.HeaderLen || wire.Flags(ans)&wire.FlagError == 0 {
		return false
	}
	rc, ok := message.Uint32Of(ans, message.ResultCode, 0)
	return ok && (rc == message.UnableToDeliver || rc == message.TooBusy)
}

// pooledOutcome is a request's Outcome with room for its keys.
type pooledOutcome struct {
	o    Outcome
	keys [2]Key
}

// storeDownAnswer is the answer to a request the store could not decide
// on: DIAMETER_TOO_BUSY, so that the client tries another server. Its
// Error-Message is fixed: the store's error names internal addresses.
func storeDownAnswer(p *peer.Peer, req []byte) []byte {
	var me message.Identity
	if p != nil {
		me = p.LocalIdentity()
	}
	return message.ErrorAnswer(req, me, message.TooBusy, "duplicate store unavailable").Bytes()
}

// notKeptAnswer is the answer to a duplicate of a request whose answer was too
// large to keep: DIAMETER_UNABLE_TO_COMPLY, final, so that no other
// server applies it a second time.
func notKeptAnswer(p *peer.Peer, req []byte) []byte {
	var me message.Identity
	if p != nil {
		me = p.LocalIdentity()
	}
	return message.ErrorAnswer(req, me, message.UnableToComply, "request already applied; its answer was too large to keep").Bytes()
}
