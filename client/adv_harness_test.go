package client

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/peer"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/aaatp/aaatp/wire"
)

// advServer is a hand-driven Diameter server on 127.0.0.1: it answers the
// CER (with cea, when set, instead of a success) and then gives every
// message it reads to on, which writes whatever it likes. DWRs and DPRs
// are answered correctly unless on says otherwise (returns true).
type advServer struct {
	ln   net.Listener
	host string
	// cea builds the CEA from the CER; nil: a success.
	cea func(cer []byte) []byte
	// on gets each message after the CEA; handled false lets the default
	// (DWA, DPA, success answer) run.
	on func(s *advConn, msg []byte) (handled bool)
	// afterCEA runs once the CEA is written.
	afterCEA func(s *advConn)

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []*advConn
}

type advConn struct {
	srv *advServer
	nc  net.Conn
	tc  transport.Conn
	wmu sync.Mutex
}

func (c *advConn) write(msgs ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.tc.WriteMessages(msgs...)
}

func (c *advConn) writeRaw(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(b)
	return err
}

func startAdv(t *testing.T, s *advServer) *advServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	if s.host == "" {
		s.host = "adv.example.net"
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			c := &advConn{srv: s, nc: nc, tc: transport.NewStreamConn(nc, transport.SchemeTCP, transport.Options{MaxMessageLen: wire.MaxMessageLen})}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer nc.Close()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *advServer) stop() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *advServer) url() string { return "tcp://" + s.ln.Addr().String() }

func (s *advServer) answer(req []byte, rc uint32) []byte {
	return message.NewAnswer(req).ResultCode(rc).
		String(message.OriginHost, 0, true, s.host).
		String(message.OriginRealm, 0, true, "example.net").Bytes()
}

func (s *advServer) goodCEA(cer []byte) []byte {
	return message.NewAnswer(cer).ResultCode(message.Success).
		String(message.OriginHost, 0, true, s.host).
		String(message.OriginRealm, 0, true, "example.net").
		Address(message.HostIPAddress, 0, true, netip.MustParseAddr("127.0.0.1")).
		Uint32(message.VendorID, 0, true, 0).
		String(message.ProductName, 0, false, "adv").
		Uint32(message.AcctApplicationID, 0, true, message.AppAccounting).Bytes()
}

func (s *advServer) serve(c *advConn) {
	cer, err := c.tc.ReadMessage()
	if err != nil {
		return
	}
	cea := s.goodCEA(cer)
	if s.cea != nil {
		cea = s.cea(cer)
	}
	if cea != nil {
		if c.write(cea) != nil {
			return
		}
	}
	if s.afterCEA != nil {
		s.afterCEA(c)
	}
	for {
		msg, err := c.tc.ReadMessage()
		if err != nil {
			return
		}
		if s.on != nil && s.on(c, msg) {
			continue
		}
		if !wire.IsRequest(msg) {
			continue
		}
		if c.write(s.answer(msg, message.Success)) != nil {
			return
		}
	}
}

func advPeerConfig() peer.Config {
	return peer.Config{
		OriginHost: "c1.example.net", OriginRealm: "example.net",
		AcctApps: []uint32{message.AppAccounting},
		Watchdog: watchdog.Config{Twinit: 6 * time.Second, Rand: noJitter{}},
		Logger:   quiet,
	}
}

func advACR(i int) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable).
		String(message.SessionID, 0, true, "c1.example.net;1;"+itoa(i)).
		String(message.OriginHost, 0, true, "c1.example.net").
		String(message.OriginRealm, 0, true, "example.net").
		String(message.DestinationRealm, 0, true, "example.net").
		Uint32(message.AccountingRecordType, 0, true, 2).
		Uint32(message.AccountingRecordNumber, 0, true, uint32(i)).Bytes()
}

func advClient(t *testing.T, urls ...string) *Client {
	t.Helper()
	var specs []PeerSpec
	for _, u := range urls {
		specs = append(specs, PeerSpec{URL: u})
	}
	c, err := New(Config{Peers: specs, Peer: advPeerConfig(), RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}
