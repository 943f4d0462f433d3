// Package peer is one Diameter connection object per peer: it connects (or
// accepts), exchanges capabilities (CER/CEA), keeps the link honest with
// DWR/DWA as the RFC 3539 watchdog machine in package watchdog decides,
// matches answers to requests by Hop-by-Hop Identifier, disconnects with
// DPR/DPA, and reports every state change as an Event.
//
// # Goroutines and ownership
//
// A Peer runs one loop goroutine that owns its watchdog.Machine and its Tw
// timer; every state decision happens there. Each transport connection adds
// a reader and a writer goroutine. The reader matches answers itself and,
// while the watchdog is OKAY, only records the time of the last message
// received: the loop applies that reset lazily when the timer fires, so the
// per-message cost of the watchdog is one atomic store (RFC 3539 3.4.1 [2]
// says any message resets Tw; when Tw fires the loop re-arms it from the
// last receipt instead of expiring). The writer batches whatever callers
// queued into one write (writev), yielding once before it flushes so that
// concurrent callers share a syscall.
//
// # Concurrency
//
// Peer's methods are safe for concurrent use. Request may be called from
// any number of goroutines (pipelining, RFC 3539 T3). Event subscribers are
// called from the peer's goroutines and must not block.
//
// # Requirements
//
//   - W1-W9: the watchdog machine in package watchdog, driven by Peer.loop.
//   - T3 (one connection, pipelining): Peer.Request, conn.writer.
//   - T4 (idle bring-down after >= 5 minutes): Config.IdleTimeout.
//   - T5 (bad bytes close only that connection): conn.reader.
package peer
