package peer

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/aaatp/aaatp/transport"
)

// Server accepts connections on one listener and runs a server Peer for
// each. Its methods are safe for concurrent use.
type Server struct {
	cfg Config
	ln  transport.Listener

	mu     sync.Mutex
	peers  map[*Peer]struct{}
	closed bool
	wg     sync.WaitGroup
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
	return &Server{cfg: cfg, ln: ln, peers: make(map[*Peer]struct{})}, nil
}

// Addr returns the listening address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Events returns the bus every accepted peer publishes on.
func (s *Server) Events() *Bus { return s.cfg.Events }

// Serve accepts until Close; it returns nil after Close.
func (s *Server) Serve() error {
	for {
		tc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		p, err := Accept(tc, s.cfg)
		if err != nil {
			return err // a Config that validated once cannot fail here
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			p.Close(context.Background())
			continue
		}
		s.peers[p] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			<-p.Done()
			p.wg.Wait()
			s.mu.Lock()
			delete(s.peers, p)
			s.mu.Unlock()
		}()
	}
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
// ctx and DPATimeout) and waits for them.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	err := s.ln.Close()
	var wg sync.WaitGroup
	for _, p := range s.Peers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Close(ctx)
		}()
	}
	wg.Wait()
	s.wg.Wait()
	return err
}
