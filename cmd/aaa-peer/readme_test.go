package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var updateREADME = flag.Bool("update", false, "rewrite README.md's generated parts (flag tables, help texts, the demo's transcript) from the binary")

const readmePath = "../../README.md"

// A generated part of the README sits between these two lines.
func blockBegin(name string) string { return "<!-- BEGIN generated: " + name + " -->" }
func blockEnd(name string) string   { return "<!-- END generated: " + name + " -->" }

// readmeFlagBlocks are the README's parts generated from the commands'
// flag sets and help texts.
func readmeFlagBlocks(t *testing.T) map[string]string {
	return map[string]string{
		"server flags":        flagTable(serverFlags(&serverOptions{}, io.Discard)),
		"client flags":        flagTable(clientFlags(&clientOptions{}, io.Discard)),
		"client RADIUS flags": flagTable(radiusClientFlags(&radiusClientOptions{}, io.Discard)),
		"demo flags":          flagTable(demoFlags(&demoOptions{}, io.Discard)),
		"demo RADIUS flags":   flagTable(radiusDemoFlags(&radiusDemoOptions{}, io.Discard)),
		"route flags":         flagTable(routeFlags(&routeOptions{}, io.Discard)),
		"config help":         helpBlock(t, "config", "-h"),
		"version help":        helpBlock(t, "version", "-h"),
	}
}

// flagTable renders fs as the README's flag tables: a row a flag, in
// name order.
func flagTable(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) { b.WriteString(readmeRow(f) + "\n") })
	return b.String()
}

// readmeRow renders f as a row of the README's flag tables.
func readmeRow(f *flag.Flag) string {
	name, usage := flag.UnquoteUsage(f)
	arg := ""
	if name != "" {
		arg = " " + name
	}
	def := ""
	if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "[]" {
		def = "`" + f.DefValue + "`"
	}
	return fmt.Sprintf("| `--%s%s` | %s | %s |", f.Name, arg, def, strings.ReplaceAll(usage, "|", "\\|"))
}

// helpBlock is what "aaa-peer args..." prints, as a code block.
func helpBlock(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("aaa-peer %s: exit %d\n%s", strings.Join(args, " "), code, stderr.String())
	}
	return "```\n$ aaa-peer " + strings.Join(args, " ") + "\n" + stdout.String() + stderr.String() + "```\n"
}

// readmeBlock returns the generated part name of doc.
func readmeBlock(t *testing.T, doc, name string) string {
	t.Helper()
	i := strings.Index(doc, blockBegin(name)+"\n")
	j := strings.Index(doc, blockEnd(name))
	if i < 0 || j < i {
		t.Fatalf("README.md has no %q and %q around its generated part %q", blockBegin(name), blockEnd(name), name)
	}
	return doc[i+len(blockBegin(name))+1 : j]
}

// setREADMEBlock returns doc with the generated part name replaced by
// content.
func setREADMEBlock(doc, name, content string) string {
	i := strings.Index(doc, blockBegin(name)+"\n") + len(blockBegin(name)) + 1
	j := strings.Index(doc, blockEnd(name))
	return doc[:i] + content + doc[j:]
}

// firstDifference describes where got and want part, by line.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d of the part: README has\n\t%q\nthe binary gives\n\t%q", i+1, gl, wl)
		}
	}
	return "no difference"
}

