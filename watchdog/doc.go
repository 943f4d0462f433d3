// Package watchdog is the application-layer watchdog of RFC 3539 section
// 3.4.1, written as the state machine of RFC 3539 Appendix A.
//
// A Machine tracks one transport connection to one peer through the five
// states of the appendix: INITIAL, OKAY, SUSPECT, DOWN and REOPEN. It is pure
// in the sense of etcd-io/raft: it starts no goroutine, reads no clock and
// performs no I/O. The owner (package peer) feeds it events with Step and
// carries out the actions it returns: send a DWR, arm the one timer Tw, fail
// over, fail back, close the connection, attempt to open one, answer a DWR,
// throw a message away. Because the machine returns its effects instead of
// performing them, every row of the appendix's table is tested by feeding one
// event and comparing the output.
//
// What the machine guarantees: one timer, Tw, drawn from Twinit (at least
// 6 s, default 30 s) with jitter uniform in [-2 s, +2 s] from a randomly
// seeded source (math/rand/v2's, or [Config.Rand]); any message received,
// and sending a DWR, resets Tw; at most one DWR outstanding, never retransmitted; exactly
// the five states, SUSPECT taking no new requests ([State.InService]) and
// closing only after the second expiry; no DWRs while DOWN, one attempt to
// reopen per Tw; REOPEN needs [Config.OkayDWAs] answered DWRs while INITIAL
// is in service at once; every state change is a [Transition], counted by
// [Machine.Transitions]; nothing depends on the transport (it runs the same
// over SCTP, whatever its heartbeats say).
//
// Two knobs generalise the appendix the way Erlang/OTP's diameter
// watchdog_config does: [Config.OkayDWAs] (DWAs needed to leave REOPEN,
// default 3) and [Config.SuspectTimeouts] (unanswered expiries before
// SUSPECT, default 1). With the defaults the machine is the appendix, row for
// row.
//
// A Machine is not safe for concurrent use: its owner serialises calls, which
// a connection object does anyway since all its events arrive on one loop.
package watchdog
