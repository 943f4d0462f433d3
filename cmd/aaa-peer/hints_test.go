package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestClientHelpListsRADIUSFlags: "aaa-peer client -h" lists the RADIUS
// client's flags too, not only when a RADIUS --peer comes first; the
// defaults of duration flags still show.
func TestClientHelpListsRADIUSFlags(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--peer", "tcp://127.0.0.1:3868", "-h"}} {
		var stdout, stderr bytes.Buffer
		if code := runClient(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("client %q: exit %d", args, code)
		}
		out := stderr.String()
		for _, want := range []string{"-destination-realm R", "With a RADIUS --peer", "-secret-file", "-status-server", "-acct-peer", "-retries", "-hold-down D\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("client %q -h does not list %q:\n%s", args, want, out)
			}
		}
		if strings.Contains(out, "panic") || !strings.Contains(out, "(default 30s)") {
			t.Errorf("client %q -h: durations' defaults not shown:\n%s", args, out)
		}
	}
}

// TestDurationFlagsKeepTheirValues: the hint on duration flags changes
// their error only: values, defaults and usage stay.
func TestDurationFlagsKeepTheirValues(t *testing.T) {
	var o serverOptions
	fs := serverFlags(&o, &bytes.Buffer{})
	if code, ok := parseFlags(fs, []string{"--listen", "tcp://127.0.0.1:0", "--origin-host", "s.example.net", "--origin-realm", "example.net", "--tw", "7s"}); !ok {
		t.Fatalf("parse: exit %d", code)
	}
	if o.tw.String() != "7s" || fs.Lookup("tw").Value.String() != "7s" || fs.Lookup("tw").DefValue != "30s" {
		t.Errorf("--tw 7s: %v, %s, default %s", o.tw, fs.Lookup("tw").Value, fs.Lookup("tw").DefValue)
	}
	if o.cerTimeout.String() != "10s" {
		t.Errorf("--cer-timeout default %v, want 10s", o.cerTimeout)
	}
}
