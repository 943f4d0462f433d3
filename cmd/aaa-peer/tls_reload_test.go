package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/internal/testhelp"
	"github.com/aaatp/aaatp/status"
)

// copyFile copies the file from to to.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	writeTestFile(t, to, string(b))
}

// The server's TLS files renewed in place (the same names, as certbot or
// cert-manager do) are named at SIGHUP among what needs a restart: the
// listeners keep the certificate they loaded at start. It used to compare
// the files' names alone and log "changed=nothing".
func TestReloadNamesTLSFilesChangedInPlace(t *testing.T) {
	pki, renewed := testhelp.NewPKI(t), testhelp.NewPKI(t)
	dir := t.TempDir()
	cert, key, ca := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem")
	copyFile(t, pki.ServerCert, cert)
	copyFile(t, pki.ServerKey, key)
	copyFile(t, pki.CAFile, ca)
	conf := reloadBase + `listen = ["tls://127.0.0.1:0"]` + "\ntls-cert = \"" + cert + "\"\ntls-key = \"" + key + "\"\ntls-client-ca = \"" + ca + "\"\n"
	rs := startReloadServer(t, conf)
	const restart = "needs a restart, not applied: tls-cert, tls-key, tls-client-ca (the files' content)"

	if line := rs.reload(t, conf); !strings.Contains(line, "changed=nothing") {
		t.Errorf("files unchanged: %q", line)
	}
	copyFile(t, renewed.ServerCert, cert) // renewed: a new certificate and key at the same paths
	copyFile(t, renewed.ServerKey, key)
	if line := rs.reload(t, conf); !strings.Contains(line, restart) {
		t.Errorf("certificate renewed in place: %q; want %q", line, restart)
	}
	copyFile(t, pki.ServerCert, cert) // back to the running pair...
	copyFile(t, pki.ServerKey, key)
	if line := rs.reload(t, conf); !strings.Contains(line, "changed=nothing") {
		t.Errorf("the running files back: %q", line)
	}
	copyFile(t, renewed.CAFile, ca) // ...but another client CA
	if line := rs.reload(t, conf); !strings.Contains(line, restart) {
		t.Errorf("client CA changed in place: %q; want %q", line, restart)
	}
	if c := rs.stop(t); c != 0 {
		t.Fatalf("server exit %d", c)
	}
}

// Both clients name their top-level TLS files changed in place among what
// needs a restart, as they name files renamed; unchanged, nothing.
func TestClientReloadNamesTLSFilesChangedInPlace(t *testing.T) {
	pki, renewed := testhelp.NewPKI(t), testhelp.NewPKI(t)
	dir := t.TempDir()
	ca, cert, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	files := "tls-ca = \"" + ca + "\"\ntls-cert = \"" + cert + "\"\ntls-key = \"" + key + "\"\n"
	reset := func() {
		copyFile(t, pki.CAFile, ca)
		copyFile(t, pki.ClientCert, cert)
		copyFile(t, pki.ClientKey, key)
	}
	const restart = "tls-ca, tls-cert, tls-key"

	t.Run("diameter", func(t *testing.T) {
		reset()
		file := writeConfig(t, clientReloadBase+files+"[[peer]]\nname = \"a\"\nurl = \"tls://127.0.0.1:1\"\n")
		var o clientOptions
		fs := clientFlags(&o, io.Discard)
		require.NoError(t, fs.Parse([]string{"--config", file}))
		base, set := o, setFlags(fs)
		cfg, err := config.Load(file)
		require.NoError(t, err)
		_, err = o.applyConfig(cfg, set)
		require.NoError(t, err)
		require.NoError(t, o.validate())
		_, err = o.tlsConfig()
		require.NoError(t, err)
		r := &diameterRequests{o: &o}
		restarts := func() []string {
			t.Helper()
			cfg, err := config.Load(file)
			require.NoError(t, err)
			_, restart, _, err := r.reloadSpecs(cfg, base, set)
			require.NoError(t, err)
			return restart
		}
		assert.Empty(t, restarts(), "files unchanged")
		copyFile(t, renewed.ClientCert, cert)
		copyFile(t, renewed.ClientKey, key)
		assert.Equal(t, []string{restart}, restarts(), "certificate renewed in place")
		reset()
		assert.Empty(t, restarts(), "the running files back")
		copyFile(t, renewed.CAFile, ca)
		assert.Equal(t, []string{restart}, restarts(), "CA changed in place")
	})

	t.Run("radius", func(t *testing.T) {
		reset()
		file := writeConfig(t, files+"[[peer]]\nname = \"a\"\nurl = \"radsec://127.0.0.1:1\"\n")
		o, ccfg := radiusStart(t, "--config", file)
		c, err := client.New(ccfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		reload := func() string {
			t.Helper()
			cfg, err := config.Load(file)
			require.NoError(t, err)
			lines, err := o.reloadPeers(cfg, c, status.NewMetrics())
			require.NoError(t, err)
			return strings.Join(lines, "; ")
		}
		assert.Empty(t, reload(), "files unchanged")
		copyFile(t, renewed.ClientCert, cert)
		copyFile(t, renewed.ClientKey, key)
		assert.Equal(t, "needs a restart, not applied: "+restart, reload(), "certificate renewed in place")
		reset()
		assert.Empty(t, reload(), "the running files back")
		copyFile(t, renewed.CAFile, ca)
		assert.Equal(t, "needs a restart, not applied: "+restart, reload(), "CA changed in place")
	})
}
