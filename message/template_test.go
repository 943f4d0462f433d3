package message

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/aaatp/aaatp/wire"
)

// referenceRequest encodes request n of s with the Builder, AVP by AVP:
// what the template must reproduce byte for byte.
func referenceRequest(s Series, n int64, user string) []byte {
	if user == "" {
		user = s.UserName
		if strings.Contains(user, "%") {
			user = fmt.Sprintf(s.UserName, n)
		}
	}
	cmd := uint32(CmdAccounting)
	if s.App == AppTest {
		cmd = CmdTest
	}
	b := NewRequest(cmd, s.App, wire.FlagProxiable).
		String(SessionID, 0, true, fmt.Sprintf("%s%d", s.SessionPrefix, n)).
		String(OriginHost, 0, true, s.From.Host).
		String(OriginRealm, 0, true, s.From.Realm).
		String(DestinationRealm, 0, true, s.DestinationRealm).
		String(UserName, 0, true, user)
	if s.App == AppTest {
		b.Uint32(AVPTestValue, VendorTest, true, uint32(n))
	} else {
		b.Uint32(AccountingRecordType, 0, true, 2).
			Uint32(AccountingRecordNumber, 0, true, uint32(n)).
			Uint32(AcctApplicationID, 0, true, AppAccounting)
	}
	return b.Bytes()
}

func TestRequestTemplateMatchesBuilder(t *testing.T) {
	ns := []int64{0, 1, 9, 10, 99, 100, 999, 1000, 12345, 1 << 31, 1<<32 + 7, 1234567890123}
	for _, app := range []uint32{AppAccounting, AppTest} {
		for _, user := range []string{"user%d@example.net", "%d", "fixed@example.net", "", "u%05d@example.net", "100%%-%d@x.net", "a@%d"} {
			for _, host := range []string{"c.example.net", "client-with-a-longer-name.example.net"} {
				s := Series{App: app, From: Identity{host, "example.net"}, DestinationRealm: "dest.example.org",
					SessionPrefix: host + ";1700000000;", UserName: user}
				tm, err := NewRequestTemplate(s)
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range ns {
					got, want := tm.Build(n, ""), referenceRequest(s, n, "")
					if !bytes.Equal(got, want) || cap(got) != len(got) {
						t.Fatalf("app %d user %q host %q n=%d (cap %d):\n got %x\nwant %x", app, user, host, n, cap(got), got, want)
					}
				}
				if got, want := tm.Build(42, "probe@example.net"), referenceRequest(s, 42, "probe@example.net"); !bytes.Equal(got, want) {
					t.Fatalf("app %d, a given User-Name:\n got %x\nwant %x", app, got, want)
				}
			}
		}
	}
	if _, err := NewRequestTemplate(Series{App: AppRelay}); err == nil {
		t.Error("a template of the relay application: no error")
	}
}

// Every request is a copy of its own: the caller may change it (a sender
// writes its ids into it).
func TestRequestTemplateCopies(t *testing.T) {
	tm, err := NewRequestTemplate(Series{App: AppAccounting, From: Identity{"c.example.net", "example.net"},
		DestinationRealm: "example.net", SessionPrefix: "c;1;", UserName: "user%d@example.net"})
	if err != nil {
		t.Fatal(err)
	}
	a := tm.Build(1, "")
	a[wire.HeaderLen+8] ^= 0xff
	if c := tm.Build(1, ""); c[wire.HeaderLen+8] == a[wire.HeaderLen+8] {
		t.Fatal("a request aliases the template")
	}
}

func BenchmarkRequestTemplate(b *testing.B) {
	s := Series{App: AppAccounting, From: Identity{"client.example.net", "example.net"}, DestinationRealm: "example.net",
		SessionPrefix: "client.example.net;1700000000;", UserName: "user%d@example.net"}
	b.Run("template", func(b *testing.B) {
		tm, _ := NewRequestTemplate(s)
		b.ReportAllocs()
		n := int64(0)
		for b.Loop() {
			n++
			tm.Build(n, "")
		}
	})
	b.Run("builder+fmt", func(b *testing.B) {
		b.ReportAllocs()
		n := int64(0)
		for b.Loop() {
			n++
			referenceRequest(s, n, "")
		}
	})
}

// UserNameOf gives the User-Name a template builds, for the RADIUS
// client, which builds its requests otherwise.
func TestUserNameOfMatchesTheTemplate(t *testing.T) {
	for _, user := range []string{"user%d@example.net", "%d", "fixed@example.net", "u%05d@example.net", "100%%-%d@x.net", "a@%d"} {
		tm, err := NewRequestTemplate(Series{App: AppAccounting, From: Identity{"c.example.net", "example.net"},
			DestinationRealm: "example.net", SessionPrefix: "s;", UserName: user})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int64{0, 7, 123456} {
			a, ok := wire.FindAVP(tm.Build(n, ""), UserName, 0)
			if !ok {
				t.Fatal("no User-Name")
			}
			if got := UserNameOf(user, n); got != string(a) {
				t.Errorf("UserNameOf(%q, %d) = %q, the template's %q", user, n, got, a)
			}
		}
	}
	if got := UserNameOf("u%06d", 42); got != "u000042" {
		t.Errorf("a padded format: %q", got)
	}
}
