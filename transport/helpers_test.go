package transport

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aaatp/aaatp/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testMsg builds a valid Diameter message of total length n (a multiple of
// 4, >= 20) with the given command code and hop-by-hop id; the body is
// filler the transport does not look at.
func testMsg(n int, cmd uint32, hbh uint32) []byte {
	b := make([]byte, n)
	b[0] = 1
	b[1], b[2], b[3] = byte(n>>16), byte(n>>8), byte(n)
	b[4] = wire.FlagRequest
	b[5], b[6], b[7] = byte(cmd>>16), byte(cmd>>8), byte(cmd)
	binary.BigEndian.PutUint32(b[12:], hbh)
	binary.BigEndian.PutUint32(b[16:], ^hbh)
	for i := wire.HeaderLen; i < n; i++ {
		b[i] = byte(i + int(hbh))
	}
	return b
}

// testCtx bounds a real-socket test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// streamOf returns the streamConn of a TCP, TLS or pipe Conn.
func streamOf(c Conn) *streamConn {
	if t, ok := c.(*tcpConn); ok {
		return t.streamConn
	}
	return c.(*streamConn)
}
