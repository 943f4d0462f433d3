package peer

import (
	"context"
	"net"
	"slices"
	"sync"

	"github.com/aaatp/aaatp/internal/bus"
	"github.com/aaatp/aaatp/internal/serve"
	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
)

// Server accepts connections on one listener and runs a server Peer for
// each. Its methods are safe for concurrent use.
type Server struct {
	// Wrap, when set before Serve, wraps every accepted connection before
	// its Peer sees it: fault injection, accounting, tracing.
	Wrap func(transport.Conn) transport.Conn
	// OnPeerEnd, when set before Serve, is called once for every peer that
	// ended, after its goroutines have finished (its Stats are final) and
	// its last events were delivered.
	// Close returns only after the calls for the peers it closed, or when
	// its ctx is done. OnPeerEnd may call Close (to stop serving when a
	// peer it needs has left): that Close disconnects the other peers and
	// waits for their ends as any Close does, but not for the OnPeerEnd
	// call it is made from, nor any other that had begun before it.
	OnPeerEnd func(*Peer)
	// MaxOpening, when set before Serve, bounds the connections accepted
	// whose capabilities exchange is not over (no CER answered yet), and
	// MaxOpeningPerAddr those from one source address: a new connection
	// over either limit is closed at once, counted and logged, so that
	// silent connections cannot use up the process's descriptors while
	// they wait for CEATimeout. Zero means DefaultMaxOpening and
	// DefaultMaxOpeningPerAddr; negative means no limit. An IPv6 /64
	// counts as one source address, here and for MaxConnectionsPerAddr.
	MaxOpening, MaxOpeningPerAddr int
	// MaxConnections, when set before Serve, bounds the connections open
	// at once, admitted or not: a new connection over it is closed at
	// once, counted and logged, so that peers that each pass the
	// capabilities exchange (under as many identities as they like, unless
	// Config.AllowHosts says which) cannot hold unbounded readers, buffers
	// and backlogs. Zero means DefaultMaxConnections; negative means no
	// limit. A connection that an election hands to a client Peer of the
	// Table stops counting here (one at most per client Peer).
	// MaxConnectionsPerAddr bounds those from one source address, so that
	// one host cannot take every place: zero means
	// DefaultMaxConnectionsPerAddr, negative no limit.
	MaxConnections, MaxConnectionsPerAddr int

	cfg Config
	ln  transport.Listener

	mu      sync.Mutex
	peers   map[*Peer]*served
	closed  bool
	closing chan struct{} // closed with closed
	open    serve.Admission
}

// served is what a Server knows of one of its peers' ends. s.mu guards
// ending.
type served struct {
	ended  chan struct{} // closed once the peer's OnPeerEnd call has returned
	ending bool          // that call has begun
}

// Listen listens on url (tcp://, tls://, sctp://) and returns a Server;
// call Serve to accept. Configuration errors are returned here.
func Listen(url string, cfg Config) (*Server, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	ln, err := transport.Listen(url, cfg.Transport)
	if err != nil {
		return nil, err
	}
	if cfg.Table == nil {
		cfg.Table = NewTable()
	}
	cfg.ownLanes = false // the Server's, shared by its peers: closed by Close
	return &Server{cfg: cfg, ln: ln, peers: make(map[*Peer]*served), closing: make(chan struct{})}, nil
}

// NewServer returns a Server over a listener the caller made (the Server
// takes it over: Close closes it). Configuration errors are returned here.
func NewServer(ln transport.Listener, cfg Config) (*Server, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.Table == nil {
		cfg.Table = NewTable()
	}
	cfg.ownLanes = false // the Server's, shared by its peers: closed by Close
	return &Server{cfg: cfg, ln: ln, peers: make(map[*Peer]*served), closing: make(chan struct{})}, nil
}

// Validate reports what Dial, Accept, Listen and NewServer would refuse in
// cfg, without connecting.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// Addr returns the listening address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Events returns the bus every accepted peer publishes on.
func (s *Server) Events() *Bus { return s.cfg.Events }

// Serve accepts until Close; it returns nil after Close. An accept error
// other than the listener's closing (EMFILE when out of descriptors, a
// connection aborted before accept) is logged and retried with a backoff
// of 5 ms doubling to 1 s: it must not end the service.
func (s *Server) Serve() error {
	s.open.Max, s.open.PerAddr, s.open.What = s.MaxOpening, s.MaxOpeningPerAddr, "their CER"
	s.open.MaxConns, s.open.MaxConnsPerAddr = s.MaxConnections, s.MaxConnectionsPerAddr
	closed := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.closed
	}
	return serve.Accept(s.ln, &s.open, s.cfg.Logger, closed, transport.Conn.RemoteAddr, closeConn, s.start)
}

