package peer

import (
	"fmt"
	"strings"
	"sync"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
)

// Table keeps one connection per remote Diameter identity among the
// client Peers and Servers that share it (Config.Table), as RFC 6733
// 5.6.4 wants. A Server refuses a CER from an identity that already has an
// open connection (DIAMETER_UNABLE_TO_COMPLY). When a CER arrives from
// the identity a client Peer is dialing (Config.RemoteHost) while that
// Peer waits for its CEA, the election decides: the side whose
// Origin-Host is higher wins and closes the connection it initiated. If
// we win, the client Peer's dial is closed and it takes the accepted
// connection over; if we lose, the CER gets DIAMETER_ELECTION_LOST and
// the Peer's own connection goes on. Identities compare ignoring ASCII
// case. An event on the Peer concerned says which connection was kept and
// why. A Table is safe for concurrent use; the zero value is not: use
// NewTable.
type Table struct {
	mu      sync.Mutex
	open    map[string]*conn    // by lower-case remote Origin-Host
	waiting map[string]*waiting // client Peers that sent a CER and wait for the CEA
}

type waiting struct {
	p  *Peer
	tc transport.Conn // nil once the peer answered DIAMETER_ELECTION_LOST: its CER is expected
	// won is set when an accepted connection won the election: the
	// dial is closed, and the Peer takes that connection instead.
	won bool
}

// NewTable returns an empty Table.
func NewTable() *Table {
	return &Table{open: make(map[string]*conn), waiting: make(map[string]*waiting)}
}

func tableKey(host string) string { return strings.ToLower(host) }

// startDial records that p sent its CER to host on tc. It returns false
// when host already has an open connection: p does not need another.
func (t *Table) startDial(p *Peer, host string, tc transport.Conn) (*waiting, *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := tableKey(host)
	if c := t.open[k]; c != nil {
		return nil, c
	}
	w := &waiting{p: p, tc: tc}
	t.waiting[k] = w
	return w, nil
}

// endDial forgets w, unless the peer lost the election (expectCER: it
// answered DIAMETER_ELECTION_LOST and connects to us instead, so its CER
// goes to p). It reports whether an accepted connection won the election
// meanwhile (the dial was closed for it).
func (t *Table) endDial(host string, w *waiting, expectCER bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := tableKey(host)
	if t.waiting[k] == w {
		if expectCER && !w.won {
			w.tc = nil
		} else {
			delete(t.waiting, k)
		}
	}
	return w.won
}

// verdict is what a Server does with a valid CER from host.
type verdict struct {
	rc    uint32 // 0: accept
	why   string
	adopt *Peer // accept, and hand the connection to this client Peer
}

// onCER decides on a CER from host, our identity being local.
func (t *Table) onCER(local, host string) verdict {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := tableKey(host)
	if c := t.open[k]; c != nil {
		return verdict{rc: message.UnableToComply, why: fmt.Sprintf("%s already has an open connection (%s to %s): kept it, refused this one", host, c.tc.Network(), c.tc.RemoteAddr())}
	}
	w := t.waiting[k]
	if w == nil || w.won {
		return verdict{}
	}
	if w.tc == nil {
		delete(t.waiting, k)
		return verdict{adopt: w.p, why: fmt.Sprintf("election won against %s (it answered our CER with DIAMETER_ELECTION_LOST): kept the connection it initiated", host)}
	}
	if tableKey(local) > k {
		// We win: close the connection we initiated; the accepted one
		// is kept and goes to the dialing Peer.
		w.won = true
		delete(t.waiting, k)
		w.tc.Close()
		return verdict{adopt: w.p, why: fmt.Sprintf("election won against %s (our Origin-Host %s is higher): kept the connection it initiated, closed ours", host, local)}
	}
	return verdict{rc: message.ElectionLost, why: fmt.Sprintf("election lost to %s (its Origin-Host is higher than ours, %s): kept the connection we initiated, refused its", host, local)}
}

// up records c as host's open connection; false if one is open already.
func (t *Table) up(c *conn) (*conn, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := tableKey(c.remoteHost)
	if o := t.open[k]; o != nil && o != c {
		return o, false
	}
	t.open[k] = c
	return c, true
}

// down forgets c.
func (t *Table) down(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k := tableKey(c.remoteHost); t.open[k] == c {
		delete(t.open, k)
	}
}
