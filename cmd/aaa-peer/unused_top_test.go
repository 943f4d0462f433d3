package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/config"
)

// A top-level tw in a file whose servers are all radius:// (UDP: no
// watchdog), and TLS files with no peer using TLS, are named among the
// parts of the file the client does not use, as --tw is refused for
// radius:// on the command line: they were loaded and silently ignored.
func TestClientsNameUnusedTwAndTLS(t *testing.T) {
	file := writeConfig(t, "tw = \"10s\"\ntls-ca = \"/dev/null\"\nsecret = \"s\"\n[[peer]]\nurl = \"radius://10.0.0.1:1812\"\n")
	cfg, err := config.Load(file)
	require.NoError(t, err)
	var r radiusClientOptions
	fs := radiusClientFlags(&r, io.Discard)
	require.NoError(t, fs.Parse([]string{"--config", file}))
	_, err = r.applyConfig(cfg, setFlags(fs))
	require.NoError(t, err)
	assert.Equal(t, []string{"tw (radius:// servers have no watchdog)", "tls-ca (no tls:// or radsec:// peer)"}, clientUnused(cfg, r.peers, setFlags(fs)))

	// radius+tcp:// servers have a watchdog: tw is theirs.
	file = writeConfig(t, "tw = \"10s\"\nsecret = \"s\"\n[[peer]]\nurl = \"radius+tcp://10.0.0.1:1812\"\n")
	cfg, err = config.Load(file)
	require.NoError(t, err)
	assert.Empty(t, clientUnused(cfg, []string{"radius+tcp://10.0.0.1:1812"}, nil))

	// The Diameter client names its TLS files with no tls:// peer.
	file = writeConfig(t, clientReloadBase+"tls-ca = \"/dev/null\"\ntls-cert = \"/dev/null\"\ntls-key = \"/dev/null\"\n[[peer]]\nurl = \"tcp://10.0.0.1:3868\"\n")
	cfg, err = config.Load(file)
	require.NoError(t, err)
	var d clientOptions
	fs = clientFlags(&d, io.Discard)
	require.NoError(t, fs.Parse([]string{"--config", file}))
	unused, err := d.applyConfig(cfg, setFlags(fs))
	require.NoError(t, err)
	assert.Equal(t, []string{"tls-ca, tls-cert, tls-key (no tls:// or radsec:// peer)"}, unused)
}
