package peer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/transport"
)

// zeroTryConn is a client connection that can write without waiting,
// whose TryWrite, once armed, takes nothing (a full send buffer: EAGAIN)
// and runs during hook the instant before it returns.
type zeroTryConn struct {
	transport.Conn
	armed atomic.Bool
	hook  func()
}

func (z *zeroTryConn) TryWrite(msg []byte) (int, error) {
	if z.armed.CompareAndSwap(true, false) {
		z.hook()
		return 0, nil // nothing reached the wire
	}
	return 0, nil
}

// A request handed over while its inline write is under way may be on
// the wire: it stays sent there (the call is lost, its replay has the T
// flag). Should the socket take none of it, it is not queued for the
// writer afterwards: the peer it left never reads it after its copy went
// elsewhere.
func TestHandedOverDuringAnInlineWriteThatTookNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		var zc *zeroTryConn
		var mu sync.Mutex
		var moved []*call.Call
		handed := make(chan struct{})
		var once sync.Once
		cfg := clientConfig("client.example.net")
		inner := f.dialer()
		cfg.Dialer = func(ctx context.Context, url string) (transport.Conn, error) {
			c, err := inner(ctx, url)
			if err != nil {
				return nil, err
			}
			zc = &zeroTryConn{Conn: c}
			return zc, nil
		}
		cfg.Failover = func(_ call.Carrier, calls []*call.Call, _ string) {
			mu.Lock()
			moved = append(moved, calls...)
			mu.Unlock()
			once.Do(func() { close(handed) })
		}
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()
		f.answerReqs.Store(false)
		zc.hook = func() {
			go p.HandOver("out of service: test", nil, nil)
			<-handed
		}
		zc.armed.Store(true)
		cl, err := newCall(acr(), false)
		require.NoError(t, err)
		require.NoError(t, p.submit(cl))
		synctest.Wait()
		mu.Lock()
		require.Len(t, moved, 1)
		mu.Unlock()
		assert.Equal(t, 1, cl.Sends(), "taken for lost (it may have been on the wire)")
		assert.Empty(t, f.requests(), "the peer it left read it after it was handed over")
		cl.Fail(ErrClosed)
	})
}
