package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/status"
)

const (
	unitFile = "../../deploy/aaa-peer-server.service"
	envFile  = "../../deploy/aaa-peer-server.env"
	unitBin  = "/usr/local/bin/aaa-peer" // the ExecStart path in the unit
)

// unitSettings returns the unit file's Key=Value settings by section
// ("Service.Restart"), every value of a repeated key.
func unitSettings(t *testing.T, text string) map[string][]string {
	t.Helper()
	kv := map[string][]string{}
	section := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("unit line %q is not Key=Value", line)
			}
			kv[section+"."+k] = append(kv[section+"."+k], v)
		}
	}
	return kv
}

// TestSystemdUnit: deploy/aaa-peer-server.service runs "aaa-peer server"
// with its flags from the EnvironmentFile, stops it with SIGTERM and
// leaves it time for its DPRs and report, restarts it on failure but not
// on a usage error, as an unprivileged hardened user with a high file
// limit.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	kv := unitSettings(t, string(b))
	for key, want := range map[string]string{
		"Service.Type":                     "exec",
		"Service.ExecStart":                unitBin + " server $AAA_PEER_SERVER_FLAGS",
		"Service.EnvironmentFile":          "/etc/aaa-peer/server.env",
		"Service.Restart":                  "on-failure",
		"Service.RestartPreventExitStatus": "2",
		"Service.KillSignal":               "SIGTERM",
		"Service.ExecReload":               "/bin/kill -HUP $MAINPID",
		"Service.DynamicUser":              "yes",
		"Service.NoNewPrivileges":          "yes",
		"Service.ProtectSystem":            "strict",
		"Service.ProtectHome":              "yes",
		"Service.PrivateTmp":               "yes",
		"Service.PrivateDevices":           "yes",
		"Service.CapabilityBoundingSet":    "", // 3868 and the RADIUS ports are above 1023:
		"Service.AmbientCapabilities":      "", // no CAP_NET_BIND_SERVICE needed
		"Service.StateDirectory":           "aaa-peer",
		"Install.WantedBy":                 "multi-user.target",
	} {
		if got := kv[key]; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	// Longer than the DPR wait plus the status page's shutdown, not much.
	stop, err := time.ParseDuration(strings.Join(kv["Service.TimeoutStopSec"], ""))
	if min := shutdownBudget + status.ShutdownTimeout; err != nil || stop <= min || stop > 30*time.Second {
		t.Errorf("TimeoutStopSec = %q, want more than %v and at most 30s", kv["Service.TimeoutStopSec"], min)
	}
	if n := strings.Join(kv["Service.LimitNOFILE"], ""); len(n) < 5 {
		t.Errorf("LimitNOFILE = %q, want a high limit (65536 or more)", n)
	}
}

// TestSystemdEnvFileFlags: the example EnvironmentFile's flags are ones
// "aaa-peer server" accepts, as systemd would pass them.
func TestSystemdEnvFileFlags(t *testing.T) {
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	var value string
	for _, line := range strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
		if v, ok := strings.CutPrefix(line, "AAA_PEER_SERVER_FLAGS="); ok {
			value = v
		}
	}
	if value == "" {
		t.Fatalf("%s sets no AAA_PEER_SERVER_FLAGS", envFile)
	}
	if strings.ContainsAny(value, `"'`) {
		t.Errorf("AAA_PEER_SERVER_FLAGS has quotes, which systemd passes on as they are: %s", value)
	}
	args := strings.Fields(value) // systemd splits $VAR (unbraced) on whitespace
	var o serverOptions
	if err := serverFlags(&o, io.Discard).Parse(args); err != nil {
		t.Fatalf("aaa-peer server %s: %v", value, err)
	}
	if err := o.validate(); err != nil {
		t.Errorf("aaa-peer server %s: %v", value, err)
	}
}

// TestSystemdAnalyzeVerify: systemd-analyze verify accepts the unit, with
// no warning about it, once its ExecStart binary exists (it checks that):
// a copy runs a freshly built aaa-peer.
func TestSystemdAnalyzeVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze not found (package systemd): under CI=true the unit must be verified")
		}
		t.Skip("systemd-analyze not found (package systemd): the unit is not verified")
	}
	if testing.Short() {
		t.Skip("builds aaa-peer")
	}
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "ExecStart="+unitBin+" ") {
		t.Fatalf("the unit's ExecStart does not run %s", unitBin)
	}
	bin := buildAaaPeer(t)
	unit := filepath.Join(t.TempDir(), filepath.Base(unitFile))
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(b), "ExecStart="+unitBin+" ", "ExecStart="+bin+" ")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", "--man=no", unit).CombinedOutput()
	// Warnings about the unit do not change the exit code: any line
	// naming it fails the test; lines about the machine's other units
	// (which verify loads too) do not.
	var about []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, filepath.Base(unitFile)) {
			about = append(about, line)
		}
	}
	if err != nil || len(about) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
}
