package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aaatp/aaatp/client"
	"github.com/aaatp/aaatp/config"
	"github.com/aaatp/aaatp/status"
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

// At SIGHUP the RADIUS client reads --secret-file again, as the server
// does: a new content replaces every server with the new secret (the
// old drains); the same content changes nothing. It used to compare the
// flag's file by name, log "changed=nothing" and sign with the old
// secret until a restart.
func TestRadiusClientReloadRereadsSecretFileFlag(t *testing.T) {
	dir := t.TempDir()
	sf := filepath.Join(dir, "cli.secret")
	writeTestFile(t, sf, "0ld-secret\n")
	servers := "[[peer]]\nname = \"r1\"\nurl = \"radius://127.0.0.1:18121\"\n[[peer]]\nname = \"r2\"\nurl = \"radius://127.0.0.1:18122\"\n"
	file := writeConfig(t, servers)
	o, ccfg := radiusStart(t, "--config", file, "--secret-file", sf)
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

	assert.Empty(t, reload(), "nothing changed")
	writeTestFile(t, sf, "n3w-secret\n")
	assert.Equal(t, "replaced: r1, r2", reload(), "--secret-file rotated")
	assert.Empty(t, reload(), "rotated once: the servers have the new secret")
	writeTestFile(t, sf, "")
	cfg, err := config.Load(file)
	require.NoError(t, err)
	_, err = o.reloadPeers(cfg, c, status.NewMetrics())
	assert.ErrorContains(t, err, "RADIUS shared secret", "an empty --secret-file refuses the reload")
}

// End to end (review 34, appendix B): a RADIUS/UDP server and a client
// of --config with --secret-file rotate the secret as README says, the
// server first, the client second. The client's servers are replaced with
// the new secret and the requests after the rotation are answered; only
// those sent between the two reloads may be dropped (the UDP server
// verifies every datagram with its new secret at once). Without the
// re-read, the client logged "changed=nothing" and about 200 of 250
// requests failed.
func TestRadiusClientSecretFileFlagRotation(t *testing.T) {
	dir := t.TempDir()
	srvSecret, cliSecret := filepath.Join(dir, "srv.secret"), filepath.Join(dir, "cli.secret")
	writeTestFile(t, srvSecret, "0ld-secret\n")
	writeTestFile(t, cliSecret, "0ld-secret\n")
	srvConf := reloadBase + `listen = ["radius://127.0.0.1:0"]` + "\n"
	rs := startReloadServer(t, srvConf, "--secret-file", srvSecret)
	u := rs.listener(t, "radius://")

	cr := &clientReloader{config: filepath.Join(dir, "client.toml"), hup: make(chan os.Signal, 1), stderr: &syncBuffer{}}
	peerConf := "[[peer]]\nname = \"r1\"\nurl = \"" + u + "\"\n"
	writeTestFile(t, cr.config, peerConf)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan clientReport, 1)
	go func() {
		var stdout syncBuffer
		runClientWith(ctx, []string{"--config", cr.config, "--secret-file", cliSecret, "--app", "acct", "--rate", "50",
			"--duration", "5s", "--timeout", "300ms", "--retries", "1", "--request-timeout", "1s", "--max-failed", "1"},
			&stdout, cr.stderr, cr.hup)
		var rep clientReport
		_ = json.Unmarshal([]byte(stdout.String()), &rep)
		done <- rep
	}()
	time.Sleep(time.Second)
	writeTestFile(t, srvSecret, "n3w-secret\n")
	if line := rs.reload(t, srvConf); !strings.Contains(line, "RADIUS shared secret changed") {
		t.Errorf("server reload: %q", line)
	}
	writeTestFile(t, cliSecret, "n3w-secret\n")
	line := cr.reload(t, peerConf) // the same file; the flag's secret file rotated
	if !strings.Contains(line, `msg="configuration reloaded"`) || !strings.Contains(line, "replaced: r1") {
		t.Errorf("client reload: log line %q", line)
	}
	rep := <-done
	t.Logf("client report: sent %d answered %d failed %d failed_by %v", rep.Sent, rep.Answered, rep.Failed, rep.FailedBy)
	if rep.Sent < 200 || rep.Failed > rep.Sent/10 {
		t.Errorf("through the rotation: sent %d, answered %d, failed %d (want at most a tenth, those between the two reloads)\n%s",
			rep.Sent, rep.Answered, rep.Failed, cr.stderr)
	}
	rs.stop(t)
}
