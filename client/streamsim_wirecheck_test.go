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
// instant. The other connection found full in that instant (radpeer may
// have recycled it: the requests it gave its last Identifiers before the
// recycle reach the wire after the replacement's write, as at seed
// 37506) excuses it; not full, or full only in a later instant, it is a
// violation; full before the write, there is none to judge.
func TestSSimWireCheck(t *testing.T) {
	const url = "radius+tcp://s0:1812"
	for _, tc := range []struct {
		name       string
		before     int           // requests pending on y at the write on sc
		after      int           // requests written on y after it, at once
		afterDelay time.Duration // when
		violations int
	}{
		{"full in the write's instant", 240, 15, 0, 0},
		{"full before the write", 250, 0, 0, 0},
		{"never full", 240, 9, 0, 1},
		{"full only in a later instant", 240, 15, time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newSSimNet(func(string, ...any) {})
				n.oneClient = true
				n.mu.Lock()
				y := n.addLocked(ssimStubConn{}, url, url+"#1")
				sc := n.addLocked(ssimStubConn{}, url, url+"#2")
				n.mu.Unlock()
				for i := 1; i <= tc.before; i++ {
					y.WriteMessages(ssimAccessRequest(byte(i), fmt.Sprintf("u%d", i)))
				}
				// y carries them, its watchdog OKAY: no Status-Server
				// unanswered for a second.
				time.Sleep(time.Second)
				sc.WriteMessages(ssimAccessRequest(1, "u7"))
				time.Sleep(tc.afterDelay)
				var late [][]byte
				for i := tc.before + 1; i <= tc.before+tc.after; i++ {
					late = append(late, ssimAccessRequest(byte(i), fmt.Sprintf("u%d", i)))
				}
				y.WriteMessages(late...)
				if v := n.violations(); len(v) != tc.violations {
					t.Errorf("violations %q, want %d", v, tc.violations)
				}
			})
		})
	}
}
