// Package testhook holds fault-injection points for the scenario tests and
// the simulator. Every hook is nil in production. They are plain variables
// read without synchronisation: set them before the peers that read them
// start, and clear them after those peers have ended.
package testhook

// AfterQueue, when set, runs on the sending goroutine once a request has
// been queued on a connection, before the send returns: a test can stretch
// that window (for instance let a failover run inside it).
var AfterQueue func(endToEnd uint32)

// Queued, when set, runs for every request queued on a connection, under
// that connection's lock (so calls for one request come in send order):
// conn identifies the connection, msg is the bytes queued (read them at
// once, do not keep them), afterRefusal says the previous connection
// answered the request too busy / unable to deliver. It must not block.
var Queued func(endToEnd uint32, conn any, msg []byte, afterRefusal bool)

// Withdrawn, when set, runs for every request a failover or a drain took
// back out of a connection's write queue before it was written (it never
// reached the wire: as if never queued there), under that connection's
// lock: conn and hbh as Queued gave them. It must not block.
var Withdrawn func(endToEnd uint32, conn any, hbh uint32)

// Exchanged, when set, runs on a client Peer's dial once the capabilities
// exchange has succeeded, before the Peer takes the connection: a test
// can let a CER from the same peer arrive inside that window.
var Exchanged func(remoteHost string)

// CallerRead, when set, runs on a caller that read its own request's
// answer from the connection (the reading baton), after it completed it.
var CallerRead func(endToEnd uint32)

// Posting, when set, runs at the start of every outbox.Post, on the
// posting goroutine, before the outbox's lock is taken; the lock the
// caller passes as held is still held then. It must not block.
var Posting func()

// Handing, when set, runs on a caller handing the reading baton it holds
// to a caller waiting for it (endToEnd is the waiting call's), once it
// has checked that call and before it wakes it: a test can let the
// waiting call end in between (its deadline), which the hand-over must
// see. It must not block (a yield at most).
var Handing func(endToEnd uint32)
