package watchdog

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Scenario files in testdata/ are event scripts an operator can read:
//
//	EVENT => STATE [ACTION ...]   step the machine, expect the state and exactly these actions
//	check pending=BOOL numdwa=N   expect the machine's variables
//	start => STATE [ACTION ...]   call Start instead of Step
//
// Events: connection-up, connection-down, timer, dwa, dwr, other. Actions
// are named as the RFC names them (SetWatchdog, SendWatchdog, Failover...).
var scriptEvents = map[string]Event{
	"connection-up": ConnectionUp, "connection-down": ConnectionDown, "timer": TimerExpired,
	"dwa": ReceiveDWA, "dwr": ReceiveDWR, "other": ReceiveOther,
}

func TestScenarioFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScript(t, f) })
	}
}

func runScript(t *testing.T, path string) {
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	m, err := New(Config{Twinit: twinit, Rand: noJitter})
	require.NoError(t, err)
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := path + ":" + strconv.Itoa(n) + ": " + line
		if rest, ok := strings.CutPrefix(line, "check "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "pending":
					require.Equal(t, v == "true", m.Pending(), where)
				case "numdwa":
					want, err := strconv.Atoi(v)
					require.NoError(t, err, where)
					require.Equal(t, want, m.NumDWA(), where)
				default:
					t.Fatalf("%s: unknown check %q", where, k)
				}
			}
			continue
		}
		lhs, rhs, ok := strings.Cut(line, "=>")
		require.True(t, ok, "%s: want EVENT => STATE ACTIONS", where)
		name := strings.TrimSpace(lhs)
		var o Output
		if name == "start" {
			o = m.Start()
		} else {
			ev, ok := scriptEvents[name]
			require.True(t, ok, "%s: unknown event %q", where, name)
			o = m.Step(ev)
		}
		want := strings.Fields(rhs)
		require.NotEmpty(t, want, where)
		require.Equal(t, want[0], o.State.String(), where)
		var got []string
		for _, a := range o.Actions() {
			got = append(got, a.Kind.String())
		}
		require.Equal(t, want[1:], append([]string{}, got...), where)
	}
	require.NoError(t, sc.Err())
}
