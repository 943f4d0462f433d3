package benchcmp

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// The raw implementation is the bound: no Diameter machinery at all, just
// the frames. Go's default TCP_NODELAY is kept on both sides. The server
// comes in two kinds:
//
//   - inline (StartRaw, StartPingPong): the reader answers every request
//     with acaBytes, patching the ids, and flushes its buffered writer
//     whenever no whole next request is already buffered;
//   - goroutine per request (ServeRaw with PerRequest): the reader copies
//     each request and starts a goroutine that builds the answer and hands
//     it to one writer goroutine, which writes whatever is queued and
//     flushes when the queue is empty (a batched writer). This is the
//     shape of a real Go server whose handlers may block, and the bound
//     the cross-process harness holds aaatp to.

// RawServer serves raw ACAs on a listener until Close.
type RawServer struct {
	ln         net.Listener
	perRequest bool
	wg         sync.WaitGroup
	mu         sync.Mutex
	conns      map[net.Conn]struct{}
}

// RawServerMode chooses how a RawServer answers.
type RawServerMode int

const (
	// Inline: the reader goroutine answers each request itself.
	Inline RawServerMode = iota
	// PerRequest: one goroutine per request, one batched writer.
	PerRequest
)

// ServeRaw serves ln in the background with the given mode.
func ServeRaw(ln net.Listener, mode RawServerMode) *RawServer {
	s := &RawServer{ln: ln, perRequest: mode == PerRequest, conns: make(map[net.Conn]struct{})}
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
				if s.perRequest {
					s.servePerRequest(c)
				} else {
					s.serve(c)
				}
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
		}
	}()
	return s
}

func startRawServer() (*RawServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return ServeRaw(ln, Inline), nil
}

// Addr is the listener's address.
func (s *RawServer) Addr() net.Addr { return s.ln.Addr() }

