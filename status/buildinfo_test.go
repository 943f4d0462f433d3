package status

import (
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// TestBuildInfoMetric: every node's registry exports aaatp_build_info = 1,
// a gauge labelled with the binary's version, revision and Go version.
func TestBuildInfoMetric(t *testing.T) {
	m := NewMetrics()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	version, revision, goVersion := BuildLabels()
	if goVersion != runtime.Version() || version == "" || revision == "" {
		t.Errorf("BuildLabels() = %q, %q, %q; want a version, a revision and %s", version, revision, goVersion, runtime.Version())
	}
	var found *dto.MetricFamily
	for _, f := range fams {
		if f.GetName() == MetricBuildInfo {
			found = f
		}
	}
	if found == nil {
		t.Fatalf("no %s in the registry", MetricBuildInfo)
	}
	if found.GetType() != dto.MetricType_GAUGE || len(found.Metric) != 1 {
		t.Fatalf("%s is not one gauge: %v", MetricBuildInfo, found)
	}
	got := map[string]string{}
	for _, l := range found.Metric[0].Label {
		got[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": version, "revision": revision, "goversion": goVersion}
	if len(got) != len(want) || got["version"] != version || got["revision"] != revision || got["goversion"] != goVersion {
		t.Errorf("labels %v, want %v", got, want)
	}
	if v := found.Metric[0].Gauge.GetValue(); v != 1 {
		t.Errorf("value %v, want 1", v)
	}
	// And over HTTP, with its HELP and TYPE.
	rec := httptest.NewRecorder()
	m.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"# HELP " + MetricBuildInfo + " ", "# TYPE " + MetricBuildInfo + " gauge", MetricBuildInfo + "{"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}

// TestBuildLabels: the labels come from the build information; what is not
// stamped says so.
func TestBuildLabels(t *testing.T) {
	v, r, g := buildLabels(&debug.BuildInfo{GoVersion: "go1.99.1",
		Main:     debug.Module{Path: "github.com/aaatp/aaatp", Version: "v0.0.0-20260102030405-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.modified", Value: "true"}},
	}, true)
	if v != "v0.0.0-20260102030405-0123456789ab+dirty" || r != "0123456789abcdef0123456789abcdef01234567" || g != "go1.99.1" {
		t.Errorf("stamped: %q, %q, %q", v, r, g)
	}
	v, r, g = buildLabels(nil, false)
	if v != "(devel)" || r != "unknown" || g != runtime.Version() {
		t.Errorf("no build information: %q, %q, %q", v, r, g)
	}
	v, r, _ = buildLabels(&debug.BuildInfo{Main: debug.Module{Path: "github.com/aaatp/aaatp", Version: "(devel)"}}, true)
	if v != "(devel)" || r != "unknown" {
		t.Errorf("go run: %q, %q", v, r)
	}
}
