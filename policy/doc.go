// Package policy is the per-server policy state of the Nokia 7750 SR
// radius-server-policy, applied to RADIUS and Diameter servers alike.
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
// Probing needs several servers and at least one healthy one: that is a
// decision over all servers, so Tick and Allow take it as an argument,
// and a [Group] owns the trackers of all servers and computes it.
// When a hold-down ends and probing is not allowed (a single server, or no
// other server in service and available), the server goes back to Unknown
// rather than staying out of service forever: there is nothing to protect
// by holding it, so it gets ordinary traffic, with retries, and its first
// reply puts it in service again (or the down-timeout puts it out again).
//
// In short: Unknown goes in service on any reply ([Tracker.OnReply]) and
// out of service when the first request gets none ([Tracker.Tick]); the
// down-timeout ([Config.DownTimeout], default timeout x retries) starts on
// a send and is reset by any reply; a server out of service gets nothing
// for [Config.HoldDown]; it is then probed once, with no retry, with the
// test user's request or else one real request ([Output.Probe],
// [Output.Send], [Config.ProbeTimeout]): a reply puts it in service, a
// timeout out of service for another hold-down; with a test user, servers
// in service get a keep-alive at an interval ([Config.KeepAlive]).
//
// A Tracker is not safe for concurrent use: its owner serialises calls. A
// Group is safe for concurrent use: a mutex guards its trackers.
package policy
