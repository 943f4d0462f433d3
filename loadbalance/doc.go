// Package loadbalance chooses the server (connection) for each AAA request,
// implementing RFC 3539 section 3.4.3 connection load balancing: Pearson's hash of RFC 3074 over the NAI, a weighted 256-bucket
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
//     consults the conversation memory (when anything is to be
//     remembered), which is a lock-free hash table. A known conversation,
//     or a request without a Session-Id, costs no lock and no allocation;
//     a first-seen Session-Id that must be remembered allocates one entry.
//     When that insert finds the memory half full it grows it in place if
//     no other goroutine is already doing so (TryLock, never waiting),
//     which costs that one call time proportional to the entries.
//   - SetState, Sweep, Snapshot and Generation are safe from any goroutine;
//     writers (SetState, Sweep) are serialized by an internal mutex that
//     Pick never takes.
//
// # Conversation memory and its bound
//
// With the pearson algorithm the balancer remembers a conversation
// (Session-Id) only where a rebuild could otherwise take it away from a
// server that is still in service, not every Session-Id it sees:
//
//   - Tables are built around a home table (every configured server in
//     service): a server that leaves gives its buckets to the others, and
//     when it returns it takes back those same buckets, while everyone
//     else keeps theirs. After absences that overlapped (a server left
//     while another was out), a returning server may find a home bucket
//     kept by another and take another's bucket in its place: those
//     buckets then stay where they are, with their conversations, rather
//     than move between servers in service, and the table may differ
//     from the home table in them for good. So the buckets the next
//     change of the in-service set can move (any one server joining or
//     leaving) are known in advance; they are the watched buckets. With every server in service
//     none is watched (a leaver's conversations move whatever the memory
//     says) and the memory stays empty: Pick consults it only when some
//     bucket is watched, an old table lives, or a server is suspended
//     or the conversations sent elsewhere while it was have not all aged
//     out. In that last case alone (every server in service again),
//     only a request without a NAI, or one whose NAI hashes into a
//     bucket where such a conversation may live, consults it: Sweep
//     narrows those buckets down to the ones where one is still alive.
//   - A new conversation in a watched bucket is remembered with the
//     generation of its table and its bucket. After a rebuild the old and
//     new tables live side by side: a remembered conversation keeps its
//     server until it ages out; new conversations use the new table.
//   - While a server is suspended, a new conversation in one of its
//     buckets goes where the walk sends it (the next buckets' server in
//     service) and is remembered there: it stays on that server while it
//     is in service, when the suspended server comes back (and takes
//     new conversations in its buckets again) as when it goes down (and
//     the rebuild gives its buckets to others). So does a conversation
//     that the suspended server had started before, whether the memory
//     knew it or not, if it speaks during the suspension: it has moved
//     once, and a move back would be a second one; if it stays silent
//     meanwhile, it keeps its server. The same holds for a conversation
//     whose server is suspended later, having been sent there during an
//     earlier suspension. If the server a conversation was sent to goes
//     down it moves to the current table for good. The rule: a
//     conversation moves at most once while the servers it is on stay in
//     service.
//   - When a rebuild moves a bucket that had not been watched for a whole
//     IdleTimeout (uneven weights can make a rebuild move a bucket whose
//     owner stays), the memory cannot tell the conversations of its old
//     server it never saw from new ones: until they could have aged out,
//     an unknown Session-Id there goes to the old server, and is
//     remembered there.
//
// A later request of a conversation that carries no NAI is keyed by its
// Session-Id unless the conversation is remembered, in which case it
// keeps the bucket of its first request. A conversation is expected to
// keep its NAI: one sent elsewhere while its server was suspended whose
// later request carries a NAI of another bucket than its first request's
// (a NAI it did not carry then, or another one) is routed by that NAI
// once every server is in service again.
//
// Entries idle for longer than Options.IdleTimeout (default 10 minutes,
// DefaultIdleTimeout; it must exceed the longest silence of a
// conversation that should keep its server, such as the RADIUS accounting
// interim interval) are purged lazily: on every table rebuild, by Sweep (which the owner should
// call periodically, e.g. every IdleTimeout/2), and when the memory grows;
// the whole memory is dropped once nothing is watched, no old table
// lives and no conversation diverted from a suspended server is left. An old table is dropped as soon as no live conversation refers to
// it. The memory never holds more than Options.MaxSessions entries; past
// that, new conversations are routed normally but not remembered (counted
// in Snapshot.Untracked), as is one whose first request finds the memory
// being grown or purged by another goroutine (it is remembered at its
// next request if it is then to be). Such a conversation is routed as if
// the memory had never seen it: a rebuild before it ends may move it off
// a server that stays in service, and one started while its bucket's
// server was suspended goes back to that server when it returns, with no
// rebuild (a second move). Each entry costs about 64 bytes plus its Session-Id, which the
// Balancer retains as given (pass a string that does not pin a larger
// buffer).
package loadbalance
