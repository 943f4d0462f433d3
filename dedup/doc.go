// Package dedup detects duplicate Diameter requests for servers and agents.
//
// RFC 3539 sections 2.5 and 3.5, and RFC 6733 section 5.5.4, require a AAA
// server or agent to expect duplicates on any connection, whether or not the
// T flag marks them: a client that fails over re-sends a request on another
// connection, possibly through another agent, with a new Hop-by-Hop
// Identifier but the same End-to-End Identifier. The server must answer the
// duplicate with the answer it gave the first time, without running the
// application twice (a second run of a stateful application, such as one
// enforcing simultaneous logins, could give a different answer).
//
// # Keys
//
// Every request is keyed by (Origin-Host, End-to-End Identifier), see
// [RequestKey]. Accounting requests are also keyed by their record, see
// [AccountingRecord]: Session-Id, Accounting-Record-Type and
// Accounting-Record-Number, with Event-Timestamp, Origin-Host and the NAS
// identity, so that a billing record re-sent under a new End-to-End
// Identifier is still recognised, while two records of one session sent
// in the same second (a START and a STOP) stay two. Origin-Host compares
// case-insensitively, as DiameterIdentity does. [KeysOf] reads these keys
// from a request. Other protocols build keys of their own namespace with a
// [KeyBuilder]. A [Key] is a 16-byte SHA-256 digest of its fields.
//
// # Use
//
// The request path calls [Store.Begin] with the request's keys and gets an
// [*Outcome]:
//
//   - First: this call owns the request. Run the handler, then call
//     [Outcome.Complete] with the answer bytes, or [Outcome.Abandon] if no
//     answer was produced. "defer o.Abandon()" right after Begin is the
//     idiom: it is a no-op once Complete has run and for a Duplicate.
//   - Duplicate: [Outcome.Answer] is a fresh copy of the stored answer,
//     which carries the first request's identifiers. Write the duplicate
//     request's Hop-by-Hop and End-to-End Identifiers into it
//     ([wire.SetHopByHop], [wire.SetEndToEnd]: a duplicate recognised by
//     its accounting record may come under a new End-to-End Identifier),
//     clear its T flag ([wire.ClearRetransmit]) and send it; do not run
//     the handler. [Wrap] leaves this to the peer, which does it for
//     every answer.
//
// A store that is a [ReusingStore] (the in-memory one) also offers
// [ReusingStore.BeginInto], which fills an Outcome the caller owns: a
// server recycles its Outcomes instead of having one allocated per
// request. [Wrap] does so with a pool, which makes the lookup and insert
// cheaper, the collector having less to do.
//
// A duplicate that arrives while the first is still being handled waits in
// Begin for the first's answer. The wait is bounded by ctx and by the
// in-flight mark's TTL ([WithMarkTTL], default 10 s): if the server handling
// the first hangs or dies, its mark expires and the waiting duplicate becomes
// First.
//
// # Bounds
//
// Entries live at most [WithMaxAge] (default 4 minutes, the window in which
// RFC 6733 requires End-to-End Identifiers to stay unique), measured from the
// first arrival. The in-memory store also keeps at most [WithMaxEntries]
// entries (default 1<<20) and at most [WithMaxBytes] bytes (default 512
// MiB, counting the answers and [EntryOverhead] per key), evicting the
// oldest first in O(1) (amortised, while most entries are not requests
// still running). It never evicts the in-flight mark of a
// request still running (within its mark TTL), which would let the
// request's duplicates run it again: such marks may take the byte count
// over its budget by their overhead, never the entries over their bound,
// and when a request's shard holds nothing but them, Begin refuses the
// request with [ErrFull]. Both stores keep answers of at most
// [WithMaxAnswerSize] bytes (default 16 KiB): a longer answer is sent but
// not kept, its request recorded as answered so that it is never applied
// twice, and a duplicate of it gets [ErrAnswerNotKept] (which [Wrap]
// answers DIAMETER_UNABLE_TO_COMPLY).
//
// # Stores
//
// [NewMemory] is a sharded in-process store. [NewRedis] keeps entries in
// Redis so that several servers behind one realm see each other's entries,
// on one Redis server, a master behind Sentinel or a Redis Cluster; it
// notices when Redis loses its entries at once, by a restart, a flush or a
// failover ([Redis.StateLost]), not when it evicts them one by one: give
// its Redis maxmemory-policy noeviction (see [Redis]). [Open] builds
// either from a URL ("memory", "redis://host:port/db", a Sentinel or a
// Cluster URL).
//
// # Concurrency
//
// Every Store, and the handler [Wrap] returns, is safe for concurrent use.
// An Outcome is meant for the goroutine that called Begin.
package dedup
