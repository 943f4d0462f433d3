package dedup

import (
	"context"
	"sync/atomic"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/wire"
)

// Counters count what a wrapped handler did. Safe for concurrent use.
type Counters struct {
	Received   atomic.Uint64 // requests that reached the wrapper
	Applied    atomic.Uint64 // handler runs that produced an answer
	Duplicates atomic.Uint64 // requests answered from the store
	StoreErrs  atomic.Uint64 // requests refused because the store failed
}

// KeysOf returns the duplicate keys of a request: (Origin-Host,
// End-to-End id) always (D1), and for base accounting (application 3,
// command 271) also (Session-Id, Event-Timestamp, Origin-Host, NAS
// identity) (D2), with NAS-Identifier preferred to NAS-IP-Address.
func KeysOf(req []byte) []Key {
	oh, _ := wire.FindAVP(req, message.OriginHost, 0)
	keys := make([]Key, 1, 2)
	keys[0] = RequestKey(string(oh), wire.EndToEnd(req))
	if wire.AppID(req) == message.AppAccounting && wire.CommandCode(req) == message.CmdAccounting {
		sid, ok := wire.FindAVP(req, message.SessionID, 0)
		ts, hasTS := wire.FindAVP(req, message.EventTimestamp, 0)
		if ok && hasTS {
			nas, found := wire.FindAVP(req, message.NASIdentifier, 0)
			if !found {
				nas, _ = wire.FindAVP(req, message.NASIPAddress, 0)
			}
			keys = append(keys, AccountingKey(string(sid), ts, string(oh), string(nas)))
		}
	}
	return keys
}

// Wrap returns a peer.Handler that runs h at most once per request key
// across every connection (and, with a shared Redis store, every server):
// a duplicate, with or without the T flag, gets the first answer again.
// If the store fails, the request is answered DIAMETER_TOO_BUSY (3004,
// E bit) so that the client tries another server, rather than risking a
// second application of, say, an accounting record. counters may be nil.
func Wrap(s Store, h peer.Handler, counters *Counters) peer.Handler {
	if counters == nil {
		counters = &Counters{}
	}
	return func(ctx context.Context, p *peer.Peer, req []byte) []byte {
		counters.Received.Add(1)
		o, err := s.Begin(ctx, KeysOf(req)...)
		if err != nil {
			counters.StoreErrs.Add(1)
			return message.NewAnswer(req).ResultCode(message.TooBusy).
				String(message.ErrorMessage, 0, false, "duplicate store unavailable: "+err.Error()).Bytes()
		}
		if o.Duplicate() {
			counters.Duplicates.Add(1)
			return o.Answer() // the peer writes this request's ids into it
		}
		defer o.Abandon() // no-op after Complete
		ans := h(ctx, p, req)
		if ans == nil {
			return nil
		}
		counters.Applied.Add(1)
		_ = o.Complete(ans) // ErrMarkLost: another server took over; still answer
		return ans
	}
}