// checkREADME compares each of the README's generated parts with what
// the binary gives (same, by that part's comparison), and with -update
// writes what the binary gives instead.
func checkREADME(t *testing.T, blocks map[string]string, same func(name, readme, binary string) bool) {
	t.Helper()
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	names := make([]string, 0, len(blocks))
	for name := range blocks {
		names = append(names, name)
	}
	slices.Sort(names)
	updated := doc
	for _, name := range names {
		have, want := readmeBlock(t, doc, name), blocks[name]
		if same(name, have, want) {
			continue
		}
		if *updateREADME {
			updated = setREADMEBlock(updated, name, want)
			t.Logf("README.md: %q rewritten", name)
			continue
		}
		t.Errorf("README.md's %q is not what the binary gives: %s\n(go test ./cmd/aaa-peer -run TestREADME -update rewrites it)",
			name, firstDifference(have, want))
	}
	if updated != doc {
		if err := os.WriteFile(readmePath, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestREADMEFlags: the README's flag tables (server, the Diameter and the
// RADIUS client, the Diameter and the RADIUS demo, route) are the flag
// sets' own, a row a flag with its argument name, default and usage, and
// the help of config and version are what they print. -update rewrites
// them.
func TestREADMEFlags(t *testing.T) {
	checkREADME(t, readmeFlagBlocks(t), func(_, readme, binary string) bool { return readme == binary })
}

// TestREADMEDemoTranscript: the README's transcript of the demo is the
// output of a real run (TestDemo's), its ports renumbered from 3868.
// Timings, counts and ports differ from run to run, and so does what
// happens at nearly the same time (which servers take a failover, whether
// the frozen server still has its connection when it thaws): the
// transcript matches when both have the same header and summary lines
// once numbers (with their units) and ports are replaced by "#", and the
// same kinds of timeline lines (who, and the first word of what), each
// set compared whole. A line the demo no longer prints, or a new kind,
// fails it. -update writes the run's output.
func TestREADMEDemoTranscript(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo: about 45 s")
	}
	run := runDemoOnce()
	if run.code != 0 {
		t.Fatalf("demo exit %d (TestDemo says why)\n%s", run.code, run.stderr)
	}
	blocks := map[string]string{"demo transcript": demoTranscript(run.stdout)}
	checkREADME(t, blocks, func(_, readme, binary string) bool {
		a, b := demoLines(readme), demoLines(binary)
		if slices.Equal(a, b) {
			return true
		}
		if !*updateREADME {
			t.Logf("in the README only: %q", without(a, b))
			t.Logf("in the run only: %q", without(b, a))
		}
		return false
	})
}

var (
	loopbackPort = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	demoNumber   = regexp.MustCompile(`\d+(\.\d+)?( ?(ms|us|µs|s)\b)?`)
	timelineLine = regexp.MustCompile(`^ *\d+\.\ds  (\S+) +(\S+)`)
	spaces       = regexp.MustCompile(`\s+`)
)

// demoTranscript is the README's code block of a demo run's output: the
// status page's line left out, trailing spaces too, the servers' ports renumbered from 3868
// in order of appearance.
func demoTranscript(out string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if !strings.Contains(l, "http://") {
			lines = append(lines, strings.TrimRight(l, " "))
		}
	}
	ports := map[string]string{}
	text := loopbackPort.ReplaceAllStringFunc(strings.Join(lines, "\n"), func(s string) string {
		if _, ok := ports[s]; !ok {
			ports[s] = fmt.Sprintf("127.0.0.1:%d", 3868+len(ports))
		}
		return ports[s]
	})
	return "```\n$ go run ./cmd/aaa-peer demo\n" + text + "\n```\n"
}

// demoLines are the distinct lines of a transcript, reduced to what every
// run prints alike: numbers and their units replaced by "#" and ports by
// PORT, spaces collapsed; a timeline line is its time's "#", who and the
// first word of what happened. Sorted.
func demoLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "```") || strings.HasPrefix(l, "$ ") {
			continue
		}
		if m := timelineLine.FindStringSubmatch(l); m != nil {
			out = append(out, "# "+m[1]+" "+demoNumber.ReplaceAllString(m[2], "#"))
			continue
		}
		l = demoNumber.ReplaceAllString(loopbackPort.ReplaceAllString(l, "127.0.0.1:PORT"), "#")
		if l = strings.TrimSpace(spaces.ReplaceAllString(l, " ")); l != "" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// without returns the lines of a not in b.
func without(a, b []string) []string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, l)
		}
	}
	return out
}
