package benchcmp

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/fiorix/go-diameter/v4/diam"
	"github.com/fiorix/go-diameter/v4/diam/avp"
	"github.com/fiorix/go-diameter/v4/diam/datatype"
	"github.com/fiorix/go-diameter/v4/diam/dict"
	"github.com/fiorix/go-diameter/v4/diam/sm"
)

// go-diameter v4.0.4 used the normal way: diam.Server with an
// sm.StateMachine answering ACR with ACA 2001 on the server; sm.Client
// (no watchdog) dialing once on the client, each request built with
// diam.NewRequest + NewAVP and written with m.WriteTo(conn). go-diameter
// does not match answers to requests: an ACA handler on the client's mux
// looks the Hop-by-Hop id up in a map of per-caller channels. The decoded
// answer points into a reused read buffer, so the handler copies out what
// it needs (ids and Result-Code) before returning.

type gdAnswer struct{ hbh, e2e, rc uint32 }

type gdEnv struct {
	srv      *GoDiameterServer // nil when dialed alone
	conn     diam.Conn
	mu       sync.Mutex
	pend     map[uint32]chan gdAnswer
	ids      atomic.Uint32
	gone     <-chan struct{}
	dstRealm datatype.DiameterIdentity
}

// GoDiameterServer is go-diameter's diam.Server with an sm.StateMachine
// answering ACR with ACA 2001, serving a listener until Close.
type GoDiameterServer struct {
	ln     net.Listener
	served chan error
}

// ServeGoDiameter serves ln in the background.
func ServeGoDiameter(ln net.Listener) *GoDiameterServer {
	srvSM := sm.New(&sm.Settings{
		OriginHost:  serverHost,
		OriginRealm: realm,
		VendorID:    0,
		ProductName: "go-diameter",
	})
	srvSM.HandleFunc("ACR", func(c diam.Conn, m *diam.Message) {
		a := m.Answer(diam.Success)
		a.NewAVP(avp.OriginHost, avp.Mbit, 0, datatype.DiameterIdentity(serverHost))
		a.NewAVP(avp.OriginRealm, avp.Mbit, 0, datatype.DiameterIdentity(realm))
		a.WriteTo(c)
	})
	s := &GoDiameterServer{ln: ln, served: make(chan error, 1)}
	srv := &diam.Server{Handler: srvSM, Dict: dict.Default}
	go func() { s.served <- srv.Serve(ln) }()
	return s
}

// Addr is the listener's address.
func (s *GoDiameterServer) Addr() net.Addr { return s.ln.Addr() }

// Close closes the listener and waits for Serve to return (connections
// end when their clients close).
func (s *GoDiameterServer) Close() {
	s.ln.Close()
	<-s.served // Serve returns the listener's error after Close
}

// StartGoDiameter starts go-diameter's server and client on loopback, in
// this process.
func StartGoDiameter() (Env, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := ServeGoDiameter(ln)
	e, err := dialGoDiameter(ln.Addr().String())
	if err != nil {
		s.Close()
		return nil, err
	}
	e.srv = s
	return e, nil
}

// DialGoDiameter connects go-diameter's sm.Client to addr. Close closes
// only the connection.
func DialGoDiameter(addr string) (Env, error) { return dialGoDiameter(addr) }

func dialGoDiameter(addr string) (*gdEnv, error) {
	e := &gdEnv{pend: make(map[uint32]chan gdAnswer)}
	cliSM := sm.New(&sm.Settings{
		OriginHost:  clientHost,
		OriginRealm: realm,
		VendorID:    0,
		ProductName: "go-diameter",
	})
	cliSM.HandleFunc("ACA", func(c diam.Conn, m *diam.Message) {
		var code uint32
		if a, err := m.FindAVP(avp.ResultCode, 0); err == nil {
			if v, ok := a.Data.(datatype.Unsigned32); ok {
				code = uint32(v)
			}
		}
		hbh := m.Header.HopByHopID
		e.mu.Lock()
		ch := e.pend[hbh]
		delete(e.pend, hbh)
		e.mu.Unlock()
		if ch != nil {
			ch <- gdAnswer{hbh, m.Header.EndToEndID, code}
		}
	})
	cli := &sm.Client{
		Dict:           dict.Default,
		Handler:        cliSM,
		EnableWatchdog: false, // not RFC 3539's
		AcctApplicationID: []*diam.AVP{
			diam.NewAVP(avp.AcctApplicationID, avp.Mbit, 0, datatype.Unsigned32(3)),
		},
	}
	c, err := cli.DialNetwork("tcp", addr)
	if err != nil {
		return nil, err
	}
	e.conn = c
	e.gone = c.(diam.CloseNotifier).CloseNotify()
	return e, nil
}

// gdRequest builds the ACR the go-diameter way; its bytes equal acrBytes
// but for the ids and the record number (TestSanity checks it).
func gdRequest(hbh, e2e, recNum uint32) *diam.Message {
	m := diam.NewRequest(diam.Accounting, 3, dict.Default)
	m.Header.CommandFlags |= diam.ProxiableFlag
	m.Header.HopByHopID = hbh
	m.Header.EndToEndID = e2e
	m.NewAVP(avp.SessionID, avp.Mbit, 0, datatype.UTF8String(sessionID))
	m.NewAVP(avp.OriginHost, avp.Mbit, 0, datatype.DiameterIdentity(clientHost))
	m.NewAVP(avp.OriginRealm, avp.Mbit, 0, datatype.DiameterIdentity(realm))
	m.NewAVP(avp.DestinationRealm, avp.Mbit, 0, datatype.DiameterIdentity(realm))
	m.NewAVP(avp.UserName, avp.Mbit, 0, datatype.UTF8String(userName))
	m.NewAVP(avp.AccountingRecordType, avp.Mbit, 0, datatype.Enumerated(recordType))
	m.NewAVP(avp.AccountingRecordNumber, avp.Mbit, 0, datatype.Unsigned32(recNum))
	return m
}

func (e *gdEnv) Caller() func() (Result, error) {
	ch := make(chan gdAnswer, 1)
	return func() (Result, error) {
		id := e.ids.Add(1)
		m := gdRequest(id, id, id)
		e.mu.Lock()
		e.pend[id] = ch
		e.mu.Unlock()
		if _, err := m.WriteTo(e.conn); err != nil {
			e.mu.Lock()
			delete(e.pend, id)
			e.mu.Unlock()
			return Result{}, err
		}
		select {
		case a := <-ch:
			return Result{RC: a.rc, SentHBH: id, GotHBH: a.hbh, SentE2E: id, GotE2E: a.e2e}, nil
		case <-e.gone:
			return Result{}, errors.New("go-diameter connection closed")
		}
	}
}

func (e *gdEnv) Close() error {
	e.conn.Close()
	if e.srv != nil {
		e.srv.Close()
	}
	return nil
}
