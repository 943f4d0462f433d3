package status

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit bounds the connections an http.Server keeps open. At the
// bound, a new connection takes the place of one that holds it for
// nothing: the connection idle the longest (a keep-alive connection
// between requests, which its client reopens at no cost), else the oldest
// that has not sent a whole request yet (a slow or silent client). When
// every connection is being answered (within WriteTimeout), the new
// connection is closed at once, so that its client fails fast instead of
// waiting unseen in the listen backlog. So clients that keep connections
// open idle, or open them and send nothing, cannot lock others out, and
// the goroutines and buffers of the page are bounded.
//
// The states are the http.Server's (ConnState), which marks a connection
// active once a request's header is whole: a request still arriving, on
// a new connection or a kept-alive one, can be cut to make room, and its
// client sees the connection closed (HTTP clients retry a GET then).
type connLimit struct {
	net.Listener
	max int

	mu   sync.Mutex
	open map[net.Conn]connState
}

// connState is where an open connection is, and since when.
type connState struct {
	state http.ConnState
	since time.Time
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	return &connLimit{Listener: ln, max: max, open: make(map[net.Conn]connState)}
}

// Accept returns the next connection for which there is room.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		var out net.Conn
		if len(l.open) >= l.max {
			if out = l.evictable(); out == nil {
				l.mu.Unlock()
				c.Close()
				continue
			}
			delete(l.open, out) // its place is the new one's now
		}
		l.open[c] = connState{http.StateNew, time.Now()}
		l.mu.Unlock()
		if out != nil {
			out.Close()
		}
		return c, nil
	}
}

// evictable returns the connection idle the longest, else the oldest
// that has sent no request yet, else nil. l.mu is held.
func (l *connLimit) evictable() net.Conn {
	var idle, fresh net.Conn
	var idleSince, freshSince time.Time
	for c, s := range l.open {
		switch {
		case s.state == http.StateIdle && (idle == nil || s.since.Before(idleSince)):
			idle, idleSince = c, s.since
		case s.state == http.StateNew && (fresh == nil || s.since.Before(freshSince)):
			fresh, freshSince = c, s.since
		}
	}
	if idle != nil {
		return idle
	}
	return fresh
}

// track is the http.Server's ConnState hook: it keeps the open
// connections and their state.
func (l *connLimit) track(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.open[c]; !ok {
		return // closed to make room
	}
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(l.open, c)
	case http.StateNew:
		// Accept recorded it.
	default:
		l.open[c] = connState{st, time.Now()}
	}
}
