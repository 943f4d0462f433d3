package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file longer than maxConfig is refused, not read whole: config check
// of /dev/zero used to allocate until the memory ran out.
func TestLoadRefusesHugeFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.toml")
	line := []byte("# a comment line, nothing more\n")
	body := bytes.Repeat(line, maxConfig/len(line)+1)
	if err := os.WriteFile(p, body, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), "longer than 4 MiB") {
		t.Fatalf("Load of %d bytes: %v; want refused as too long", len(body), err)
	}
	if err := os.WriteFile(p, body[:maxConfig-maxConfig%len(line)], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Errorf("a file just under the bound: %v", err)
	}
}

// A device that never ends is refused once past the bound.
func TestLoadRefusesEndlessDevice(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	if _, err := Load("/dev/zero"); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("Load(/dev/zero): %v; want refused as too long", err)
	}
}
