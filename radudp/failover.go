package radudp

import "github.com/aaatp/aaatp/client"

// maxLogged bounds the failover table.
const maxLogged = 256

// failoverLog keeps the last maxLogged failover records.
type failoverLog struct {
	recs  []client.FailoverRecord
	next  int
	total uint64
}

func (l *failoverLog) add(r client.FailoverRecord) {
	l.total++
	if len(l.recs) < maxLogged {
		l.recs = append(l.recs, r)
		return
	}
	l.recs[l.next] = r
	l.next = (l.next + 1) % maxLogged
}

func (l *failoverLog) get() ([]client.FailoverRecord, uint64) {
	out := make([]client.FailoverRecord, 0, len(l.recs))
	out = append(out, l.recs[l.next:]...)
	out = append(out, l.recs[:l.next]...)
	return out, l.total
}

// FailoverLog returns the last 256 failover records, oldest first, and
// how many were ever made.
func (c *Client) FailoverLog() ([]client.FailoverRecord, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flog.get()
}

func (c *Client) record(r client.FailoverRecord) {
	c.mu.Lock()
	c.flog.add(r)
	c.mu.Unlock()
	c.events.Publish(client.Event{Time: r.Time, Server: r.From, Kind: client.EventFailover, Failover: &r, Reason: r.Reason})
}
