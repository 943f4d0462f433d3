package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/status"
)

// When every server moves from one secret file to another, the reload
// replaces them with the new secret and says nothing of a restart: the
// servers' secret is theirs, and the shared --secret-file of the start
// signs for none of them. It used to name secret-file among what "needs a
// restart, not applied" in the same line that replaced the servers.
func TestRadiusClientReloadSecretFileMoveApplied(t *testing.T) {
	dir := t.TempDir()
	sa, sb := filepath.Join(dir, "a.secret"), filepath.Join(dir, "b.secret")
	require.NoError(t, os.WriteFile(sa, []byte("secret-a\n"), 0o600))
	require.NoError(t, os.WriteFile(sb, []byte("secret-b\n"), 0o600))
	servers := func(sf string, perPeer bool) string {
		s := ""
		if !perPeer {
			s = "secret-file = \"" + sf + "\"\n"
		}
		for _, u := range []string{"radius://127.0.0.1:18121", "radius://127.0.0.1:18122"} {
			s += "[[peer]]\nurl = \"" + u + "\"\n"
			if perPeer {
				s += "secret-file = \"" + sf + "\"\n"
			}
		}
		return s
	}
	for _, perPeer := range []bool{false, true} {
		file := writeConfig(t, servers(sa, perPeer))
		var o radiusClientOptions
		fs := radiusClientFlags(&o, io.Discard)
		require.NoError(t, fs.Parse([]string{"--config", file}))
		base, set := o, setFlags(fs)
		o.base, o.set = &base, set
		cfg, err := config.Load(file)
		require.NoError(t, err)
		o.secrets, err = o.applyConfig(cfg, set)
		require.NoError(t, err)
		require.NoError(t, o.validate())
		ccfg, err := o.clientConfig(nil, client.NewBus(), slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		c, err := client.New(ccfg)
		require.NoError(t, err)

		writeTestFile(t, file, servers(sb, perPeer))
		cfg, err = config.Load(file)
		require.NoError(t, err)
		lines, err := o.reloadPeers(cfg, c, status.NewMetrics())
		require.NoError(t, err)
		got := strings.Join(lines, "; ")
		assert.Contains(t, got, "replaced: radius://127.0.0.1:18121, radius://127.0.0.1:18122", "per peer %v", perPeer)
		assert.NotContains(t, got, "needs a restart", "per peer %v", perPeer)
		c.Close(context.Background())
	}
}
