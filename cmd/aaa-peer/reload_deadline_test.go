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
// timeout among what needs a restart, and warns that the deadline is
// shorter than that peer's failover detection (64s). With --timeout
// given, the warning alone. It used to say nothing: the new peer's
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
		if assert.Len(t, warnings, 1) {
			assert.Contains(t, warnings[0], warnPrefix+"the request deadline 26s is shorter than failover detection 1m4s of the longest tw (30s)")
		}
	})
	t.Run("given", func(t *testing.T) {
		restart, warnings := reload(t, "--timeout", "40s")
		assert.Empty(t, restart)
		if assert.Len(t, warnings, 1) {
			assert.Contains(t, warnings[0], warnPrefix+"the request deadline 40s is shorter than failover detection 1m4s of the longest tw (30s)")
		}
		restart, warnings = reload(t, "--timeout", "90s")
		assert.Empty(t, restart)
		assert.Empty(t, warnings, "a deadline longer than detection")
	})
}
