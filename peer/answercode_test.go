package peer

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/message"
)

// An answer's Result-Code, read while the answer is checked, comes with
// it: the dispatcher classes the answer without reading it again.
func TestAnswerCarriesItsResultCode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("server.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()
		cl, err := newCall(acr(), false)
		require.NoError(t, err)
		require.NoError(t, p.submit(cl))
		r := cl.Await(context.Background(), time.Second)
		require.NoError(t, r.Err)
		assert.Equal(t, uint32(message.Success), r.Code)
	})
}
