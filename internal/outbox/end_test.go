package outbox

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failConn is a transport whose every write fails.
type failConn struct{ tries atomic.Int32 }

var errBroken = errors.New("broken pipe")

func (f *failConn) TryWrite([]byte) (int, error)  { f.tries.Add(1); return 0, errBroken }
func (f *failConn) WriteMessages(...[]byte) error { f.tries.Add(1); return errBroken }
func (f *failConn) ReadMessage() ([]byte, error)  { select {} }
func (f *failConn) Close() error                  { return nil }
func (f *failConn) LocalAddr() net.Addr           { return nil }
func (f *failConn) RemoteAddr() net.Addr          { return nil }
func (f *failConn) Network() string               { return "fail" }

// A failed write ends the connection once, however many messages are
// posted after it and whether the caller or a writer wrote: the owner's
// onEnd is told once, and nothing more is tried on the broken
// connection.
func TestOnEndOnceAfterAFailedWrite(t *testing.T) {
	for _, alone := range []bool{true, false} {
		f := &failConn{}
		var o Outbox
		var mu sync.Mutex
		var ends []error
		o.Init(f, nil, func(err error) { mu.Lock(); ends = append(ends, err); mu.Unlock() })
		for range 3 {
			o.Post([]byte("req"), alone, false, nil)
			time.Sleep(5 * time.Millisecond) // let a writer finish
		}
		o.Send([]byte("more"))
		o.Kick()
		o.CloseAfterFlush()
		time.Sleep(5 * time.Millisecond)
		o.Close(true)
		mu.Lock()
		assert.Equal(t, []error{errBroken}, ends, "alone=%v: onEnd calls", alone)
		mu.Unlock()
		require.EqualValues(t, 1, f.tries.Load(), "alone=%v: writes tried on a broken connection", alone)
	}
}
