package peer

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/watchdog"
)

// A client Peer configured for one identity (RemoteHost) that reaches a
// node answering as another does not go into service under that name:
// the open fails, its event names both identities, and it is retried as
// any failed open. Before, the Peer went OKAY named after the other node.
// The identities compare ignoring ASCII case.
func TestCEAFromAnotherIdentityThanRemoteHostFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("hss2.example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.RemoteHost = "hss1.example.net"
		cfg.Events = NewBus()
		rec, cancel := record(cfg.Events)
		defer cancel()
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		defer p.Close(context.Background())
		synctest.Wait()
		assert.NotEqual(t, watchdog.Okay, p.State())
		assert.NotEqual(t, "hss2.example.net", p.Name())
		assert.Empty(t, rec.ofKind(EventConnUp))
		failed := rec.ofKind(EventOpenFailed)
		require.Len(t, failed, 1)
		assert.True(t, strings.Contains(failed[0].Reason, "hss2.example.net") && strings.Contains(failed[0].Reason, "hss1.example.net"),
			"the event names both identities: %s", failed[0].Reason)
		time.Sleep(31 * time.Second)
		synctest.Wait()
		assert.Equal(t, 2, f.dials(), "retried at Tw")
		assert.Len(t, rec.ofKind(EventOpenFailed), 2)
	})
}

// RemoteHost and the CEA's Origin-Host that differ only in ASCII case are
// the same identity.
func TestCEAFromRemoteHostInOtherCaseAccepted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakePeer("HSS1.Example.net")
		defer f.close()
		cfg := clientConfig("client.example.net")
		cfg.Dialer = f.dialer()
		cfg.RemoteHost = "hss1.example.NET"
		p, err := Dial("tcp://x:1", cfg)
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, watchdog.Okay, p.State())
		require.NoError(t, p.Close(context.Background()))
	})
}