func closeConn(c transport.Conn) { c.Close() }

// start runs a server Peer on an accepted connection; t is its place in
// s.open: admitted once its capabilities exchange is over, ended with it.
func (s *Server) start(tc transport.Conn, t *serve.Ticket) {
	if s.Wrap != nil {
		tc = s.Wrap(tc)
	}
	// Accept and register under the lock, so that Close either sees
	// the peer or the peer is never started.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		t.Ended()
		tc.Close()
		return
	}
	p, err := accept(tc, s.cfg, t.Admitted)
	if err != nil { // a Config that validated once cannot fail here
		s.mu.Unlock()
		t.Ended()
		tc.Close()
		return
	}
	sv := &served{ended: make(chan struct{})}
	s.peers[p] = sv
	s.mu.Unlock()
	go func() {
		defer close(sv.ended)
		<-p.opened // admitted, if it was, before its CEA went out
		// Its last events are out before OnPeerEnd: a subscriber's state
		// for it can then be dropped.
		<-p.Done()
		finished := make(chan struct{}) // its readers and Handlers have ended
		go func() {
			p.wg.Wait()
			close(finished)
		}()
		select {
		case <-finished:
		case <-s.closing:
			// Its socket is closed: a Handler still running, which
			// may never return, no longer holds its place.
		}
		t.Ended()
		<-finished
		s.mu.Lock()
		sv.ending = true // a Close from OnPeerEnd does not wait for this call
		s.mu.Unlock()
		if s.OnPeerEnd != nil {
			s.OnPeerEnd(p)
		}
		s.mu.Lock()
		delete(s.peers, p)
		s.mu.Unlock()
	}()
}

// Peers returns the peers connected now.
func (s *Server) Peers() []*Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := make([]*Peer, 0, len(s.peers))
	for p := range s.peers {
		ps = append(ps, p)
	}
	return ps
}

// Close stops accepting, disconnects every peer with DPR/DPA (bounded by
// ctx and DPATimeout; Disconnect-Cause DO_NOT_WANT_TO_TALK_TO_YOU) and
// waits for them, their Handlers and OnPeerEnd calls, but not past ctx:
// it returns when ctx is done, whatever a Handler does, and what still
// runs then ends on its own (a connection it closed gives its place back
// at once, though its Handler still runs). Called with the context a
// subscriber got with an event of one of its peers, it starts the
// disconnects and returns without waiting for them. Called from a
// Handler, it waits for that Handler too, so until ctx ends: call it
// with a deadline, or from another goroutine.
func (s *Server) Close(ctx context.Context) error {
	return s.Disconnect(ctx, message.DisconnectDoNotWantToTalkToU)
}

// Disconnect is Close with the Disconnect-Cause of the DPRs:
// message.DisconnectRebooting when the process restarts and its clients
// should come back as soon as it does.
func (s *Server) Disconnect(ctx context.Context, cause uint32) error {
	s.mu.Lock()
	first := !s.closed
	if first {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	var err error
	if first { // a later call waits for the same end, without an error of its own
		err = s.ln.Close()
	}
	// The ends to wait for: those of the peers it closes. A peer whose
	// OnPeerEnd call has begun ended before, and that call may be this
	// Close's caller: waiting for it would wait for itself.
	s.mu.Lock()
	peers := make([]*Peer, 0, len(s.peers))
	var ends []chan struct{}
	for p, sv := range s.peers {
		peers = append(peers, p)
		if !sv.ending {
			ends = append(ends, sv.ended)
		}
	}
	s.mu.Unlock()
	q, _ := bus.Publisher[*Peer](ctx)
	onPeer := q != nil && slices.Contains(peers, q)
	if onPeer {
		// That context is done once q has ended: the others' DPAs get
		// their time all the same.
		ctx = context.WithoutCancel(ctx)
	}
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Disconnect(ctx, cause)
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		for _, e := range ends {
			<-e
		}
		s.cfg.lanes.close() // their parked workers end now, not after a linger
		close(done)
	}()
	if onPeer {
		// On the notifier of one of its peers: the DPRs are sent, the
		// rest follows (waiting here would hold that peer's events).
		return err
	}
	select {
	case <-done:
	case <-ctx.Done():
		// Handlers that ignore their ctx, or OnPeerEnd calls, still
		// run: they end on their own.
	}
	return err
}
