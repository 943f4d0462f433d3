// Package throttle is the AAA throttling of the Cisco ASR5K aaamgr,
// applied to Diameter servers: a per-server maximum
// rate spread evenly over time slots, a per-server maximum of outstanding
// requests, an instance-level queue every request enters and per-server
// queues for the requests that could not go, a queue-depth alarm with
// hysteresis, and separate limits for authentication/authorization and
// accounting traffic.
//
// A [Scheduler] is a pure scheduler that its owner drives: it starts no
// goroutine, reads no clock and performs no I/O. The owner calls
// [Scheduler.Enqueue] for each request, [Scheduler.Poll] with the current
// time to learn which requests to send now and to which server (and which
// failed: their deadline passed while they waited), [Scheduler.Done] when a
// sent request's answer arrives or it times out, and arms one timer at
// [Scheduler.NextWakeup]. Items are opaque to the scheduler: any type with
// a Deadline method.
//
// # How a request moves
//
// Enqueue appends it to the instance queue, which is in age order: a
// failover's replays (EnqueueReplay) count as older than every new
// request and leave in the order they came back, and a request the owner
// could not send after all goes back where it stood (Requeue). Poll first takes, from every server
// queue, as many requests as the server can send now (quota left in the
// current slot and free outstanding places) and puts them back in the
// instance queue at their age's place, mostly its head. Then it serves the instance queue from the head: a request
// that came from a server queue goes to that server; a new one goes to the
// server the owner's Pick function (its balancer) names, or when Pick
// names none, or an unavailable one, to an available server chosen round-robin.
// If that server has room the request is dispatched; if not, it waits in
// that server's queue, in age order too (or, with Config.Spill, goes to
// another available server that has room). When Pick says the request
// may go to none of the available servers (Nowhere), Poll hands it back
// to the owner (Err matching ErrNowhere), which puts it back (Requeue)
// once a server can take it. When no server is available, the instance queue
// waits.
//
// # Rate slots
//
// Each second is split into slots of Config.Slot, a length that divides
// one second (50, 62.5, 100, 125, 200, 250 or 500 ms, or 1 s; see
// [CheckSlot]), aligned on the Unix epoch, and each slot gets its share
// of MaxRate. When the share is not an integer (30/s in 50 ms slots is
// 1.5) the slots take turns so that the count sent by the end of slot k is
// floor(k x MaxRate x Slot / 1 s): 1, 2, 1, 2, ... here. Over any whole
// second of the clock (one that starts on a whole second) at most MaxRate
// go, and so over any second that starts on a slot boundary; no slot gets
// more than the ceiling of its share, so a second that starts inside a
// slot holds at most that many more. A rate below one per slot (5/s in
// 50 ms slots) gives one message every fourth slot.
//
// # Outstanding requests
//
// A dispatched request holds one place of its server and class until the
// owner calls Done: when its answer arrives or when it times out (and when
// it is moved away by failover). The default maximum is 256.
//
// # Deadlines
//
// Requests keep their deadlines while queued: one whose deadline passes
// comes back from Poll as a Dispatch with Err matching [ErrExpired] and
// saying which queue it waited in. No request is ever dropped silently:
// each Enqueue, EnqueueReplay or Requeue is matched by exactly one
// Dispatch, with or without Err (ErrNowhere hands it back to the owner),
// or by a Cancel that reports true (the owner gave up on it), Release
// aside, which hands the requests back to the owner.
//
// # Alarm
//
// The depth of a server's queues (both classes) is exposed; when it reaches
// Config.AlarmHigh an alarm is raised, and it is cleared when the depth falls
// to Config.AlarmLow or below. Both are reported to Config.OnAlarm.
//
// # Classes
//
// Every limit, counter and server queue exists once per [Class]: Auth
// (authentication and authorization) and Accounting. [ClassOf] classifies a
// Diameter request by application id and command code.
//
// # Concurrency
//
// A Scheduler is not safe for concurrent use: one goroutine owns it (the
// owner's dispatch loop), or the owner guards it with a mutex. A request
// that reaches no limit costs no allocation.
package throttle
