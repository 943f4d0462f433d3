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
// Where each requirement lives (IDs from requirements.md):
//
//   - W1 (one timer, Twinit >= 6 s, default 30 s): [Config.Twinit], [Config.validate].
//   - W2 (jitter drawn uniformly from [-2 s, +2 s], crypto-seeded): [Machine.setWatchdog], [NewRand].
//   - W3 (any message received, and sending a DWR, resets Tw): the ReceiveDWA,
//     ReceiveDWR and ReceiveOther rows of [Machine.Step].
//   - W4 (one DWR outstanding, never retransmitted): the Pending flag.
//   - W5 (the five states, exactly): [Machine.Step].
//   - W6 (SUSPECT: no new requests; close only after the second expiry): [State.InService].
//   - W7 (DOWN: no DWRs, AttemptOpen once per Tw): the DOWN rows.
//   - W8 (REOPEN needs three DWAs, INITIAL is in service at once): [Config.OkayDWAs].
//   - W9 (every state change observable and counted): [Transition], [Machine.Transitions].
//   - W10 (runs regardless of SCTP heartbeats): nothing here depends on the transport.
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
