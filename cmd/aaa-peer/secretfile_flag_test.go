package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
)

// radiusStart prepares the RADIUS client's options from args as
// runRadiusClient does, up to its client.Config.
func radiusStart(t *testing.T, args ...string) (*radiusClientOptions, client.Config) {
	t.Helper()
	o := &radiusClientOptions{}
	fs := radiusClientFlags(o, io.Discard)
	require.NoError(t, fs.Parse(args))
	base, set := *o, setFlags(fs)
	o.base, o.set = &base, set
	cfg, err := config.Load(o.config)
	require.NoError(t, err)
	o.secrets, err = o.applyConfig(cfg, set)
	require.NoError(t, err)
	require.NoError(t, o.validate())
	o.secret, err = o.sharedSecret()
	require.NoError(t, err)
	ccfg, err := o.clientConfig(o.secret, client.NewBus(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	return o, ccfg
}

// signedWith is the secret the client signs for server i with.
func signedWith(ccfg client.Config, i int) string {
	if s := ccfg.Peers[i].Secret; s != nil {
		return string(s)
	}
	return string(ccfg.RADIUS.Secret)
}

// "A flag given on the command line overrides the file": --secret-file is
// every server's secret, whether a server takes the file's top-level
// secret or sets its own (as --tw is every peer's watchdog interval,
// their own included); without the flag, the file's secrets apply. The
// file's top-level secret-file used to win over the flag, silently.
func TestRadiusClientSecretFileFlagOverridesFile(t *testing.T) {
	dir := t.TempDir()
	oldS, ownS, newS := filepath.Join(dir, "old.secret"), filepath.Join(dir, "own.secret"), filepath.Join(dir, "new.secret")
	writeTestFile(t, oldS, "0ld-secret\n")
	writeTestFile(t, ownS, "own-secret\n")
	writeTestFile(t, newS, "n3w-secret\n")
	file := writeConfig(t, "secret-file = \""+oldS+"\"\n"+
		"[[peer]]\nurl = \"radius://127.0.0.1:18121\"\n"+
		"[[peer]]\nurl = \"radius://127.0.0.1:18122\"\nsecret-file = \""+ownS+"\"\n")

	_, ccfg := radiusStart(t, "--config", file)
	assert.Equal(t, "0ld-secret", signedWith(ccfg, 0), "without the flag: the file's top-level secret")
	assert.Equal(t, "own-secret", signedWith(ccfg, 1), "without the flag: the server's own secret")

	o, ccfg := radiusStart(t, "--config", file, "--secret-file", newS)
	for i := range ccfg.Peers {
		assert.Equal(t, "n3w-secret", signedWith(ccfg, i), "--secret-file given: server %s", ccfg.Peers[i].URL)
	}
	cfg, err := config.Load(file)
	require.NoError(t, err)
	assert.Contains(t, clientUnused(cfg, o.peers, o.set), "secret, secret-file (--secret-file is every server's secret, their own included)")
}
