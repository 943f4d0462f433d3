package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/status"
	"github.com/aaatp/aaatp/transport"
)

// ownFile is a Diameter client's file: the top level's tw, CA and
// max-outstanding, a with its own, b with the top level's.
func ownFile(tw, ca string, out string, ownCA string) string {
	return clientReloadBase + "tw = \"" + tw + "\"\ntls-ca = \"" + ca + "\"\nmax-outstanding = " + out + "\n" +
		"[[peer]]\nname = \"a\"\nurl = \"tls://127.0.0.1:1\"\ntw = \"10s\"\nmax-outstanding = 128\ntls-ca = \"" + ownCA + "\"\n" +
		"[[peer]]\nname = \"b\"\nurl = \"tls://127.0.0.1:2\"\n"
}

// A reload that moves the top level to what a peer sets for itself keeps
// the peer's own settings, and the peers that take the top level's keep
// the running ones (the top level needs a restart): it used to compute a
// peer's own settings against the file's new top level, so a's own tw,
// max-outstanding and CA vanished from its spec, and a was replaced onto
// the running template: the log said "replaced: a" and a then ran with
// the old top level's 30s, 64 and CA.
func TestClientReloadKeepsOwnSettingsWhenTopMovesToThem(t *testing.T) {
	pki := testhelp.NewPKI(t)
	file := writeConfig(t, ownFile("30s", pki.OtherCAFile, "64", pki.CAFile))
	var o clientOptions
	fs := clientFlags(&o, io.Discard)
	require.NoError(t, fs.Parse([]string{"--config", file}))
	base, set := o, setFlags(fs)
	cfg, err := config.Load(file)
	require.NoError(t, err)
	_, err = o.applyConfig(cfg, set)
	require.NoError(t, err)
	require.NoError(t, o.validate())
	specs := mustSpecs(t, o)
	tc, err := o.tlsConfig()
	require.NoError(t, err)
	ccfg := o.clientConfig(slog.New(slog.DiscardHandler), transport.Options{TLS: tc}, client.NewBus())
	ccfg.Peers = specs
	c, err := client.New(ccfg)
	require.NoError(t, err)
	defer c.Close(context.Background())
	r := &diameterRequests{o: &o}

	writeTestFile(t, file, ownFile("10s", pki.CAFile, "128", pki.CAFile))
	cfg, err = config.Load(file)
	require.NoError(t, err)
	specs, restart, _, err := r.reloadSpecs(cfg, base, set)
	require.NoError(t, err)
	lines, err := applyPeers(c, specs, restart, status.NewMetrics())
	require.NoError(t, err)
	got := strings.Join(lines, "; ")
	assert.Equal(t, "needs a restart, not applied: tw, tls-ca, tls-cert, tls-key, max-outstanding", got)
	require.Len(t, specs, 2)
	a, b := specs[0], specs[1]
	assert.Equal(t, "10s", a.Tw.String(), "a's own tw")
	if assert.NotNil(t, a.Throttle, "a's own limits") {
		assert.Equal(t, 128, a.Throttle.Accounting.MaxOutstanding)
	}
	assert.NotNil(t, a.TLS, "a's own CA")
	assert.Zero(t, b.Tw, "b: the running top level's tw")
	assert.Nil(t, b.Throttle, "b: the running top level's limits")
	assert.Nil(t, b.TLS, "b: the running top level's CA")
}

// The RADIUS client's reload alike: a radius+tcp:// server's own tw and
// max-outstanding stay when the top level moves to them.
func TestRadiusClientReloadKeepsOwnSettingsWhenTopMovesToThem(t *testing.T) {
	sf := secretFile(t)
	servers := func(tw, out string) string {
		return "secret-file = \"" + sf + "\"\ntw = \"" + tw + "\"\nmax-outstanding = " + out + "\n" +
			"[[peer]]\nname = \"a\"\nurl = \"radius+tcp://127.0.0.1:1\"\ntw = \"10s\"\nmax-outstanding = 128\n" +
			"[[peer]]\nname = \"b\"\nurl = \"radius+tcp://127.0.0.1:2\"\n"
	}
	file := writeConfig(t, servers("30s", "64"))
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
	ccfg, err := o.clientConfig([]byte(testRadiusSecret), client.NewBus(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	c, err := client.New(ccfg)
	require.NoError(t, err)
	defer c.Close(context.Background())

	writeTestFile(t, file, servers("10s", "128"))
	cfg, err = config.Load(file)
	require.NoError(t, err)
	lines, err := o.reloadPeers(cfg, c, status.NewMetrics())
	require.NoError(t, err)
	assert.Equal(t, "needs a restart, not applied: tw, max-rate, max-rate-acct, max-outstanding", strings.Join(lines, "; "))
}
