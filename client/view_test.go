package client

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aaatp/aaatp/call"
	"github.com/aaatp/aaatp/watchdog"
	"github.com/stretchr/testify/require"
)

// The balancer's table a pick reads is the one taken with the view: it
// picks only among the members the view has in service, before and after
// one of them leaves service.
func TestViewCarriesTheBalancersTable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := network{"tcp://a:1": newFakeServer("a.example.net"), "tcp://b:1": newFakeServer("b.example.net"), "tcp://c:1": newFakeServer("c.example.net")}
		defer n.close()
		c, err := New(clientConfig(n, Balance, "tcp://a:1", "tcp://b:1", "tcp://c:1"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		waitOkay(t, c)
		check := func(wantOpen int) map[string]int {
			t.Helper()
			v := c.view()
			require.Equal(t, wantOpen, v.nopen)
			got := map[string]int{}
			for i := range 300 {
				s, err := v.pick.Pick(balanceKeys(call.Key{NAI: []byte(fmt.Sprintf("user%d@example.net", i))}))
				require.NoError(t, err)
				require.True(t, v.open[s.Index], "picked %s, not in service in the view", s.Name)
				got[s.Name]++
			}
			return got
		}
		require.Len(t, check(3), 3, "every member in service gets some")
		n["tcp://b:1"].freeze()
		time.Sleep(2*30*time.Second + time.Second) // SUSPECT at 2 Tw
		synctest.Wait()
		require.Equal(t, watchdog.Suspect, c.Peers()[1].State())
		require.Len(t, check(2), 2)
		n["tcp://b:1"].unfreeze()
	})
}
