package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/config"
)

// A Diameter client started without any limit has no throttle: a reload
// giving a peer limits of its own is refused with what to do, the peer
// and its line named. It used to be refused by the Client's words
// ("Throttle limits need Config.Throttle"), naming no file, no line and
// no restart.
func TestClientReloadLimitsWithoutThrottleNeedRestart(t *testing.T) {
	peers := "[[peer]]\nname = \"a\"\nurl = \"tcp://127.0.0.1:1\"\n"
	file := writeConfig(t, clientReloadBase+peers)
	var o clientOptions
	fs := clientFlags(&o, io.Discard)
	require.NoError(t, fs.Parse([]string{"--config", file}))
	base, set := o, setFlags(fs)
	cfg, err := config.Load(file)
	require.NoError(t, err)
	_, err = o.applyConfig(cfg, set)
	require.NoError(t, err)
	require.NoError(t, o.validate())
	require.False(t, o.throttled())
	r := &diameterRequests{o: &o}

	writeTestFile(t, file, clientReloadBase+peers+"max-rate = 10\n")
	cfg, err = config.Load(file)
	require.NoError(t, err)
	_, _, _, err = r.reloadSpecs(cfg, base, set)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "peer a ("+file+":4): throttle limits on a client started without any: needs a restart")

	// The top level's alone: named among those that need a restart.
	writeTestFile(t, file, "max-rate = 10\n"+clientReloadBase+peers)
	cfg, err = config.Load(file)
	require.NoError(t, err)
	_, restart, _, err := r.reloadSpecs(cfg, base, set)
	require.NoError(t, err)
	assert.Equal(t, []string{"max-rate"}, restart)
}
