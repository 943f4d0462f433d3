package client

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	lradius "layeh.com/radius"

	"github.com/aaatp/aaatp/transport"
)

// ssimStubConn is the far end of a connection of TestSSimWireCheck: it
// takes every write.
type ssimStubConn struct{ transport.Conn }

func (ssimStubConn) WriteMessages(...[]byte) error { return nil }
func (ssimStubConn) Close() error                  { return nil }

// ssimAccessRequest is an Access-Request of user on Identifier id, as the
// wire check reads it (code, Identifier, User-Name).
func ssimAccessRequest(id byte, user string) []byte {
	b := make([]byte, 20, 22+len(user))
	b[0], b[1] = byte(lradius.CodeAccessRequest), id
	b = append(b, 1, byte(2+len(user)))
	b = append(b, user...)
	b[2], b[3] = byte(len(b)>>8), byte(len(b))
	return b
}

// TestSSimWireCheck: TestSimRADIUSStream's wire check of RFC 6613 2.6.1
// (checkWriteLocked) judges a request written on one connection of a
// server while pending on another, OKAY, at the end of the write's
// instant. The other connection closed in that instant (radpeer closes a
// recycled connection when its link fails over and hands its requests
// on: the close reaches the wire after the lock, and the hand-over's
// write may come first) excuses it; open, or closed only in a later
// instant, it is a violation, full (recycled) or not, written on lately
// or not (a recycled connection sends no Status-Server).
func TestSSimWireCheck(t *testing.T) {
	const url = "radius+tcp://s0:1812"
	for _, tc := range []struct {
		name       string
		pending    int           // requests pending on y at the write on sc
		idle       time.Duration // since y's last write
		closeAfter time.Duration // when y closes after the write; < 0: never
		closeOther bool          // a third connection closes in the write's instant instead
		violations int
	}{
		{"closed in the write's instant", 240, time.Second, 0, false, 0},
		{"another closed in the write's instant", 240, time.Second, -1, true, 1},
		{"open", 240, time.Second, -1, false, 1},
		{"closed only in a later instant", 240, time.Second, time.Millisecond, false, 1},
		{"full and open", 255, time.Second, -1, false, 1},
		{"idle and open", 255, 30 * time.Second, -1, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newSSimNet(func(string, ...any) {})
				n.oneClient = true
				n.mu.Lock()
				y := n.addLocked(ssimStubConn{}, url, url+"#1")
				sc := n.addLocked(ssimStubConn{}, url, url+"#2")
				z := n.addLocked(ssimStubConn{}, url, url+"#3")
				n.mu.Unlock()
				for i := 1; i <= tc.pending; i++ {
					y.WriteMessages(ssimAccessRequest(byte(i), fmt.Sprintf("u%d", i)))
				}
				// y carries them, its watchdog OKAY: no Status-Server
				// unanswered.
				time.Sleep(tc.idle)
				sc.WriteMessages(ssimAccessRequest(1, "u7"))
				if tc.closeAfter >= 0 {
					time.Sleep(tc.closeAfter)
					y.Close()
				}
				if tc.closeOther {
					z.Close()
				}
				if v := n.violations(); len(v) != tc.violations {
					t.Errorf("violations %q, want %d", v, tc.violations)
				}
			})
		})
	}
}
