package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestREADMEListsEveryFlag: the README's table of each subcommand's flags
// has a row for every flag the subcommand takes, and none for a flag it
// does not take (the demo's section also lists the RADIUS demo's flags,
// which are not checked). A missing row is printed in the table's format, from the
// flag's own usage text, ready to paste.
func TestREADMEListsEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, tc := range []struct {
		section string
		fs      *flag.FlagSet
		all     bool // the section lists this FlagSet's flags and no other
	}{
		{"### `aaa-peer server`", serverFlags(&serverOptions{}, io.Discard), true},
		{"### `aaa-peer client`", clientFlags(&clientOptions{}, io.Discard), true},
		{"### `aaa-peer demo`", demoFlags(&demoOptions{}, io.Discard), false},
	} {
		i := strings.Index(readme, tc.section)
		if i < 0 {
			t.Errorf("README has no section %s", tc.section)
			continue
		}
		sec := readme[i+len(tc.section):]
		if j := strings.Index(sec, "\n### "); j >= 0 {
			sec = sec[:j]
		}
		listed := map[string]bool{}
		for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)").FindAllStringSubmatch(sec, -1) {
			listed[m[1]] = true
		}
		var missing []string
		tc.fs.VisitAll(func(f *flag.Flag) {
			if !listed[f.Name] {
				missing = append(missing, readmeRow(f))
			}
			delete(listed, f.Name)
		})
		if len(missing) > 0 {
			t.Errorf("%s: no README row for %d flag(s):\n%s", tc.section, len(missing), strings.Join(missing, "\n"))
		}
		var extra []string
		for name := range listed {
			extra = append(extra, "--"+name)
		}
		sort.Strings(extra)
		if len(extra) > 0 && tc.all {
			t.Errorf("%s: README rows for flags the subcommand does not take: %v", tc.section, extra)
		}
	}
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
