package serve

// Backlog counts, for one connection, the requests read from the peer and
// not yet answered on the wire: those in a handler, and the answers queued
// or being written. The reader stops reading while it is at the limit, so
// that a peer that pipelines requests and never reads its answers meets
// TCP flow control instead of growing our memory and goroutines without
// bound.
//
// Only answers count, never requests of our own: two peers that both
// waited on the other's requests before reading answers could deadlock.
//
// A Backlog has no lock: its owner guards it with the lock that guards
// its write queue, and every method is called with that lock held.
type Backlog struct {
	Limit     int // at most this many unanswered; <= 0: no limit
	InHandler int // requests handed to a handler, not answered yet
	Queued    int // answers queued for the writer
	Writing   int // answers in the batch being written

	resume chan struct{} // closed when the reader may read again; nil if it is not waiting
	pauses uint64
}

// Unanswered returns the requests read and not answered on the wire.
func (b *Backlog) Unanswered() int { return b.InHandler + b.Queued + b.Writing }

// Full reports whether the reader must stop reading.
func (b *Backlog) Full() bool { return b.Limit > 0 && b.Unanswered() >= b.Limit }

// Pause is for a reader that found the backlog Full: it returns a channel
// that Wake closes once there is room again. The reader waits on it
// without the lock.
func (b *Backlog) Pause() <-chan struct{} {
	b.pauses++
	ch := make(chan struct{})
	b.resume = ch
	return ch
}

// Wake lets a paused reader go on once there is room. Call it whenever
// the counts go down.
func (b *Backlog) Wake() {
	if b.resume != nil && !b.Full() {
		close(b.resume)
		b.resume = nil
	}
}

// Pauses returns how many times the reader paused.
func (b *Backlog) Pauses() uint64 { return b.pauses }

// Waiting reports whether a reader is paused.
func (b *Backlog) Waiting() bool { return b.resume != nil }
