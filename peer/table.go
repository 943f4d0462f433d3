package peer

import (
	"fmt"
	"sync"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
)

// Table keeps one connection per remote Diameter identity among the
// client Peers and Servers that share it (Config.Table), as RFC 6733
// 5.6.4 wants. The identity is taken when a CER from it is accepted or a
// CEA accepts our CER, before the connection is in service: a CER from an
// identity that is taken gets DIAMETER_UNABLE_TO_COMPLY and its
// connection closes, and a dial to it is not made. When a CER arrives
// from the identity a client Peer is dialing (Config.RemoteHost) while
// that Peer waits for its CEA, the election decides: the side whose
// Origin-Host is higher wins and closes the connection it initiated. If
// we win, the client Peer's dial is closed and it takes the accepted
// connection over; if we lose, the CER gets DIAMETER_ELECTION_LOST and
// the Peer's own connection goes on. A CER from that identity while its
// client Peer has no connection and no CER out goes to that Peer too, and
// so does one while the Peer's connection, after the peer's DPR, only
// waits for the answers to our requests: the peer restarted, the old
// connection closes at once (its requests fail over) and the new one is
// the Peer's. A
// Table has one client Peer per identity, from Dial until it is closed.
// Dial the client Peers before the Server serves: a peer that connects
// before its client Peer exists is served by a server Peer, and the
// client Peer opens no connection to it while that one lasts.
// Identities compare ignoring ASCII case. An event on the Peer concerned
// says which connection was kept and why. A Table is safe for concurrent
// use; the zero value is not: use NewTable.
type Table struct {
	mu sync.Mutex
	// ids, by lower-case remote Origin-Host. An entry goes as soon as it
	// holds nothing: the map is bounded by the connections being
	// admitted or open and the client Peers alive with a RemoteHost.
	ids map[string]*entry
}

// entry is what a Table knows of one remote identity.
type entry struct {
	// client is the client Peer that dials this identity
	// (Config.RemoteHost), from Dial until it ends. It takes a
	// connection the identity opens to us while it has none.
	client *Peer
	// dial is client's CER in flight, its CEA awaited: a CER from the
	// identity meanwhile holds the election.
	dial *waiting
	// lost: client's last CER was answered DIAMETER_ELECTION_LOST, so
	// the peer's CER is on its way (for the event's wording).
	lost bool
	// held is the identity's one connection, from the moment its CER is
	// accepted or its CEA received; open once it is in service.
	held transport.Conn
	open bool
	// to is the client Peer held goes to (nil: a server Peer's).
	to *Peer
}

type waiting struct {
	p  *Peer
	tc transport.Conn
	// won is set when an accepted connection won the election: tc is
	// closed, and the Peer takes that connection instead.
	won bool
}

// NewTable returns an empty Table.
func NewTable() *Table {
	return &Table{ids: make(map[string]*entry)}
}

