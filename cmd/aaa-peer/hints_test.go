package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aaatp/aaatp/message"
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

// TestIdentityFlagsRefused: every flag naming a DiameterIdentity, on the
// server and the client, refuses a value that is none with a usage error
// (exit 2) naming the flag and what is wrong, before anything is dialed
// or listened on; well-formed names pass.
func TestIdentityFlagsRefused(t *testing.T) {
	srv := []string{"--listen", "tcp://127.0.0.1:0", "--origin-host", "s.example.net", "--origin-realm", "example.net"}
	cli := []string{"--peer", "tcp://127.0.0.1:3868", "--origin-host", "c.example.net", "--origin-realm", "example.net", "--destination-realm", "example.net"}
	bad := []struct{ v, why string }{
		{"bad host", "a space at offset 3"},
		{"host.example.net.", "an empty label"},
		{".example.net", "an empty label"},
		{"a..example.net", "an empty label"},
		{"-a.example.net", `label "-a" begins or ends with '-'`},
		{"h\u00e9.example.net", "is not ASCII"},
		{"a/b.example.net", `'/' at offset 1`},
		{strings.Repeat("x", 64) + ".net", "is 64 bytes long, at most 63"},
		{strings.Repeat("a.", 128) + "net", "bytes long, at most 253"},
		{strings.Repeat("a.", 125) + "net0", "254 bytes long, at most 253"},
	}
	type run func(context.Context, []string, io.Writer, io.Writer) int
	for _, cmd := range []struct {
		name  string
		run   run
		base  []string
		flags []string
	}{
		{"server", runServer, srv, []string{"origin-host", "origin-realm"}},
		{"client", runClient, cli, []string{"origin-host", "origin-realm", "destination-realm"}},
	} {
		for _, f := range cmd.flags {
			for _, b := range bad {
				args := append(slices.Clone(cmd.base), "--"+f, b.v)
				var stdout, stderr bytes.Buffer
				// A value wrongly accepted runs the command until this ends.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				code := cmd.run(ctx, args, &stdout, &stderr)
				cancel()
				want := fmt.Sprintf("--%s %s: want a DiameterIdentity (RFC 6733 4.3.1) such as ", f, message.Printable(b.v, 64))
				if code != 2 || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), b.why) {
					t.Errorf("%s --%s %q: exit %d, stderr:\n%s\nwant exit 2 and %q ... %q", cmd.name, f, b.v, code, stderr.String(), want, b.why)
				}
			}
		}
	}
	for _, v := range []string{"s.example.net", "example.net", "EXAMPLE.NET", "host_1.ex-ample.net", "localhost", "xn--bcher-kva.example", strings.Repeat("x", 63) + ".net"} {
		if why := identityProblem(v); why != "" {
			t.Errorf("%q refused: %s", v, why)
		}
	}
}
