package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/status"
)

// A --weight naming a peer a reload's file no longer has is ignored with
// a warning line: started with --weight a=4, a reload removing a used to
// be refused ("a is neither a --peer nor the name of a --config peer"),
// and so was every reload after it until a restart.
func TestClientReloadIgnoresWeightOfRemovedPeer(t *testing.T) {
	a := "[[peer]]\nname = \"a\"\nurl = \"tcp://127.0.0.1:1\"\n"
	b := "[[peer]]\nname = \"b\"\nurl = \"tcp://127.0.0.1:2\"\n"
	file := writeConfig(t, clientReloadBase+a+b)
	var o clientOptions
	fs := clientFlags(&o, io.Discard)
	require.NoError(t, fs.Parse([]string{"--config", file, "--weight", "a=4"}))
	base, set := o, setFlags(fs)
	cfg, err := config.Load(file)
	require.NoError(t, err)
	_, err = o.applyConfig(cfg, set)
	require.NoError(t, err)
	require.NoError(t, o.validate())
	r := &diameterRequests{o: &o}

	writeTestFile(t, file, clientReloadBase+b)
	var logs bytes.Buffer
	hup := make(chan os.Signal)
	stop := watchReload(hup, slog.New(slog.NewTextHandler(&logs, nil)), file, false, status.NewMetrics(), func(cfg *config.Config) ([]string, error) {
		specs, restart, warnings, err := r.reloadSpecs(cfg, base, set)
		if err != nil {
			return nil, err
		}
		require.Len(t, specs, 1)
		assert.LessOrEqual(t, specs[0].Weight, 1, "b keeps the default weight")
		return append(restart, warnings...), nil
	})
	hup <- syscall.SIGHUP
	stop()
	out := logs.String()
	assert.Contains(t, out, `level=WARN msg="configuration reload: --weight \"a=4\" ignored: a is neither a --peer nor the name of a peer of the file"`)
	assert.Contains(t, out, `level=INFO msg="configuration reloaded"`)
	assert.NotContains(t, out, "refused")

	// The peer back: the weight applies again.
	writeTestFile(t, file, clientReloadBase+a+b)
	cfg, err = config.Load(file)
	require.NoError(t, err)
	specs, _, warnings, err := r.reloadSpecs(cfg, base, set)
	require.NoError(t, err)
	assert.Empty(t, warnings)
	assert.Equal(t, 4, specs[0].Weight)
}
