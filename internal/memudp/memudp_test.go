package memudp

import (
	"context"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func read(t *testing.T, c net.PacketConn) (string, string) {
	t.Helper()
	buf := make([]byte, 64)
	k, from, err := c.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:k]), from.String()
}

// A dialed endpoint and a listener exchange datagrams, each reply going
// back to the sender's port; a connected endpoint ignores strangers.
func TestDialListenExchange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		srv, err := n.Listen("s:1")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		if _, err := n.Listen("s:1"); !errors.Is(err, ErrInUse) {
			t.Errorf("second Listen: %v, want ErrInUse", err)
		}
		c, _ := n.Dial(context.Background(), "s:1")
		defer c.Close()
		stranger, _ := n.Listen("x:9")
		defer stranger.Close()
		c.Write([]byte("ping"))
		msg, from := read(t, srv)
		if msg != "ping" || from != c.LocalAddr().String() {
			t.Fatalf("server read %q from %s", msg, from)
		}
		stranger.WriteTo([]byte("spam"), c.LocalAddr())
		srv.WriteTo([]byte("pong"), Addr(from))
		buf := make([]byte, 8)
		k, err := c.Read(buf)
		if err != nil || string(buf[:k]) != "pong" {
			t.Fatalf("client read %q, %v; want pong (not the stranger's)", buf[:k], err)
		}
	})
}

// Dropped datagrams are lost; a frozen endpoint reads nothing until
// thawed, then its queue in order; Close ends a pending read.
func TestDropFreezeClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		srv, _ := n.Listen("s:1")
		c, _ := n.Dial(context.Background(), "s:1")
		defer c.Close()
		n.SetDrop(func(_, _ string, b []byte) bool { return string(b) == "lost" })
		n.Freeze("s:1")
		for _, m := range []string{"one", "lost", "two"} {
			c.Write([]byte(m))
		}
		got := make(chan string, 3)
		go func() {
			for {
				buf := make([]byte, 8)
				k, _, err := srv.ReadFrom(buf)
				if err != nil {
					close(got)
					return
				}
				got <- string(buf[:k])
			}
		}()
		time.Sleep(time.Minute)
		synctest.Wait()
		if len(got) != 0 {
			t.Fatalf("a frozen endpoint read %d datagrams", len(got))
		}
		n.Thaw("s:1")
		if a, b := <-got, <-got; a != "one" || b != "two" {
			t.Errorf("read %q %q after the thaw, want one two", a, b)
		}
		srv.Close()
		if _, ok := <-got; ok {
			t.Error("a read after Close succeeded")
		}
		if _, err := srv.WriteTo([]byte("x"), Addr("s:1")); !errors.Is(err, net.ErrClosed) {
			t.Errorf("write after Close: %v", err)
		}
	})
}
