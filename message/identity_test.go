package message

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckIdentity(t *testing.T) {
	name253 := strings.Repeat(strings.Repeat("a", 62)+".", 4) + "a" // labels of 62 bytes and a last of 1
	good := []string{"a", "server.example.net", "AAA-1.Example.NET", "host_1.realm", "xn--bcher-kva.example",
		"localhost", "10.0.0.1", "192.0.2.7.", "_diameter._tcp.example.net", "1", "_",
		"-host-.example.net", "-", "a-.b", // '-' wherever it was accepted before the label rules
		"aaa.example.net.",                       // one final '.': the absolute form
		strings.Repeat("x", 63) + ".example.net", // the longest label
		"example." + strings.Repeat("y", 63),     // ... last
		strings.Repeat("z", 63),                  // ... alone
		name253, name253 + ".",                   // the longest name, and with its final '.'
	}
	for _, s := range good {
		if err := CheckIdentity(s); err != nil {
			t.Errorf("CheckIdentity(%q) = %v, want nil", s, err)
		}
	}
	bad := []struct{ s, why string }{
		{"", "empty"},
		{"attacker.e\x87ample.net", "byte 0x87"},
		{"a\x00b", "byte 0x00"},
		{"a\nb", "byte 0x0a"},
		{"a b", "byte 0x20"},
		{"bücher.example", "byte 0xc3"},
		{"a/b", "byte 0x2f"},
		{"a;b", "byte 0x3b"},
		// Not a DNS name (review 34b, finding 3).
		{".", "empty label at offset 0"},
		{"..", "empty label at offset 0"},
		{"a..b", "empty label at offset 2"},
		{".example.net", "empty label at offset 0"},
		{"example.net..", "empty label at offset 12"},
		{strings.Repeat("a", 64) + ".example.net", "label of 64 bytes at offset 0"},
		{"aaa." + strings.Repeat("b", 64) + ".net", "label of 64 bytes at offset 4"},
		{"example." + strings.Repeat("c", 64), "label of 64 bytes at offset 8"},
		{strings.Repeat("d", 64) + ".", "label of 64 bytes at offset 0"},
		{strings.Repeat("a.", 127) + "a", "255 bytes (at most 253, 254 with a final '.')"},
		{name253 + "a", "254 bytes (at most 253"},
		{name253 + "a.", "255 bytes (at most 253"},
		{strings.Repeat("a", 300), "300 bytes"},
	}
	for _, tc := range bad {
		err := CheckIdentity(tc.s)
		if !errors.Is(err, ErrBadIdentity) {
			t.Errorf("CheckIdentity(%q) = %v, want ErrBadIdentity", tc.s, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.why) {
			t.Errorf("CheckIdentity(%q) = %q, want it to say %q", tc.s, err, tc.why)
		}
		if len(err.Error()) > 200 {
			t.Errorf("error for a %d-byte name is %d bytes long", len(tc.s), len(err.Error()))
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

// isDNSName is CheckIdentity's rule written another way: letters,
// digits, '-', '_' and '.'; with one final '.' cut, a name of at most 253
// bytes whose labels are 1 to 63 bytes long.
func isDNSName(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	name := strings.TrimSuffix(s, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	for _, l := range strings.Split(name, ".") {
		if len(l) == 0 || len(l) > 63 {
			return false
		}
	}
	return true
}

// FuzzCheckIdentity: CheckIdentity accepts exactly the DNS names of
// isDNSName, which are short, valid UTF-8 and free of control bytes, and
// its errors are short and printable; Printable of anything is printable
// ASCII and bounded.
func FuzzCheckIdentity(f *testing.F) {
	for _, s := range []string{"server.example.net", "attacker.e\x87ample.net", "a\x00b", "", ".", "a..b", ".example.net",
		"example.net.", "_sip._udp.example.net", "-", strings.Repeat("a", 64) + ".net", strings.Repeat("a.", 127) + "a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := CheckIdentity(s)
		if (err == nil) != isDNSName(s) {
			t.Fatalf("CheckIdentity(%q) = %v, isDNSName = %v", s, err, isDNSName(s))
		}
		if err == nil {
			if len(s) == 0 || len(s) > MaxIdentityLen || !utf8.ValidString(s) {
				t.Fatalf("accepted %q", s)
			}
			for i := 0; i < len(s); i++ {
				if s[i] < 0x21 || s[i] > 0x7e {
					t.Fatalf("accepted byte 0x%02x in %q", s[i], s)
				}
			}
		} else {
			if !errors.Is(err, ErrBadIdentity) || len(err.Error()) > 400 { // Printable(s, 64) is at most 261 bytes
				t.Fatalf("CheckIdentity(%q) = %v", s, err)
			}
			for _, r := range err.Error() {
				if r < 0x20 || r > 0x7e {
					t.Fatalf("error for %q is not printable ASCII: %q", s, err)
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
