package status

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// ShutdownTimeout bounds how long a Server waits for requests in progress
// once its context is done; past it, connections are closed.
const ShutdownTimeout = 2 * time.Second

// Bounds of a Server's connections, so that clients that do not read
// their answers, or open connections and send nothing, hold a bounded
// number of goroutines and buffers: a request's headers must come within
// ReadHeaderTimeout, its answer be written within WriteTimeout, an idle
// keep-alive connection is closed after IdleTimeout, and at most MaxConns
// connections are open at once: a new one past it takes the place of the
// connection idle the longest, else of the oldest that has not sent a
// whole request yet, or, every one being answered, is closed at once.
const (
	ReadHeaderTimeout = 5 * time.Second
	WriteTimeout      = 30 * time.Second
	IdleTimeout       = time.Minute
	MaxConns          = 64
)

// Server is an HTTP server started by ListenAndServe.
type Server struct {
	addr net.Addr
	done chan struct{}
	err  error
}

// ListenAndServe listens on addr (host:port; port 0 picks a free one) and
// serves h in the background until ctx is done. It returns once listening,
// or with the error of net.Listen. After ctx is done the server stops
// accepting, finishes the requests in progress (at most ShutdownTimeout)
// and closes; Wait waits for that.
func ListenAndServe(ctx context.Context, addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Serve(ctx, ln, h), nil
}

// Serve is ListenAndServe on a listener the caller opened; the Server
// closes it.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) *Server {
	return serveLimited(ctx, ln, h, WriteTimeout, MaxConns)
}

func serveLimited(ctx context.Context, ln net.Listener, h http.Handler, writeTimeout time.Duration, maxConns int) *Server {
	lim := newConnLimit(ln, maxConns)
	hs := &http.Server{
		Handler:           h,
		ConnState:         lim.track,
		ReadHeaderTimeout: ReadHeaderTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       IdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	s := &Server{addr: ln.Addr(), done: make(chan struct{})}
	ln = lim
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	go func() {
		defer close(s.done)
		var err error
		select {
		case err = <-served: // failed on its own
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
			if hs.Shutdown(sctx) != nil {
				hs.Close()
			}
			cancel()
			err = <-served
		}
		if !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s
}

// Addr returns the bound address.
func (s *Server) Addr() net.Addr { return s.addr }

// URL returns the page's address, http://host:port/. An unspecified host
// (0.0.0.0, ::) is given as the loopback address of its family.
func (s *Server) URL() string {
	host, port, err := net.SplitHostPort(s.addr.String())
	if err != nil {
		return "http://" + s.addr.String() + "/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			host = "127.0.0.1"
		} else {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// Done is closed when the server has stopped.
func (s *Server) Done() <-chan struct{} { return s.done }

// Wait waits until the server has stopped and returns why it stopped
// before its context was done, if it did; nil after a normal shutdown.
func (s *Server) Wait() error {
	<-s.done
	return s.err
}
