package radpeer

import (
	"runtime"
	"sync"

	"github.com/aaatp/aaatp/transport"
)

// outbox is a connection's write queue. A writer goroutine runs only
// while something is queued, and writes whatever callers queued meanwhile
// in one WriteMessages (one writev on TCP): an idle connection costs no
// writer, a busy one batches.
type outbox struct {
	tc      transport.Conn
	onError func(error) // called once, by the writer, when a write fails

	mu      sync.Mutex
	q       [][]byte
	spare   [][]byte
	writing bool
	closed  bool
	wg      sync.WaitGroup
}

// send queues msgs; false if the outbox is closed.
func (o *outbox) send(msgs ...[]byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	o.q = append(o.q, msgs...)
	if !o.writing {
		o.writing = true
		o.wg.Add(1)
		go o.write()
	}
	return true
}

func (o *outbox) write() {
	defer o.wg.Done()
	for {
		runtime.Gosched() // let callers that are runnable now join the batch
		o.mu.Lock()
		batch := o.q
		if len(batch) == 0 || o.closed {
			o.writing = false
			o.mu.Unlock()
			return
		}
		o.q, o.spare = o.spare[:0], nil
		o.mu.Unlock()
		err := o.tc.WriteMessages(batch...)
		clear(batch)
		o.mu.Lock()
		o.spare = batch[:0]
		o.mu.Unlock()
		if err != nil {
			o.onError(err)
			return
		}
	}
}

// close stops the outbox (what is queued is dropped) and waits for the
// writer; the caller closes the transport first so a blocked write ends.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.q = nil
	o.mu.Unlock()
	o.wg.Wait()
}
