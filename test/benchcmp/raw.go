package benchcmp

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// The raw implementation is the bound: no Diameter machinery at all, just
// the frames. The server answers every request with acaBytes, patching the
// ids, and flushes its buffered writer whenever no whole next request is
// already buffered. Go's default TCP_NODELAY is kept on both sides.

type rawServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startRawServer() (*rawServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &rawServer{ln: ln, conns: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c)
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
		}
	}()
	return s, nil
}

func (s *rawServer) serve(c net.Conn) {
	r := bufio.NewReaderSize(c, 64<<10)
	w := bufio.NewWriterSize(c, 64<<10)
	buf := make([]byte, 0, 4096)
	out := make([]byte, len(acaBytes))
	copy(out, acaBytes)
	for {
		msg, err := readFrame(r, &buf)
		if err != nil {
			return
		}
		wire.SetHopByHop(out, wire.HopByHop(msg))
		wire.SetEndToEnd(out, wire.EndToEnd(msg))
		if _, err := w.Write(out); err != nil {
			return
		}
		if !nextBuffered(r) {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

func (s *rawServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// rawAnswer is what the raw client's reader hands a caller.
type rawAnswer struct{ hbh, e2e, rc uint32 }

// rawClient: callers write under a mutex (one write per request), one
// reader goroutine matches answers by Hop-by-Hop id through a
// mutex-protected map of per-caller channels.
type rawClient struct {
	srv  *rawServer
	c    net.Conn
	wmu  sync.Mutex
	mu   sync.Mutex
	pend map[uint32]chan rawAnswer
	ids  atomic.Uint32
	gone chan struct{} // closed when the reader ends
}

var errGone = errors.New("connection gone")

func StartRaw() (Env, error) {
	s, err := startRawServer()
	if err != nil {
		return nil, err
	}
	c, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		s.close()
		return nil, err
	}
	rc := &rawClient{srv: s, c: c, pend: make(map[uint32]chan rawAnswer), gone: make(chan struct{})}
	go rc.reader()
	return rc, nil
}

func (rc *rawClient) reader() {
	defer close(rc.gone)
	r := bufio.NewReaderSize(rc.c, 64<<10)
	buf := make([]byte, 0, 4096)
	for {
		msg, err := readFrame(r, &buf)
		if err != nil {
			return
		}
		code, _ := message.ResultCodeOf(msg)
		hbh := wire.HopByHop(msg)
		rc.mu.Lock()
		ch := rc.pend[hbh]
		delete(rc.pend, hbh)
		rc.mu.Unlock()
		if ch != nil {
			ch <- rawAnswer{hbh, wire.EndToEnd(msg), code}
		}
	}
}

func (rc *rawClient) Caller() func() (Result, error) {
	req := make([]byte, len(acrBytes))
	copy(req, acrBytes)
	ch := make(chan rawAnswer, 1)
	return func() (Result, error) {
		id := rc.ids.Add(1)
		wire.SetHopByHop(req, id)
		wire.SetEndToEnd(req, id)
		rc.mu.Lock()
		rc.pend[id] = ch
		rc.mu.Unlock()
		rc.wmu.Lock()
		_, err := rc.c.Write(req)
		rc.wmu.Unlock()
		if err != nil {
			rc.mu.Lock()
			delete(rc.pend, id)
			rc.mu.Unlock()
			return Result{}, err
		}
		select {
		case a := <-ch:
			return Result{RC: a.rc, SentHBH: id, GotHBH: a.hbh, SentE2E: id, GotE2E: a.e2e}, nil
		case <-rc.gone:
			return Result{}, errGone
		}
	}
}

func (rc *rawClient) Close() error {
	err := rc.c.Close()
	<-rc.gone
	rc.srv.close()
	return err
}

// pingPong is the latency bound: one goroutine writes a request, reads its
// answer, and repeats; no map, no channel, no second goroutine. Its caller
// functions share one reader: use one caller at a time.
type pingPong struct {
	srv *rawServer
	c   net.Conn
	r   *bufio.Reader
	buf []byte
	req []byte
	id  uint32
}

func StartPingPong() (Env, error) {
	s, err := startRawServer()
	if err != nil {
		return nil, err
	}
	c, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		s.close()
		return nil, err
	}
	req := make([]byte, len(acrBytes))
	copy(req, acrBytes)
	return &pingPong{srv: s, c: c, r: bufio.NewReaderSize(c, 64<<10), buf: make([]byte, 0, 4096), req: req}, nil
}

func (pp *pingPong) Caller() func() (Result, error) { return pp.roundTrip }

func (pp *pingPong) roundTrip() (Result, error) {
	pp.id++
	id := pp.id
	wire.SetHopByHop(pp.req, id)
	wire.SetEndToEnd(pp.req, id)
	if _, err := pp.c.Write(pp.req); err != nil {
		return Result{}, err
	}
	msg, err := readFrame(pp.r, &pp.buf)
	if err != nil {
		return Result{}, err
	}
	code, _ := message.ResultCodeOf(msg)
	return Result{RC: code, SentHBH: id, GotHBH: wire.HopByHop(msg), SentE2E: id, GotE2E: wire.EndToEnd(msg)}, nil
}

func (pp *pingPong) Close() error {
	err := pp.c.Close()
	pp.srv.close()
	return err
}
