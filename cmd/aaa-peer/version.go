package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// buildTime is when the binary was built, in RFC 3339, if the build set it
// with -ldflags "-X main.buildTime=$(date -u +%Y-%m-%dT%H:%M:%SZ)": the Go
// toolchain records the commit's time (vcs.time) but not the build's.
var buildTime string

// versionInfo is what "aaa-peer version" prints, read from the build
// information the Go toolchain stamps into the binary.
type versionInfo struct {
	module    string // module path of the main module
	version   string // its version: a tag, a pseudo-version, or (devel)
	revision  string // vcs.revision: the commit the binary was built from
	vcsTime   string // vcs.time: that commit's time
	modified  string // vcs.modified: true when the work tree had changes
	buildTime string // main.buildTime, when the build set it
	goVersion string
	platform  string // GOOS/GOARCH
}

// readVersion reads the running binary's build information. A binary built
// with "go run", "go test" or -buildvcs=false carries no VCS stamp: its
// version is (devel) and its revision, commit time and dirty flag are
// unknown.
func readVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	return versionFrom(bi, ok)
}

func versionFrom(bi *debug.BuildInfo, ok bool) versionInfo {
	const unknown = "unknown"
	v := versionInfo{
		module: "github.com/aaatp/aaatp", version: "(devel)",
		revision: unknown, vcsTime: unknown, modified: unknown, buildTime: unknown,
		goVersion: runtime.Version(), platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	if buildTime != "" {
		v.buildTime = buildTime
	}
	if !ok || bi == nil {
		return v
	}
	if bi.Main.Path != "" {
		v.module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		v.version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.goVersion = bi.GoVersion
	}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.revision = s.Value
		case "vcs.time":
			v.vcsTime = s.Value
		case "vcs.modified":
			v.modified = s.Value
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" && goarch != "" {
		v.platform = goos + "/" + goarch
	}
	return v
}

// runVersion prints the binary's version and build information.
func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			io.WriteString(stdout, versionUsage)
			return 0
		}
		fmt.Fprintf(stderr, "aaa-peer version: unexpected argument %q\n\n", args[0])
		io.WriteString(stderr, versionUsage)
		return 2
	}
	v := readVersion()
	fmt.Fprintf(stdout, "aaa-peer %s\n", v.version)
	for _, row := range [][2]string{
		{"module", v.module},
		{"version", v.version},
		{"revision", v.revision},
		{"dirty", v.modified},
		{"commit time", v.vcsTime},
		{"build time", v.buildTime},
		{"go", v.goVersion},
		{"platform", v.platform},
	} {
		fmt.Fprintf(stdout, "  %-12s %s\n", row[0], row[1])
	}
	return 0
}

const versionUsage = `usage: aaa-peer version   (also --version, -version)

Prints the module version, the VCS revision the binary was built from,
whether the work tree had uncommitted changes (dirty), the commit's time,
the build time, the Go version and the platform.

"go build" stamps the revision, dirty flag and commit time when it runs in
a Git checkout (unless -buildvcs=false); "go run" and "go test" do not, so
those print "unknown" and the version "(devel)". The build time is known
only when the build set it:

  go build -ldflags "-X main.buildTime=$(date -u +%Y-%m-%dT%H:%M:%SZ)" ./cmd/aaa-peer
`
