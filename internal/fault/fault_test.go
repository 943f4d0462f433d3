package fault

import (
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/transport"
	"github.com/aaatp/aaatp/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func acr(n uint32) []byte {
	return message.NewRequest(message.CmdAccounting, message.AppAccounting, 0).
		Uint32(message.AccountingRecordNumber, 0, true, n).Bytes()
}

func dwr() []byte { return message.NewRequest(wire.CmdDeviceWatchdog, 0, 0).Bytes() }

// pair returns the wrapped (process) end and the raw (remote) end of a pipe.
func pair(s *Switch, rst func() error) (*Conn, transport.Conn) {
	a, b := net.Pipe()
	return s.Wrap(transport.NewStreamConn(a, "pipe", transport.Options{}), rst),
		transport.NewStreamConn(b, "pipe", transport.Options{})
}

// async runs f in a goroutine and returns its error on a channel.
func async(f func() error) chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func TestFreezeHoldsReadsWritesAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s Switch
		c, remote := pair(&s, nil)
		s.Freeze()
		for i := range 3 {
			if err := remote.WriteMessages(acr(uint32(i))); err != nil {
				t.Fatal(err)
			}
		}
		var got []byte
		read := async(func() (err error) { got, err = c.ReadMessage(); return err })
		wrote := async(func() error { return c.WriteMessages(dwr()) })
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(read) != 0 || len(wrote) != 0 {
			t.Fatal("a frozen connection read or wrote")
		}
		if n := s.Buffered(); n != 3 {
			t.Fatalf("Buffered = %d while frozen, want 3", n)
		}
		if err := c.Close(); err != nil { // held: a hung process closes nothing
			t.Fatal(err)
		}
		if s.Conns() != 1 {
			t.Fatalf("Close while frozen closed the connection")
		}
		buffered, dropped := s.Thaw()
		if buffered != 3 || dropped != 3 {
			t.Fatalf("Thaw = %d, %d; want 3 buffered, 3 dropped (closed while frozen)", buffered, dropped)
		}
		if err := <-read; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after the held close: %v %x", err, got)
		}
		if err := <-wrote; err == nil {
			t.Fatal("write after the held close succeeded")
		}
		remote.Close()
		s.Wait()
	})
}

func TestThawDeliversInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s Switch
		c, remote := pair(&s, nil)
		s.Freeze()
		for i := range 3 {
			remote.WriteMessages(acr(uint32(i)))
		}
		synctest.Wait()
		if b, d := s.Thaw(); b != 3 || d != 0 {
			t.Fatalf("Thaw = %d, %d; want 3, 0", b, d)
		}
		for i := range 3 {
			m, err := c.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			if got := wire.EndToEnd(m); got != wire.EndToEnd(acr(uint32(i))) && wire.CommandCode(m) != message.CmdAccounting {
				t.Fatalf("message %d: %x", i, m)
			}
		}
		if s.Buffered() != 0 {
			t.Fatalf("Buffered = %d after reading all", s.Buffered())
		}
		echo := async(func() error { _, err := remote.ReadMessage(); return err })
		if err := c.WriteMessages(dwr()); err != nil {
			t.Fatal(err)
		}
		if err := <-echo; err != nil {
			t.Fatal(err)
		}
		c.Close()
		remote.Close()
		s.Wait()
	})
}

func TestMuteThenReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s Switch
		rsts := 0
		c, remote := pair(&s, func() error { rsts++; return nil })
		s.Mute()
		if err := remote.WriteMessages(acr(1)); err != nil {
			t.Fatal(err)
		}
		if m, err := c.ReadMessage(); err != nil || wire.CommandCode(m) != message.CmdAccounting {
			t.Fatalf("a muted process still reads: %v", err)
		}
		wrote := async(func() error { return c.WriteMessages(message.NewAnswer(acr(1)).Bytes()) })
		peerRead := async(func() error { _, err := remote.ReadMessage(); return err })
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(wrote) != 0 || len(peerRead) != 0 {
			t.Fatal("a muted connection sent something")
		}
		if n := s.Reset(); n != 1 || rsts != 1 {
			t.Fatalf("Reset = %d with %d RSTs, want 1, 1", n, rsts)
		}
		if err := <-wrote; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("muted write after Reset: %v", err)
		}
		if err := <-peerRead; err == nil {
			t.Fatal("the remote end read a message from a muted connection")
		}
		if s.Conns() != 0 {
			t.Fatalf("Conns = %d after Reset", s.Conns())
		}
		// Reset ended the mute: a new connection writes.
		c2, remote2 := pair(&s, nil)
		got := async(func() error { _, err := remote2.ReadMessage(); return err })
		if err := c2.WriteMessages(dwr()); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		c2.Close()
		remote.Close()
		remote2.Close()
		s.Wait()
	})
}

