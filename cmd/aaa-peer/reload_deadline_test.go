package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/config"
)

// The Diameter client's request deadline is fixed at start. Derived (no
// --timeout) from the longest tw, 2 x (6s + 2s) + 10s = 26s here, it
// would be 74s with a peer of tw 30s: a reload adding one names the
// timeout among what needs a restart (client.SetPeers then warns that
// the deadline is shorter than that peer's failover detection, 64s:
// client.TestShortDeadlineWarnedAtSetPeers). With --timeout given,
// nothing needs a restart. It used to say nothing: the new peer's
// requests timed out before failover could replay them.
func TestClientReloadDeadlineOfALongerTw(t *testing.T) {
	one := clientReloadBase + "tw = \"6s\"\n" + peerTable("a", "tcp://127.0.0.1:1", 1)
	two := one + peerTable("b", "tcp://127.0.0.1:2", 1) + "tw = \"30s\"\n"
	reload := func(t *testing.T, args ...string) (restart, warnings []string) {
		t.Helper()
		file := writeConfig(t, one)
		var o clientOptions
		fs := clientFlags(&o, io.Discard)
		require.NoError(t, fs.Parse(append([]string{"--config", file}, args...)))
		base, set := o, setFlags(fs)
		cfg, err := config.Load(file)
		require.NoError(t, err)
		_, err = o.applyConfig(cfg, set)
		require.NoError(t, err)
		require.NoError(t, o.validate())
		r := &diameterRequests{o: &o}

		_, restart, warnings, err = r.reloadSpecs(cfg, base, set)
		require.NoError(t, err)
		assert.Empty(t, restart, "the same file")
		assert.Empty(t, warnings, "the same file")
		writeTestFile(t, file, two)
		cfg, err = config.Load(file)
		require.NoError(t, err)
		_, restart, warnings, err = r.reloadSpecs(cfg, base, set)
		require.NoError(t, err)
		return restart, warnings
	}

	t.Run("derived", func(t *testing.T) {
		restart, warnings := reload(t)
		assert.Equal(t, []string{"timeout (its default for the longest tw, 30s, is 1m14s; running 26s)"}, restart)
		assert.Empty(t, warnings)
	})
	t.Run("given", func(t *testing.T) {
		for _, timeout := range []string{"40s", "90s"} {
			restart, warnings := reload(t, "--timeout", timeout)
			assert.Empty(t, restart, "--timeout %s", timeout)
			assert.Empty(t, warnings, "--timeout %s", timeout)
		}
	})
}
