// Package policy is the per-server policy state of the Nokia 7750 SR
// radius-server-policy (requirements S1-S5), applied to Diameter servers.
//
// A server is in one of four states: Unknown (no reply yet), InService,
// OutOfService and Probing. The request path tells a [Tracker] what it does
// and sees: [Tracker.OnSent] when a request goes out (this starts the
// down-timeout if it is not running), [Tracker.OnReply] when any reply
// arrives from the server, for any subscriber (this resets the down-timeout
// to 0: it runs again from the next request sent). [Tracker.Tick] advances
// time: an expired down-timeout puts the server out of service for the
// hold-down time; the end of the hold-down lets it be probed with exactly
// one message and no retry. [Tracker.Allow] says whether a new request may
// go to the server and whether it is the probe.
//
// Like package watchdog, the package is pure: it starts no goroutine, reads
// no clock and performs no I/O. Every method takes the time; the owner arms
// one timer at [Tracker.NextWakeup] and calls Tick then. Every state change
// is returned as an [Event] (the owner publishes it with type [EventType],
// in the same stream as the watchdog's events).
//
// Probing needs several servers and at least one healthy one (S3): that is a
// decision over all servers, so Tick and Allow take it as an argument
// (probeOK), and a [Group] owns the trackers of all servers and computes it.
// When a hold-down ends and probing is not allowed (a single server, or no
// other server in service and available), the server goes back to Unknown
// rather than staying out of service forever: there is nothing to protect
// by holding it, so it gets ordinary traffic, with retries, and its first
// reply puts it in service again (or the down-timeout puts it out again).
//
// Where each requirement lives:
//
//   - S1 (unknown -> in-service on any reply, unknown -> out-of-service when
//     the first request gets no reply): [Tracker.OnReply], [Tracker.Tick].
//   - S2 (down-timeout started on send, reset by any reply, default
//     timeout x retries): [Config.DownTimeout], [Tracker.OnSent].
//   - S3 (nothing during hold-down; probing only with several servers and a
//     healthy one): [Config.HoldDown], [Group].
//   - S4 (one probe, no retry: the test user's, else one real request; reply
//     -> in-service, timeout -> out-of-service and hold-down again):
//     [Output.Probe], [Output.Send], [Config.ProbeTimeout].
//   - S5 (keep-alive with the test user at an interval): [Config.KeepAlive].
//
// A Tracker is not safe for concurrent use: its owner serialises calls. A
// Group is safe for concurrent use: a mutex guards its trackers.
package policy