func TestDropDWA(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := Switch{DropDWA: true}
		c, remote := pair(&s, nil)
		dwa := message.NewAnswer(dwr()).Bytes()
		ans := message.NewAnswer(acr(7)).Bytes()
		if err := c.WriteMessages(dwa); err != nil { // nothing left to write
			t.Fatal(err)
		}
		got := make(chan []byte, 4)
		go func() {
			for {
				m, err := remote.ReadMessage()
				if err != nil {
					close(got)
					return
				}
				got <- m
			}
		}()
		if err := c.WriteMessages(dwa, dwr(), ans, dwa); err != nil {
			t.Fatal(err)
		}
		c.Close()
		var cmds []string
		for m := range got {
			if wire.CommandCode(m) == wire.CmdDeviceWatchdog && !wire.IsRequest(m) {
				t.Fatal("a DWA went out")
			}
			kind := "answer"
			if wire.IsRequest(m) {
				kind = "request"
			}
			cmds = append(cmds, kind)
		}
		if len(cmds) != 2 || cmds[0] != "request" || cmds[1] != "answer" {
			t.Fatalf("sent %v, want the DWR and the ACA", cmds)
		}
		remote.Close()
		s.Wait()
	})
}

func TestStallAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stalls := 0
		s := Switch{StallAfter: 2, OnStall: func() { stalls++ }}
		c1, r1 := pair(&s, nil)
		c2, r2 := pair(&s, nil)
		r1.WriteMessages(dwr()) // base protocol: not counted
		r1.WriteMessages(acr(1))
		r2.WriteMessages(acr(2))
		synctest.Wait()
		// Both are counted; at most the read already under way takes one
		// more message off the pipe, and the next write backs up.
		blocked := async(func() error {
			if err := r1.WriteMessages(acr(3)); err != nil {
				return err
			}
			return r1.WriteMessages(acr(4))
		})
		time.Sleep(time.Second) // under the transport's default write timeout
		synctest.Wait()
		if len(blocked) != 0 {
			t.Fatal("a stalled process kept reading")
		}
		if stalls != 1 {
			t.Fatalf("OnStall called %d times, want 1", stalls)
		}
		for _, want := range []struct {
			c   *Conn
			cmd uint32
		}{{c1, wire.CmdDeviceWatchdog}, {c1, message.CmdAccounting}, {c2, message.CmdAccounting}} {
			m, err := want.c.ReadMessage()
			if err != nil || wire.CommandCode(m) != want.cmd {
				t.Fatalf("read %x, %v; want command %d", m, err, want.cmd)
			}
		}
		read := async(func() error { _, err := c2.ReadMessage(); return err })
		synctest.Wait()
		if len(read) != 0 {
			t.Fatal("read past the stall")
		}
		c1.Close()
		c2.Close()
		if err := <-read; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("stalled read after Close: %v", err)
		}
		if err := <-blocked; err == nil {
			t.Fatal("write into a closed stalled connection succeeded")
		}
		r1.Close()
		r2.Close()
		s.Wait()
	})
}

// With a small ReadAhead the remote's writes back up while the process
// hangs, once the connection's read buffer and the read-ahead are full;
// the thaw delivers everything, in order.
func TestReadAheadBacksUpTheSender(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := Switch{ReadAhead: 2}
		c, remote := pair(&s, nil)
		s.Freeze()
		big := func(n uint32) []byte { // 4 KiB: a handful fill the read buffer
			return message.NewRequest(message.CmdAccounting, message.AppAccounting, 0).
				Uint32(message.AccountingRecordNumber, 0, true, n).
				String(message.SessionID, 0, true, strings.Repeat("x", 4096)).Bytes()
		}
		const n = 20
		var wrote atomic.Int32
		done := async(func() error {
			for i := range n {
				if err := remote.WriteMessages(big(uint32(i))); err != nil {
					return err
				}
				wrote.Add(1)
			}
			return nil
		})
		time.Sleep(time.Second) // less than the remote's write timeout
		synctest.Wait()
		if w := wrote.Load(); w >= n || w < 2 {
			t.Fatalf("%d of %d writes went through a frozen process with 2 messages of read-ahead, want the first few", w, n)
		}
		if len(done) > 0 {
			t.Fatalf("the writes ended early: %v", <-done)
		}
		s.Thaw()
		for i := range n {
			m, err := c.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := message.Uint32Of(m, message.AccountingRecordNumber, 0); got != uint32(i) {
				t.Fatalf("read record %d, want %d", got, i)
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		c.Close()
		remote.Close()
		s.Wait()
	})
}
