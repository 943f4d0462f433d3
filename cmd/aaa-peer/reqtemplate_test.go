package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/aaatp/aaatp/message"
	"github.com/aaatp/aaatp/wire"
)

// referenceRequest encodes request n with message.Builder, AVP by AVP:
// what the template must reproduce byte for byte.
func referenceRequest(o *clientOptions, start, n int64, user string) []byte {
	if user == "" {
		user = o.nai
		if strings.Contains(user, "%") {
			user = fmt.Sprintf(o.nai, n)
		}
	}
	var b *message.Builder
	if o.app == "test" {
		b = message.NewRequest(message.CmdTest, message.AppTest, wire.FlagProxiable)
	} else {
		b = message.NewRequest(message.CmdAccounting, message.AppAccounting, wire.FlagProxiable)
	}
	b.String(message.SessionID, 0, true, fmt.Sprintf("%s;%d;%d", o.originHost, start, n)).
		String(message.OriginHost, 0, true, o.originHost).
		String(message.OriginRealm, 0, true, o.originRealm).
		String(message.DestinationRealm, 0, true, o.destRealm).
		String(message.UserName, 0, true, user)
	if o.app == "test" {
		b.Uint32(message.AVPTestValue, message.VendorTest, true, uint32(n))
	} else {
		b.Uint32(message.AccountingRecordType, 0, true, 2).
			Uint32(message.AccountingRecordNumber, 0, true, uint32(n)).
			Uint32(message.AcctApplicationID, 0, true, message.AppAccounting)
	}
	return b.Bytes()
}

func TestRequestTemplateMatchesBuilder(t *testing.T) {
	ns := []int64{0, 1, 9, 10, 99, 100, 999, 1000, 12345, 1 << 31, 1<<32 + 7, 1234567890123}
	for _, app := range []string{"acct", "test"} {
		for _, nai := range []string{"user%d@example.net", "%d", "fixed@example.net", "", "u%05d@example.net", "100%%-%d@x.net", "a@%d"} {
			for _, host := range []string{"c.example.net", "client-with-a-longer-name.example.net"} {
				o := &clientOptions{originHost: host, originRealm: "example.net", destRealm: "dest.example.org", nai: nai, app: app}
				const start = 1700000000
				tm := newRequestTemplate(o, start)
				for _, n := range ns {
					got := tm.build(n, "")
					want := referenceRequest(o, start, n, "")
					if wire.EndToEnd(got) == 0 {
						t.Fatalf("%s %q n=%d: End-to-End not set", app, nai, n)
					}
					wire.SetEndToEnd(got, 0)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s nai %q host %q n=%d:\n got %x\nwant %x", app, nai, host, n, got, want)
					}
				}
				got := tm.build(42, "probe@example.net")
				wire.SetEndToEnd(got, 0)
				if want := referenceRequest(o, start, 42, "probe@example.net"); !bytes.Equal(got, want) {
					t.Fatalf("%s test user:\n got %x\nwant %x", app, got, want)
				}
			}
		}
	}
}

// TestRequestTemplateDistinctIDs: every request gets its own End-to-End
// id and its own copy (Send takes the slice over).
func TestRequestTemplateDistinctIDs(t *testing.T) {
	o := &clientOptions{originHost: "c.example.net", originRealm: "example.net", destRealm: "example.net", nai: "user%d@example.net", app: "acct"}
	tm := newRequestTemplate(o, 1)
	a, b := tm.build(1, ""), tm.build(1, "")
	if wire.EndToEnd(a) == wire.EndToEnd(b) {
		t.Fatal("two requests share an End-to-End id")
	}
	a[wire.HeaderLen+8] ^= 0xff
	if c := tm.build(1, ""); c[wire.HeaderLen+8] == a[wire.HeaderLen+8] {
		t.Fatal("a request aliases the template")
	}
}

func BenchmarkBuildRequest(b *testing.B) {
	o := &clientOptions{originHost: "client.example.net", originRealm: "example.net", destRealm: "example.net", nai: "user%d@example.net", app: "acct"}
	b.Run("template", func(b *testing.B) {
		tm := newRequestTemplate(o, 1700000000)
		b.ReportAllocs()
		n := int64(0)
		for b.Loop() {
			n++
			tm.build(n, "")
		}
	})
	b.Run("builder+fmt", func(b *testing.B) {
		b.ReportAllocs()
		n := int64(0)
		for b.Loop() {
			n++
			referenceRequest(o, 1700000000, n, "")
		}
	})
}