func (s *RawServer) serve(c net.Conn) {
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
		if wire.CommandCode(msg) != message.CmdAccounting {
			if a := baseAnswer(msg); a != nil {
				if _, err := w.Write(a); err != nil {
					return
				}
			}
		} else {
			wire.SetHopByHop(out, wire.HopByHop(msg))
			wire.SetEndToEnd(out, wire.EndToEnd(msg))
			if _, err := w.Write(out); err != nil {
				return
			}
		}
		if !nextBuffered(r) {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// servePerRequest: the reader copies each request out of its buffer and
// starts a goroutine for it; answers go through a batchWriter.
func (s *RawServer) servePerRequest(c net.Conn) {
	bw := newBatchWriter(c)
	defer bw.close()
	r := bufio.NewReaderSize(c, 64<<10)
	buf := make([]byte, 0, 4096)
	for {
		msg, err := readFrame(r, &buf)
		if err != nil {
			return
		}
		if wire.CommandCode(msg) != message.CmdAccounting {
			if a := baseAnswer(msg); a != nil {
				bw.write(a)
			}
			continue
		}
		req := append([]byte(nil), msg...)
		go func() {
			out := make([]byte, len(acaBytes))
			copy(out, acaBytes)
			wire.SetHopByHop(out, wire.HopByHop(req))
			wire.SetEndToEnd(out, wire.EndToEnd(req))
			bw.write(out)
		}()
	}
}

// Close stops accepting, closes every connection and waits for their
// goroutines.
func (s *RawServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// batchWriter is one writer goroutine fed by a queue: it writes everything
// queued into a buffer and flushes once the queue is empty, so concurrent
// senders share write system calls.
type batchWriter struct {
	c    net.Conn
	mu   sync.Mutex
	q    [][]byte
	wake chan struct{}
	done chan struct{}
	dead atomic.Bool
}

func newBatchWriter(c net.Conn) *batchWriter {
	bw := &batchWriter{c: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go bw.run()
	return bw
}

// write queues b (taken over); false once the connection failed.
func (bw *batchWriter) write(b []byte) bool {
	if bw.dead.Load() {
		return false
	}
	bw.mu.Lock()
	bw.q = append(bw.q, b)
	first := len(bw.q) == 1
	bw.mu.Unlock()
	if first {
		select {
		case bw.wake <- struct{}{}:
		default:
		}
	}
	return true
}

func (bw *batchWriter) run() {
	w := bufio.NewWriterSize(bw.c, 64<<10)
	var batch [][]byte
	for {
		select {
		case <-bw.wake:
		case <-bw.done:
			return
		}
		for {
			bw.mu.Lock()
			batch, bw.q = bw.q, batch[:0]
			bw.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for _, b := range batch {
				if _, err := w.Write(b); err != nil {
					bw.dead.Store(true)
					return
				}
			}
			clear(batch)
		}
		if err := w.Flush(); err != nil {
			bw.dead.Store(true)
			return
		}
	}
}

func (bw *batchWriter) close() { close(bw.done) }

// rawAnswer is what the raw client's reader hands a caller.
type rawAnswer struct{ hbh, e2e, rc uint32 }

// rawClient: callers write under a mutex (one write per request), or
// through a batchWriter when batched; one reader goroutine matches
// answers by Hop-by-Hop id through a mutex-protected map of per-caller
// channels.
type rawClient struct {
	srv  *RawServer // nil when dialed alone
	c    net.Conn
	bw   *batchWriter // nil: one write per request under wmu
	wmu  sync.Mutex
	mu   sync.Mutex
	pend map[uint32]chan rawAnswer
	ids  atomic.Uint32
	gone chan struct{} // closed when the reader ends
}

var errGone = errors.New("connection gone")

// StartRaw starts an inline raw server and a raw client (one write per
// request) on loopback, in this process.
func StartRaw() (Env, error) {
	s, err := startRawServer()
	if err != nil {
		return nil, err
	}
	e, err := dialRaw(s.Addr().String(), false, false)
	if err != nil {
		s.Close()
		return nil, err
	}
	e.srv = s
	return e, nil
}

// StartRawPerRequest starts a goroutine-per-request raw server and a
// batched raw client on loopback, in this process.
func StartRawPerRequest() (Env, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := ServeRaw(ln, PerRequest)
	e, err := dialRaw(s.Addr().String(), true, false)
	if err != nil {
		s.Close()
		return nil, err
	}
	e.srv = s
	return e, nil
}

// DialRaw connects a raw client to addr; with batched, callers queue their
// requests to one batched writer goroutine instead of writing themselves.
// It sends a CER and waits for its CEA first, so that it can face any
// Diameter server; the raw servers answer it too. Requests from the
// server (DWR) are answered. Close closes only the connection.
func DialRaw(addr string, batched bool) (Env, error) { return dialRaw(addr, batched, true) }

func dialRaw(addr string, batched, cer bool) (*rawClient, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(c, 64<<10)
	if cer {
		if err := handshake(c, r); err != nil {
			c.Close()
			return nil, err
		}
	}
	rc := &rawClient{c: c, pend: make(map[uint32]chan rawAnswer), gone: make(chan struct{})}
	if batched {
		rc.bw = newBatchWriter(c)
	}
	go rc.reader(r)
	return rc, nil
}

func (rc *rawClient) reader(r *bufio.Reader) {
	defer close(rc.gone)
	buf := make([]byte, 0, 4096)
	for {
		msg, err := readFrame(r, &buf)
		if err != nil {
			return
		}
		if wire.Flags(msg)&wire.FlagRequest != 0 { // a DWR from the server
			if a := watchdogAnswer(msg); a != nil {
				if rc.bw != nil {
					rc.bw.write(a)
				} else {
					rc.wmu.Lock()
					_, err = rc.c.Write(a)
					rc.wmu.Unlock()
				}
			}
			continue
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
		rc.mu.Lock()
		rc.pend[id] = ch
		rc.mu.Unlock()
		var err error
		if rc.bw != nil {
			// The writer owns the bytes until written: one copy each.
			b := make([]byte, len(acrBytes))
			copy(b, acrBytes)
			wire.SetHopByHop(b, id)
			wire.SetEndToEnd(b, id)
			setRecordNumber(b, id)
			if !rc.bw.write(b) {
				err = errGone
			}
		} else {
			wire.SetHopByHop(req, id)
			wire.SetEndToEnd(req, id)
			setRecordNumber(req, id)
			rc.wmu.Lock()
			_, err = rc.c.Write(req)
			rc.wmu.Unlock()
		}
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
	if rc.bw != nil {
		rc.bw.close()
	}
	if rc.srv != nil {
		rc.srv.Close()
	}
	return err
}

// pingPong is the latency bound: one goroutine writes a request, reads its
// answer, and repeats; no map, no channel, no second goroutine. Its caller
// functions share one reader: use one caller at a time.
type pingPong struct {
	srv *RawServer // nil when dialed alone
	c   net.Conn
	r   *bufio.Reader
	buf []byte
	req []byte
	id  uint32
}

// StartPingPong starts an inline raw server and a ping-pong client on
// loopback, in this process.
func StartPingPong() (Env, error) {
	s, err := startRawServer()
	if err != nil {
		return nil, err
	}
	pp, err := dialPingPong(s.Addr().String(), false)
	if err != nil {
		s.Close()
		return nil, err
	}
	pp.srv = s
	return pp, nil
}

// DialPingPong connects a ping-pong client (one caller only) to addr,
// after a CER/CEA exchange. Close closes only the connection.
func DialPingPong(addr string) (Env, error) { return dialPingPong(addr, true) }

func dialPingPong(addr string, cer bool) (*pingPong, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	req := make([]byte, len(acrBytes))
	copy(req, acrBytes)
	r := bufio.NewReaderSize(c, 64<<10)
	if cer {
		if err := handshake(c, r); err != nil {
			c.Close()
			return nil, err
		}
	}
	return &pingPong{c: c, r: r, buf: make([]byte, 0, 4096), req: req}, nil
}

func (pp *pingPong) Caller() func() (Result, error) { return pp.roundTrip }

func (pp *pingPong) roundTrip() (Result, error) {
	pp.id++
	id := pp.id
	wire.SetHopByHop(pp.req, id)
	wire.SetEndToEnd(pp.req, id)
	setRecordNumber(pp.req, id)
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
	if pp.srv != nil {
		pp.srv.Close()
	}
	return err
}

// Base protocol for the raw pieces, so that they can face a real Diameter
// peer (aaa-peer) across processes: the raw server answers CER, DWR and
// DPR (command codes other than the ACR's) with a minimal answer, and a raw
// client that dials with a handshake sends a CER first and reads its CEA.
// None of this is on the measured path.

const (
	cmdCER = 257
	cmdDWR = 280
	cmdDPR = 282
)

// baseAnswer answers a base protocol request, or returns nil for anything
// else (the ACR path).
func baseAnswer(req []byte) []byte {
	switch wire.CommandCode(req) {
	case cmdCER:
		return message.NewAnswer(req).
			Uint32(message.ResultCode, 0, true, successCode).
			String(message.OriginHost, 0, true, serverHost).
			String(message.OriginRealm, 0, true, realm).
			Address(message.HostIPAddress, 0, true, netip.MustParseAddr("127.0.0.1")).
			Uint32(message.VendorID, 0, true, 0).
			String(message.ProductName, 0, false, "benchcmp-raw").
			Uint32(message.AcctApplicationID, 0, true, message.AppAccounting).
			Bytes()
	case cmdDWR, cmdDPR:
		return message.NewAnswer(req).
			Uint32(message.ResultCode, 0, true, successCode).
			String(message.OriginHost, 0, true, serverHost).
			String(message.OriginRealm, 0, true, realm).
			Bytes()
	}
	return nil
}

// watchdogAnswer is the raw client's answer to a DWR (nil for any other
// request, which it ignores).
func watchdogAnswer(req []byte) []byte {
	if wire.CommandCode(req) != cmdDWR {
		return nil
	}
	return message.NewAnswer(req).
		Uint32(message.ResultCode, 0, true, successCode).
		String(message.OriginHost, 0, true, clientHost).
		String(message.OriginRealm, 0, true, realm).
		Bytes()
}

// cerBytes is the raw client's CER.
var cerBytes = message.NewRequest(cmdCER, message.AppCommon, 0).
	String(message.OriginHost, 0, true, clientHost).
	String(message.OriginRealm, 0, true, realm).
	Address(message.HostIPAddress, 0, true, netip.MustParseAddr("127.0.0.1")).
	Uint32(message.VendorID, 0, true, 0).
	String(message.ProductName, 0, false, "benchcmp-raw").
	Uint32(message.AcctApplicationID, 0, true, message.AppAccounting).
	Bytes()

// handshake sends a CER on c and reads one message, which must be a CEA
// with Result-Code 2001; r is the reader the connection is read with
// afterwards.
func handshake(c net.Conn, r *bufio.Reader) error {
	if _, err := c.Write(cerBytes); err != nil {
		return err
	}
	buf := make([]byte, 0, 4096)
	msg, err := readFrame(r, &buf)
	if err != nil {
		return err
	}
	if wire.CommandCode(msg) != cmdCER || wire.Flags(msg)&wire.FlagRequest != 0 {
		return errors.New("raw client: answer to CER is not a CEA")
	}
	if rc, _ := message.ResultCodeOf(msg); rc != successCode {
		return fmt.Errorf("raw client: CEA Result-Code %d", rc)
	}
	return nil
}
