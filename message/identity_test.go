package message

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckIdentity(t *testing.T) {
	good := []string{"a", "server.example.net", "AAA-1.Example.NET", "host_1.realm", "xn--bcher-kva.example", strings.Repeat("a", MaxIdentityLen)}
	for _, s := range good {
		if err := CheckIdentity(s); err != nil {
			t.Errorf("CheckIdentity(%q) = %v, want nil", s, err)
		}
	}
	bad := []string{"", "attacker.e\x87ample.net", "a\x00b", "a\nb", "a b", "bücher.example", "a/b", "a;b", strings.Repeat("a", MaxIdentityLen+1)}
	for _, s := range bad {
		err := CheckIdentity(s)
		if !errors.Is(err, ErrBadIdentity) {
			t.Errorf("CheckIdentity(%q) = %v, want ErrBadIdentity", s, err)
			continue
		}
		if len(err.Error()) > 200 {
			t.Errorf("error for a %d-byte name is %d bytes long", len(s), len(err.Error()))
		}
	}
}

func TestEqualIdentity(t *testing.T) {
	if !EqualIdentity("Server.Example.NET", "server.example.net") {
		t.Error("DiameterIdentity comparison must ignore case")
	}
	if EqualIdentity("a.example.net", "b.example.net") {
		t.Error("different names compare equal")
	}
}

func TestPrintable(t *testing.T) {
	if got := Printable("a\x87\x00b", 0); got != `"a\x87\x00b"` {
		t.Errorf("Printable = %s", got)
	}
	if got := Printable(strings.Repeat("x", 100), 10); got != `"xxxxxxxxxx"...` {
		t.Errorf("Printable cut = %s", got)
	}
}

// FuzzCheckIdentity: whatever CheckIdentity accepts is short, valid UTF-8
// and free of control bytes; Printable of anything is printable ASCII and
// bounded.
func FuzzCheckIdentity(f *testing.F) {
	for _, s := range []string{"server.example.net", "attacker.e\x87ample.net", "a\x00b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckIdentity(s) == nil {
			if len(s) == 0 || len(s) > MaxIdentityLen || !utf8.ValidString(s) {
				t.Fatalf("accepted %q", s)
			}
			for i := 0; i < len(s); i++ {
				if s[i] < 0x21 || s[i] > 0x7e {
					t.Fatalf("accepted byte 0x%02x in %q", s[i], s)
				}
			}
		}
		p := Printable(s, 64)
		if len(p) > 64*10+5 {
			t.Fatalf("Printable of %d bytes is %d bytes", len(s), len(p))
		}
		for i := 0; i < len(p); i++ {
			if p[i] < 0x20 || p[i] > 0x7e {
				t.Fatalf("Printable(%q) = %q has byte 0x%02x", s, p, p[i])
			}
		}
	})
}
