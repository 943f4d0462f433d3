// Package loadbalance chooses the server (connection) for each AAA request,
// implementing RFC 3539 section 3.4.3 connection load balancing (requirements
// L1-L4): Pearson's hash of RFC 3074 over the NAI, a weighted 256-bucket
// table, suspension without recomputation, and a transition period in which
// the old and new tables both live until the conversations started under the
// old one age out. The 7750 SR algorithms direct, round-robin and hash are
// provided behind the same Pick.
//
// It is pure logic: no I/O, no goroutines, no timers. Time comes from
// Options.Now.
//
// # Concurrency
//
// A Balancer follows the grpc-go balancer pattern. Its routing state is an
// immutable snapshot (the picker) published through an atomic pointer; a new
// snapshot is built only when a server's state actually changes, and a new
// bucket table (a new generation) only when the set of in-service servers
// changes.
//
//   - Pick and Route are safe for concurrent use from any number of
//     goroutines. Pick never blocks: it loads the snapshot, hashes, and
//     consults the conversation memory, which is a lock-free hash table.
//     A known conversation, or a request without a Session-Id, costs no
//     lock and no allocation; a first-seen Session-Id allocates one entry.
//     When that insert finds the memory half full it grows it in place if
//     no other goroutine is already doing so (TryLock, never waiting),
//     which costs that one call time proportional to the entries.
//   - SetState, Sweep, Snapshot and Generation are safe from any goroutine;
//     writers (SetState, Sweep) are serialized by an internal mutex that
//     Pick never takes.
//
// # Conversation memory and its bound
//
// With the pearson algorithm every request carrying a Session-Id records (or
// refreshes) the conversation: the generation of the table it started under
// and the hash bucket of its first request. This is what lets a rebuild keep
// conversations in progress on their old server (L3). Entries idle for
// longer than Options.IdleTimeout (default 5 minutes) are purged lazily: on
// every table rebuild, by Sweep (which the owner should call periodically,
// e.g. every IdleTimeout/2), and when the memory grows. An old table is
// dropped as soon as no live conversation refers to it. The memory never
// holds more than Options.MaxSessions entries; past that, new conversations
// are routed normally but not remembered (counted in Snapshot.Untracked),
// which only matters if a rebuild happens before they end. Each entry costs
// about 64 bytes plus its Session-Id, which the Balancer retains as given
// (pass a string that does not pin a larger buffer).
package loadbalance
