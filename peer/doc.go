// Package peer is one Diameter connection object per peer: it connects (or
// accepts), exchanges capabilities (CER/CEA), keeps the link honest with
// DWR/DWA as the RFC 3539 watchdog machine in package watchdog decides,
// matches answers to requests by Hop-by-Hop Identifier, disconnects with
// DPR/DPA, and reports every state change as an Event.
//
// # Goroutines and ownership
//
// Every state decision of a Peer is made under its mutex: the events of its
// connection's reader, of a dial, of Close, and the fires of its one Tw
// timer (a runtime timer, time.AfterFunc: the runtime's timer heap serves
// every peer, so an idle peer costs no goroutine of its own but its
// reader's). The reader matches answers itself and, while the watchdog is
// OKAY, only records the time of the last message received: the timer
// applies that reset lazily when it fires, so the per-message cost of the
// watchdog is one atomic store (RFC 3539 3.4.1 [2] says any message resets
// Tw; when Tw fires the peer re-arms it from the last receipt instead of
// expiring). Tw deadlines fall on a 50 ms wall-clock grid (still within
// Twinit +/- 2 s), so that the timers of many idle peers fire in one
// wake-up of the process. A writer goroutine runs while messages are queued
// and batches whatever callers queued into one write (writev), yielding
// once before it flushes so that concurrent callers share a syscall; it
// exits when the queue is empty. The base protocol's lone messages (a DWR,
// the DWA answering one, DPR, DPA) are written instead by the goroutine
// that sends them, when nothing is queued and the transport can write
// without waiting (plain TCP: transport.TryWriter); what the socket does
// not take then goes to the writer, so that goroutine, often the reader,
// never blocks behind a full send buffer. A request alone on its
// connection is written that way too, by its caller, and over plain TCP
// the caller then reads the connection itself while it waits, until its
// answer is in: one caller at a time wakes from the network with its
// answer, not through the reader. The reader steps aside for that while
// nothing is pending on the connection, and looks at it again at least
// every 10 ms, at once when anything of the base protocol is sent; on an
// idle connection a request from the peer, or its loss, is so noticed up
// to 10 ms later, which the watchdog's Tw (seconds) does not feel. A
// caller's deadline or cancellation reaches it while it reads.
//
// The requests a peer sends us are answered by the Handler on the
// connection's reader, one after the other, while the Handlers are fast:
// no goroutine is woken per request. A slow Handler cannot block the
// connection: the reader marks (atomically) when it enters a Handler, and
// a goroutine shared by a Server's connections, which looks at them only
// while Handlers are entered (every Config.InlineHandlerTime, or every
// 5 ms when that is shorter), hands the reading over to a new goroutine
// once a Handler it finds has run for Config.InlineHandlerTime (through
// a timer of that connection when the Handler is younger); the old goroutine finishes its Handler, sees
// that it is no longer the reader, sends its answer and ends. The DWRs,
// DPRs, answers and requests behind a slow Handler are so read at most
// that late, and after a slow Handler the next requests run on worker
// goroutines, side by side (see Handler). While the read buffer holds the
// next request whole, the reader leaves its answer queued, and the writer
// sends the answers of a burst in one write.
//
// A step decides under the mutex and returns what must happen: writes
// (DWR, DWA, DPR, DPA) and calls failed by a lost connection are carried
// out by the goroutine that stepped once it has unlocked; events and the
// hand-over of moved requests to a Client (package client, which replays
// them elsewhere) are queued, in step order, for a notifier goroutine that runs only while notices are queued.
//
// # Requests
//
// Each request has one lifecycle (queued, in flight on one connection,
// moved, parked, answered, failed). A request is in
// flight on at most one connection, is never sent twice on one connection,
// and leaves a connection's pending table as soon as it is moved off it
// (failover, graceful disconnect, a DIAMETER_TOO_BUSY or
// DIAMETER_UNABLE_TO_DELIVER answer); a late answer there is still matched
// and delivered only if the caller has none. Close, and the idle
// bring-down, drain: no new requests, the answers in flight get up to
// Config.DrainTimeout, then DPR; after the DPA, the answers still owed
// (requests that crossed the DPR) are written before the connection
// closes, for DPATimeout at most. A peer that receives a DPR takes no new
// request on that connection (it says so: EventDisconnecting), holds its
// DPA until the answers it owes are out, and closes the connection once
// the answers to its own requests there are in too, or they have left
// it, and the DPA is written. DPATimeout after the DPR the DPA goes if it
// is still held, and the connection closes once what is queued then, the
// DPA with it, is written, whatever is still pending or owed: so the
// connection closes at most DPATimeout after the DPR plus the time that
// writing takes, each write bounded by the transport's WriteTimeout
// (transport.Options), whose expiry closes the connection of a peer that
// does not read. It closes
// at once when the peer connects again (a restart: the old instance will
// not answer; the requests still pending fail over). Meanwhile it sends
// no DWR, but the watchdog runs on: with DPATimeout above 2Tw, a peer
// silent for 2Tw is failed over as any other, the transition saying it
// was silent after its DPR.
//
// # Concurrency
//
// Peer's methods are safe for concurrent use. Request may be called from
// any number of goroutines (pipelining). Event subscribers run on the
// peer's notifier, never with its mutex held nor on
// a connection's reader: they may call any method of the peer, Close
// included, but should be quick, since the peer's later events wait for
// them.
package peer