// tableKey folds ASCII case, as RFC 6733 5.6.4 compares identities (and
// as strcasecmp does for freeDiameter): 'A'-'Z' become 'a'-'z', so that
// '_' and the other bytes between 'Z' and 'a' sort below every letter.
func tableKey(host string) string {
	for i := 0; i < len(host); i++ {
		if c := host[i]; c >= 'A' && c <= 'Z' {
			b := []byte(host)
			for j := i; j < len(b); j++ {
				if c := b[j]; c >= 'A' && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return host
}

// tidy deletes e when it holds nothing. t.mu held.
func (t *Table) tidy(k string, e *entry) {
	if e.client == nil && e.dial == nil && e.held == nil {
		delete(t.ids, k)
	}
}

func (t *Table) entryLocked(k string) *entry {
	e := t.ids[k]
	if e == nil {
		e = &entry{}
		t.ids[k] = e
	}
	return e
}

func describe(tc transport.Conn, open bool) string {
	s := tc.Network() + " to " + tc.RemoteAddr().String()
	if !open {
		s += ", not yet in service"
	}
	return s
}

// register makes p the client Peer of host; false if another Peer is.
func (t *Table) register(p *Peer, host string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entryLocked(tableKey(host))
	if e.client != nil && e.client != p {
		return false
	}
	e.client = p
	return true
}

// forget drops p's claim on host: p has ended.
func (t *Table) forget(p *Peer, host string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := tableKey(host)
	e := t.ids[k]
	if e == nil || e.client != p {
		return
	}
	// A dial of p still running ends in endDial: it may still take
	// the identity with its CEA, and its conn releases it.
	e.client, e.lost, e.dial = nil, false, nil
	t.tidy(k, e)
}

// startDial records that p, the client Peer of host, sends its CER to
// host on tc. An error means no CER is to be sent: errElectionWon when a
// connection from the peer has been given to p meanwhile, else the
// identity is taken, or p is closing.
func (t *Table) startDial(p *Peer, host string, tc transport.Conn) (*waiting, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.ids[tableKey(host)]
	switch {
	case e == nil || e.client != p:
		return nil, fmt.Errorf("not dialing %s: the peer is closing", host)
	case e.held != nil && e.to == p:
		return nil, errElectionWon // p has a connection from the peer
	case e.held != nil:
		return nil, fmt.Errorf("%s is already connected (%s): not opening a second connection", host, describe(e.held, e.open))
	case e.dial != nil:
		return nil, fmt.Errorf("a connection to %s is being opened already: not opening a second one", host)
	}
	e.dial = &waiting{p: p, tc: tc}
	e.lost = false
	return e.dial, nil
}

// endDial ends the dial w to host (nil w: a dial without RemoteHost, or
// none in the Table). When the peer accepted our CER, accepted is the
// connection and id the CEA's Origin-Host: in the same step accepted
// takes id, or err says which connection has it (accepted must then
// close). lost: the CEA said DIAMETER_ELECTION_LOST, the peer's CER is
// expected. won reports that the election gave host to the peer's
// connection meanwhile (and closed w's).
func (t *Table) endDial(host string, w *waiting, accepted transport.Conn, id string, lost bool) (won bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w != nil {
		k := tableKey(host)
		if e := t.ids[k]; e != nil && e.dial == w {
			e.dial = nil
			e.lost = lost
			t.tidy(k, e)
		}
		if w.won {
			return true, nil
		}
	}
	if accepted == nil {
		return false, nil
	}
	e := t.entryLocked(tableKey(id))
	if e.held != nil {
		return false, fmt.Errorf("%s already has a connection (%s): closing this one", id, describe(e.held, e.open))
	}
	e.held = accepted
	if w != nil {
		e.to = w.p
	}
	return false, nil
}

// verdict is what a Server does with a valid CER.
type verdict struct {
	rc    uint32 // 0: accept
	why   string
	adopt *Peer // accept, and hand the connection to this client Peer
	// dialEnded: adopt's dial ended for this connection (closed by the
	// election, or answered DIAMETER_ELECTION_LOST before).
	dialEnded bool
	// closeDial is the connection the election closes (outside the
	// Table's lock: a TLS close can wait for its close_notify).
	closeDial transport.Conn
}

// onCER decides on a CER from host received on tc, our identity being
// local. Unless it refuses, tc has host from here on: release it when the
// CEA cannot be sent or the connection ends before it is in service.
func (t *Table) onCER(local, host string, tc transport.Conn) verdict {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := tableKey(host)
	e := t.entryLocked(k)
	if e.held != nil {
		return verdict{rc: message.UnableToComply, why: fmt.Sprintf("%s already has an open connection (%s): kept it, refused this one", host, describe(e.held, e.open))}
	}
	w := e.dial
	switch {
	case w != nil && tableKey(local) <= k:
		return verdict{rc: message.ElectionLost, why: fmt.Sprintf("election lost to %s (its Origin-Host is higher than ours, %s): kept the connection we initiated, refused its", host, local)}
	case w != nil:
		// We win: close the connection we initiated; the accepted one
		// is kept and goes to the dialing Peer.
		w.won = true
		e.dial, e.held, e.to = nil, tc, w.p
		return verdict{adopt: w.p, closeDial: w.tc, dialEnded: true, why: fmt.Sprintf("election won against %s (our Origin-Host %s is higher): kept the connection it initiated, closed ours", host, local)}
	case e.client != nil:
		e.held, e.to = tc, e.client
		v := verdict{adopt: e.client, dialEnded: e.lost, why: fmt.Sprintf("%s connected to us while we had no connection to it: kept it", host)}
		if e.lost {
			v.why = fmt.Sprintf("election won against %s (it answered our CER with DIAMETER_ELECTION_LOST): kept the connection it initiated", host)
		}
		e.lost = false
		return v
	}
	e.held = tc
	return verdict{}
}

// up records that c, which has its identity since its CER or CEA, is in
// service; false if it does not have it (another connection does).
func (t *Table) up(c *conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.ids[tableKey(c.remoteHost)]
	if e == nil || e.held != c.tc {
		return false
	}
	e.open = true
	return true
}

// release gives host up if tc has it: tc closed, or never came into
// service.
func (t *Table) release(host string, tc transport.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := tableKey(host)
	if e := t.ids[k]; e != nil && e.held == tc {
		e.held, e.open, e.to = nil, false, nil
		t.tidy(k, e)
	}
}

// down forgets c.
func (t *Table) down(c *conn) { t.release(c.remoteHost, c.tc) }
